"""Reports of optimisation runs: ``report.md`` and a self-contained ``report.html``.

A run directory (see ``docs/RUNS.md``) holds ``run.json``, ``rounds/<k>/{candidate.cu,
verdict.json,bench.json}``, ``baseline/bench.json`` and ``best.cu``. :func:`load_run` reads
whatever of that is present: a run that failed early or found nothing still gets a report that
says so. Parts that are present but malformed raise :class:`RunLoadError`, one line naming the
file and the field.

The report is built once as a list of blocks (headings, text, tables, figures, code) and
rendered twice: Markdown with the plots as PNG files beside it, and HTML with the same
plots inlined as base64, so the HTML file can be mailed or archived on its own.
"""

from __future__ import annotations

import base64
import difflib
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from astra_graph import plots
from astra_graph.catalog import kernels_root
from astra_graph.external import EXTERNAL
from astra_graph.models import BenchReport, ShapeTiming, Verdict
from astra_graph.rundir import BASELINE_BENCH, BENCH, BEST, HELDOUT_VERDICT, RUN_JSON, VERDICT
from astra_graph.state import OptimizationResult, RoundRecord, Usage

MARKDOWN_FILE = "report.md"
HTML_FILE = "report.html"
PLOT_PREFIX = "report."
"""Plot files sit beside report.md as ``report.<name>.png``."""


ModelT = TypeVar("ModelT", bound=BaseModel)


class RunLoadError(ValueError):
    """A run directory that cannot be read; ``str()`` is one line naming the file and field."""


# --- a loaded run -------------------------------------------------------------------------------


@dataclass
class RoundRow:
    """One row of the per-round table: run.json's record merged with ``rounds/<k>/``."""

    round: int
    record: RoundRecord | None = None
    verdict: Verdict | None = None
    heldout: Verdict | None = None
    """The held-out check, made at the end for candidates that beat the baseline."""
    bench: BenchReport | None = None
    speedup: float | None = None
    speedup_err: float | None = None
    tokens: int = 0
    cost_usd: float | None = None
    answered_externally: list[str] = field(default_factory=list)
    """Agents whose requests in this round were answered outside (model ``external``)."""

    @property
    def accepted(self) -> bool:
        return self.verdict is not None and self.verdict.accepted

    @property
    def outcome(self) -> str:
        if self.verdict is None:
            return "no verdict"
        return "accepted" if self.verdict.accepted else (self.verdict.reason or "rejected")


@dataclass
class Run:
    """Everything a report shows about one run directory."""

    path: Path
    result: OptimizationResult | None
    """run.json, when the run got far enough to write it."""
    rounds: list[RoundRow]
    shapes: list[ShapeTiming]
    baseline_bench: BenchReport | None
    baseline_source: str | None
    best_source: str | None
    missing: list[str]
    """Parts of the layout that were not found, for the report to say so."""

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def op(self) -> str | None:
        if self.result is not None:
            return self.result.op
        return next((b.op for b in self._benches()), None)

    @property
    def device(self) -> str | None:
        return next((b.device for b in self._benches()), None)

    @property
    def copy_bandwidth_gbps(self) -> float | None:
        return next((b.copy_bandwidth_gbps for b in self._benches()), None)

    def _benches(self) -> list[BenchReport]:
        found = [self.baseline_bench, self.result.baseline if self.result else None]
        found += [r.bench for r in self.rounds]
        return [b for b in found if b is not None]

    @property
    def geomean_speedup(self) -> tuple[float | None, float | None]:
        """The best kernel's geometric-mean speedup and its standard error."""
        if self.result is not None:
            return self.result.geomean_speedup, self.result.geomean_speedup_err
        speedups = [s.speedup for s in self.shapes if s.speedup]
        if not speedups:
            return None, None
        return math.exp(sum(math.log(v) for v in speedups) / len(speedups)), None

    @property
    def final_verdict(self) -> str:
        """The held-out check of the best kernel, or why there is none."""
        result = self.result
        if result is None:
            return "unknown: no run.json"
        if result.status == "failed":
            return f"run failed: {result.error or 'no error recorded'}"
        if result.status == "running":
            return "unfinished: the run is still going, or stopped without a word (resume it)"
        heldout = result.heldout
        if heldout is not None:
            if heldout.accepted:
                return f"held-out suite passed ({heldout.cases_checked} cases)"
            return f"held-out suite rejected it ({heldout.reason}): {heldout.message}"
        if not result.improved:
            return "no candidate beat the baseline"
        return "no held-out check recorded"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RunLoadError(f"{path}: invalid JSON: {exc}") from None
    except OSError as exc:
        raise RunLoadError(f"{path}: cannot read: {exc.strerror}") from None


