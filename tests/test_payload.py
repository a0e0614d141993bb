"""What check and bench requests carry, and the compile check's architecture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from astra_graph.harness.bench_request import BenchRequest
from astra_graph.harness.compile import DEFAULT_ARCH
from astra_graph.harness.evaluator import Evaluator
from astra_graph.harness.payload import CheckRequest, JobPayload, operation_spec
from astra_graph.kernel.catalog import resolve
from astra_graph.loop.context import Context

MERGE, MERGE_IMPL = resolve("merge_attn_states_lse")


def test_check_and_bench_requests_carry_the_same_payload() -> None:
    evaluator = Evaluator()
    try:
        bench = evaluator.bench_request(MERGE, MERGE_IMPL, MERGE_IMPL, "device", None, None, {})
    finally:
        evaluator.close()
    parsed = BenchRequest.model_validate(bench)
    shared = set(JobPayload.model_fields)
    assert shared <= set(BenchRequest.model_fields) and shared <= set(CheckRequest.model_fields)
    assert parsed.candidate.source == MERGE_IMPL.source  # the source travels, not just a path
    assert parsed.baseline is not None and parsed.baseline.path == str(MERGE_IMPL.path)
    spec = operation_spec(parsed.op)
    assert spec.contract == MERGE.contract  # -inf of the special scenarios survives
    assert spec.contract.specials[0].values["s_a"] == [-np.inf]


class _ArchEvaluator:
    def __init__(self) -> None:
        self.asked = 0

    def arch(self) -> str:
        self.asked += 1
        return "sm_80"


def test_the_compile_check_uses_the_evaluators_architecture() -> None:
    evaluator: Any = _ArchEvaluator()
    assert Context(evaluator=evaluator).compile_arch() == "sm_80"
    assert Context(evaluator=evaluator, arch="sm_90").compile_arch() == "sm_90"
    assert evaluator.asked == 1
    assert Context(evaluator=object()).compile_arch() == DEFAULT_ARCH  # type: ignore[arg-type]  # an evaluator with no arch attribute


def test_a_compile_check_for_the_workers_arch_fills_the_cache_the_worker_reads(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from astra_graph.harness import compile as compile_module
    from astra_graph.kernel.dtypes import DTYPES
    from astra_graph.kernel.header import load_implementation

    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path))
    spec, impl = resolve("silu_and_mul")
    again = load_implementation(impl.path, spec.contract)
    first = compile_module.compile_implementation(impl, DTYPES["float16"], arch="sm_80")
    # the worker asks with the header's default tunables spelt out: the same cache entry
    second = compile_module.compile_implementation(
        again, DTYPES["float16"], again.header.default_tunables(), arch="sm_80"
    )
    assert not first.cache_hit and second.cache_hit


def test_sanitize_says_so_when_compute_sanitizer_is_missing(monkeypatch: Any) -> None:
    from astra_graph.harness import deep

    monkeypatch.setattr(deep, "find_tool", lambda name: None)
    spec, impl = resolve("silu_and_mul")
    with Evaluator() as evaluator:
        report = evaluator.sanitize(spec, impl.path)
        assert evaluator.worker.starts == 0  # the tool runs beside the worker, not in it
    assert not report.available and not report.ok
    assert {r.tool for r in report.results} == {"memcheck", "racecheck"}
    assert len(report.results) == 2 * len(spec.contract.dtypes)
    assert all("compute-sanitizer not found" in r.summary for r in report.results)
