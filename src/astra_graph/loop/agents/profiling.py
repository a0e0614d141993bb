"""The profiling agent: time the baseline and each accepted candidate.

Timing goes through the harness (device mode by default: kernel time without the host's launch
overhead), on the tuning suite in every dtype of the contract: a kernel is faster only if it is
faster in the dtypes it ships for, and the planner and coder see each dtype's profile. What the
planner reads of a timing is its summary (``agents/summary.py``). The
outcome lands in the round's record (``state.CandidateRecord.timing``); the candidate's
speedup, whether it beat the baseline, and the best implementation so far are computed from
the records by the selection rule, so this module decides nothing about them.

:func:`measure` is the last step of every candidate: of the single-agent graph's round and of
each best-of-K branch (``agents/candidates.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from astra_graph.harness.results import BenchReport, Verdict
from astra_graph.harness.worker import WorkerError, WorkerTimeout
from astra_graph.kernel.contract import OperationSpec
from astra_graph.loop.agents.common import context_of, emit, load_baseline, write_candidate_files
from astra_graph.loop.best import best_so_far
from astra_graph.loop.context import Context
from astra_graph.loop.records import RoundRecord, merge_rounds
from astra_graph.loop.state import State
from astra_graph.store.rundir import BASELINE_BENCH, write_model


def profile_baseline(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Time the starting kernel on the tuning suite in every dtype; it is the first best-so-far."""
    spec, _ = load_baseline(state)
    emit(runtime, agent="profiling", round=0, message="timing the starting kernel")
    bench = (
        context_of(runtime)
        .get_evaluator()
        .bench(
            spec,
            Path(state.kernel),
            mode=context_of(runtime).timing_mode,
            shapes=spec.contract.suite("tuning"),
            dtypes=spec.contract.dtypes,
        )
    )
    write_model(Path(state.run_dir) / BASELINE_BENCH, bench)
    return {"baseline": bench}


def measure(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Time the candidate if it was accepted, and close its record (the round's log entry in
    the single-agent graph; the join tells the round's end in the multi-agent one)."""
    work = state.work
    assert work is not None
    k = state.round
    record = work.model_copy(update={"finished": True})
    if work.candidate_path is not None and work.verdict is not None and work.verdict.accepted:
        spec, _ = load_baseline(state)
        which = f"candidate {work.branch}" if state.candidates > 1 else "the candidate"
        emit(runtime, agent="profiling", round=k, message=f"timing {which} against the baseline")
        bench, failure = time_candidate(spec, state, Path(work.candidate_path), context_of(runtime))
        record = record.model_copy(update={"timing": bench, "timing_error": failure})
        # verdict.json says what the record says (rejected, if timing rejected it); bench.json
        # is kept as evidence even then
        write_candidate_files(state, record)
    update = state.with_candidate(record)
    if state.branch == 0:
        log = merge_rounds(state.history, update["history"])
        best = best_so_far(state.kernel, state.baseline, log, state.baseline_tuning)
        emit(
            runtime,
            agent="profiling",
            round=k,
            message=round_outcome(log[-1]),
            speedup=log[-1].geomean_speedup,
            best=best.geomean_speedup,
        )
    return update


def time_candidate(
    spec: OperationSpec, state: State, candidate: Path, context: Context
) -> tuple[BenchReport | None, Verdict | None]:
    """Time a checked candidate against the baseline: (report, or the reason there is none).

    Timing re-checks the outputs and rejects impossible times (``report.rejection``); a
    candidate that hangs or kills the worker while timed is rejected, not fatal to the run.
    """
    try:
        bench = context.get_evaluator().bench(
            spec,
            candidate,
            against=Path(state.kernel),
            mode=context.timing_mode,
            shapes=spec.contract.suite("tuning"),
            dtypes=spec.contract.dtypes,
        )
    except WorkerTimeout as exc:
        return None, Verdict.reject("timeout", f"killed while timing: {exc}", log=exc.log)
    except WorkerError as exc:
        return None, Verdict.reject("crashed", f"failed while timing: {exc}", log=exc.log)
    return bench, None


def round_outcome(record: RoundRecord) -> str:
    if record.verdict is None:
        return "no candidate this round"
    if not record.verdict.accepted:
        return f"candidate rejected ({record.verdict.reason})"
    if record.geomean_speedup is None:
        return "candidate accepted, no timing"
    return f"candidate {record.geomean_speedup:.3f}x ({'faster' if record.faster else 'no gain'})"
