"""The profiling agent: time the baseline and each accepted candidate, and summarise the profile.

Timing goes through the harness (device mode by default: kernel time without the host's launch
overhead). The summary is what the planner reads: per-shape time and speedup, percent of the
roof (the device's achievable bandwidth for the operation's read:write mix), the limit each shape
is up against (bandwidth-bound at X% of the achievable, or Y% above the latency floor, where a
minimal kernel moving the same bytes takes longer than the bytes need), the kernel's resources
and a likely bottleneck. It also keeps the
best implementation so far: a candidate replaces it only if it beats the baseline beyond the
noise and is faster than the current best.
"""

from __future__ import annotations

from pathlib import Path
from statistics import median
from typing import Any

from langgraph.runtime import Runtime

from astra_graph import selection
from astra_graph.agents.common import context_of, emit, load_baseline
from astra_graph.context import Context
from astra_graph.contract import OperationSpec
from astra_graph.harness.roofline import at_latency_floor
from astra_graph.harness.worker import WorkerError, WorkerTimeout
from astra_graph.models import BenchReport, ShapeTiming, Verdict
from astra_graph.rundir import BASELINE_BENCH, BENCH, VERDICT, round_dir, write_model
from astra_graph.selection import replaces_best
from astra_graph.state import Best, RoundRecord, State

NEAR_ROOFLINE_PCT = 75.0
SMALL_KERNEL_US = 8.0


def beats_baseline(bench: BenchReport) -> bool:
    """The geometric-mean speedup is ``faster`` by the selection rule (not a tie)."""
    return selection.beats_baseline(bench.geomean_speedup, bench.geomean_speedup_err)


def likely_bottlenecks(bench: BenchReport, which: str = "candidate") -> list[str]:
    """Plain-language guesses at what limits the kernel, from the timings and resources."""
    found = []
    resources = bench.resources.get(which)
    if resources and resources.spill_bytes:
        found.append(f"register spills ({resources.spill_bytes} B): local-memory traffic")
    if resources and resources.occupancy is not None and resources.occupancy < 0.5:
        limit = f", limited by {resources.occupancy_limit}" if resources.occupancy_limit else ""
        found.append(f"low occupancy ({resources.occupancy:.0%}{limit})")
    latency = [s for s in bench.shapes if s.bound == "latency"]
    at_floor = [s.label for s in latency if _at_floor(s)]
    above = [s.label for s in latency if not _at_floor(s)]
    if at_floor:
        found.append(
            "at the latency floor on " + ", ".join(at_floor[:4]) + ": a minimal kernel moving "
            "the same bytes is no faster there; gains must come from the other shapes"
        )
    small = above or [
        s.label
        for s in bench.shapes
        if s.bound is None and s.candidate.median_us < SMALL_KERNEL_US and s.roofline_pct < 40
    ]
    if small:
        found.append(
            "latency on small shapes (" + ", ".join(small[:4]) + "): too little work in flight "
            "per launch; more bytes per thread or more blocks"
        )
    bandwidth = [s for s in bench.shapes if s.bound != "latency"]
    if bandwidth:
        typical = median(s.roofline_pct for s in bandwidth)
        if typical >= NEAR_ROOFLINE_PCT:
            found.append(f"memory bandwidth: median {typical:.0f}% of the roofline already")
        elif not small and not at_floor:
            found.append(
                f"memory access efficiency: median {typical:.0f}% of the roofline "
                "(narrow or uncoalesced accesses, too few loads in flight)"
            )
    return found or ["no clear bottleneck"]


def _at_floor(shape: ShapeTiming) -> bool:
    floor = shape.latency_floor
    return floor is not None and at_latency_floor(shape.candidate.median_us, floor.median_us)


def summarize(bench: BenchReport, title: str) -> str:
    """The compact profile the planner reads."""
    lines = [f"{title} ({bench.mode} timing on {bench.device})"]
    if bench.geomean_speedup is not None:
        err = f" +- {bench.geomean_speedup_err:.3f}" if bench.geomean_speedup_err else ""
        lines.append(f"geomean speedup over the starting kernel: {bench.geomean_speedup:.3f}x{err}")
    lines.append(
        f"{'shape':<14}{'dtype':<10}{'time us':>10}{'start us':>10}{'speedup':>9}"
        f"{'GB/s':>8}{'roofline':>10}  limit"
    )
    for s in bench.shapes:
        base = f"{s.baseline.median_us:10.2f}" if s.baseline else f"{'-':>10}"
        speedup = f"{s.speedup:8.3f}x" if s.speedup is not None else f"{'-':>9}"
        lines.append(
            f"{s.label:<14}{s.dtype:<10}{s.candidate.median_us:10.2f}{base}{speedup}"
            f"{s.achieved_gbps:8.0f}{s.roofline_pct:9.1f}%  {s.limit or '-'}"
        )
    for name, r in bench.resources.items():
        occupancy = f", occupancy {r.occupancy:.0%}" if r.occupancy is not None else ""
        limit = f" (limit: {r.occupancy_limit})" if r.occupancy_limit else ""
        lines.append(
            f"resources ({name}): {r.registers} registers, {r.threads_per_block} threads/block, "
            f"{r.static_smem_bytes + r.dynamic_smem_bytes} B shared, {r.spill_bytes} B spilled"
            f"{occupancy}{limit}"
        )
    lines.append("likely bottleneck: " + "; ".join(likely_bottlenecks(bench)))
    return "\n".join(lines)


