"""Per-shape tuning: sweep an implementation's tunables per shape bucket, build a dispatch table.

Good kernels differ by shape, so one setting is chosen per *bucket*, not per operation: the
serving phase (decode or prefill) and row class (small, medium, large), as
``astra_graph.harness.buckets`` defines them for the tuner and the verification plan alike.

For each bucket the sweep times every configuration against the implementation's default
setting on the bucket's shapes (interleaved, device mode), ranks them by geometric-mean speedup,
and keeps the fastest one that beats the default beyond the noise *and* passes the harness's
full verification (tuning, held-out and edge suites) with that setting. The sweep is bounded by
a configuration count and a time budget and records everything it skipped.

This module uses the harness only through the evaluator's ``bench`` and ``check`` methods, so it
runs without LangGraph and is tested with a scripted evaluator.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from astra_graph import loaded
from astra_graph.contract import OperationSpec
from astra_graph.dtypes import DTYPES
from astra_graph.harness.buckets import bucket_of, group_by_bucket
from astra_graph.harness.protocol import EvaluatorLike
from astra_graph.models import DispatchEntry, TuningReport, Verdict
from astra_graph.selection import final_pick

DEFAULT_BUDGET_S = 120.0
DEFAULT_MAX_CONFIGS = 24


@dataclass(frozen=True)
class _Timed:
    """One setting's geometric-mean speedup over the default on a bucket's shapes."""

    geomean_speedup: float
    geomean_speedup_err: float | None
    config: dict[str, int]


def config_label(tunables: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(tunables.items())) or "(defaults)"


def tunables_for(
    report: TuningReport, spec: OperationSpec, dims: Mapping[str, int], dtype: str
) -> dict[str, int]:
    """The dispatch table's setting for a shape (the default where its bucket was not tuned)."""
    bucket = bucket_of(spec, dims, dtype)
    for entry in report.dispatch:
        if entry.bucket == bucket:
            return dict(entry.tunables)
    return dict(report.default_tunables)


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
    budget_from: float | None = None
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
    verdicts: dict[str, Verdict] = {}

    def verified(config: dict[str, int]) -> Verdict:
        key = config_label(config)
        if key not in verdicts:
            verdicts[key] = evaluator.check(
                spec, baseline, implementation, extra_shapes=extra_shapes, tunables=config
            )
        return verdicts[key]

    for bucket, bucket_shapes in group_by_bucket(spec, shapes, dtype).items():
        labels = [spec.contract.label(d) for d in bucket_shapes]
        ranked: list[_Timed] = []
        for config in configs:
            if budget_from is not None and time.monotonic() - budget_from > budget_s:
                report.skipped.append(f"{bucket}: {config_label(config)}: time budget spent")
                continue
            unmet = next(
                (
                    need
                    for d in bucket_shapes
                    if (need := impl.header.unmet_requirement(d, DTYPES[dtype], config))
                ),
                None,
            )
            if unmet:
                report.skipped.append(f"{bucket}: {config_label(config)}: requires {unmet}")
                continue
            try:
                timing = evaluator.bench(
                    spec,
                    implementation,
                    against=implementation,
                    shapes=bucket_shapes,
                    dtypes=[dtype],
                    tunables=config,
                )
            except Exception as exc:  # a faulty configuration never stops the sweep
                report.skipped.append(f"{bucket}: {config_label(config)}: {exc}".splitlines()[0])
                continue
            finally:
                budget_from = budget_from or time.monotonic()
            report.tried += 1
            if timing.rejection is not None:
                report.skipped.append(
                    f"{bucket}: {config_label(config)}: rejected in timing "
                    f"({timing.rejection.reason}: {timing.rejection.message})"
                )
                continue
            if timing.geomean_speedup is not None:
                ranked.append(_Timed(timing.geomean_speedup, timing.geomean_speedup_err, config))

        def passes(timed: _Timed, bucket: str = bucket) -> bool:
            verdict = verified(timed.config)
            if not verdict.accepted:
                report.skipped.append(
                    f"{bucket}: {config_label(timed.config)}: {timed.geomean_speedup:.2f}x but "
                    f"rejected ({verdict.reason}: {verdict.message})"
                )
            return verdict.accepted

        # the selection rule: faster than the default beyond a tie, best so far in the order
        # tried, the next best when verification refuses it
        winner = final_pick(ranked, passes)
        chosen: DispatchEntry | None = None
        if winner is not None:
            chosen = DispatchEntry(
                bucket=bucket,
                tunables=winner.config,
                shapes=labels,
                speedup_vs_default=winner.geomean_speedup,
                speedup_err=winner.geomean_speedup_err,
                verified=True,
            )
        report.dispatch.append(
            chosen
            or DispatchEntry(
                bucket=bucket,
                tunables=default,
                shapes=labels,
                speedup_vs_default=1.0,
                verified=verified(default).accepted,
            )
        )
    report.seconds = time.monotonic() - started
    return report