def _validate(model: type[ModelT], path: Path, data: Any) -> ModelT:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        loc = loc.lstrip(".") or "(top level)"
        message = "required field is missing" if first["type"] == "missing" else first["msg"]
        raise RunLoadError(f"{path}: {loc}: {message}") from None


def _load_json_model(model: type[ModelT], path: Path) -> ModelT | None:
    return _validate(model, path, _read_json(path)) if path.is_file() else None


def _read_source(run_dir: Path, named: str | None) -> str | None:
    """A file's text by its recorded path: relative to the run directory, as given, or (for a
    run recorded on another machine) the same ``kernels/<op>/<impl>.cu`` in this checkout."""
    if not named:
        return None
    path = Path(named)
    candidates = [run_dir / path, path]
    if "kernels" in path.parts:
        last = len(path.parts) - 1 - path.parts[::-1].index("kernels")
        candidates.append(kernels_root().joinpath(*path.parts[last + 1 :]))
    for candidate in candidates:
        if candidate.is_file():
            return candidate.read_text()
    return None


def _round_dirs(run_dir: Path) -> dict[int, Path]:
    rounds_dir = run_dir / "rounds"
    if not rounds_dir.is_dir():
        return {}
    return {int(p.name): p for p in rounds_dir.iterdir() if p.is_dir() and p.name.isdigit()}


def _merge_rounds(run_dir: Path, result: OptimizationResult | None) -> list[RoundRow]:
    rows: dict[int, RoundRow] = {}
    for record in result.rounds if result else []:
        rows[record.round] = RoundRow(
            round=record.round,
            record=record,
            verdict=record.verdict,
            speedup=record.geomean_speedup,
            speedup_err=record.geomean_speedup_err,
        )
    # A finished round's record (run.json) is its outcome; a round's files only fill in a round
    # that has no record yet (a run stopped inside it), and a speedup counts only when accepted.
    for number, folder in sorted(_round_dirs(run_dir).items()):
        row = rows.setdefault(number, RoundRow(round=number))
        file_verdict = _load_json_model(Verdict, folder / VERDICT)
        if row.record is None:
            row.verdict = file_verdict
        row.heldout = _load_json_model(Verdict, folder / HELDOUT_VERDICT)
        row.bench = _load_json_model(BenchReport, folder / BENCH)
        accepted = row.verdict is not None and row.verdict.accepted
        if row.record is None and row.bench is not None and accepted:
            row.speedup = row.bench.geomean_speedup
            row.speedup_err = row.bench.geomean_speedup_err
    for usage in result.usage if result else []:
        used_in = rows.get(usage.round)
        if used_in is not None:
            used_in.tokens += usage.input_tokens + usage.output_tokens
            if usage.model == EXTERNAL and usage.agent not in used_in.answered_externally:
                used_in.answered_externally.append(usage.agent)
            if usage.cost_usd is not None:
                used_in.cost_usd = (used_in.cost_usd or 0.0) + usage.cost_usd
    return [rows[k] for k in sorted(rows)]