def profile_baseline(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Time the starting kernel on the tuning suite; it is the first best-so-far."""
    assert state.suite is not None
    spec, _ = load_baseline(state)
    emit(agent="profiling", round=0, message="timing the starting kernel")
    bench = (
        context_of(runtime)
        .get_evaluator()
        .bench(
            spec,
            Path(state.kernel),
            mode=context_of(runtime).timing_mode,
            shapes=state.suite.tuning,
        )
    )
    write_model(Path(state.run_dir) / BASELINE_BENCH, bench)
    profile = summarize(bench, "Profile of the starting kernel")
    return {
        "baseline": bench,
        "best": Best(round=0, path=state.kernel, bench=bench, profile=profile),
    }


def profiling(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Time the round's candidate if it was accepted, log the round, update the best so far."""
    assert state.best is not None and state.suite is not None
    k = state.round
    candidate = state.candidate if state.candidate and state.candidate.problem is None else None
    record = RoundRecord(
        round=k,
        plan=state.plan,
        attempts=state.attempt,
        candidate_path=candidate.path if candidate else None,
        verdict=state.verdict,
        notes=state.round_notes,
    )
    best = state.best
    if candidate and state.verdict and state.verdict.accepted:
        spec, _ = load_baseline(state)
        emit(agent="profiling", round=k, message="timing the candidate against the baseline")
        bench, rejection = time_candidate(spec, state, Path(candidate.path), context_of(runtime))
        if rejection is not None:
            record.verdict = rejection.model_copy(
                update={
                    "cases_checked": state.verdict.cases_checked,
                    "suites": state.verdict.suites,
                }
            )
            # the round's verdict file says what the record says: rejected by timing
            write_model(round_dir(state.run_dir, k) / VERDICT, record.verdict)
        if bench is not None:
            write_model(round_dir(state.run_dir, k) / BENCH, bench)  # evidence, even if rejected
        if bench is not None and rejection is None:
            record.geomean_speedup = bench.geomean_speedup
            record.geomean_speedup_err = bench.geomean_speedup_err
            record.profile = summarize(bench, f"Profile of round {k}'s candidate")
            record.faster = beats_baseline(bench)
            contender = Best(
                round=k,
                path=candidate.path,
                geomean_speedup=bench.geomean_speedup or 1.0,
                geomean_speedup_err=bench.geomean_speedup_err,
                bench=bench,
                profile=record.profile,
            )
            if replaces_best(contender, best):
                best = contender
    record.best_speedup = best.geomean_speedup
    emit(
        agent="profiling",
        round=k,
        message=round_outcome(record),
        speedup=record.geomean_speedup,
        best=best.geomean_speedup,
    )
    return {"history": [record], "best": best}


def time_candidate(
    spec: OperationSpec, state: State, candidate: Path, context: Context
) -> tuple[BenchReport | None, Verdict | None]:
    """Time a checked candidate against the baseline: (report, rejection or None).

    Timing re-checks the outputs and rejects impossible times (``report.rejection``); a
    candidate that hangs or kills the worker while timed is rejected, not fatal to the run.
    """
    assert state.suite is not None
    try:
        bench = context.get_evaluator().bench(
            spec,
            candidate,
            against=Path(state.kernel),
            mode=context.timing_mode,
            shapes=state.suite.tuning,
        )
    except WorkerTimeout as exc:
        return None, Verdict.reject("timeout", f"killed while timing: {exc}", log=exc.log)
    except WorkerError as exc:
        return None, Verdict.reject("crashed", f"failed while timing: {exc}", log=exc.log)
    return bench, bench.rejection


def round_outcome(record: RoundRecord) -> str:
    if record.verdict is None:
        return "no candidate this round"
    if not record.verdict.accepted:
        return f"candidate rejected ({record.verdict.reason})"
    if record.geomean_speedup is None:
        return "candidate accepted, no timing"
    return f"candidate {record.geomean_speedup:.3f}x ({'faster' if record.faster else 'no gain'})"
