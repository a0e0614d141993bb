"""Many kernels at once: one ``optimize()`` run per kernel, concurrently, over one GPU pool.

``astra optimize K1 K2 ...`` (or a directory of operations) lands here. Each kernel gets its own
run directory, checkpoint and report, exactly as a single run; the runs share one evaluator
(``harness.pool.GpuPool``), so while one run waits for its model another's candidates use the
GPUs. The pool serialises each GPU, so timings never overlap on one device however many runs
there are.

One kernel's failure (bad input, a stopped run) is recorded in its row and never stops the
others. :func:`write_summary` keeps the table as ``summary-<UTC timestamp>.json`` and ``.md``
in the runs folder.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from astra_graph.harness.protocol import EvaluatorLike
from astra_graph.kernel.contract import CONTRACT_FILE, ContractError
from astra_graph.loop.state import OptimizationResult
from astra_graph.run.runner import ConfigurationError, RunFailed, optimize
from astra_graph.store.rundir import write_text

Outcome = Literal["improved", "no gain", "offline", "failed", "bad input"]
MAX_CONCURRENT_RUNS = 16
"""Runs in flight at once: each holds a thread and an open checkpoint; the GPUs are shared."""
SUMMARY_PREFIX = "summary-"


class KernelRun(BaseModel):
    """One kernel's row of the summary."""

    kernel: str
    outcome: Outcome
    op: str | None = None
    run_dir: str | None = None
    geomean_speedup: float | None = None
    best_round: int | None = None
    rounds_completed: int = 0
    seconds: float = 0.0
    error: str | None = None


class Summary(BaseModel):
    started_at: str
    seconds: float
    pool: str
    """The evaluation pool the runs shared (backend and GPUs)."""
    runs: list[KernelRun]


def expand_kernels(targets: Sequence[str]) -> list[str]:
    """The kernels the arguments name: a folder holding operation folders (each with
    ``contract.toml``, none of its own) stands for each operation's default implementation;
    anything else is passed on as it is (``resolve`` judges it). Duplicates are dropped."""
    kernels: list[str] = []
    for target in targets:
        path = Path(target)
        if path.is_dir() and not (path / CONTRACT_FILE).is_file():
            found = sorted(p for p in path.iterdir() if (p / CONTRACT_FILE).is_file())
            if not found:
                raise ContractError(f"{path}: no operation folders (with {CONTRACT_FILE}) in it")
            kernels += [str(p) for p in found]
        else:
            kernels.append(target)
    return list(dict.fromkeys(kernels))


def _row(kernel: str, result: OptimizationResult, seconds: float) -> KernelRun:
    if result.status == "failed":
        outcome: Outcome = "failed"
    elif result.agents == "offline":
        outcome = "offline"
    else:
        outcome = "improved" if result.improved else "no gain"
    return KernelRun(
        kernel=kernel,
        outcome=outcome,
        op=result.op,
        run_dir=result.run_dir,
        geomean_speedup=result.geomean_speedup,
        best_round=result.best_round,
        rounds_completed=result.rounds_completed,
        seconds=seconds,
        error=result.error,
    )


def optimize_many(
    kernels: Sequence[str],
    *,
    evaluator: EvaluatorLike,
    on_progress: Callable[[str, dict[str, Any]], None] | None = None,
    max_concurrent: int = MAX_CONCURRENT_RUNS,
    **optimize_kwargs: Any,
) -> list[KernelRun]:
    """Run ``optimize(kernel, evaluator=evaluator, **optimize_kwargs)`` for every kernel at once;
    rows in the order given. ``on_progress(kernel, event)`` sees every run's progress."""

    def one(kernel: str) -> KernelRun:
        started = time.monotonic()

        def forward(event: dict[str, Any]) -> None:
            if on_progress is not None:
                on_progress(kernel, event)

        try:
            result = optimize(kernel, evaluator=evaluator, on_progress=forward, **optimize_kwargs)
        except (ContractError, ConfigurationError) as exc:
            return KernelRun(kernel=kernel, outcome="bad input", error=str(exc))
        except RunFailed as exc:
            return KernelRun(
                kernel=kernel,
                outcome="failed",
                run_dir=str(exc.run_dir),
                seconds=time.monotonic() - started,
                error=str(exc),
            )
        return _row(kernel, result, time.monotonic() - started)

    workers = max(1, min(len(kernels), max_concurrent))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="astra-run") as runs:
        return list(runs.map(one, kernels))


def summary_table(runs: Sequence[KernelRun]) -> str:
    """The summary as a Markdown table (also readable as plain text)."""
    lines = [
        "| kernel | outcome | speedup | best round | rounds | seconds | run directory |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        speedup = f"{r.geomean_speedup:.3f}x" if r.geomean_speedup is not None else "-"
        best = str(r.best_round) if r.best_round is not None else "-"
        where = r.run_dir or f"({r.error})"
        lines.append(
            f"| {r.kernel} | {r.outcome} | {speedup} | {best} | {r.rounds_completed} "
            f"| {r.seconds:.0f} | {where} |"
        )
    return "\n".join(lines)


def write_summary(summary: Summary, runs_dir: Path) -> Path:
    """Write ``summary-<stamp>.json`` and ``.md`` into ``runs_dir``; returns the JSON's path."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    base = runs_dir / f"{SUMMARY_PREFIX}{stamp}"
    write_text(base.with_suffix(".json"), summary.model_dump_json(indent=2) + "\n")
    write_text(
        base.with_suffix(".md"),
        f"# {len(summary.runs)} kernels, {summary.pool}\n\n{summary_table(summary.runs)}\n",
    )
    return base.with_suffix(".json")
