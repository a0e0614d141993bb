"""The round trip for an operation imported from a framework file, on the CPU (issue 24).

``astra import`` of the project's framework-style fixtures (tests/fixtures/framework/csrc, no
op registration of their own) writes ``framework.toml``; a finished run of the imported
``production.cu`` (faked as tests/export_run.py fakes one) exports as a torch package and as a
patch against the fixture; the original's build is the fixture unmodified with a generated
registration; ``[gate]`` says where the op sits in a serving block. What needs torch and a GPU
(the build itself, verify, gate) runs in benchmarks/export_round_trip.py --imported."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from astra_graph.cli import main
from astra_graph.export.dispatch_source import ExportError
from astra_graph.export.framework import FRAMEWORK_FILE, MODEL, gate_of, load_framework
from astra_graph.export.original import NAMESPACE_PREFIX, framework_root, original_build
from astra_graph.export.torch_package import FinishedRun, export_torch, read_run
from astra_graph.framework.device import TORCH_TYPES_BEGIN, framework_type_map
from astra_graph.framework.naming import DEFAULT_NAMESPACE, default_root, registered_namespace
from astra_graph.harness.timing import EVENTS_METHOD, NODE_METHOD
from astra_graph.kernel import expr
from astra_graph.kernel.catalog import resolve
from astra_graph.kernel.contract import ContractError
from export_run import REPO, applied_patch, finished_run

# conftest.py says why
pytestmark = pytest.mark.usefixtures("plots_not_drawn", "default_search_path", "needs_nvrtc")

FRAMEWORK = REPO / "tests" / "fixtures" / "framework"
CSRC = FRAMEWORK / "csrc"
FRAMEWORK_OPS = REPO / "tests" / "fixtures" / "framework_ops"
ARCH = "sm_90"
IMPORTS = {"silu_and_mul": CSRC / "activation.cu", "fused_add_rms_norm": CSRC / "layernorm.cu"}


def _import(tmp: Path, launcher: str) -> Path:
    """The launcher's operation folder, imported from its fixture (the root found alone)."""
    out = tmp / "ops"
    assert main(["import", str(IMPORTS[launcher]), "--op", launcher, "--out", str(out)]) == 0
    return out / launcher


def _run(tmp: Path, launcher: str) -> FinishedRun:
    folder = _import(tmp, launcher)
    return read_run(finished_run(tmp, launcher, kernel=folder / "production.cu"))


def test_import_writes_the_framework_naming_export_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _import(tmp_path, "fused_add_rms_norm")
    capsys.readouterr()
    spec, _ = resolve(folder / "production.cu")
    fw = load_framework(folder, spec.contract)
    assert fw.qualname == f"{DEFAULT_NAMESPACE}::fused_add_rms_norm"
    assert [(a.kind, a.name) for a in fw.args] == [
        ("Tensor!", "input"),
        ("Tensor!", "residual"),
        ("Tensor", "weight"),
        ("float", "epsilon"),
    ]  # the launcher's parameters in its order, mutations from the kernel's const pointers
    assert fw.source is not None
    assert (fw.source.file, fw.source.launcher, fw.source.kernel) == (
        "csrc/layernorm.cu",
        "fused_add_rms_norm",
        "fused_add_rms_norm_kernel",
    )
    assert fw.source.include_dirs == ["csrc"]  # the file's own folder, under the root
    assert default_root(IMPORTS["fused_add_rms_norm"]) == FRAMEWORK.resolve()
    assert "registers no op" in (folder / FRAMEWORK_FILE).read_text()
    assert fw.gate is None  # the block around the op is the user's to say


