"""The exported op on a real GPU against the framework-style original built from source (marked
``gpu``; torch, nvcc and a GPU needed): ``--verify`` passes for every shipped operation, a shape
outside the verified domain runs the original, a lazy export is caught, and the patched
framework file builds with nvcc (``--check``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from astra_graph.export.torch_package import FinishedRun, export_torch, read_run
from export_run import REPO, finished_run

pytestmark = pytest.mark.gpu

FRAMEWORK = REPO / "tests" / "fixtures" / "framework_ops"
OPS = ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse")


def _exported(tmp_path: Path, op: str) -> tuple[FinishedRun, Path, Path]:
    pytest.importorskip("torch")
    from astra_graph.harness.compile import DEFAULT_ARCH, gpu_arch

    run = read_run(finished_run(tmp_path, op))
    package = export_torch(run, tmp_path / "out", arch=gpu_arch() or DEFAULT_ARCH)
    assert run.framework.source is not None
    return run, package, FRAMEWORK / run.framework.source.file


@pytest.mark.parametrize("op", OPS)
def test_verify_passes_against_the_original(op: str, tmp_path: Path) -> None:
    from astra_graph.export.verify import verify

    run, package, original = _exported(tmp_path, op)
    report = verify(run, package, original)
    assert report["passed"], report["failures"][:5]
    assert all(c["ok"] for c in report["checks"]), report["checks"]
    assert all(case["fallback_reason"] is None for case in report["cases"])
    assert report["host_overhead"]["exported_us"] > 0


def test_outside_the_domain_runs_the_original(tmp_path: Path) -> None:
    import torch

    from astra_graph.export.measure import load_original, load_package

    run, package, original_source = _exported(tmp_path, "silu_and_mul")
    original = load_original(run.spec, run.framework, original_source)
    op = load_package(package).load(fallback=original)
    runtime = sys.modules[f"{package.name}.op"].RUNTIME
    tokens_max = runtime.dispatch.TABLE.domain["tokens"][1]
    x = torch.randn(tokens_max + 1, 2 * 64, device="cuda", dtype=torch.float16)
    got = torch.empty(tokens_max + 1, 64, device="cuda", dtype=torch.float16)
    op(got, x)
    assert runtime.last_reason is not None and "verified domain" in runtime.last_reason
    want = torch.empty_like(got)
    original(want, x)
    assert torch.equal(got, want)
    odd = torch.randn(4, 2 * 12, device="cuda", dtype=torch.float16)  # d = 12: not a multiple of 8
    out = torch.empty(4, 12, device="cuda", dtype=torch.float16)
    op(out, odd)
    assert runtime.last_reason is not None


def test_verify_catches_a_wrong_export(tmp_path: Path) -> None:
    """An export whose kernel writes only the first half of each row fails verification."""
    from astra_graph.export.verify import verify

    run, package, original = _exported(tmp_path, "silu_and_mul")
    lines = (package / "dispatch.py").read_text().splitlines()
    # every launch gets half the blocks along the row: half of each row stays unwritten (NaN)
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("grid="))
    lazy = lines[at].replace("(ceil_div(", "(max(1, ceil_div(", 1)
    lazy = lazy.replace("* e['VECS'])", "* e['VECS']) // 2)", 1)
    assert lazy != lines[at] and lazy.count("(") == lazy.count(")")
    lines[at] = lazy
    (package / "dispatch.py").write_text("\n".join(lines) + "\n")
    report = verify(run, package, original)
    assert not report["passed"]
    assert any("mismatch" in f for f in report["failures"])


@pytest.mark.parametrize("op", OPS)
def test_patched_framework_file_builds(op: str, tmp_path: Path) -> None:
    from astra_graph.export.patch import check_patch, write_patch

    run, _, _ = _exported(tmp_path, op)
    _, patched = write_patch(run, FRAMEWORK, tmp_path / "patch", "sm_90")
    assert check_patch(run, FRAMEWORK, patched, "sm_90") is None


@pytest.mark.parametrize("op", ("fused_add_rmsnorm", "merge_attn_states_lse"))
def test_between_samples_restores_in_place_inputs_and_poisons_outputs(op: str) -> None:
    # the export's in-graph time repeats the bench's work between samples: every timed call
    # starts from the same in-place inputs and finds NaN where it must write
    torch = pytest.importorskip("torch")
    from astra_graph.export.measure import between_samples, make_inputs
    from astra_graph.kernel.contract import load_contract

    spec = load_contract(REPO / "kernels" / op)
    dims = spec.contract.suite("tuning")[0]
    tensors = make_inputs(spec, dims, "float16", torch.Generator("cuda").manual_seed(5))
    given = {name: t.clone() for name, t in tensors.items()}
    between = between_samples(spec, tensors)
    for t in tensors.values():
        t.fill_(3.0)  # what a timed call might leave
    between()
    for arg in spec.contract.args:
        now = tensors[arg.name]
        if arg.role == "inout":
            assert torch.equal(now, given[arg.name]), arg.name
        elif arg.role == "output":
            assert bool(torch.isnan(now).all()), arg.name
        else:
            assert bool((now == 3.0).all()), arg.name  # pure inputs: the call does not write them
    assert any(a.role != "input" for a in spec.contract.args)
