"""A kernel specialized on the shape (``// astra: specialize``), checked and timed on the GPU.

tests/fixtures/specialized/rms_norm_fixed.cu takes the row length as a template argument: the
harness builds one instantiation per hidden size a case asks for. It must be accepted against
rms_norm's contract over every suite and the domain suite (dozens of hidden sizes, each its own
build), rejected where one instantiation is wrong, and time at shapes of different sizes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.harness.evaluator import Evaluator
from astra_graph.kernel.catalog import kernels_root
from astra_graph.kernel.contract import load_contract

pytestmark = pytest.mark.gpu

FIXED = Path(__file__).resolve().parent / "fixtures" / "specialized" / "rms_norm_fixed.cu"
DEADLINE_S = 300
"""Every hidden size the suites and the domain suite ask for is one NVRTC build."""


def test_a_specialized_kernel_is_accepted_over_the_whole_domain() -> None:
    spec = load_contract(kernels_root() / "rms_norm")
    with Evaluator(deadline_s=DEADLINE_S) as evaluator:
        verdict = evaluator.check(spec, spec.folder / "naive.cu", FIXED)
    assert verdict.accepted, f"{verdict.message} {verdict.evidence}"


def test_one_wrong_instantiation_is_rejected(tmp_path: Path) -> None:
    """Wrong only where the row is 4096 long (a compile-time branch no other build takes)."""
    spec = load_contract(kernels_root() / "rms_norm")
    wrong = tmp_path / "wrong.cu"
    wrong.write_text(
        FIXED.read_text().replace(
            "as_f32(row[i]) * scale * as_f32(weight[i])",
            "as_f32(row[i]) * scale * as_f32(weight[i]) * (kHidden == 4096 ? 1.01f : 1.0f)",
        )
    )
    with Evaluator(deadline_s=DEADLINE_S) as evaluator:
        verdict = evaluator.check(spec, spec.folder / "naive.cu", wrong)
    assert not verdict.accepted
    assert verdict.evidence is not None and verdict.evidence.dims.get("hidden") == 4096


def test_a_specialized_kernel_is_timed_at_shapes_of_different_sizes() -> None:
    spec = load_contract(kernels_root() / "rms_norm")
    shapes = [{"tokens": 64, "hidden": 2048}, {"tokens": 16, "hidden": 8192}]
    with Evaluator(deadline_s=DEADLINE_S) as evaluator:
        report = evaluator.bench(
            spec,
            FIXED,
            against=spec.folder / "production.cu",
            shapes=shapes,
            dtypes=list(spec.contract.dtypes),
        )
    assert report.rejection is None, report.rejection
    timed = {(s.label, s.dtype) for s in report.shapes if s.speedup}
    assert timed == {(spec.contract.label(d), t) for d in shapes for t in spec.contract.dtypes}
