"""Every correct-but-different kernel is accepted on a real GPU, in the agent loop's own path.

Each kernel of ``tests/fixtures/correct_kernels/<op>/`` goes through ``Evaluator.evaluate``
against the operation's production kernel: the full check (every suite, both dtypes, the
verification's special values, scenarios and precision rules), then timing (whose re-check and
impossible-time rule can still reject). A rejection of any of them is a false rejection of the
verification, never a flaky test: these kernels compute the contract's operation. Each kernel's
line (verdict, worst error over the tolerance, cases, speedup) is printed, and appended to the
file named by ``ASTRA_GPU_SUMMARY`` when set.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from astra_graph.harness.evaluator import Evaluator
from astra_graph.kernel.contract import OperationSpec
from correct_kernels import correct_kernels, kernel_id

pytestmark = pytest.mark.gpu

KERNELS = correct_kernels()


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(deadline_s=240) as ev:
        yield ev


def _record(line: str) -> None:
    print(line)
    target = os.environ.get("ASTRA_GPU_SUMMARY")
    if target:
        with open(target, "a") as out:
            out.write(line + "\n")


@pytest.mark.parametrize(("spec", "path"), KERNELS, ids=[kernel_id(k) for k in KERNELS])
def test_correct_kernel_is_accepted(evaluator: Evaluator, spec: OperationSpec, path: Path) -> None:
    evaluation = evaluator.evaluate(spec, spec.folder / "production.cu", path)
    verdict, bench = evaluation.verdict, evaluation.bench
    speedup = bench.geomean_speedup if bench is not None else None
    _record(
        f"{kernel_id((spec, path))}: "
        f"{'accepted' if verdict.accepted else f'REJECTED {verdict.reason}'}; "
        f"worst error {verdict.worst_error_ratio or 0.0:.3f} of the tolerance; "
        f"{verdict.cases_checked} cases; "
        f"speedup vs production {'-' if speedup is None else f'{speedup:.2f}x'}; "
        f"{evaluation.seconds:.1f} s; {verdict.message}"
    )
    assert verdict.accepted, verdict.model_dump_json(indent=1)
    assert bench is not None, "accepted but not timed"
    assert bench.rejection is None, bench.rejection.model_dump_json(indent=1)
    assert verdict.worst_error_ratio is not None and verdict.worst_error_ratio <= 1.0