def load_run(run_dir: Path | str) -> Run:
    """Read a run directory; raises :class:`RunLoadError` when it is not one or is malformed."""
    path = Path(run_dir)
    if not path.exists():
        raise RunLoadError(f"{path}: no such run directory")
    if not path.is_dir():
        raise RunLoadError(f"{path}: not a directory (expected a run directory)")
    run_file = path / RUN_JSON
    baseline_file = path / BASELINE_BENCH
    if not run_file.is_file() and not (path / "rounds").is_dir() and not baseline_file.is_file():
        raise RunLoadError(
            f"{path}: not a run directory (expected {RUN_JSON}, rounds/ or baseline/bench.json)"
        )
    missing: list[str] = []
    result = None
    if run_file.is_file():
        data = _read_json(run_file)
        if not isinstance(data, dict):
            raise RunLoadError(f"{run_file}: expected a JSON object, got {type(data).__name__}")
        result = _validate(OptimizationResult, run_file, data)
    else:
        missing.append(RUN_JSON)
    baseline_bench = _load_json_model(BenchReport, baseline_file)
    if baseline_bench is None:
        missing.append("baseline/bench.json")
    rounds = _merge_rounds(path, result)

    shapes = list(result.shapes) if result else []
    if not shapes:
        timed = [r for r in rounds if r.accepted and r.bench is not None and r.speedup]
        best_round = max(timed, key=lambda r: r.speedup or 0.0, default=None)
        if best_round is not None and best_round.bench is not None:
            shapes = list(best_round.bench.shapes)

    best_source = (path / BEST).read_text() if (path / BEST).is_file() else None
    if best_source is None and result is not None:
        best_source = result.best_source or _read_source(path, result.best_path)
    if best_source is None:
        missing.append(BEST)
    baseline_source = _read_source(path, result.kernel) if result else None
    return Run(
        path=path,
        result=result,
        rounds=rounds,
        shapes=shapes,
        baseline_bench=baseline_bench or (result.baseline if result else None),
        baseline_source=baseline_source,
        best_source=best_source,
        missing=missing,
    )


# --- formatting helpers -------------------------------------------------------------------------


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


# --- report blocks ------------------------------------------------------------------------------


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Text:
    text: str


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass
class Figure:
    name: str
    """Short name; the PNG beside report.md is ``report.<name>.png``."""
    caption: str
    png: bytes


@dataclass
class Code:
    text: str
    language: str = ""


Block = Heading | Text | Table | Figure | Code


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
            ["model", _models(result.models)],
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
            f"{record.best_speedup:.3f}x" if record is not None else "-",
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
        headers.append("limit (bandwidth roof or latency floor)")
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
        )
        for r in run.rounds
    ]


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
                    str(c.branch) + (" (carried)" if c.branch == record.chosen else ""),
                    c.plan.summary if c.plan is not None else "-",
                    str(c.attempts),
                    outcome,
                    _speedup(c.geomean_speedup, c.geomean_speedup_err),
                ]
            )
    return Table(["round", "candidate", "plan", "attempts", "verdict", "geomean speedup"], rows)


def build_blocks(run: Run) -> list[Block]:
    """The report of one run, in order."""
    title = f"Optimisation run {run.name}"
    blocks: list[Block] = [Heading(title, 1), Heading("Summary"), summary_table(run)]
    if run.missing:
        blocks.append(Text("Not found in the run directory: " + ", ".join(run.missing) + "."))
    blocks.append(Heading("Rounds"))
    if run.rounds:
        blocks.append(rounds_table(run))
        candidates = candidates_table(run)
        if candidates is not None:
            blocks += [Heading("Candidates of each round"), candidates]
        points = round_points(run)
        blocks.append(
            Figure("speedup_by_round", "Speedup by round", plots.speedup_by_round(points))
        )
    else:
        blocks.append(Text("No round was recorded: the run stopped before its first candidate."))
    bandwidth = run.copy_bandwidth_gbps
    note = f" Copy bandwidth of the device: {bandwidth:,.0f} GB/s." if bandwidth else ""
    legend = "Median times in microseconds; ± is one standard error; a tie is a difference "
    legend += "inside the noise." + note
    blocks.append(Heading("Per-shape timings of the best kernel"))
    if any(s.speedup is not None for s in run.shapes):
        blocks += [
            Text(legend),
            shapes_table(run.shapes),
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
                Figure(
                    "roofline",
                    "The baseline's achieved bandwidth against the copy-bandwidth roof",
                    plots.roofline(baseline_shapes, bandwidth, label="baseline"),
                ),
            ]
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


