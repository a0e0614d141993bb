"""The run directory's layout (docs/RUNS.md) and atomic writes into it."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

RUN_JSON = "run.json"
CHECKPOINT = "checkpoint.sqlite"
BEST = "best.cu"
BEST_DISPATCH = "best.dispatch.json"
BASELINE_BENCH = Path("baseline") / "bench.json"
CANDIDATE = "candidate.cu"
VERDICT = "verdict.json"
HELDOUT_VERDICT = "heldout.json"
SANITIZER = "sanitizer.json"
BENCH = "bench.json"
EXTERNAL_DIR = "external"
"""Requests to external agents and their answers (astra_graph.llm.external)."""
CANDIDATES = "candidates"
"""In a best-of-K round, each candidate's folder is ``rounds/<k>/candidates/<branch>``."""


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_run_dir(root: Path, op: str) -> Path:
    """Create ``root/<UTC timestamp>-<op>`` (with a numeric suffix if that exists already)."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    root.mkdir(parents=True, exist_ok=True)
    for suffix in ("", *(f"-{i}" for i in range(2, 1000))):
        path = root / f"{stamp}-{op}{suffix}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{root}: cannot create a run directory for {op}")


def round_dir(run_dir: str | Path, round_number: int) -> Path:
    path = Path(run_dir) / "rounds" / str(round_number)
    path.mkdir(parents=True, exist_ok=True)
    return path


def branch_dir(run_dir: str | Path, round_number: int, branch: int = 0) -> Path:
    """Where one candidate of a round writes its files: ``rounds/<k>/candidates/<branch>`` in a
    best-of-K round, the round's own folder for branch 0 (a round of one candidate)."""
    folder = round_dir(run_dir, round_number)
    if branch:
        folder = folder / CANDIDATES / str(branch)
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def carried_copy(branch_file: str | Path) -> Path:
    """Where a best-of-K round keeps a copy of a branch's file once that candidate is carried
    forward: the round's own folder (``rounds/<k>/candidates/<branch>/x`` -> ``rounds/<k>/x``)."""
    path = Path(branch_file)
    return path.parents[2] / path.name


def attempt_file(run_dir: str | Path, round_number: int, attempt: int, branch: int = 0) -> Path:
    return branch_dir(run_dir, round_number, branch) / f"attempt-{attempt}.cu"


def write_text(path: Path, text: str) -> None:
    """Write through a temporary file and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except BaseException:  # a full disk: leave no half-written temporary behind
        tmp.unlink(missing_ok=True)
        raise


def write_model(path: Path, model: BaseModel) -> None:
    write_text(path, model.model_dump_json(indent=2) + "\n")
