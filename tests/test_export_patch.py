"""``astra export --format patch`` without a GPU: the diff against a framework-style file, what
it adds to the launcher, its errors, and the C++ spelling of the launch geometry (compiled with
the host C++ compiler and compared with the harness's own evaluation)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.export.dispatch_source import ExportError
from astra_graph.export.patch import HELPERS, cpp, write_patch
from astra_graph.export.torch_package import read_run, settings_used
from astra_graph.kernel.dtypes import DTYPES
from export_run import REPO, applied_patch, finished_run

FRAMEWORK = REPO / "tests" / "fixtures" / "framework_ops"
OPS = ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse")
ARCH = "sm_90"


@pytest.mark.parametrize("op", OPS)
def test_patch_applies_and_calls_the_dispatcher_first(op: str, tmp_path: Path) -> None:
    run = read_run(finished_run(tmp_path, op))
    assert run.framework.source is not None
    text, _ = applied_patch(run, FRAMEWORK, tmp_path, ARCH)
    original = (FRAMEWORK / run.framework.source.file).read_text()
    launcher = text.index(f" {run.framework.source.launcher}(", text.index("end astra-graph"))
    body = text[text.index("{", launcher) + 1 :].lstrip()
    assert body.startswith(f"if (astra_{op}::launch(")
    for i in range(len(settings_used(run))):
        assert f"namespace astra_{op}_{i} {{" in text
    # every line of the original survives, in order
    lines = iter(text.splitlines())
    assert all(line in lines for line in original.splitlines())


def test_patch_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = finished_run(tmp_path, "silu_and_mul")
    run = read_run(run_dir)
    broken = tmp_path / "fw"
    shutil.copytree(FRAMEWORK, broken)
    path = broken / "csrc" / "activation_kernels.cu"
    path.write_text(path.read_text().replace("void silu_and_mul(", "void other_name("))
    with pytest.raises(ExportError, match="no definition of the launcher 'silu_and_mul'"):
        write_patch(run, broken, tmp_path / "out", ARCH)
    assert main(["export", str(run_dir), "--format", "patch"]) == 2
    assert "--framework-root" in capsys.readouterr().err
    missing = ["export", str(run_dir), "--format", "patch", "--framework-root", str(tmp_path)]
    assert main(missing) == 2
    err = capsys.readouterr().err
    assert "activation_kernels.cu not found" in err and len(err.strip().splitlines()) == 1
    ok = [
        "export",
        str(run_dir),
        "--format",
        "patch",
        "--framework-root",
        str(FRAMEWORK),
        "--arch",
        ARCH,
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(ok) == 0
    assert (tmp_path / "o" / "silu_and_mul.patch").read_text().startswith("--- a/csrc/")


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler (g++)")
@pytest.mark.parametrize("op", OPS)
def test_cpp_geometry_equals_the_harness(op: str, tmp_path: Path) -> None:
    """The patch's C++ grid, block, shared memory and requires give the harness's values on
    every suite shape, for every setting the patch compiles."""
    run = read_run(finished_run(tmp_path, op))
    header, contract = run.impl.header, run.spec.contract
    cases, expected = [], []
    for setting in settings_used(run):
        for suite in ("tuning", "heldout", "edge"):
            for dims in contract.suite(suite):
                for dtype in contract.dtypes:
                    env = header.env(dims, DTYPES[dtype], setting)
                    grid, block, smem = header.launch(dims, DTYPES[dtype], setting)
                    met = [int(bool(header.unmet_requirement(dims, DTYPES[dtype], setting)))]
                    expected.append(" ".join(map(str, (*grid, *block, smem, *met))))
                    names = "".join(f"const int64_t {k} = {v}; " for k, v in env.items())
                    requires = " && ".join(f"bool({cpp(r)})" for r in header.requires) or "true"
                    cases.append(
                        f"{{ {names} dim3 g = {cpp.dims3(header.grid)}; "
                        f"dim3 b = {cpp.dims3(header.block)}; "
                        f"std::cout << g.x << ' ' << g.y << ' ' << g.z << ' ' << b.x << ' ' "
                        f"<< b.y << ' ' << b.z << ' ' << {cpp(header.smem)} << ' ' "
                        f"<< int(!({requires})) << '\\n'; }}"
                    )
    program = "\n".join(
        [
            "#include <algorithm>\n#include <cmath>\n#include <cstdint>\n#include <iostream>",
            "struct dim3 { unsigned x, y, z; dim3(unsigned x = 1, unsigned y = 1, "
            "unsigned z = 1) : x(x), y(y), z(z) {} };",
            HELPERS,
            "int main() {",
            *cases,
            "}",
        ]
    )
    source = tmp_path / "geometry.cpp"
    source.write_text(program)
    binary = tmp_path / "geometry"
    built = subprocess.run(
        ["g++", "-std=c++17", "-O0", "-w", str(source), "-o", str(binary)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[:2000]
    out = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == expected


def test_check_without_torch_is_a_missing_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("torch is installed here: --check would build")
    run_dir = finished_run(tmp_path, "silu_and_mul")
    argv = [
        "export",
        str(run_dir),
        "--format",
        "patch",
        "--framework-root",
        str(FRAMEWORK),
        "--check",
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--check:" in err and len(err.strip().splitlines()) == 1
