"""Finalize: choose the result, checked on the held-out suite, never worse than the baseline.

Contenders are the rounds' candidates and the tuned implementations (with their dispatch
tables) that beat the baseline on the tuning suite. The selection rule
(``astra_graph.harness.selection``)
picks the best of them; it wins if the harness also accepts it on the held-out suite (shapes no
agent has seen) and compute-sanitizer's memcheck and racecheck find nothing (where the tool is
installed; the message says when it is not), else the rule picks again among the rest. Every
setting in a dispatch table already passed the full verification, held-out suite included, in
the sweep. If none qualifies the result is the baseline itself, with speedup 1.0 (its header's
default tunables), and the message says so.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from astra_graph.harness.deep import SanitizerReport
from astra_graph.harness.results import Verdict
from astra_graph.harness.selection import final_pick
from astra_graph.kernel.contract import OperationSpec
from astra_graph.loop.agents.common import context_of, emit, load_baseline
from astra_graph.loop.best import Best, contenders
from astra_graph.loop.context import Context
from astra_graph.loop.result import result_from_state
from astra_graph.loop.state import State
from astra_graph.store.rundir import (
    BEST,
    BEST_DISPATCH,
    HELDOUT_VERDICT,
    SANITIZER,
    round_dir,
    write_model,
)

HELDOUT_SUITES = ("heldout",)


def sanitizer_report(
    evaluator: Any, spec: OperationSpec, contender: Best
) -> SanitizerReport | None:
    """compute-sanitizer over the contender with every tunable setting it runs with (its dispatch
    table's, else its defaults); None when the evaluator has no ``sanitize``."""
    sanitize = getattr(evaluator, "sanitize", None)
    if sanitize is None:
        return None
    settings: list[dict[str, int] | None] = [None]
    if contender.dispatch is not None:
        settings = []
        for entry in contender.dispatch.dispatch:
            if entry.tunables not in settings:
                settings.append(entry.tunables)
    results = []
    for tunables in settings:
        results += sanitize(spec, Path(contender.path), tunables=tunables).results
    return SanitizerReport(results=results)


def finalize(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    spec, _ = load_baseline(state)
    run_dir = Path(state.run_dir)
    emit(
        runtime,
        agent="finalize",
        round=state.round,
        message="checking the best candidates on held-out shapes",
    )
    evaluator = context_of(runtime).get_evaluator()
    heldout: Verdict | None = None
    refused: list[str] = []
    verdicts: dict[str, Verdict] = {}
    sanitized: list[str] = []

    def passes(contender: Best) -> bool:
        """The final checks: the held-out suite, then compute-sanitizer where it exists."""
        nonlocal heldout
        verdict = None
        if contender.round > 0:
            # the baseline itself needs no held-out check against itself; every setting of a
            # dispatch table passed the held-out suite in the sweep already
            if contender.path not in verdicts:
                verdicts[contender.path] = evaluator.check(
                    spec, Path(state.kernel), Path(contender.path), suites=HELDOUT_SUITES
                )
                write_model(
                    round_dir(run_dir, contender.round) / HELDOUT_VERDICT,
                    verdicts[contender.path],
                )
            verdict = verdicts[contender.path]
            if not verdict.accepted:
                refused.append(
                    f"{contender.describe()} failed the held-out suite ({verdict.reason})"
                )
                return False
        report = sanitizer_report(evaluator, spec, contender)
        if report is None:
            sanitized.append("compute-sanitizer not run: the evaluator cannot run it")
        else:
            folder = (
                run_dir / "baseline"
                if contender.round == 0
                else round_dir(run_dir, contender.round)
            )
            write_model(folder / SANITIZER, report)
            if not report.available:
                sanitized.append("compute-sanitizer not installed: memcheck and racecheck not run")
            elif not report.ok:
                failed = "; ".join(r.summary for r in report.results if not r.ok)
                refused.append(f"{contender.describe()} failed compute-sanitizer: {failed}")
                return False
            else:
                sanitized.append("compute-sanitizer memcheck and racecheck found no errors")
        heldout = verdict
        return True

    chosen = final_pick(contenders(state.history, state.baseline_tuning), passes)
    final = chosen or Best(round=0, path=state.kernel, bench=state.baseline)
    shutil.copyfile(final.path, run_dir / BEST)
    if final.dispatch is not None:
        write_model(run_dir / BEST_DISPATCH, final.dispatch)
    if final.round or final.dispatch is not None:
        message = (
            f"{final.describe()} is {final.geomean_speedup:.3f}x faster than the baseline "
            "(geometric mean over the tuning shapes) and passed the held-out suite"
        )
    else:
        message = "no candidate beat the baseline; the result is the baseline (speedup 1.0)"
    if chosen is not None and sanitized:
        message += f"; {sanitized[-1]}"
    if refused:
        message += "; " + "; ".join(refused)
    emit(runtime, agent="finalize", round=state.round, message=message, best=final.geomean_speedup)
    result = result_from_state(
        state, status="finished", final=final, heldout=heldout, message=message
    )
    return {"result": result}
