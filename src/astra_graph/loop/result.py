"""The run's result, :class:`~astra_graph.loop.state.OptimizationResult`, as the state shows it.

One function, used by the finalize node (the finished result) and by the runner, which writes
``run.json`` after every step (the result so far, or a failed or waiting run's). It lives beside
the state, not in a node module, so that the runner reaches the nodes only through the graph.
"""

from __future__ import annotations

from pathlib import Path

from astra_graph.harness.results import Verdict
from astra_graph.kernel import loaded
from astra_graph.loop.best import Best
from astra_graph.loop.state import OptimizationResult, RunStatus, State, StoppedAt
from astra_graph.store.rundir import BEST, utc_now


def result_from_state(
    state: State,
    *,
    status: RunStatus = "running",
    final: Best | None = None,
    heldout: Verdict | None = None,
    message: str = "",
    error: str | None = None,
    stopped_at: StoppedAt | None = None,
) -> OptimizationResult:
    """The run's result so far. Until finalize has chosen (``final``), the best so far shows."""
    run_dir = Path(state.run_dir)
    shown = final if final is not None else state.best
    if status == "finished":
        best_path = run_dir / BEST
    else:
        best_path = Path(shown.path if shown else state.kernel)
    costs = [u.cost_usd for u in state.usage]
    records = state.history
    return OptimizationResult(
        run_id=run_dir.name,
        run_dir=str(run_dir),
        op=loaded.spec_of(state.kernel).name,
        kernel=state.kernel,
        status=status,
        error=error,
        stopped_at=stopped_at,
        agents=state.agents,
        models=state.models,
        rounds_requested=state.rounds,
        candidates_per_round=state.candidates,
        rounds_completed=sum(1 for r in records if r.complete),
        test_suite=state.suite,
        baseline=state.baseline,
        baseline_tuning=state.baseline_tuning,
        best_round=shown.round if shown else 0,
        best_path=str(best_path),
        best_source=best_path.read_text() if best_path.is_file() else "",
        improved=bool(shown and (shown.round > 0 or shown.dispatch is not None)),
        geomean_speedup=shown.geomean_speedup if shown else 1.0,
        geomean_speedup_err=shown.geomean_speedup_err if shown else None,
        shapes=shown.bench.shapes if shown and shown.bench else [],
        heldout=heldout,
        dispatch=shown.dispatch if shown else None,
        message=message,
        rounds=records,
        usage=state.usage,
        total_tokens=sum(u.input_tokens + u.output_tokens for u in state.usage),
        total_cost_usd=None if any(c is None for c in costs) else sum(c or 0.0 for c in costs),
        started_at=state.started_at,
        updated_at=utc_now(),
    )
