"""The tuning agent: sweep an implementation's tunables per shape bucket (no LLM involved).

It runs after the baseline is profiled and after every round's profiling. Its subject is the
baseline (round 0) or the round's candidate if that was accepted and timed. The sweep
(``astra_graph.harness.tuning.tune``) picks a verified setting per bucket; the implementation is
then
timed with that dispatch table against the baseline's defaults; the sweep lands in the round's
record (the baseline's in ``State.baseline_tuning``), and the selection rule over the records
decides whether it is the best so far.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from astra_graph.harness.protocol import EvaluatorLike, spread
from astra_graph.harness.results import BenchReport, TimingMode, TuningReport
from astra_graph.harness.timing import geomean_speedup
from astra_graph.harness.tuning import group_by_bucket, tune
from astra_graph.harness.worker import WorkerError
from astra_graph.kernel import loaded
from astra_graph.kernel.contract import OperationSpec
from astra_graph.loop.agents.common import context_of, emit, load_baseline
from astra_graph.loop.best import best_so_far
from astra_graph.loop.context import Context
from astra_graph.loop.records import RoundRecord, Tuned, merge_rounds
from astra_graph.loop.state import State
from astra_graph.store.rundir import round_dir, write_model

TUNING_FILE = "tuning.json"
TUNED_BENCH_FILE = "tuned-bench.json"


def subject(state: State) -> tuple[int, str] | None:
    """(round, path) of what to tune now, or None: the baseline first, then accepted candidates."""
    if not state.history:
        return (0, state.kernel) if state.baseline_tuning is None else None
    record = state.history[-1]
    if record.tuning is None and record.candidate_path and record.geomean_speedup is not None:
        return record.round, record.candidate_path
    return None


def bench_with_dispatch(
    evaluator: EvaluatorLike,
    spec: OperationSpec,
    implementation: Path,
    baseline: Path,
    report: TuningReport,
    shapes: list[dict[str, int]],
    mode: TimingMode,
) -> BenchReport:
    """Time ``implementation`` with each bucket's setting against ``baseline``'s defaults.

    One interleaved bench per bucket and dtype (each on one GPU; with a pool, at once); the
    shapes are merged into one report whose geometric mean is recomputed over all of them. A
    rejection in any bucket rejects the whole table.
    """
    jobs = []
    for dtype in spec.contract.dtypes:  # timed as the untuned candidate is: every dtype
        by_bucket = group_by_bucket(spec, shapes, dtype)
        jobs += [
            partial(
                evaluator.bench,
                spec,
                implementation,
                against=baseline,
                mode=mode,
                shapes=by_bucket[entry.bucket],
                dtypes=[dtype],
                tunables=entry.tunables,
            )
            for entry in report.dispatch
            if by_bucket.get(entry.bucket)
        ]
    parts = spread(evaluator, jobs)  # the benches on idle GPUs at once
    merged = parts[0].model_copy(deep=True)
    merged.shapes = [s for part in parts for s in part.shapes]
    merged.notes = [n for part in parts for n in part.notes]
    merged.rejection = next((p.rejection for p in parts if p.rejection is not None), None)
    pairs = [(s.speedup, s.speedup_err or 0.0) for s in merged.shapes if s.speedup is not None]
    if pairs:
        merged.geomean_speedup, merged.geomean_speedup_err = geomean_speedup(pairs)
    return merged


def tuning(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    target = subject(state)
    if target is None:
        return {}
    k, path = target
    spec, _ = load_baseline(state)
    impl = loaded.implementation(spec, path)
    if not impl.header.tunables:
        return {}
    context = context_of(runtime)
    evaluator = context.get_evaluator()
    assert state.suite is not None
    shapes = [*spec.contract.suite("tuning"), *state.suite.extra]
    who = "the starting kernel" if k == 0 else f"round {k}'s candidate"
    emit(
        runtime, agent="tuning", round=k, message=f"sweeping the tunables of {who} per shape bucket"
    )
    try:
        report = tune(
            evaluator,
            spec,
            Path(path),
            baseline=Path(state.kernel),
            shapes=shapes,
            extra_shapes=state.suite.extra,
            budget_s=context.tune_budget_s,
        )
    except WorkerError as exc:  # the worker died under some setting: keep the defaults
        report = TuningReport(implementation=path, default_tunables=impl.header.default_tunables())
        report.skipped.append(f"sweep stopped: {exc}".splitlines()[0])
    folder = Path(state.run_dir) / "baseline" if k == 0 else round_dir(state.run_dir, k)
    write_model(folder / TUNING_FILE, report)
    record = Tuned(round=k, path=path, report=report)
    changed = any(e.tunables != report.default_tunables for e in report.dispatch)
    if changed:
        try:
            bench = bench_with_dispatch(
                evaluator, spec, Path(path), Path(state.kernel), report, shapes, context.timing_mode
            )
        except WorkerError as exc:
            report.skipped.append(f"timing with the dispatch table failed: {exc}".splitlines()[0])
            bench = None
        if bench is not None and bench.rejection is None:
            write_model(folder / TUNED_BENCH_FILE, bench)
            record.bench = bench
    if k == 0:
        update: dict[str, Any] = {"baseline_tuning": record}
        best = best_so_far(state.kernel, state.baseline, state.history, record)
    else:
        update = {"history": [RoundRecord(round=k, tuning=record)]}
        log = merge_rounds(state.history, update["history"])
        best = best_so_far(state.kernel, state.baseline, log, state.baseline_tuning)
    tuned_speedup = record.bench.geomean_speedup if record.bench else None
    emit(
        runtime,
        agent="tuning",
        round=k,
        message=(
            f"{len(report.dispatch)} buckets, {report.tried} settings timed, "
            f"{len(report.skipped)} skipped"
            + (f"; with its dispatch table {tuned_speedup:.3f}x" if tuned_speedup else "")
        ),
        best=best.geomean_speedup,
    )
    return update
