"""Bring your own kernel: kernels as written, parameter bindings, astra new / validate, --path.

The two framework-style kernels of examples/byok (namespaced entries, a functor template
argument, a load macro, cub::BlockReduce, <cstdint>/<type_traits>, a helper header, an
input_stride parameter and the kernel's own parameter order) are brought in without edits.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from astra_graph.cli import main
from astra_graph.harness import nvrtc
from astra_graph.harness.cases import make_case
from astra_graph.harness.compile import compile_implementation
from astra_graph.kernel.catalog import resolve, set_search_dirs
from astra_graph.kernel.contract import ContractError, OperationSpec, load_contract
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import Implementation, load_implementation, split_entry
from astra_graph.kernel.signature import find_signature, interface_problem

# conftest.py says why
pytestmark = pytest.mark.usefixtures("plots_not_drawn", "default_search_path")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "byok"
ACT = EXAMPLES / "act_and_mul" / "act_and_mul.cu"
NORM = EXAMPLES / "fused_add_rmsnorm" / "fused_add_rmsnorm.cu"


def test_entry_grammar() -> None:
    assert split_entry("ns::k<T, act<T>, true>") == ("ns::k", ["T", "act<T>", "true"])
    assert split_entry("::a::b") == ("::a::b", None)
    for bad in ("k<T", "k<T,>", "k<T; x>", "k<>", "1k", "k<T>>"):
        with pytest.raises(ValueError):
            split_entry(bad)


def test_examples_resolve_through_their_operation_header() -> None:
    spec, impl = resolve(ACT)
    assert spec.name == "silu_and_mul"
    assert impl.header.kernel_name == "act_and_mul_kernel"
    entry = impl.header.entry_for(DTYPES["bfloat16"], {"MAX_BLOCK": 256})
    assert (
        entry == "byok::act_and_mul_kernel<__nv_bfloat16, byok::SiluFunctor<__nv_bfloat16>, true>"
    )
    spec, impl = resolve(NORM)
    assert spec.name == "fused_add_rmsnorm"
    assert [(b.name, b.kind, b.dtype) for b in impl.bindings] == [
        ("input", "tensor", None),
        ("input_stride", "expr", "int64"),
        ("residual", "tensor", None),
        ("weight", "tensor", None),
        ("eps", "scalar", "float32"),
        ("num_tokens", "expr", "int32"),
        ("hidden", "scalar", "int32"),
    ]


def test_signature_is_read_from_the_included_header() -> None:
    spec, impl = resolve(NORM)
    found = find_signature(impl, spec.include_paths)
    assert found is not None
    template, params = found
    assert template == ["scalar_t", "kBlockSize"]
    assert [p.name for p in params][:2] == ["input", "input_stride"]
    for dtype in spec.contract.dtypes:
        assert interface_problem(spec, impl, dtype) is None


def _edited(tmp_path: Path, source: Path, old: str, new: str) -> Path:
    target = tmp_path / source.name
    for item in source.parent.iterdir():
        shutil.copy(item, tmp_path / item.name)
    text = source.read_text()
    assert old in text
    target.write_text(text.replace(old, new))
    return target


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "input_stride: int64 = hidden",
            "input_stride = hidden",
            "parameter 2 ('const int64_t input_stride') is int64, "
            "'input_stride' is passed as int32",
        ),
        (
            "weight, eps, num_tokens",
            "eps, weight, num_tokens",
            "parameter 4 ('const scalar_t* __restrict__ weight') must be a value for 'eps'",
        ),
        (", hidden\n", "\n", "takes 7 parameters, its bindings pass 6"),
    ],
)
def test_binding_mismatch_is_one_line_naming_the_parameter(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    spec, _ = resolve(NORM)
    impl = load_implementation(_edited(tmp_path, NORM, old, new), spec.contract)
    problem = interface_problem(spec, impl, "float16")
    assert problem is not None and expected in problem and "\n" not in problem


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ("input, residual, weight, eps, rows", "params[4]: 'rows' is no tensor or scalar"),
        ("input, residual, eps", "tensor 'weight' is not passed"),
        ("input, input, residual, weight", "'input' is listed twice"),
        ("input, s: int16 = hidden, residual, weight", "type 'int16'"),
        ("input, s = width, residual, weight", "unknown dim 'width'"),
        ("input = hidden, residual, weight", "is a contract argument"),
    ],
)
def test_bad_params_are_one_line(tmp_path: Path, params: str, expected: str) -> None:
    spec, _ = resolve(NORM)
    path = _edited(
        tmp_path,
        NORM,
        "input, input_stride: int64 = hidden, residual, weight, eps, num_tokens = tokens, hidden",
        params,
    )
    with pytest.raises(ContractError) as info:
        load_implementation(path, spec.contract)
    assert expected in str(info.value) and str(info.value).startswith(str(path))


def test_kernel_arguments_follow_the_bindings() -> None:
    from astra_graph.harness.launch import LoadedKernel

    spec, impl = resolve(NORM)
    case = make_case(
        spec, {"tokens": 3, "hidden": 24}, "float16", __import__("numpy").random.default_rng(1)
    )
    # arguments() needs neither a compiled kernel nor a CUDA function: none exist without a GPU
    no_gpu: Any = None
    kernel = LoadedKernel(spec, impl, DTYPES["float16"], {}, compiled=no_gpu, function=no_gpu)
    args = kernel.arguments(case)
    assert args[0] is case.arrays["input"] and args[2] is case.arrays["residual"]
    assert args[1] == 24 and str(args[1].dtype) == "int64"
    assert args[5] == 3 and str(args[5].dtype) == "int32"
    assert args[4] == pytest.approx(1e-6) and str(args[4].dtype) == "float32"


@pytest.mark.usefixtures("needs_nvrtc")
@pytest.mark.parametrize("path", [ACT, NORM])
def test_examples_compile_as_written_with_cccl(path: Path) -> None:
    assert nvrtc.cccl_include_dirs(), "CCCL (cub, libcu++) not found beside the CUDA wheels or CuPy"
    spec, impl = resolve(path)
    for dtype in spec.contract.dtypes:
        kernel = compile_implementation(
            impl, DTYPES[dtype], arch="sm_90", include_dirs=spec.include_paths
        )
        assert kernel.entry.startswith("byok::")


@pytest.mark.usefixtures("needs_nvrtc")
def test_editing_an_included_header_recompiles(tmp_path: Path) -> None:
    path = _edited(tmp_path, ACT, "MAX_BLOCK = 1024", "MAX_BLOCK = 1024")
    spec = load_contract(resolve(ACT)[0].folder)
    impl = load_implementation(path, spec.contract)
    first = compile_implementation(impl, DTYPES["float16"], arch="sm_90")
    helper = tmp_path / "activation_kernels.cuh"
    helper.write_text(helper.read_text().replace("1.0f + expf(-x)", "1.0f + expf(-x) + 0.0f"))
    second = compile_implementation(impl, DTYPES["float16"], arch="sm_90")
    assert not second.cache_hit and second.cubin_file != first.cubin_file


@pytest.mark.usefixtures("needs_nvrtc")
def test_validate_every_shipped_operation(capsys: pytest.CaptureFixture[str]) -> None:
    for op in (
        "silu_and_mul",
        "fused_add_rmsnorm",
        "merge_attn_states_lse",
        "rms_norm",
        "gelu_and_mul",
        "gelu_tanh_and_mul",
        "rotary_embedding",
        "per_token_fp8_quant",
    ):
        assert main(["validate", op]) == 0, capsys.readouterr().out
    for example in (ACT, NORM):
        assert main(["validate", str(example)]) == 0, capsys.readouterr().out


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            ("// astra: block = min(d, MAX_BLOCK)", "// astra: block = 0"),
            "header.block: expression '0' gives 0",
        ),
        (
            ("// astra: block = min(d, MAX_BLOCK)", "// astra: block = 2048"),
            "2048 threads per block",
        ),
        (
            ("// astra: grid = tokens", "// astra: grid = tokens // 0"),
            "header.grid: cannot evaluate",
        ),
    ],
)
def test_validate_and_compile_refuse_bad_geometry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: tuple[str, str], expected: str
) -> None:
    path = _edited(tmp_path, ACT, *edit)
    assert main(["validate", str(path), "--no-compile"]) == 1
    assert expected in capsys.readouterr().out
    assert main(["compile", str(path)]) == 1
    assert expected in capsys.readouterr().out


def test_validate_reports_a_broken_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "silu_and_mul"
    shutil.copytree(resolve("silu_and_mul")[0].folder, folder)
    (folder / "reference.py").write_text("def silu_and_mul(xp, inputs, params):\n    return {}\n")
    assert main(["validate", str(folder), "--no-compile"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  reference" in out and "returned no 'out'" in out
    assert out.count("ok    interface") == 2  # both implementations still checked


def test_new_drafts_an_operation_that_parses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = EXAMPLES / "fused_add_rmsnorm" / "layernorm_kernels.cuh"
    args = ["new", "my_norm", "--from", str(source), "--entry", "byok::fused_add_rms_norm_kernel"]
    assert main([*args, "--path", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "left to decide" in out and "reference.py: write the float64 reference" in out
    assert "input_stride is a stride" in out and "tunable K_BLOCK_SIZE" not in out
    spec = load_contract(tmp_path / "my_norm")
    assert [a.name for a in spec.contract.args] == ["input", "residual", "weight"]
    assert spec.contract.args[2].role == "input" and spec.contract.args[0].role == "inout"
    assert set(spec.contract.dims) == {"num_tokens", "hidden_size"}
    impl = load_implementation(tmp_path / "my_norm" / "production.cu", spec.contract)
    assert [b.name for b in impl.bindings][:2] == ["input", "input_stride"]
    assert interface_problem(spec, impl, "float16") is None
    assert main([*args, "--path", str(tmp_path)]) == 2  # never overwrites
    assert main(["validate", "my_norm", "--path", str(tmp_path), "--no-compile"]) == 1
    assert "NotImplementedError" in capsys.readouterr().out


def test_path_and_environment_find_operations_outside_the_repository(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(resolve("silu_and_mul")[0].folder, tmp_path / "outside_op")
    contract = tmp_path / "outside_op" / "contract.toml"
    contract.write_text(
        contract.read_text().replace('name = "silu_and_mul"', 'name = "outside_op"')
    )
    assert main(["kernels", "--path", str(tmp_path)]) == 0
    assert "outside_op" in capsys.readouterr().out
    monkeypatch.setenv("ASTRA_KERNEL_PATH", str(tmp_path))
    assert main(["validate", "outside_op", "--no-compile"]) == 0
    capsys.readouterr()
    assert main(["kernels", "--path", str(tmp_path / "nope")]) == 2
    assert "--path: " in capsys.readouterr().err


def test_broken_operations_never_hide_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "binary_op").mkdir()
    (tmp_path / "binary_op" / "contract.toml").write_bytes(b"\x00\x01\x02garbage")
    (tmp_path / "latin1_op").mkdir()
    (tmp_path / "latin1_op" / "contract.toml").write_bytes('name = "caf\xe9"\n'.encode("latin-1"))
    shutil.copytree(resolve("silu_and_mul")[0].folder, tmp_path / "good_op")
    contract = tmp_path / "good_op" / "contract.toml"
    contract.write_text(contract.read_text().replace('name = "silu_and_mul"', 'name = "good_op"'))
    (tmp_path / "good_op" / "broken.cu").write_bytes(b"\xff\xfe binary")
    assert main(["kernels", "--path", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "BROKEN: " in out and "contract.toml is binary" in out
    assert "contract.toml is not UTF-8 text" in out
    assert "broken.cu is not UTF-8" in out or "implementation is not UTF-8" in out
    for name in ("good_op", "silu_and_mul", "fused_add_rmsnorm"):
        assert f"\n{name}  [" in f"\n{out}"
    lines = [line for line in out.splitlines() if "BROKEN" in line]
    assert len(lines) == 3


@pytest.mark.usefixtures("needs_nvrtc")
@pytest.mark.parametrize("path", [ACT, NORM])
def test_offline_optimize_runs_on_an_example_outside_its_operation_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Path
) -> None:
    """The graph reloads the kernel by path: a file naming its operation must work there too."""
    from astra_graph.run.runner import optimize
    from fake_evaluator import FakeEvaluator

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ASTRA_API_KEY", raising=False)
    result = optimize(path, runs_dir=tmp_path, evaluator=FakeEvaluator())
    assert result.status == "finished", result.message
    assert Path(result.best_path).read_text() == path.read_text()


def test_operations_are_found_by_contract_name_and_path_takes_precedence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = resolve("silu_and_mul")[0].folder
    shutil.copytree(shipped, tmp_path / "my_copy")  # same contract name, another folder
    shutil.copytree(shipped, tmp_path / "folder_name")
    renamed = tmp_path / "folder_name" / "contract.toml"
    renamed.write_text(renamed.read_text().replace('name = "silu_and_mul"', 'name = "by_name"'))
    assert main(["kernels", "--path", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.count("\nsilu_and_mul  [") + out.startswith("silu_and_mul  [") == 1
    (warning,) = err.splitlines()
    assert str(shipped) in warning and "hidden by" in warning and "my_copy" in warning
    set_search_dirs([str(tmp_path)])
    assert resolve("silu_and_mul")[0].folder == (tmp_path / "my_copy").resolve()
    assert resolve("by_name")[0].folder == (tmp_path / "folder_name").resolve()
    assert main(["validate", "by_name", "--no-compile", "--path", str(tmp_path)]) == 0


@pytest.mark.parametrize("entry", ["a_file.txt", "missing_folder"])
def test_a_kernel_path_entry_that_is_no_folder_is_bad_input(
    entry: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "a_file.txt").write_text("not a folder")
    monkeypatch.setenv("ASTRA_KERNEL_PATH", str(tmp_path / entry))
    assert main(["kernels"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "ASTRA_KERNEL_PATH" in line and entry in line


TEMPLATED = """\
template <typename T, int BLOCK, int blockRows, int kVecs>
__global__ void scale_kernel(T* out, const T* x, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) out[i] = x[i];
}
"""


def test_new_drafts_tunables_from_the_names_the_user_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from astra_graph.kernel.drafting import TUNABLE_SUFFIX, tunable_name

    assert tunable_name("blockRows", TEMPLATED) == "BLOCK_ROWS"
    assert tunable_name("kVecs", TEMPLATED) == "VECS"
    assert tunable_name("BLOCK", TEMPLATED) == "BLOCK" + TUNABLE_SUFFIX  # BLOCK is taken
    assert tunable_name("KERNEL_SIZE", "") == "KERNEL_SIZE"  # not "ERNEL_SIZE"
    source = tmp_path / "scale.cuh"
    source.write_text(TEMPLATED)
    args = ["new", "my_scale", "--from", str(source), "--entry", "scale_kernel"]
    assert main([*args, "--path", str(tmp_path)]) == 0
    capsys.readouterr()
    header = (tmp_path / "my_scale" / "production.cu").read_text()
    block = "BLOCK" + TUNABLE_SUFFIX
    assert f"entry = scale_kernel<T, {block}, BLOCK_ROWS, VECS>" in header
    assert f"block = {block}" in header and f"tunable {block} = " in header
    assert "B_L_O_C_K" not in header
    spec = load_contract(tmp_path / "my_scale")
    impl = load_implementation(tmp_path / "my_scale" / "production.cu", spec.contract)
    assert interface_problem(spec, impl, "float16") is None


def _one_op(tmp_path: Path, source: str, header: str) -> tuple[OperationSpec, Implementation]:
    folder = tmp_path / "scale"
    folder.mkdir()
    (folder / "scale.cuh").write_text(source)
    (folder / "contract.toml").write_text(
        'name = "scale"\nsummary = "copy"\ndtypes = ["float16"]\nreference = "reference.py:f"\n'
        'bytes_moved = "2 * n * elem_bytes"\n[dims.n]\nmin = 1\n'
        '[[args]]\nname = "out"\ndtype = "T"\nshape = ["n"]\nrole = "output"\n'
        '[[args]]\nname = "x"\ndtype = "T"\nshape = ["n"]\nrole = "input"\n'
        '[[scalars]]\nname = "n"\ndtype = "int32"\nvalue = "n"\n'
        "[tolerance.float16]\natol = 0.0\nrtol = 0.0\n"
        "[suites]\ntuning = [{ n = 64 }]\nheldout = [{ n = 65 }]\n"
    )
    (folder / "reference.py").write_text("def f(xp, inputs, params):\n    return {}\n")
    (folder / "production.cu").write_text(f'{header}\n#include "scale.cuh"\n')
    spec = load_contract(folder)
    return spec, load_implementation(folder / "production.cu", spec.contract)


def test_a_tunable_named_after_a_template_parameter_is_one_line_naming_both(
    tmp_path: Path,
) -> None:
    header = (
        "// astra: entry = scale_kernel<T, BLOCK, 1, 1>\n// astra: grid = n\n"
        "// astra: block = BLOCK\n// astra: tunable BLOCK = 128, 256"
    )
    spec, impl = _one_op(tmp_path, TEMPLATED, header)
    problem = interface_problem(spec, impl, "float16")
    assert problem is not None and "\n" not in problem
    assert "tunable BLOCK" in problem and "template parameter BLOCK" in problem


def test_an_entry_absent_from_the_file_is_an_interface_error(tmp_path: Path) -> None:
    header = (
        "// astra: entry = no_such_kernel<T, 64, 1, 1>\n// astra: grid = n\n// astra: block = 64"
    )
    spec, impl = _one_op(tmp_path, TEMPLATED, header)
    problem = interface_problem(spec, impl, "float16")
    assert problem is not None and "\n" not in problem
    assert "'no_such_kernel<T, 64, 1, 1>' names no function" in problem
