"""Issue 25's serving operations on a real GPU: both kernels of each pass the full check, and
production is timed against naive.

For every new operation (rms_norm, gelu_and_mul, gelu_tanh_and_mul, rotary_embedding,
per_token_fp8_quant) the naive kernel is checked with production as the baseline, then
production is evaluated with naive as the baseline: the full check (every suite, both dtypes,
random shapes, special values, the precision rules against naive's own error), then timing on
the tuning suite, whose re-check and impossible-time rule can still reject. The speedup is
printed (and appended to the file named by ``ASTRA_GPU_SUMMARY``), never asserted: timings are
no pass/fail criterion; ``benchmarks/serving_ops.py`` measures them on every suite shape.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from astra_graph.harness.evaluator import Evaluator
from astra_graph.kernel.catalog import resolve

pytestmark = pytest.mark.gpu

SERVING_OPERATIONS = (
    "rms_norm",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "rotary_embedding",
    "per_token_fp8_quant",
)


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


@pytest.mark.parametrize("op", SERVING_OPERATIONS)
def test_naive_and_production_pass_and_production_is_timed(evaluator: Evaluator, op: str) -> None:
    spec, _ = resolve(op)
    naive, production = spec.folder / "naive.cu", spec.folder / "production.cu"
    contract = spec.contract
    shapes = sum(len(contract.suite(s)) for s in ("tuning", "heldout", "edge"))

    checked = evaluator.check(spec, production, naive)
    _record(f"{op}/naive: {'accepted' if checked.accepted else 'REJECTED'}: {checked.message}")
    assert checked.accepted, checked.model_dump_json(indent=1)
    assert checked.cases_checked >= shapes * len(contract.dtypes)
    # the whole domain (issue 22: its shapes and the whole_type values) was checked too
    assert any(note.startswith("domain suite:") for note in checked.notes), checked.notes

    evaluation = evaluator.evaluate(spec, naive, production)
    verdict, bench = evaluation.verdict, evaluation.bench
    speedup = None if bench is None else bench.geomean_speedup
    _record(
        f"{op}/production: {'accepted' if verdict.accepted else f'REJECTED {verdict.reason}'}; "
        f"worst error {verdict.worst_error_ratio or 0.0:.3f} of the tolerance; "
        f"{verdict.cases_checked} cases; speedup vs naive "
        f"{'-' if speedup is None else f'{speedup:.2f}x'} (tuning suite); "
        f"{evaluation.seconds:.1f} s"
    )
    assert verdict.accepted, verdict.model_dump_json(indent=1)
    assert verdict.worst_error_ratio is not None and verdict.worst_error_ratio <= 1.0
    assert bench is not None and bench.rejection is None
    # evaluate() times the contract's first dtype (Evaluator.bench without dtypes)
    assert {s.dtype for s in bench.shapes} == {contract.dtypes[0]}
