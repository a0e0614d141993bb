"""One interface rule (issue 21, item 3): the coding node, ``astra validate`` and the
evaluator's check all call ``harness.validation.interface_check`` and so say the same thing
about the same file, at the architecture of the GPU the evaluator has (sm_90 without one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.harness.compile import DEFAULT_ARCH
from astra_graph.harness.evaluator import Evaluator
from astra_graph.harness.geometry import smem_limit
from astra_graph.harness.pool import GpuPool, Slot
from astra_graph.harness.validation import interface_check, interface_problems
from astra_graph.kernel import loaded
from astra_graph.kernel.catalog import kernels_root
from astra_graph.kernel.header import load_implementation
from astra_graph.loop.agents.coding import read_candidate
from astra_graph.loop.context import Context
from fake_evaluator import FakeEvaluator
from kernel_sources import VECTORIZED, WRONG_INTERFACE

BASELINE = kernels_root() / "silu_and_mul" / "production.cu"
SUITES = ("tuning", "edge")
"""The visible suites: the shapes the coding node checks (with the agents' extras)."""
SMALL_SMEM_ARCH = "sm_86"
"""An architecture whose per-block shared memory is below sm_90's."""


def _between_limits() -> int:
    """Shared memory that sm_90 allows and SMALL_SMEM_ARCH does not."""
    small, large = smem_limit(SMALL_SMEM_ARCH), smem_limit(DEFAULT_ARCH)
    assert small < large
    return (small + large) // 2


def _write(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "candidate.cu"
    path.write_text(source)
    return path


class _GpuEvaluator:
    """A stand-in for the evaluator of a GPU whose architecture is ``arch``."""

    def __init__(self, arch: str) -> None:
        self._arch = arch

    def arch(self) -> str:
        return self._arch


def _three_answers(path: Path, arch: str, monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """What the coding node, validation and the evaluator's check say about a file they all
    reject, with the evaluator's GPU at ``arch`` (the evaluator's worker is never started)."""
    coding, validation = _two_answers(path, arch)
    evaluator = Evaluator()
    monkeypatch.setattr(evaluator, "arch", lambda: arch)
    with evaluator:
        verdict = evaluator.check(loaded.spec_of(BASELINE), BASELINE, path, suites=SUITES)
        assert evaluator.worker.starts == 0
    assert verdict.reason == "interface_mismatch", verdict
    return [coding, validation, verdict.message]


def _two_answers(path: Path, arch: str) -> list[str | None]:
    """What the coding node (its evaluator's GPU at ``arch``) and validation say about ``path``."""
    spec = loaded.spec_of(BASELINE)
    shapes = [dims for suite in SUITES for dims in spec.contract.suite(suite)]
    gpu_arch = Context(evaluator=_GpuEvaluator(arch)).compile_arch  # type: ignore[arg-type]
    coding = read_candidate(spec, path, path.read_text(), shapes, gpu_arch)[1]
    validation = interface_problems(spec, load_implementation(path, spec.contract), arch)
    return [coding, validation[0] if validation else None]


def test_geometry_is_checked_at_the_gpus_architecture_by_all_three(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smem = _between_limits()
    source = VECTORIZED.replace("// astra: grid", f"// astra: smem = {smem}\n// astra: grid")
    path = _write(tmp_path, source)
    small = _three_answers(path, SMALL_SMEM_ARCH, monkeypatch)
    assert all(answer is not None and "smem" in answer for answer in small), small
    assert len(set(small)) == 1, small  # the same line from all three
    assert _two_answers(path, DEFAULT_ARCH) == [None, None]


def test_a_requirement_that_excludes_a_visible_shape_is_the_same_problem_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    narrow = VECTORIZED.replace("requires = d % 8 == 0", "requires = d % 1024 == 0")
    answers = _three_answers(_write(tmp_path, narrow), DEFAULT_ARCH, monkeypatch)
    assert all(a is not None and "excludes shape" in a for a in answers), answers
    assert len(set(answers)) == 1, answers


def test_a_signature_mismatch_is_decided_without_asking_the_architecture(tmp_path: Path) -> None:
    spec = loaded.spec_of(BASELINE)
    impl = load_implementation(_write(tmp_path, WRONG_INTERFACE), spec.contract)

    def no_gpu_here() -> str:
        raise AssertionError("the architecture was asked for a signature mismatch")

    problems = interface_check(spec, impl, no_gpu_here, spec.contract.suite("tuning"))
    assert [p.dtype for p in problems] == list(spec.contract.dtypes)
    assert all("parameters" in p.message or "points to" in p.message for p in problems)


def test_without_a_gpu_the_check_is_at_the_target_architecture() -> None:
    assert Context(evaluator=object()).compile_arch() == DEFAULT_ARCH  # type: ignore[arg-type]


def test_a_pool_reports_its_gpus_architecture() -> None:
    """The CLI's default evaluator is a pool: the coding node asks it, through the context."""
    pool = GpuPool([Slot(gpu="0", evaluator=_GpuEvaluator(SMALL_SMEM_ARCH))])  # type: ignore[arg-type]
    assert Context(evaluator=pool).compile_arch() == SMALL_SMEM_ARCH
    fakes = GpuPool([Slot(gpu="0", evaluator=FakeEvaluator())])
    assert fakes.arch() == DEFAULT_ARCH