def test_a_launcher_the_schema_cannot_express_gets_no_framework_toml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "ops" / "scale_rows"
    stale.mkdir(parents=True)
    (stale / FRAMEWORK_FILE).write_text("# another op's\n")
    argv = ["import", str(CSRC / "layernorm.cu"), "--op", "scale_rows", "--out", str(stale.parent)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "framework.toml not written" in out and "'relu' (bool)" in out
    assert not (stale / FRAMEWORK_FILE).exists()  # a stale one would name another op


def test_root_and_include_folders_are_recorded_relative_to_the_checkout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = tmp_path / "checkout"
    shutil.copytree(FRAMEWORK, tree)
    source = tree / "csrc" / "activation.cu"
    out = tmp_path / "ops"
    argv = ["import", str(source), "--op", "silu_and_mul", "--root", str(tree), "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    spec, _ = resolve(out / "silu_and_mul" / "production.cu")
    fw = load_framework(out / "silu_and_mul", spec.contract)
    assert fw.source is not None and fw.source.file == "csrc/activation.cu"
    assert "csrc" in fw.source.include_dirs and "include" not in fw.source.include_dirs
    assert (tree / fw.source.file).is_file()
    assert framework_root(source, fw.source.file) == tree.resolve()
    assert framework_root(tmp_path / "elsewhere.cu", fw.source.file) is None


def test_registered_namespace_reads_the_files_own_registration() -> None:
    text = (FRAMEWORK_OPS / "csrc" / "activation_kernels.cu").read_text()
    assert registered_namespace(text, "silu_and_mul") == "_C"
    merge = (FRAMEWORK_OPS / "csrc" / "attention" / "merge_attn_states.cu").read_text()
    assert registered_namespace(merge, "merge_state") == "sgl_kernel"
    assert registered_namespace(text, "mul_and_silu") is None  # defined nowhere
    assert registered_namespace(IMPORTS["silu_and_mul"].read_text(), "silu_and_mul") is None
    other = 'TORCH_LIBRARY_FRAGMENT(mine, ops) {\n  ops.def("silu_and_mul(Tensor! o) -> ()");\n}'
    assert registered_namespace(other, "silu_and_mul") == "mine"
    assert registered_namespace(other, "silu") is None  # a prefix is another op


def test_the_original_of_an_imported_op_is_the_file_unmodified_and_registered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path, "fused_add_rms_norm")
    capsys.readouterr()
    source = IMPORTS["fused_add_rms_norm"]
    build = original_build(run.framework, run.spec.name, source, tmp_path / "builds")
    assert build.generated and build.namespace.startswith(NAMESPACE_PREFIX)
    assert build.op == "fused_add_rms_norm" and build.name.endswith(build.namespace[-12:])
    assert build.include_dirs == [CSRC.resolve()]
    (unit,) = build.sources
    text = unit.read_text()
    assert f'#include "{source.resolve()}"' in text  # the file itself, not a copy
    assert (
        "void astra_original_call(at::Tensor& input, at::Tensor& residual, at::Tensor& weight, "
        "double epsilon) { fused_add_rms_norm(input, residual, weight, epsilon); }"
    ) in text
    assert f"TORCH_LIBRARY({build.namespace}, m)" in text
    assert (
        'm.def("fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, '
        'float epsilon) -> ()");'
    ) in text
    again = original_build(run.framework, run.spec.name, source, tmp_path / "builds")
    assert again == build  # the same build: torch's cache holds
    changed = tmp_path / "csrc" / "layernorm.cu"
    shutil.copytree(CSRC, changed.parent)
    changed.write_text(changed.read_text() + "\n// changed\n")
    other = original_build(run.framework, run.spec.name, changed, tmp_path / "builds")
    assert other.name != build.name and other.namespace != build.namespace


def test_include_folders_the_original_cannot_find_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path, "fused_add_rms_norm")
    capsys.readouterr()
    assert run.framework.source is not None
    source = IMPORTS["fused_add_rms_norm"]
    missing = run.framework.source.model_copy(update={"include_dirs": ["no_such_folder"]})
    framework = run.framework.model_copy(update={"source": missing})
    with pytest.raises(ExportError, match=r"include_dirs 'no_such_folder' is no folder under"):
        original_build(framework, run.spec.name, source, tmp_path / "builds")
    elsewhere = missing.model_copy(update={"file": "other/layernorm.cu"})
    framework = run.framework.model_copy(update={"source": elsewhere})
    with pytest.raises(ExportError, match=r"is not the end of .*include_dirs cannot be found"):
        original_build(framework, run.spec.name, source, tmp_path / "builds")


