"""Per-shape tuning: sweep an implementation's tunables per shape bucket, build a dispatch table.

Good kernels differ by shape, so one setting is chosen per *bucket*, not per operation:

- phase: ``decode`` when the contract's first dim (the row/token count) is at most 256,
  else ``prefill`` (the serving split the contracts' suites follow);
- row class, from the bytes one row moves (the contract's ``bytes_moved`` over the first dim,
  at the element type timed): ``small`` below 16 KiB, ``medium`` below 64 KiB, ``large`` above.

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
from pathlib import Path
from typing import Protocol

from astra_graph.contract import OperationSpec, load_implementation
from astra_graph.dtypes import DTYPES
from astra_graph.harness.timing import MIN_EFFECT
from astra_graph.models import BenchReport, DispatchEntry, TimingMode, TuningReport, Verdict

DECODE_MAX_ROWS = 256
ROW_CLASSES = ((16 * 1024, "small"), (64 * 1024, "medium"))
LARGEST_ROW_CLASS = "large"
DEFAULT_BUDGET_S = 120.0
DEFAULT_MAX_CONFIGS = 24
WIN_SIGMAS = 2.0
"""A configuration wins only when its speedup minus this many standard errors exceeds 1, and by
more than the harness's smallest trusted effect (``timing.MIN_EFFECT``)."""


class TuningEvaluator(Protocol):
    """The part of ``harness.evaluator.Evaluator`` the sweep uses."""

    def bench(
        self,
        op: OperationSpec,
        candidate: Path,
        *,
        against: Path | None = None,
        mode: TimingMode = "device",
        shapes: list[dict[str, int]] | None = None,
        dtypes: list[str] | None = None,
        tunables: dict[str, int] | None = None,
    ) -> BenchReport: ...

    def check(
        self,
        op: OperationSpec,
        baseline: Path,
        candidate: Path,
        *,
        extra_shapes: Sequence[Mapping[str, int]] = (),
        tunables: dict[str, int] | None = None,
    ) -> Verdict: ...


def bucket_of(spec: OperationSpec, dims: Mapping[str, int], dtype: str) -> str:
    """The bucket a shape falls in (see the module docstring)."""
    rows_dim = next(iter(spec.contract.dims))
    rows = max(dims[rows_dim], 1)
    phase = "decode" if rows <= DECODE_MAX_ROWS else "prefill"
    row_bytes = spec.contract.bytes_for(dims, dtype) / rows
    row_class = next((name for limit, name in ROW_CLASSES if row_bytes < limit), LARGEST_ROW_CLASS)
    return f"{phase}/{row_class}"


def group_by_bucket(
    spec: OperationSpec, shapes: Sequence[Mapping[str, int]], dtype: str
) -> dict[str, list[dict[str, int]]]:
    buckets: dict[str, list[dict[str, int]]] = {}
    for dims in shapes:
        buckets.setdefault(bucket_of(spec, dims, dtype), []).append(dict(dims))
    return dict(sorted(buckets.items()))


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
    evaluator: TuningEvaluator,
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
    impl = load_implementation(implementation, spec.contract)
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
        ranked: list[tuple[float, float | None, dict[str, int]]] = []
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
                ranked.append((timing.geomean_speedup, timing.geomean_speedup_err, config))
        ranked.sort(key=lambda item: item[0], reverse=True)
        chosen: DispatchEntry | None = None
        for speedup, err, config in ranked:
            if speedup - WIN_SIGMAS * (err or 0.0) <= 1.0 or speedup <= 1.0 + MIN_EFFECT:
                continue  # inside the noise; a slower but surer setting may still win
            verdict = verified(config)
            if verdict.accepted:
                chosen = DispatchEntry(
                    bucket=bucket,
                    tunables=config,
                    shapes=labels,
                    speedup_vs_default=speedup,
                    speedup_err=err,
                    verified=True,
                )
                break
            report.skipped.append(
                f"{bucket}: {config_label(config)}: {speedup:.2f}x but rejected "
                f"({verdict.reason}: {verdict.message})"
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
