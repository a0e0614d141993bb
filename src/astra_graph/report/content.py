"""What a run's report says: its blocks in order, built from a loaded :class:`Run`.

Summary, rounds (and best-of-K candidates), per-shape timings with their plots, the dispatch
table, usage, and the best kernel's diff against the baseline; also the side-by-side tables of
two runs. Nothing here reads files or writes markup: ``reading.py`` loads, ``render.py`` writes.
"""

from __future__ import annotations

import difflib

from astra_graph.harness.results import ShapeTiming, Verdict
from astra_graph.llm.usage import Usage
from astra_graph.loop.records import RoundRecord
from astra_graph.loop.state import OptimizationResult
from astra_graph.report import plots
from astra_graph.report.blocks import Block, Code, Figure, Heading, Table, Text
from astra_graph.report.reading import Run
from astra_graph.store.rundir import BEST


def _speedup(value: float | None, err: float | None = None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}x ± {err:.3f}" if err else f"{value:.3f}x"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def best_diff(run: Run) -> str | None:
    """Unified diff of the best kernel against the baseline, or None when either is unknown."""
    if run.baseline_source is None or run.best_source is None:
        return None
    lines = difflib.unified_diff(
        run.baseline_source.splitlines(keepends=True),
        run.best_source.splitlines(keepends=True),
        fromfile=f"baseline ({run.result.kernel if run.result else 'baseline'})",
        tofile=f"best ({BEST})",
    )
    return "".join(lines) or "(the best kernel is identical to the baseline)\n"


