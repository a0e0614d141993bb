"""``astra export --format torch`` without a GPU: the package's files, its pure-Python dispatch
(imported from the generated package, torch absent), the framework naming, the CLI's errors."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from astra_graph.cli import main
from astra_graph.export.framework import FRAMEWORK_FILE, load_framework
from astra_graph.export.torch_package import export_torch, read_run, settings_used
from astra_graph.harness.buckets import bucket_of
from astra_graph.kernel.catalog import resolve
from astra_graph.kernel.contract import ContractError
from astra_graph.kernel.dtypes import DTYPES
from export_run import REPO, finished_run

OPS = ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse")
ELF_MAGIC = b"\x7fELF"
ARCH = "sm_90"


@pytest.fixture(scope="module", params=OPS)
def exported(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path, Path]]:
    """(op, run dir, package folder) for each shipped operation."""
    op = request.param
    root = tmp_path_factory.mktemp(op)
    run = finished_run(root, op)
    package = export_torch(read_run(run), root / "out", arch=ARCH)
    yield op, run, package


def _import_dispatch(package: Path) -> ModuleType:
    sys.path.insert(0, str(package.parent))
    try:
        for name in [m for m in sys.modules if m.split(".")[0] == package.name]:
            del sys.modules[name]
        return importlib.import_module(f"{package.name}.dispatch")
    finally:
        sys.path.remove(str(package.parent))


def _shapes(spec_args: list, dims: dict[str, int], spec: object) -> dict[str, tuple[int, ...]]:
    return {a.name: spec.contract.shape_of(a, dims) for a in spec_args}  # type: ignore[attr-defined]


def test_package_files_and_manifest(exported: tuple[str, Path, Path]) -> None:
    _, run, package = exported
    for name in ("__init__.py", "dispatch.py", "_core.py", "_launch.py", "op.py", "manifest.json"):
        assert (package / name).is_file(), name
    finished = read_run(run)
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["op"] == exported[0] and manifest["arch"] == ARCH
    settings = settings_used(finished)
    assert len(manifest["kernels"]) == len(settings) * len(finished.spec.contract.dtypes)
    for entry in manifest["kernels"].values():
        assert (package / "kernels" / entry["cubin"]).read_bytes()[:4] == ELF_MAGIC
    unverified = [e for e in finished.dispatch.dispatch if not e.verified]  # type: ignore[union-attr]
    for entry in unverified:
        setting = {**finished.impl.header.default_tunables(), **entry.tunables}
        assert setting not in settings or any(
            e.verified and {**finished.impl.header.default_tunables(), **e.tunables} == setting
            for e in finished.dispatch.dispatch  # type: ignore[union-attr]
        )


def test_package_imports_nothing_of_astra_graph(exported: tuple[str, Path, Path]) -> None:
    _, _, package = exported
    allowed = {
        "torch",
        "cupy",
        "numpy",
        "math",
        "collections",
        "dataclasses",
        "typing",
        "importlib",
        "inspect",
        "pathlib",
        "sys",
        "types",
        "__future__",
    }
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            assert roots <= allowed, f"{path.name} imports {roots - allowed}"


def test_dispatch_imports_without_torch(exported: tuple[str, Path, Path]) -> None:
    """A fresh interpreter imports the package and its dispatch with torch made unimportable."""
    _, _, package = exported
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['cupy'] = None\n"
        f"import {package.name}.dispatch as d\n"
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "print(d.TABLE.op)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=package.parent, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == exported[0]


def test_dispatch_matches_the_harness_on_every_suite_shape(
    exported: tuple[str, Path, Path],
) -> None:
    """The generated plan gives the geometry, bucket and setting the harness and the tuner
    compute, for every shape of every suite in every dtype."""
    _, run, package = exported
    finished = read_run(run)
    spec, header = finished.spec, finished.impl.header
    dispatch = _import_dispatch(package)
    for suite in ("tuning", "heldout", "edge"):
        for dims in spec.contract.suite(suite):
            for dtype in spec.contract.dtypes:
                shapes = _shapes(spec.contract.args, dims, spec)
                dtypes = {a.name: spec.contract.dtype_of(a, dtype).name for a in spec.contract.args}
                launch = dispatch.plan(shapes, dtypes, ARCH)
                assert not isinstance(launch, str), launch
                assert finished.dispatch is not None
                # the verified dispatch table's setting for the shape's bucket, else the default
                chosen = {
                    e.bucket: dict(e.tunables) for e in finished.dispatch.dispatch if e.verified
                }.get(bucket_of(spec, dims, dtype), dict(finished.dispatch.default_tunables))
                tunables = {**header.default_tunables(), **chosen}
                grid, block, smem = header.launch(dims, DTYPES[dtype], tunables)
                assert (launch.grid, launch.block, launch.smem) == (grid, block, smem)
                assert launch.bucket == bucket_of(spec, dims, dtype)
                assert launch.tunables == tunables
                assert launch.dims == dims


def test_dispatch_falls_back_outside_the_verified_domain(exported: tuple[str, Path, Path]) -> None:
    _, run, package = exported
    spec = read_run(run).spec
    dispatch = _import_dispatch(package)
    dims = dict(spec.contract.suite("tuning")[0])
    dtype = spec.contract.dtypes[0]
    dtypes = {a.name: spec.contract.dtype_of(a, dtype).name for a in spec.contract.args}
    shapes = _shapes(spec.contract.args, dims, spec)
    assert not isinstance(dispatch.plan(shapes, dtypes, ARCH), str)
    assert "compiled for" in dispatch.plan(shapes, dtypes, "sm_80")
    rows = next(iter(spec.contract.dims))
    high = dispatch.TABLE.domain[rows][1]
    beyond = _shapes(spec.contract.args, {**dims, rows: high + 1}, spec)
    assert "outside the verified domain" in dispatch.plan(beyond, dtypes, ARCH)
    first = spec.contract.args[0].name
    bad = {**shapes, first: (*shapes[first][:-1], shapes[first][-1] + 8)}
    assert isinstance(dispatch.plan(bad, dtypes, ARCH), str)
    wrong_type = {n: ("float32" if t == dtype else t) for n, t in dtypes.items()}
    assert "element type" in dispatch.plan(shapes, wrong_type, ARCH)
    misaligned = {a.name: 256 for a in spec.contract.args} | {first: 258}
    assert "aligned" in dispatch.plan(shapes, dtypes, ARCH, misaligned)


def test_op_source_declares_the_framework_signature(exported: tuple[str, Path, Path]) -> None:
    _, run, package = exported
    framework = read_run(run).framework
    tree = ast.parse((package / "op.py").read_text())
    function = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == framework.name
    )
    assert [a.arg for a in function.args.args] == [a.name for a in framework.args]
    decorator = function.decorator_list[0]
    assert isinstance(decorator, ast.Call)
    mutates = next(k for k in decorator.keywords if k.arg == "mutates_args")
    assert ast.literal_eval(mutates.value) == tuple(
        a.name for a in framework.args if a.kind == "Tensor!"
    )
    written = {a.name for a in read_run(run).spec.contract.args if a.written}
    assert {a.contract_name for a in framework.args if a.mutated} == written


def test_framework_toml_errors_are_one_line(tmp_path: Path) -> None:
    spec, _ = resolve(REPO / "kernels" / "silu_and_mul" / "production.cu")
    cases = {
        '[op]\nschema = "silu_and_mul(Tensor! out, Tensor input)"\n': "op.schema",
        '[op]\nschema = "_C::silu_and_mul(Tensor out, Tensor input)"\n'
        'args = { input = "x" }\n': "'out' is Tensor",
        '[op]\nschema = "_C::silu_and_mul(Tensor! out, Tensor input)"\n': "'input' -> 'input'",
        '[op]\nschema = "_C::silu_and_mul(Tensor! out)"\n': "'x' has no argument",
        '[op]\nschema = "_C::s(Tensor! out, Tensor x)"\n[[patch]]\nmodule = "m"\n'
        'function = "f"\nparams = ["out"]\n': "patch[0].params",
    }
    for text, expected in cases.items():
        (tmp_path / FRAMEWORK_FILE).write_text(text)
        with pytest.raises(ContractError) as info:
            load_framework(tmp_path, spec.contract)
        message = str(info.value)
        assert expected in message and "\n" not in message, message
    (tmp_path / FRAMEWORK_FILE).unlink()
    with pytest.raises(ContractError, match="not found"):
        load_framework(tmp_path, spec.contract)


def test_cli_exports_and_refuses_bad_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = finished_run(tmp_path, "silu_and_mul")
    out = tmp_path / "pkg"
    assert main(["export", str(run), "--out", str(out), "--arch", ARCH]) == 0
    assert (out / "astra_silu_and_mul" / "op.py").is_file()
    assert main(["export", str(tmp_path / "nothing")]) == 2
    assert "run.json: not found" in capsys.readouterr().err
    waiting = finished_run(tmp_path / "w", "silu_and_mul", status="waiting")
    assert main(["export", str(waiting)]) == 2
    err = capsys.readouterr().err
    assert "expected 'finished'" in err and len(err.strip().splitlines()) == 1
    assert main(["export", str(run), "--check"]) == 2
