"""``astra kernels`` and ``astra compile``: output, and the exit-code rule for bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.kernel.catalog import kernels_root

OPS = [
    "fused_add_rmsnorm",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "merge_attn_states_lse",
    "per_token_fp8_quant",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
]
MISSPELT = Path(__file__).parent / "data" / "contracts" / "misspelt_dim"


def test_kernels_json_lists_the_three_operations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernels", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["operations"]
    assert [op["name"] for op in listed] == OPS
    by_name = {op["name"]: op for op in listed}
    merge = by_name["merge_attn_states_lse"]
    assert list(merge["dims"]) == ["tokens", "heads", "head_dim"]
    assert {impl["name"] for impl in merge["implementations"]} == {"naive", "production"}
    production = next(i for i in merge["implementations"] if i["name"] == "production")
    assert production["entry"] == "merge_attn_states_lse_vec<T, VECS, STREAM>"
    assert {"ROWS", "VECS", "STREAM"} <= set(production["tunables"])
    norm = by_name["fused_add_rmsnorm"]
    assert [a["role"] for a in norm["args"]] == ["inout", "inout", "input"]
    assert {s["name"] for s in norm["scalars"]} == {"hidden", "eps"}
    for op in listed:
        assert op["dtypes"] == ["float16", "bfloat16"]
        assert op["suites"]["tuning"] and op["suites"]["heldout"] and op["suites"]["edge"]


def test_kernels_text_lists_each_operation_and_implementation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["kernels"]) == 0
    out = capsys.readouterr().out
    for op in OPS:
        assert f"{op}  [" in out
    assert out.count("- naive") == len(OPS) and out.count("- production") == len(OPS)


def test_kernels_json_as_a_subprocess(tmp_path: Path) -> None:
    env = {**os.environ, "ASTRA_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "astra_graph.cli", "kernels", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [op["name"] for op in json.loads(done.stdout)["operations"]] == OPS


@pytest.mark.usefixtures("needs_nvrtc")
def test_compile_prints_register_counts(capsys: pytest.CaptureFixture[str]) -> None:
    path = kernels_root() / "silu_and_mul" / "production.cu"
    assert main(["compile", str(path), "--arch", "sm_90"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "registers" in line]
    assert len(lines) == 2  # float16 and bfloat16
    for line in lines:
        registers = int(line.split("registers")[1].split()[0])
        assert registers > 0


@pytest.mark.usefixtures("needs_nvrtc")
def test_compile_json_by_operation_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "merge_attn_states_lse", "--arch", "sm_90", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert [r["dtype"] for r in report["results"]] == ["float16", "bfloat16"]
    assert all(r["resources"]["registers"] > 0 for r in report["results"])


@pytest.mark.usefixtures("needs_nvrtc")
def test_compile_of_a_broken_kernel_exits_1_with_the_compiler_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "silu_and_mul"
    shutil.copytree(kernels_root() / "silu_and_mul", folder)
    source = (folder / "naive.cu").read_text().replace("expf(-a)", "expf(-a) +* 2", 1)
    (folder / "broken.cu").write_text(source)
    assert main(["compile", str(folder / "broken.cu"), "--arch", "sm_90"]) == 1
    out = capsys.readouterr().out
    assert "compile failed" in out and "broken.cu(" in out and "error" in out


def test_misspelt_dim_gives_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(MISSPELT / "kernel.cu")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"astra compile: {MISSPELT / 'contract.toml'}: args[2].shape: unknown dim 'hiden'\n"
    )


def test_unknown_operation_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "no_such_op"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("astra compile: no_such_op: no such kernel file or operation")


def test_missing_kernel_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(tmp_path / "absent.cu")]) == 2
    assert "absent.cu: implementation file not found" in capsys.readouterr().err


def test_unknown_flag_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["kernels", "--colour"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--colour" in err


def test_a_bad_arch_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "silu_and_mul", "--arch", "bogus"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--arch" in err
