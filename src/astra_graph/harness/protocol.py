"""The one evaluator protocol: what the agents, the tuner and the pool ask of an evaluator.

Every evaluator satisfies it and says so by subclassing it, so mypy checks each signature
against it: the harness's ``Evaluator`` (one worker process), ``GpuPool`` (calls go to an idle
slot's evaluator), the Ray backend's ``ActorEvaluator`` (files shipped to a cluster GPU) and the
tests' ``FakeEvaluator``. Parameters are the narrowest the callers pass (an ``OperationSpec``,
shapes as mappings), so an implementation may accept more, never less.

Not in the protocol, looked up where used because not every evaluator has them: ``sanitize``
(compute-sanitizer, the final check), ``arch`` (the compile check's architecture) and
``require_gpu`` (``optimize()``'s precondition on the evaluator it starts itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from astra_graph.contract import OperationSpec
from astra_graph.models import BenchReport, TimingMode, Verdict


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
