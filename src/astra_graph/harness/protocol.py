"""The one evaluator protocol: what the agents, the tuner and the pool ask of an evaluator.

Every evaluator satisfies it and says so by subclassing it, so mypy checks each signature
against it: the harness's ``Evaluator`` (one worker process), ``GpuPool`` (calls go to an idle
slot's evaluator), the Ray backend's ``ActorEvaluator`` (files shipped to a cluster GPU) and the
tests' ``FakeEvaluator``. Parameters are the narrowest the callers pass (an ``OperationSpec``,
shapes as mappings), so an implementation may accept more, never less.

``width`` (how many calls it runs at once) has a body here, 1, which every single-worker
evaluator inherits; ``GpuPool`` answers its count of working slots, so callers with independent
calls (the tuner's sweep, its verifications, the dispatch table's timings) keep that many in
flight through :func:`spread`.

Not in the protocol, looked up where used because a caller's evaluator may lack them:
``sanitize`` (compute-sanitizer in the final check; the four above have it, the tuner's test
double does not), ``arch`` (the compile check's architecture) and ``require_gpu``
(``optimize()``'s precondition on the evaluator it starts itself).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

from astra_graph.harness.results import BenchReport, TimingMode, Verdict
from astra_graph.kernel.contract import OperationSpec

T = TypeVar("T")


@runtime_checkable  # pydantic checks the type when it builds the run context's schema
class EvaluatorLike(Protocol):
    """Verifies and times kernels; ``close`` stops whatever it started (worker, actor)."""

    def check(
        self,
        op: OperationSpec,
        baseline: Path,
        candidate: Path,
        *,
        suites: Sequence[str] = ...,
        extra_shapes: Iterable[Mapping[str, int]] = ...,
        tunables: Mapping[str, int] | None = ...,
    ) -> Verdict:
        """Verify ``candidate`` against the reference and ``baseline``'s own error."""
        ...

    def bench(
        self,
        op: OperationSpec,
        candidate: Path,
        *,
        against: Path | None = ...,
        mode: TimingMode = ...,
        shapes: Sequence[Mapping[str, int]] | None = ...,
        dtypes: Sequence[str] | None = ...,
        tunables: Mapping[str, int] | None = ...,
    ) -> BenchReport:
        """Time ``candidate`` (and ``against``, interleaved with it) on ``shapes``."""
        ...

    def close(self) -> None:
        """Stop what the evaluator started."""
        ...

    @property
    def width(self) -> int:
        """How many calls it runs at once: 1 for one worker (a pool says how many GPUs)."""
        return 1


def spread(evaluator: EvaluatorLike, jobs: Sequence[Callable[[], T]]) -> list[T]:
    """Run independent ``jobs`` (each calling ``evaluator``) with ``evaluator.width`` of them in
    flight; their results in the jobs' order. A job's exception is raised here once no job is
    running (none is left running behind the caller's back).

    With width 1 the jobs run one after another in the caller's thread, in order: exactly the
    serial loop they replace. Jobs start in order, so a job that reads shared progress (the
    tuner's time budget) sees what the jobs started before it have done by then.
    """
    width = min(evaluator.width, len(jobs))
    if width <= 1:
        return [job() for job in jobs]
    with ThreadPoolExecutor(max_workers=width, thread_name_prefix="spread") as executor:
        futures = [executor.submit(job) for job in jobs]
    return [future.result() for future in futures]