def _cost(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def _models(models: dict[str, str]) -> str:
    distinct = sorted(set(models.values()))
    if len(distinct) <= 1:
        return distinct[0] if distinct else "unknown"
    return ", ".join(f"{agent}: {model}" for agent, model in sorted(models.items()))


def summary_table(run: Run) -> Table:
    result = run.result
    speedup, err = run.geomean_speedup
    rows = [
        ["operation", run.op or "unknown"],
        ["device", run.device or "unknown"],
    ]
    if result is not None:
        status = result.status + (f" ({result.error})" if result.error else "")
        rows += [
            ["starting kernel", result.kernel],
            ["agents", result.agents],
            ["model", "none (offline)" if result.agents == "offline" else _models(result.models)],
            ["rounds", f"{result.rounds_completed} of {result.rounds_requested}"],
            ["status", status],
        ]
    else:
        rows.append(["rounds", f"{len(run.rounds)} found under rounds/"])
    rows.append(["geomean speedup", _speedup(speedup, err)])
    if result is None:
        rows.append(["final verdict", run.final_verdict])
    else:
        best = f"round {result.best_round}" if result.best_round else "the baseline (round 0)"
        rows += [
            ["best kernel", f"{best}: {result.best_path}"],
            ["final verdict", run.final_verdict],
            ["tokens", f"{result.total_tokens:,}"],
            ["cost", _cost(result.total_cost_usd)],
        ]
        if result.external:
            answered = sum(e.answer is not None for e in result.external)
            rows.append(
                ["external requests", f"{len(result.external)}, {answered} answered (external/)"]
            )
        if result.message:
            rows.append(["message", result.message])
        if result.started_at:
            rows.append(["started", result.started_at])
    return Table(["", ""], rows)


def _heldout(verdict: Verdict | None) -> str:
    if verdict is None:
        return "-"
    return "passed" if verdict.accepted else f"rejected ({verdict.reason})"


def rounds_table(run: Run) -> Table:
    """One row per round; a held-out column when any round's candidate was checked on it."""
    with_heldout = any(r.heldout is not None for r in run.rounds)
    with_external = any(r.answered_externally for r in run.rounds)
    rows = []
    for r in run.rounds:
        record = r.record
        plan = record.plan.summary if record is not None and record.plan is not None else "-"
        message = r.verdict.message if r.verdict is not None else ""
        row = [
            str(r.round),
            plan,
            str(record.attempts) if record is not None else "-",
            r.outcome,
            message or "-",
            _speedup(r.speedup, r.speedup_err),
            f"{r.best_speedup:.3f}x" if r.best_speedup is not None else "-",
        ]
        if with_heldout:
            row.append(_heldout(r.heldout))
        if with_external:
            row.append(", ".join(r.answered_externally) or "-")
        tokens, cost = (f"{r.tokens:,}", _cost(r.cost_usd)) if r.tokens else ("-", "-")
        rows.append([*row, tokens, cost])
    headers = [
        "round",
        "plan",
        "attempts",
        "verdict",
        "verdict message",
        "geomean speedup",
        "best so far",
        *(["held-out"] if with_heldout else []),
        *(["answered externally"] if with_external else []),
        "tokens",
        "cost",
    ]
    return Table(headers, rows)


def shapes_table(shapes: list[ShapeTiming]) -> Table:
    """Per-shape times; the baseline, speedup and call columns only when timed against one."""
    compared = any(s.baseline is not None for s in shapes)
    headers = ["shape", "dtype"]
    headers += ["baseline µs", "best µs", "speedup", "call"] if compared else ["µs"]
    # the roof is the achievable bandwidth of the shape's read:write mix where it was measured,
    # the copy bandwidth in reports made before
    headers += [
        "achieved GB/s",
        "of roof" if any(s.roof_gbps for s in shapes) else "of copy bandwidth",
    ]
    limits = any(s.limit for s in shapes)
    if limits:
        headers.append("limit (the floor it is near: bandwidth roof, same-bytes copy, launch)")
    rows = []
    for s in shapes:
        row = [s.label, s.dtype]
        if compared:
            call = "IMPOSSIBLE (below the bandwidth floor)" if s.impossible else (s.call or "-")
            row += [
                _us(s.baseline.median_us if s.baseline else None),
                _us(s.candidate.median_us),
                _speedup(s.speedup, s.speedup_err),
                call,
            ]
        else:
            row.append(_us(s.candidate.median_us))
        row += [f"{s.achieved_gbps:,.0f}", f"{s.roofline_pct:.0f}%"]
        rows.append([*row, s.limit or "-"] if limits else row)
    return Table(headers, rows)


def usage_table(usage: list[Usage]) -> Table | None:
    """Tokens and cost of each agent in each round, the structured-output method the endpoint
    ended up with, and why a call gave nothing usable (its tokens still count)."""
    if not usage:
        return None
    rows = [
        [
            str(u.round),
            u.agent,
            u.model,
            str(u.calls),
            str(u.requests),
            u.method or "-",
            f"{u.input_tokens:,}",
            f"{u.output_tokens:,}",
            _cost(u.cost_usd),
            u.failure or "",
        ]
        for u in sorted(usage, key=lambda u: (u.round, u.agent))
    ]
    headers = [
        "round", "agent", "model", "calls", "requests", "structured output",
        "input tokens", "output tokens", "cost", "failure",
    ]  # fmt: skip
    return Table(headers, rows)


def dispatch_table(result: OptimizationResult | None) -> Table | None:
    """The winner's dispatch table: bucket -> tunables, with the gain over the defaults."""
    if result is None or result.dispatch is None:
        return None
    rows = [
        [
            e.bucket,
            ", ".join(f"{k}={v}" for k, v in e.tunables.items()) or "(defaults)",
            _speedup(e.speedup_vs_default, e.speedup_err),
            "yes" if e.verified else "no",
            " ".join(e.shapes),
        ]
        for e in result.dispatch.dispatch
    ]
    return Table(["bucket", "tunables", "vs defaults", "verified", "tuning shapes"], rows)


def round_points(run: Run) -> list[plots.RoundPoint]:
    return [
        plots.RoundPoint(
            round=r.round,
            accepted=r.accepted,
            speedup=r.speedup,
            speedup_err=r.speedup_err,
            reason=None if r.accepted else r.outcome,
            best=r.best_speedup,
        )
        for r in run.rounds
    ]


def _role(record: RoundRecord, branch: int) -> str:
    """How the selection rule saw a candidate: carried forward, or a contender beside it."""
    if branch == record.chosen:
        return " (carried)"
    return " (contender)" if branch in record.contender_branches else ""


def candidates_table(run: Run) -> Table | None:
    """Every candidate of the best-of-K rounds (None when every round had one candidate)."""
    records = [r.record for r in run.rounds if r.record is not None]
    if not any(len(record.candidates) > 1 for record in records):
        return None
    rows = []
    for record in records:
        for c in record.candidates:
            if c.verdict is None:
                outcome = "no verdict"
            else:
                outcome = "accepted" if c.verdict.accepted else (c.verdict.reason or "rejected")
            rows.append(
                [
                    str(record.round),
                    str(c.branch) + _role(record, c.branch),
                    c.plan.summary if c.plan is not None else "-",
                    str(c.attempts),
                    outcome,
                    _speedup(c.geomean_speedup, c.geomean_speedup_err),
                ]
            )
    return Table(["round", "candidate", "plan", "attempts", "verdict", "geomean speedup"], rows)


def build_blocks(run: Run, *, charts: bool = True) -> list[Block]:
    """The report of one run, in order; without its charts when ``charts`` is false (then a
    line says how to draw them)."""
    title = f"Optimisation run {run.name}"
    blocks: list[Block] = [Heading(title, 1), Heading("Summary"), summary_table(run)]
    if run.missing:
        blocks.append(Text("Not found in the run directory: " + ", ".join(run.missing) + "."))
    if not charts:
        blocks.append(Text(f"Charts not drawn; `astra report {run.path}` draws them."))
    blocks.append(Heading("Rounds"))
    if run.rounds:
        blocks.append(rounds_table(run))
        candidates = candidates_table(run)
        if candidates is not None:
            blocks += [Heading("Candidates of each round"), candidates]
        if charts:
            points = round_points(run)
            blocks.append(
                Figure("speedup_by_round", "Speedup by round", plots.speedup_by_round(points))
            )
    elif run.result is not None and run.result.rounds_requested == 0:
        why = "an offline run" if run.result.agents == "offline" else "the run asked for none"
        blocks.append(Text(f"No agent rounds: {why} (the baseline profiled and tuned only)."))
    else:
        blocks.append(Text("No round was recorded: the run stopped before its first candidate."))
    bandwidth = run.copy_bandwidth_gbps
    note = f" Copy bandwidth of the device: {bandwidth:,.0f} GB/s." if bandwidth else ""
    legend = "Median times in microseconds; ± is one standard error; a tie is a difference "
    legend += "inside the noise." + note
    blocks.append(Heading("Per-shape timings of the best kernel"))
    if any(s.speedup is not None for s in run.shapes):
        blocks += [Text(legend), shapes_table(run.shapes)]
        if charts:
            blocks += [
                Figure("shape_speedups", "Speedup per shape", plots.shape_speedups(run.shapes)),
                Figure(
                    "roofline",
                    "Achieved bandwidth against the copy-bandwidth roof",
                    plots.roofline(run.shapes, bandwidth),
                ),
            ]
    else:
        blocks.append(Text("No timed candidate: no candidate was accepted and timed."))
        if run.baseline_bench is not None and run.baseline_bench.shapes:
            baseline_shapes = run.baseline_bench.shapes
            blocks += [
                Heading("Per-shape timings of the baseline", 3),
                Text(legend),
                shapes_table(baseline_shapes),
            ]
            if charts:
                blocks.append(
                    Figure(
                        "roofline",
                        "The baseline's achieved bandwidth against the copy-bandwidth roof",
                        plots.roofline(baseline_shapes, bandwidth, label="baseline"),
                    )
                )
    dispatch = dispatch_table(run.result)
    if dispatch is not None:
        blocks += [
            Heading("Dispatch table of the best kernel"),
            Text(
                "Tunables chosen per shape bucket (decode: at most 256 rows; row class by bytes "
                "per row: small < 16 KiB, medium < 64 KiB, large) by the tuning sweep. A setting "
                "other than the defaults is chosen only after it passes the full verification, "
                "held-out suite included; the verified column says how each bucket's setting did."
            ),
            dispatch,
        ]
    usage = usage_table(run.result.usage if run.result else [])
    if usage is not None:
        blocks += [Heading("Usage"), usage]
    blocks.append(Heading("Best kernel against the baseline"))
    diff = best_diff(run)
    if diff is None:
        blocks.append(Text("No diff: the best kernel or the baseline source was not found."))
    else:
        blocks.append(Code(diff, "diff"))
    return blocks


def comparison_tables(first: Run, second: Run) -> tuple[Table, Table]:
    """Two runs side by side: their summaries, and their speedups on the shapes either timed."""
    first_summary = dict(summary_table(first).rows)
    second_summary = dict(summary_table(second).rows)
    keys = list(dict.fromkeys([*first_summary, *second_summary]))
    summary = Table(
        ["", first.name, second.name],
        [[k, first_summary.get(k, "-"), second_summary.get(k, "-")] for k in keys],
    )
    by_first = {(s.label, s.dtype): s for s in first.shapes}
    by_second = {(s.label, s.dtype): s for s in second.shapes}
    rows = []
    for key in dict.fromkeys([*by_first, *by_second]):
        a, b = by_first.get(key), by_second.get(key)
        rows.append(
            [
                key[0],
                key[1],
                _speedup(a.speedup, a.speedup_err) if a else "-",
                _speedup(b.speedup, b.speedup_err) if b else "-",
            ]
        )
    shapes = Table(["shape", "dtype", first.name, second.name], rows)
    return summary, shapes
