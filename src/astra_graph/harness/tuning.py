"""Per-shape tuning: sweep an implementation's tunables per shape bucket, build a dispatch table.

Good kernels differ by shape, so one setting is chosen per *bucket*, not per operation: the
serving phase (decode or prefill) and row class (small, medium, large), as
``astra_graph.harness.buckets`` defines them for the tuner and the verification plan alike.

For each bucket the sweep times every configuration against the implementation's default
setting on the bucket's shapes (interleaved, device mode), ranks them by geometric-mean speedup,
and keeps the fastest one that beats the default beyond the noise *and* passes the harness's
full verification (tuning, held-out and edge suites) with that setting. The sweep is bounded by
a configuration count and a time budget and records everything it skipped.

The timings are independent of each other, so they go through ``harness.protocol.spread``:
with a GPU pool as the evaluator, as many at once as it has idle GPUs (each timing still times
the setting and the default together in one worker on one GPU, so every speedup is formed on
one device); then each bucket's verification of its pick, at once too. Outcomes are gathered in
the serial order, so the report means the same whatever the pool's size; only the time budget
buys more timings on more GPUs.

This module uses the harness only through the evaluator's ``bench`` and ``check`` methods, so it
runs without LangGraph and is tested with a scripted evaluator.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from astra_graph.harness.buckets import group_by_bucket
from astra_graph.harness.protocol import EvaluatorLike, spread
from astra_graph.harness.results import DispatchEntry, TuningReport, Verdict
from astra_graph.harness.selection import final_pick
from astra_graph.kernel import loaded
from astra_graph.kernel.contract import OperationSpec
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import Implementation

DEFAULT_BUDGET_S = 120.0
DEFAULT_MAX_CONFIGS = 24


class _Budget:
    """The sweep's time budget, counted from the end of the first timing (thread-safe)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._from: float | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            self._from = self._from or time.monotonic()

    def spent(self) -> bool:
        with self._lock:
            return self._from is not None and time.monotonic() - self._from > self.seconds


class _Verdicts:
    """Each setting verified once, however many buckets pick it at once."""

    def __init__(self) -> None:
        self._futures: dict[str, Future[Verdict]] = {}
        self._lock = threading.Lock()

    def get(self, key: str, verify: Callable[[], Verdict]) -> Verdict:
        with self._lock:
            future = self._futures.get(key)
            mine = future is None
            if future is None:
                future = self._futures[key] = Future()
        if mine:  # the first asker verifies; later askers wait for its verdict
            try:
                future.set_result(verify())
            except BaseException as exc:
                future.set_exception(exc)
        return future.result()


@dataclass(frozen=True)
class _Timed:
    """One setting's geometric-mean speedup over the default on a bucket's shapes."""

    geomean_speedup: float
    geomean_speedup_err: float | None
    config: dict[str, int]


@dataclass(frozen=True)
class _Attempt:
    """What one setting came to on one bucket: timed (``tried``), and ranked or why not."""

    tried: bool = False
    timed: _Timed | None = None
    skipped: str | None = None


def config_label(tunables: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(tunables.items())) or "(defaults)"


def tune(
    evaluator: EvaluatorLike,
    spec: OperationSpec,
    implementation: Path,
    *,
    baseline: Path,
    shapes: Sequence[Mapping[str, int]],
    extra_shapes: Sequence[Mapping[str, int]] = (),
    dtype: str | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    max_configs: int = DEFAULT_MAX_CONFIGS,
) -> TuningReport:
    """Sweep ``implementation``'s tunables per bucket of ``shapes``; verify what is selected.

    ``baseline`` is what verification compares against (its own error bounds the candidate's).
    Verification covers every suite of the contract plus ``extra_shapes`` (the testing agent's),
    in every dtype. ``dtype`` is the element type timed (default: the contract's first).
    ``budget_s`` counts from the end of the first timing: that call also pays the worker's
    one-time start-up (CUDA context, CuPy's own kernel compiles, 10-30 s on a fresh machine),
    which would otherwise starve a sweep in a new process.
    """
    started = time.monotonic()
    dtype = dtype or spec.contract.dtypes[0]
    impl = loaded.implementation(spec, implementation)  # once per version of the file
    default = impl.header.default_tunables()
    report = TuningReport(implementation=str(implementation), default_tunables=default)
    configs = [c for c in impl.header.configurations() if c != default]
    if not configs:
        report.skipped.append("no tunables declared: nothing to sweep")
        return report
    if len(configs) > max_configs:
        report.skipped.append(
            f"{len(configs) - max_configs} of {len(configs)} configurations beyond the first "
            f"{max_configs} not tried (max_configs)"
        )
        configs = configs[:max_configs]
    sweep = _Sweep(
        evaluator,
        spec,
        implementation,
        impl,
        baseline,
        extra_shapes,
        dtype,
        buckets=group_by_bucket(spec, shapes, dtype),
        clock=_Budget(budget_s),
    )
    # Every (bucket, setting) timing is independent: they go to the evaluator's idle GPUs at
    # once (a pool), each timing setting and default together on one GPU; then each bucket's
    # verification of its pick, also at once. Results are gathered in the serial order, so the
    # report reads the same whatever the evaluator's width.
    pairs = [(bucket, config) for bucket in sweep.buckets for config in configs]
    attempts = spread(evaluator, [partial(sweep.time_one, b, c) for b, c in pairs])
    by_bucket: dict[str, list[_Attempt]] = {bucket: [] for bucket in sweep.buckets}
    for (bucket, _), attempt in zip(pairs, attempts, strict=True):
        by_bucket[bucket].append(attempt)
    selected = spread(
        evaluator, [partial(sweep.select, bucket, found) for bucket, found in by_bucket.items()]
    )
    for (entry, refused), found in zip(selected, by_bucket.values(), strict=True):
        report.tried += sum(a.tried for a in found)
        report.skipped.extend(a.skipped for a in found if a.skipped is not None)
        report.skipped.extend(refused)
        report.dispatch.append(entry)
    report.seconds = time.monotonic() - started
    return report


