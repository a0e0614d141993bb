"""Faults while a run works (issue 26, item 5): a worker killed at random points of a job, the
harness's worker dying at chosen points of verification and timing in a whole run, and a full
disk under the run directory.

Each case must end in one line (a finished run, or RunFailed whose message is one line) and
leave a run directory that ``astra report`` reads and ``--resume`` finishes. Points are drawn
from a seeded generator, so a failure names a case that can be run again. The count of cases is
printed (``pytest -s``).
"""

from __future__ import annotations

import errno
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.harness.worker import Worker, WorkerCrashed
from astra_graph.kernel.catalog import kernels_root
from astra_graph.llm.client import LLMSettings
from astra_graph.loop.state import OptimizationResult
from astra_graph.run.runner import RunFailed, optimize
from astra_graph.store import rundir
from fake_evaluator import FakeEvaluator
from fake_openai import FakeOpenAI, Scripted, structured, text
from kernel_sources import VECTORIZED, fenced, marked

pytestmark = pytest.mark.usefixtures("plots_not_drawn")  # conftest.py says why

NAIVE = kernels_root() / "silu_and_mul" / "naive.cu"
SEED = 26
KILL_POINTS = 6
"""Kills of a running worker job, at random times within it."""
RUN_FAULTS = 3
"""Whole runs whose harness dies at a random check or bench call."""
DISK_FULL_POINTS = 4
"""Whole runs whose run directory fills up at a random write."""
JOB_S = 0.4
"""How long the killed job would run: kills land anywhere in it."""


def _script() -> dict[str, list[Scripted]]:
    change = {"change": "16-byte loads", "why": "5% of roofline", "expected_effect": "2x"}
    return {  # enough for a run and its resume
        "testing": [structured({"shapes": []})] * 2,
        "planning": [structured({"summary": "vectorize", "changes": [change]})] * 2,
        "coding": [text(fenced(marked(VECTORIZED, speedup=1.3)))] * 2,
    }


def _run(server: FakeOpenAI, runs: Path, evaluator: FakeEvaluator) -> OptimizationResult:
    settings = LLMSettings(base_url=server.base_url, max_retries=0)
    return optimize(NAIVE, rounds=1, runs_dir=runs, evaluator=evaluator, llm_settings=settings)


def _readable_and_resumable(
    run_dir: Path, server: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(run_dir)]) == 0
    capsys.readouterr()
    settings = LLMSettings(base_url=server.base_url, max_retries=0)
    resumed = optimize(None, resume=run_dir, evaluator=FakeEvaluator(), llm_settings=settings)
    assert resumed.status == "finished" and (run_dir / "best.cu").is_file()


def _stopped_run(runs: Path) -> Path:
    (found,) = [p for p in runs.iterdir() if p.is_dir()]
    return found


def test_a_worker_killed_anywhere_in_a_job_is_one_error_and_the_next_job_works() -> None:
    draw = random.Random(SEED)
    crashed = 0
    with Worker() as worker:
        for _ in range(KILL_POINTS):
            worker.start()
            child = worker.pid
            assert child is not None
            delay = draw.uniform(0, JOB_S)
            killer = threading.Timer(delay, os.kill, (child, signal.SIGKILL))
            killer.start()
            try:
                worker.call("time:sleep", JOB_S, deadline_s=60)
            except WorkerCrashed as exc:
                assert "SIGKILL" in str(exc) and "\n" not in str(exc)
                crashed += 1
            killer.join()
            time.sleep(0.05)  # the kill of a job that had already answered lands between jobs
            assert worker.call("time:sleep", 0.0, deadline_s=60) is None  # the next job works
    print(f"fuzz: {KILL_POINTS} worker kills, {crashed} inside a job")
    assert crashed > 0


def _dying_at(n: int) -> Callable[[str, Path], bool]:
    """The harness's worker dies (WorkerCrashed, as the Evaluator raises it) at call ``n``."""
    calls = iter(range(1_000_000))

    def fail(method: str, candidate: Path) -> bool:
        if next(calls) == n:
            raise WorkerCrashed(f"the worker died (signal 9) during {method}", exitcode=-9)
        return False

    return fail


def test_a_harness_dying_at_any_call_leaves_a_run_that_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeOpenAI(_script()) as server:
        probe = FakeEvaluator()
        _run(server, tmp_path / "probe", probe)
    total = len(probe.checks) + len(probe.benches)
    points = sorted(random.Random(SEED).sample(range(total), RUN_FAULTS))
    outcomes = []
    for point in points:
        runs = tmp_path / f"fault-{point}"
        with FakeOpenAI(_script()) as server:
            try:
                result = _run(server, runs, FakeEvaluator(fail=_dying_at(point)))
            except RunFailed as exc:
                assert "\n" not in str(exc) and "WorkerCrashed" in str(exc)
                outcomes.append(f"call {point}: stopped")
                run_dir = _stopped_run(runs)
                _readable_and_resumable(run_dir, server, capsys)
            else:  # a crash the run absorbs (a setting of the sweep, say) is recorded, no more
                assert result.status == "finished"
                outcomes.append(f"call {point}: absorbed")
                assert main(["report", result.run_dir]) == 0
                capsys.readouterr()
    print(f"fuzz: harness died at {len(points)} of {total} calls: {'; '.join(outcomes)}")


@pytest.fixture
def disk_full_after(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], int]]:
    """``fill(n)``: the n-th write into a run directory from now (0 first) and every later one
    fail with ENOSPC, as on a full disk; ``fill(-1)`` frees the disk. Returns how many writes
    were made since the last call (a probe run counts them)."""
    write = rundir.write_text
    state = {"left": -1, "made": 0}

    def writer(path: Path, text_: str) -> None:
        if state["left"] == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        state["left"] -= 1
        state["made"] += 1
        write(path, text_)

    def fill(n: int) -> int:
        made, state["made"], state["left"] = state["made"], 0, n
        return made

    monkeypatch.setattr(rundir, "write_text", writer)
    yield fill


def test_a_full_disk_ends_in_one_line_and_a_run_that_resumes(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    disk_full_after: Callable[[int], int],
) -> None:
    with FakeOpenAI(_script()) as server:
        _run(server, tmp_path / "probe", FakeEvaluator())
    total = disk_full_after(-1)
    points = sorted(random.Random(SEED).sample(range(total), DISK_FULL_POINTS))
    for point in points:
        runs = tmp_path / f"full-{point}"
        with FakeOpenAI(_script()) as server:
            disk_full_after(point)
            with pytest.raises(RunFailed) as stopped:
                _run(server, runs, FakeEvaluator())
            assert "No space left on device" in str(stopped.value)
            assert "\n" not in str(stopped.value)
            disk_full_after(-1)
            run_dir = _stopped_run(runs)
            assert not list(run_dir.rglob(".*.tmp*"))  # no half-written files left
            _readable_and_resumable(run_dir, server, capsys)
    print(f"fuzz: disk full at writes {points} of {total}; each stopped in one line and resumed")
