"""The path of one candidate from the coding agent's reply to its verdict and timing, on the CPU,
with its header parses counted (issue 21, item 3: the file is parsed once on the way).

The worker's jobs need a GPU, so the worker is an in-process stand-in doing what the jobs do
with a request before any kernel runs: validate it and rebuild the implementations from it.
Used by ``tests/test_parse_once.py`` and ``benchmarks/load_counts.py``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from astra_graph.harness.bench import BenchRequest
from astra_graph.harness.compile import DEFAULT_ARCH
from astra_graph.harness.evaluator import BENCH_JOB, CHECK_JOB, Evaluator
from astra_graph.harness.payload import CheckRequest, JobPayload, operation_spec
from astra_graph.harness.results import BenchReport, Verdict
from astra_graph.kernel import header, loaded
from astra_graph.kernel.catalog import kernels_root
from astra_graph.loop.agents.coding import read_candidate
from kernel_sources import VECTORIZED

BASELINE = kernels_root() / "silu_and_mul" / "production.cu"


class JobStandIn:
    """Answers the check and bench jobs in this process, after rebuilding the request's
    implementations as the jobs do (``verify.run_check``, ``bench.run_bench``)."""

    def __init__(self) -> None:
        self.jobs: list[str] = []

    def start(self) -> None:
        """Nothing to start: the jobs are answered here."""

    def log_tail(self) -> str:
        return ""

    def call(self, job: str, request: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.jobs.append(job)
        kind: type[JobPayload] = CheckRequest if job == CHECK_JOB else BenchRequest
        payload = kind.model_validate(request)
        contract = operation_spec(payload.op).contract
        payload.candidate.implementation(contract)
        if payload.baseline is not None:
            payload.baseline.implementation(contract)
        if job == CHECK_JOB:
            return Verdict(accepted=True).model_dump()
        if job != BENCH_JOB:
            raise RuntimeError(f"unexpected job {job}")
        return BenchReport(
            op="silu_and_mul",
            mode="device",
            device="stand-in",
            candidate=payload.candidate.path,
            copy_bandwidth_gbps=1.0,
            shapes=[],
        ).model_dump()


def parses_from_reply_to_verdict(folder: Path) -> int:
    """Header parses of one candidate file (written in ``folder``): the coding step, the
    evaluator's check and timing, and the jobs' rebuilding of the request."""
    path = folder / "candidate.cu"
    counts: Counter[str] = Counter()
    original = header.parse_header_lines

    def counting(source: str, where: str) -> dict[str, Any]:
        counts[where] += 1
        return original(source, where)

    header.parse_header_lines = counting  # load_implementation looks it up in its module
    try:
        _reply_to_verdict(path)
    finally:
        header.parse_header_lines = original
    return counts[str(path)]


def _reply_to_verdict(path: Path) -> None:
    spec = loaded.spec_of(BASELINE)
    shapes = spec.contract.suite("tuning")
    impl, problem = read_candidate(spec, path, VECTORIZED, shapes, DEFAULT_ARCH)
    if impl is None or problem is not None:
        raise RuntimeError(f"the scripted candidate does not pass the interface check: {problem}")
    path.write_text(VECTORIZED)  # what the coding step does with an accepted reply
    loaded.remember(spec, impl)
    evaluator = Evaluator()
    stand_in = JobStandIn()
    evaluator.worker = stand_in  # type: ignore[assignment]  # the jobs need a GPU
    evaluator.arch = lambda: DEFAULT_ARCH  # type: ignore[method-assign]  # asks the worker
    verdict = evaluator.check(spec, BASELINE, path, suites=("tuning", "edge"))
    if not verdict.accepted or stand_in.jobs != [CHECK_JOB]:
        raise RuntimeError(f"the check did not pass as scripted: {verdict}")
    evaluator.bench(spec, path, against=BASELINE)
