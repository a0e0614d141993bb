"""What the evaluator asks the timing job (``harness.bench.run_bench``) to do: the payload a
check request carries too (``harness.payload``) plus the timing settings (moved out of bench.py,
issue 21)."""

from __future__ import annotations

from pydantic import Field

from astra_graph.harness import timing
from astra_graph.harness.payload import JobPayload
from astra_graph.harness.results import TimingMode


class BenchRequest(JobPayload):
    """What the evaluator asks the worker to time (``Evaluator.bench_request`` builds it): the
    payload a check request carries too (``harness.payload``), plus the timing settings."""

    mode: TimingMode = "device"
    shapes: list[dict[str, int]] | None = None
    """The tuning suite's when None."""
    dtypes: list[str] | None = None
    """Element types to time; the contract's first when None."""
    seed: int | None = None
    """Seed of the timed inputs; a fresh one from the OS when None."""
    budget_s: float = Field(timing.BUDGET_S, gt=0)
    """Device-mode sampling budget per shape."""
    copy_gbps: float | None = Field(None, gt=0)
    """Override the measured copy bandwidth (tests of the impossibility check)."""