def test_a_file_registering_its_op_is_built_alone(tmp_path: Path) -> None:
    spec, _ = resolve("silu_and_mul/production")
    fw = load_framework(spec.folder, spec.contract)
    source = FRAMEWORK_OPS / "csrc" / "activation_kernels.cu"
    build = original_build(fw, spec.name, source, tmp_path)
    assert not build.generated and build.sources == [source]
    assert (build.namespace, build.op) == ("_C", "silu_and_mul")
    assert not list(tmp_path.iterdir())  # nothing generated
    with pytest.raises(ExportError, match="cannot read the original"):
        original_build(fw, spec.name, tmp_path / "missing.cu", tmp_path)


def _dispatch(package: Path) -> ModuleType:
    sys.path.insert(0, str(package.parent))
    try:
        for name in [m for m in sys.modules if m.split(".")[0] == package.name]:
            del sys.modules[name]
        return __import__(f"{package.name}.dispatch", fromlist=["plan"])
    finally:
        sys.path.remove(str(package.parent))


@pytest.mark.parametrize("launcher", sorted(IMPORTS))
def test_an_imported_run_exports_a_package_covering_its_suites(
    launcher: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path, launcher)
    capsys.readouterr()
    package = export_torch(run, tmp_path / "out", arch=ARCH)
    contract = run.spec.contract
    cubins = sorted(p.name for p in (package / "kernels").iterdir())
    assert cubins == sorted(f"{launcher}-{d}-0.cubin" for d in contract.dtypes)
    op = (package / "op.py").read_text()
    assert f"mutates_args={tuple(run.framework.mutated)!r}" in op
    dispatch = _dispatch(package)
    for suite in ("tuning", "heldout"):
        for dims in contract.suite(suite):
            for dtype in contract.dtypes:
                shapes = {a.name: contract.shape_of(a, dims) for a in contract.args}
                dtypes = {a.name: contract.dtype_of(a, dtype).name for a in contract.args}
                launch = dispatch.plan(shapes, dtypes, ARCH)
                assert not isinstance(launch, str), (dims, dtype, launch)
                assert launch.dims == dims


