"""Reading a run directory into a :class:`Run`: what a report (or a notebook) shows of it.

A run directory (see ``docs/RUNS.md``) holds ``run.json``, ``rounds/<k>/{candidate.cu,
verdict.json,bench.json}``, ``baseline/bench.json`` and ``best.cu``. :func:`load_run` reads
whatever of that is present: a run that failed early or found nothing still gets a report that
says so. Parts that are present but malformed raise :class:`RunLoadError`, one line naming the
file and the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from astra_graph.harness import selection
from astra_graph.harness.results import BenchReport, ShapeTiming, Verdict
from astra_graph.kernel.catalog import kernels_root
from astra_graph.llm.external import EXTERNAL
from astra_graph.loop.records import RoundRecord
from astra_graph.loop.state import OptimizationResult
from astra_graph.store.rundir import BASELINE_BENCH, BENCH, BEST, HELDOUT_VERDICT, RUN_JSON, VERDICT

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
    best_speedup: float | None = None
    """The best speedup so far once this round's candidate was timed (from run.json)."""
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
        if result.status == "interrupted":
            where = result.stopped_at.describe() if result.stopped_at else "an unknown step"
            return f"interrupted at {where}: no held-out-checked result yet (resume it)"
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


def _speed(row: RoundRow) -> selection.Speed | None:
    """A round's speedup as the selection rule reads it; None when it has none."""
    return None if row.speedup is None else selection.Speed(row.speedup, row.speedup_err)


def _merge_rounds(run_dir: Path, result: OptimizationResult | None) -> list[RoundRow]:
    rows: dict[int, RoundRow] = {}
    records = result.rounds if result else []
    best = result.best_speedups if result else []
    for record, best_so_far in zip(records, best, strict=True):
        carried = record.carried
        rows[record.round] = RoundRow(
            round=record.round,
            record=record,
            verdict=record.verdict,
            bench=carried.timing if carried is not None else None,
            speedup=record.geomean_speedup,
            speedup_err=record.geomean_speedup_err,
            best_speedup=best_so_far,
        )
    # A finished round's record (run.json) is its outcome; a round's files only fill in a round
    # that has no record yet (a run stopped inside it), and a speedup counts only when accepted.
    for number, folder in sorted(_round_dirs(run_dir).items()):
        row = rows.setdefault(number, RoundRow(round=number))
        file_verdict = _load_json_model(Verdict, folder / VERDICT)
        if row.record is None:
            row.verdict = file_verdict
        row.heldout = _load_json_model(Verdict, folder / HELDOUT_VERDICT)
        if row.record is None:
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
        timed = [r for r in rounds if r.accepted and r.bench is not None]
        best_round = selection.best_by(timed, _speed)
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