# --- rendering ----------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Text):
            out.append(block.text)
        elif isinstance(block, Table):
            lines = [
                "| " + " | ".join(_md_cell(h) for h in block.headers) + " |",
                "|" + "|".join("---" for _ in block.headers) + "|",
            ]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
            out.append("\n".join(lines))
        elif isinstance(block, Figure):
            out.append(f"![{block.caption}]({PLOT_PREFIX}{block.name}.png)")
        else:
            fence = "````" if "```" in block.text else "```"
            out.append(f"{fence}{block.language}\n{block.text.rstrip()}\n{fence}")
    return "\n\n".join(out) + "\n"


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 70rem; padding: 0 1rem;
       color: #1d232a; }
h1 { font-size: 1.6rem; }
h2 { font-size: 1.25rem; margin-top: 2rem; border-bottom: 1px solid #ccd; }
table { border-collapse: collapse; margin: 0.5rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccd; padding: 0.25rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #eef1f5; }
figure { margin: 1rem 0; } figure img { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.85rem; }
pre { background: #f6f8fa; padding: 0.8rem; overflow-x: auto; font-size: 0.8rem;
      line-height: 1.35; }
.add { color: #1a7f37; background: #e6ffec; display: block; }
.del { color: #b42318; background: #ffebe9; display: block; }
.hunk { color: #6639ba; display: block; }
"""


def _html_code(block: Code) -> str:
    if block.language != "diff":
        return f"<pre><code>{html.escape(block.text)}</code></pre>"
    spans = []
    for line in block.text.splitlines():
        escaped = html.escape(line) or " "
        if line.startswith(("+++", "---")):
            spans.append(f"<b>{escaped}</b>")
        elif line.startswith("+"):
            spans.append(f'<span class="add">{escaped}</span>')
        elif line.startswith("-"):
            spans.append(f'<span class="del">{escaped}</span>')
        elif line.startswith("@@"):
            spans.append(f'<span class="hunk">{escaped}</span>')
        else:
            spans.append(escaped)
    body = "".join(s if s.startswith("<span") else s + "\n" for s in spans)
    return f"<pre><code>{body}</code></pre>"


def render_html(blocks: list[Block]) -> str:
    """One HTML page with no outside references: plots are inlined as base64 PNG."""
    title = next((b.text for b in blocks if isinstance(b, Heading)), "Run report")
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"<h{block.level}>{html.escape(block.text)}</h{block.level}>")
        elif isinstance(block, Text):
            out.append(f"<p>{html.escape(block.text)}</p>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in block.headers)
            body = "".join(
                "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                for row in block.rows
            )
            head_row = f"<thead><tr>{head}</tr></thead>" if any(block.headers) else ""
            out.append(f"<table>{head_row}<tbody>{body}</tbody></table>")
        elif isinstance(block, Figure):
            data = base64.b64encode(block.png).decode("ascii")
            caption = html.escape(block.caption)
            out.append(
                f'<figure><img alt="{caption}" src="data:image/png;base64,{data}">'
                f"<figcaption>{caption}</figcaption></figure>"
            )
        else:
            out.append(_html_code(block))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(out)
        + "\n</body></html>\n"
    )


def write_report(run_dir: Path | str) -> tuple[Path, Path]:
    """Write ``report.md`` (with ``report.<plot>.png`` beside it) and ``report.html``."""
    run = load_run(run_dir)
    blocks = build_blocks(run)
    figures = {f"{PLOT_PREFIX}{b.name}.png": b.png for b in blocks if isinstance(b, Figure)}
    for stale in run.path.glob(f"{PLOT_PREFIX}*.png"):
        if stale.name not in figures:
            stale.unlink()
    for name, png in figures.items():
        (run.path / name).write_bytes(png)
    md_path = run.path / MARKDOWN_FILE
    html_path = run.path / HTML_FILE
    md_path.write_text(render_markdown(blocks))
    html_path.write_text(render_html(blocks))
    return md_path, html_path