@dataclass
class _Sweep:
    """One implementation's sweep: what timing a setting and selecting a bucket's pick need."""

    evaluator: EvaluatorLike
    spec: OperationSpec
    implementation: Path
    impl: Implementation
    baseline: Path
    extra_shapes: Sequence[Mapping[str, int]]
    dtype: str
    buckets: dict[str, list[dict[str, int]]]
    clock: _Budget
    verdicts: _Verdicts = field(default_factory=lambda: _Verdicts())

    def time_one(self, bucket: str, config: dict[str, int]) -> _Attempt:
        """Time one setting against the default on one bucket (one bench: one GPU)."""
        label = f"{bucket}: {config_label(config)}"
        if self.clock.spent():
            return _Attempt(skipped=f"{label}: time budget spent")
        header = self.impl.header
        unmet = next(
            (
                need
                for d in self.buckets[bucket]
                if (need := header.unmet_requirement(d, DTYPES[self.dtype], config))
            ),
            None,
        )
        if unmet:
            return _Attempt(skipped=f"{label}: requires {unmet}")
        try:
            timing = self.evaluator.bench(
                self.spec,
                self.implementation,
                against=self.implementation,
                shapes=self.buckets[bucket],
                dtypes=[self.dtype],
                tunables=config,
            )
        except Exception as exc:  # a faulty configuration never stops the sweep
            return _Attempt(skipped=f"{label}: {exc}".splitlines()[0])
        finally:
            self.clock.start()
        if timing.rejection is not None:
            return _Attempt(
                tried=True,
                skipped=f"{label}: rejected in timing "
                f"({timing.rejection.reason}: {timing.rejection.message})",
            )
        if timing.geomean_speedup is None:
            return _Attempt(tried=True)
        return _Attempt(
            tried=True,
            timed=_Timed(timing.geomean_speedup, timing.geomean_speedup_err, config),
        )

    def verified(self, config: dict[str, int]) -> Verdict:
        return self.verdicts.get(
            config_label(config),
            lambda: self.evaluator.check(
                self.spec,
                self.baseline,
                self.implementation,
                extra_shapes=self.extra_shapes,
                tunables=config,
            ),
        )

    def select(self, bucket: str, attempts: list[_Attempt]) -> tuple[DispatchEntry, list[str]]:
        """The bucket's dispatch entry, and why settings faster than the default lost."""
        refused: list[str] = []

        def passes(timed: _Timed) -> bool:
            verdict = self.verified(timed.config)
            if not verdict.accepted:
                refused.append(
                    f"{bucket}: {config_label(timed.config)}: {timed.geomean_speedup:.2f}x but "
                    f"rejected ({verdict.reason}: {verdict.message})"
                )
            return verdict.accepted

        # the selection rule: faster than the default beyond a tie, best so far in the order
        # tried, the next best when verification refuses it
        ranked = [a.timed for a in attempts if a.timed is not None]
        winner = final_pick(ranked, passes)
        labels = [self.spec.contract.label(d) for d in self.buckets[bucket]]
        if winner is not None:
            entry = DispatchEntry(
                bucket=bucket,
                tunables=winner.config,
                shapes=labels,
                speedup_vs_default=winner.geomean_speedup,
                speedup_err=winner.geomean_speedup_err,
                verified=True,
            )
        else:
            default = self.impl.header.default_tunables()
            entry = DispatchEntry(
                bucket=bucket,
                tunables=default,
                shapes=labels,
                speedup_vs_default=1.0,
                verified=self.verified(default).accepted,
            )
        return entry, refused
