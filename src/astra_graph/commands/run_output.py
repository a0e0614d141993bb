"""What a run shows on the terminal, for ``astra optimize`` and ``astra reply``: progress lines
(structlog), then the outcome (the result table or JSON, or the one line saying what a waiting
run needs) and the exit code.

Exit codes: 0 a faster kernel was found and proven, an offline run finished, or the run waits
for an external answer; 1 the run finished without beating the baseline, or failed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

import structlog

from astra_graph.llm.external import waiting_for, waiting_line
from astra_graph.loop.state import OptimizationResult


def configure_logging(stream: TextIO) -> None:
    """structlog to ``stream``: console lines on a terminal, JSON lines otherwise."""
    tty = sys.stdout.isatty()
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=stream.isatty())
        if tty
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )


def format_result(result: OptimizationResult) -> str:
    """The per-round log, the winner's per-shape table and the totals, as plain text."""
    lines = [f"{result.op}: {result.message}"]
    if result.rounds:
        lines += ["", f"{'round':>5}  {'attempts':>8}  {'verdict':<24}{'speedup':>9}  {'best':>7}"]
    for r, best in zip(result.rounds, result.best_speedups, strict=True):
        if r.verdict is None:
            verdict = "no candidate"
        else:
            verdict = "accepted" if r.verdict.accepted else f"rejected: {r.verdict.reason}"
        speedup = f"{r.geomean_speedup:8.3f}x" if r.geomean_speedup is not None else f"{'-':>9}"
        lines.append(f"{r.round:>5}  {r.attempts:>8}  {verdict:<24}{speedup}  {best:6.3f}x")
    if result.dispatch is not None:
        lines += ["", f"{'bucket':<16}{'tunables':<34}{'vs default':>11}  shapes"]
        for entry in result.dispatch.dispatch:
            tunables = ", ".join(f"{k}={v}" for k, v in entry.tunables.items())
            lines.append(
                f"{entry.bucket:<16}{tunables:<34}{entry.speedup_vs_default:10.3f}x  "
                + " ".join(entry.shapes)
            )
    if result.shapes:
        lines += ["", f"{'shape':<14}{'dtype':<10}{'time us':>9}{'base us':>9}{'speedup':>9}"]
        for s in result.shapes:
            base = f"{s.baseline.median_us:9.2f}" if s.baseline else f"{'-':>9}"
            speedup = f"{s.speedup:8.3f}x" if s.speedup is not None else f"{'-':>9}"
            lines.append(f"{s.label:<14}{s.dtype:<10}{s.candidate.median_us:9.2f}{base}{speedup}")
    cost = f", ~${result.total_cost_usd:.4f}" if result.total_cost_usd is not None else ""
    lines += [
        "",
        f"result: {result.best_path} ({result.geomean_speedup:.3f}x, round {result.best_round})",
        f"tokens: {result.total_tokens}{cost}; run directory: {result.run_dir}",
    ]
    return "\n".join(lines)


def proven(result: OptimizationResult) -> bool:
    """A result a command may print as the run's outcome: only finalize marks a run
    ``finished``, after the winner passed the held-out suite (a dispatch table's settings each
    passed it in the sweep); a running, interrupted or failed run's best is unproven."""
    return result.status == "finished"


def show_outcome(result: OptimizationResult, as_json: bool) -> int:
    """Print the result (or, for a waiting run, the one line saying what to answer); exit code.

    A run that has not finished with a held-out-checked result gets one line saying where it
    stands and never exit code 0: an unproven speedup is never shown as a result."""
    pending = waiting_for(result.external) if result.status == "waiting" else None
    if as_json:
        print(result.model_dump_json(indent=2))
    elif pending is None and proven(result):
        print(format_result(result))
    if pending is not None:
        print(
            f"astra: {waiting_line(pending, Path(result.run_dir))}",
            file=sys.stderr if as_json else sys.stdout,
        )
        return 0
    if not proven(result):
        why = result.error or f"the run is {result.status}, with no held-out-checked result"
        print(
            f"astra optimize: run {result.status}: {why}; continue with --resume {result.run_dir}",
            file=sys.stderr,
        )
        return 1
    return 0 if result.improved or result.agents == "offline" else 1