@pytest.mark.parametrize("launcher", sorted(IMPORTS))
def test_an_imported_run_patches_its_framework_file_in_torchs_terms(
    launcher: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The patch applies to the fixture; the NVRTC stand-ins of torch's types the imported
    kernel carries are left out (the framework's build has torch's own), the map to the
    framework's element types is defined once, and the launcher calls the dispatcher first."""
    run = _run(tmp_path, launcher)
    capsys.readouterr()
    assert run.framework.source is not None
    text, _ = applied_patch(run, FRAMEWORK, tmp_path, ARCH)
    assert TORCH_TYPES_BEGIN not in text and "namespace c10 {" not in text
    assert text.count(framework_type_map().strip()) == 1
    for dtype in run.spec.contract.dtypes:
        assert f"astra_{launcher}_0::astra_entry_{dtype}();" in text
    assert "reinterpret_cast<astra_param_t<decltype(kernel), 0>>(" in text
    launcher_at = text.index(f"void {launcher}(", text.index("end astra-graph"))
    body = text[text.index("{", launcher_at) + 1 :].lstrip()
    assert body.startswith(f"if (astra_{launcher}::launch(")


def _gate(folder: Path, gate: str) -> None:
    text = (folder / FRAMEWORK_FILE).read_text()
    (folder / FRAMEWORK_FILE).write_text(f"{text}\n[gate]\n{gate}")


NORM_DIMS = 'dims = { tokens = "tokens", hidden_size = "hidden" }\n'


@pytest.mark.parametrize(
    ("gate", "error"),
    [
        ('block = "norm"\ndims = { tokens = "tokens" }\nreads = "input"\n', "'hidden_size' has"),
        (
            'block = "norm"\ndims = { tokens = "tokens", hidden_size = "w" }\nreads = "input"\n',
            "'w' is none of",
        ),
        (
            f'block = "norm"\n{NORM_DIMS}reads = "weight"\n',
            "gate.reads: 'weight' is no tensor the op writes",
        ),
        (f'block = "mlp"\n{NORM_DIMS}reads = "input"\n', "gate.writes: required"),
        (f'block = "norm"\n{NORM_DIMS}reads = "input"\nwrites = "weight"\n', "gate.writes: only"),
        ('block = "conv"\ndims = {}\nreads = "input"\n', "gate.block"),
    ],
)
def test_gate_errors_are_one_line_naming_the_field(
    gate: str, error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _import(tmp_path, "fused_add_rms_norm")
    capsys.readouterr()
    spec, _ = resolve(folder / "production.cu")
    _gate(folder, gate)
    with pytest.raises(ContractError) as caught:
        load_framework(folder, spec.contract)
    message = str(caught.value)
    assert error in message and FRAMEWORK_FILE in message and "\n" not in message


def test_gate_without_a_block_is_bad_input_before_any_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path, "silu_and_mul")
    capsys.readouterr()
    with pytest.raises(ContractError, match=r"no \[gate\]"):
        gate_of(run.framework, run.spec.folder)
    assert main(["export", str(run.run_dir), "--gate", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no [gate]" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def _benchmark() -> ModuleType:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        return __import__("export_round_trip")
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def test_the_benchmarks_gates_fit_the_imported_contracts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """benchmarks/export_round_trip.py --imported fixtures: each fixture imports with a
    framework.toml that validates with the benchmark's [gate], and at every token count the
    gate runs the block's projections fit the drafted tensors (what gate._rows checks on the
    GPU)."""
    bench = _benchmark()
    targets = [bench.imported(item, tmp_path) for item in bench.IMPORTED_FIXTURES]
    capsys.readouterr()
    assert [t.framework_op for t in targets] == ["silu_and_mul", "fused_add_rms_norm"]
    for target in targets:
        spec, _ = resolve(Path(target.kernel))
        fw = load_framework(spec.folder, spec.contract)
        gate = gate_of(fw, spec.folder)
        assert target.root == FRAMEWORK.resolve()
        for tokens in (1, 2048):
            env = {"tokens": tokens, **MODEL}
            dims = {d: expr.evaluate_int(text, env) for d, text in gate.dims.items()}
            assert spec.contract.shape_problem(dims) is None
            sizes = {
                a.name: expr.evaluate_int(" * ".join(map(str, spec.contract.shape_of(a, dims))), {})
                for a in spec.contract.args
            }
            width = {"mlp": MODEL["intermediate"], "norm": MODEL["hidden"]}[gate.block]
            assert sizes[gate.reads] >= tokens * width
            if gate.writes is not None:
                assert sizes[gate.writes] >= tokens * 2 * MODEL["intermediate"]
    with pytest.raises(SystemExit, match=r"expected FILE\.cu:LAUNCHER"):
        bench.imported("tests/fixtures/framework/csrc/missing.cu:x", tmp_path)
    with pytest.raises(SystemExit, match="0 launch sites imported"):
        bench.imported("tests/fixtures/framework/csrc/activation.cu:nothing", tmp_path)


def test_the_benchmarks_agreement_counts_each_protocol_apart() -> None:
    bench = _benchmark()
    node, graph = NODE_METHOD, "graph x38, each copy once"
    cases = [
        {"shape": "a", "dtype": "float16", "bench_method": node, "export_over_bench": 1.045,
         "direct_over_bench": 1.005, "graph_over_direct": 1.04, "host_ahead": True},
        {"shape": "b", "dtype": "float16", "bench_method": graph, "export_over_bench": 1.01,
         "direct_over_bench": None, "graph_over_direct": None, "host_ahead": False},
        {"shape": "c", "dtype": "float16", "bench_method": None, "export_over_bench": None,
         "direct_over_bench": None, "graph_over_direct": None, "host_ahead": None},
        # a run benched before the node protocol: still one flushed launch
        {"shape": "d", "dtype": "bfloat16", "bench_method": EVENTS_METHOD,
         "export_over_bench": 0.99, "direct_over_bench": None, "graph_over_direct": None,
         "host_ahead": True},
    ]  # fmt: skip
    out = bench.agreement(cases)
    assert out["graph"]["within"] == 2 and out["graph"]["timed"] == 3
    assert out["graph"]["outside"] == [f"a float16 1.045 ({node})"]
    assert out["graph"]["single_launch_timed"] == 2
    assert out["direct"] == {
        "within": 1,
        "timed": 1,
        "single_launch_timed": 1,
        "range": [1.005, 1.005],
        "outside": [],
    }
    assert out["same_buffers"]["timed"] == 1 and out["same_buffers"]["within"] == 0
    assert out["same_buffers"]["outside"] == [f"a float16 1.040 ({node})"]
    assert out["host_time_possible"] == 1
