"""Worker supervision on the CPU: jobs that hang, die, fail, flood their output or retire.

The jobs below run inside the spawned worker, imported by name (``test_worker:<function>``);
the worker inherits this process's ``sys.path``, where pytest put this folder.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from astra_graph.harness import evaluator as evaluator_module
from astra_graph.harness.evaluator import Evaluator, HarnessUnavailable
from astra_graph.harness.results import BenchReport, Evidence, Verdict
from astra_graph.harness.worker import (
    JobCancelled,
    JobFailed,
    Worker,
    WorkerCrashed,
    WorkerTimeout,
    allow_jobs,
    cancel_jobs,
    holding,
    progress,
    retire,
)
from astra_graph.kernel.catalog import resolve

SILU, _ = resolve("silu_and_mul")
ME = "test_worker"

# --- jobs (run in the worker) ----------------------------------------------------------------


def pid(_: Any) -> int:
    return os.getpid()


def sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def beating(request: dict[str, float]) -> int:
    """Report progress every ``every`` seconds for ``total`` seconds."""
    beats = 0
    end = time.monotonic() + request["total"]
    while time.monotonic() < end:
        progress({"beat": beats})
        beats += 1
        time.sleep(request["every"])
    return beats


def stall_after_progress(_: Any) -> None:
    progress({"step": "case", "dims": {"tokens": 3, "d": 24}, "dtype": "float16", "suite": "edge"})
    time.sleep(60)


def unwatched_then_stall(_: Any) -> str:
    progress({"step": "compile"}, watch=False)
    time.sleep(1.5)  # slow but safe: not held to the stall limit
    progress({"step": "run"})
    time.sleep(0.2)
    progress(watch=False)
    return "done"


def exit_hard(code: int) -> None:
    print("about to exit", flush=True)
    os._exit(code)


def segfault(_: Any) -> None:
    ctypes.string_at(0)


def flood(lines: int) -> str:
    for i in range(lines):
        print(f"line {i} " + "x" * 100)
    os.write(2, b"LAST WORDS on fd 2\n")
    return "done"


def fail(message: str) -> None:
    raise ValueError(message)


class StickyError(RuntimeError):
    sticky = True


def fail_sticky(_: Any) -> None:
    raise StickyError("context lost")


class RawCudaError(RuntimeError):
    """Like CuPy's CUDARuntimeError from a plain synchronize after an illegal address."""

    status = 700


def fail_raw_cuda(_: Any) -> None:
    raise RawCudaError("cudaErrorIllegalAddress: an illegal memory access was encountered")


def retire_after(value: int) -> int:
    retire()
    return value + 1


def unpicklable(_: Any) -> Any:
    return lambda: None


def fake_no_gpu(_: Any) -> None:
    from astra_graph.harness.errors import NoGpu

    raise NoGpu("no CUDA GPU visible to the evaluation worker")


# --- tests -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    with Worker() as w:
        yield w


def test_job_runs_and_the_process_is_reused(worker: Worker) -> None:
    first = worker.call(f"{ME}:pid", None, deadline_s=60)
    assert first != os.getpid()
    assert worker.call(f"{ME}:pid", None, deadline_s=60) == first
    assert worker.call(f"{ME}:sleep", 0.01, deadline_s=60) == "woke"


def test_a_cancelled_job_kills_its_child_from_another_thread(worker: Worker) -> None:
    """Ctrl-C reaches only the main thread; an evaluation in a branch's thread must end too,
    and leave no process behind on the GPU (issue 26)."""
    import threading

    child = worker.call(f"{ME}:pid", None, deadline_s=60)
    raised: list[BaseException] = []

    def evaluate() -> None:
        try:
            worker.call(f"{ME}:sleep", 60, deadline_s=120)
        except BaseException as exc:  # the test reads what the thread got
            raised.append(exc)

    thread = threading.Thread(target=evaluate)
    thread.start()
    time.sleep(0.3)
    try:
        cancel_jobs()
        thread.join(timeout=30)
        assert not thread.is_alive()
        assert len(raised) == 1 and isinstance(raised[0], JobCancelled)
        with pytest.raises(JobCancelled, match="not started"):
            worker.call(f"{ME}:pid", None, deadline_s=60)
    finally:
        allow_jobs()
    assert not worker.alive
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # the child is gone, not left running
    assert worker.call(f"{ME}:sleep", 0.01, deadline_s=60) == "woke"


def test_hang_is_killed_at_the_deadline_and_the_next_call_works(worker: Worker) -> None:
    before = worker.call(f"{ME}:pid", None, deadline_s=60)
    started = time.monotonic()
    with pytest.raises(WorkerTimeout, match="over 1 s"):
        worker.call(f"{ME}:sleep", 60, deadline_s=1.0)
    assert time.monotonic() - started < 10
    after = worker.call(f"{ME}:pid", None, deadline_s=60)
    assert after != before
    assert worker.call(f"{ME}:sleep", 0.01, deadline_s=60) == "woke"


def test_jobs_that_report_no_progress_have_only_the_deadline(worker: Worker) -> None:
    assert worker.call(f"{ME}:sleep", 1.5, deadline_s=60, stall_s=0.5) == "woke"


def test_unwatched_stretches_are_not_held_to_the_stall_limit(worker: Worker) -> None:
    assert worker.call(f"{ME}:unwatched_then_stall", None, deadline_s=60, stall_s=1.0) == "done"


def test_stall_is_caught_long_before_the_deadline(worker: Worker) -> None:
    started = time.monotonic()
    with pytest.raises(WorkerTimeout, match="no progress for 1 s") as caught:
        worker.call(f"{ME}:stall_after_progress", None, deadline_s=60, stall_s=1.0)
    assert time.monotonic() - started < 10
    assert caught.value.last_progress["suite"] == "edge"


def test_progress_keeps_a_long_job_alive(worker: Worker) -> None:
    beats = worker.call(f"{ME}:beating", {"total": 2.0, "every": 0.2}, deadline_s=60, stall_s=1.0)
    assert beats >= 5


@pytest.mark.parametrize(
    ("job", "request_value", "status"),
    [("exit_hard", 3, "exit code 3"), ("segfault", None, "signal SIGSEGV")],
)
def test_death_is_crashed_and_the_next_call_gets_a_fresh_worker(
    worker: Worker, job: str, request_value: Any, status: str
) -> None:
    before = worker.call(f"{ME}:pid", None, deadline_s=60)
    with pytest.raises(WorkerCrashed, match=status) as caught:
        worker.call(f"{ME}:{job}", request_value, deadline_s=60)
    if job == "exit_hard":
        assert "about to exit" in caught.value.log
    else:
        assert "Segmentation fault" in caught.value.log  # faulthandler's report
    assert worker.call(f"{ME}:pid", None, deadline_s=60) not in (before, None)


def test_job_exception_is_reported_and_the_worker_lives_on(worker: Worker) -> None:
    before = worker.call(f"{ME}:pid", None, deadline_s=60)
    with pytest.raises(JobFailed, match="ValueError: broken") as caught:
        worker.call(f"{ME}:fail", "broken", deadline_s=60)
    assert caught.value.type_name == "ValueError" and "fail" in caught.value.trace
    with pytest.raises(JobFailed, match="no such function"):
        worker.call(f"{ME}:no_such_job", None, deadline_s=60)
    with pytest.raises(JobFailed):
        worker.call(f"{ME}:unpicklable", None, deadline_s=60)
    assert worker.call(f"{ME}:pid", None, deadline_s=60) == before


def test_retiring_and_sticky_jobs_get_a_fresh_worker(worker: Worker) -> None:
    before = worker.call(f"{ME}:pid", None, deadline_s=60)
    assert worker.call(f"{ME}:retire_after", 41, deadline_s=60) == 42
    middle = worker.call(f"{ME}:pid", None, deadline_s=60)
    assert middle != before
    with pytest.raises(JobFailed, match="context lost"):
        worker.call(f"{ME}:fail_sticky", None, deadline_s=60)
    after_sticky = worker.call(f"{ME}:pid", None, deadline_s=60)
    assert after_sticky not in (before, middle)
    # a raw CUDA error with a sticky status (no LaunchError wrapping it) retires the worker too
    with pytest.raises(JobFailed, match="illegal memory access"):
        worker.call(f"{ME}:fail_raw_cuda", None, deadline_s=60)
    assert worker.call(f"{ME}:pid", None, deadline_s=60) != after_sticky


def test_worker_output_stays_out_of_our_terminal(
    worker: Worker, capfd: pytest.CaptureFixture[str]
) -> None:
    assert worker.call(f"{ME}:flood", 20_000, deadline_s=60) == "done"
    captured = capfd.readouterr()
    assert "line 19999" not in captured.out + captured.err
    tail = worker.log_tail()
    assert tail.endswith("LAST WORDS on fd 2\n") and "line 19999" in tail
    assert len(tail) <= 4000
    worker.call(f"{ME}:pid", None, deadline_s=60)
    assert "line 19999" not in worker.log_tail()  # emptied before every job


def test_close_stops_the_process_and_removes_the_log() -> None:
    w = Worker()
    child = w.call(f"{ME}:pid", None, deadline_s=60)
    log_path = Path(w._log_path)
    assert log_path.exists()
    w.close()
    assert not w.alive and not log_path.exists()
    with pytest.raises(ProcessLookupError):
        for _ in range(50):  # the child is gone once reaped
            os.kill(child, 0)
            time.sleep(0.1)


# --- the evaluator's mapping of worker failures to verdicts ----------------------------------


@pytest.mark.parametrize(
    ("job", "reason", "fragment"),
    [
        ("stall_after_progress", "timeout", "no progress"),
        ("segfault", "crashed", "SIGSEGV"),
        ("fail", "crashed", "evaluation failed"),
    ],
)
def test_evaluator_turns_worker_failures_into_verdicts(
    monkeypatch: pytest.MonkeyPatch, job: str, reason: str, fragment: str
) -> None:
    monkeypatch.setattr(evaluator_module, "CHECK_JOB", f"{ME}:{job}")
    baseline, candidate = SILU.folder / "production.cu", SILU.folder / "naive.cu"
    with Evaluator(deadline_s=30, stall_s=4.0) as ev:  # stall covers importing the job
        verdict = ev.check("silu_and_mul", baseline, candidate)
        assert not verdict.accepted and verdict.reason == reason
        assert fragment in verdict.message
        assert verdict.evidence is not None and verdict.evidence.op == "silu_and_mul"
        if job == "stall_after_progress":
            assert verdict.evidence.dims == {"tokens": 3, "d": 24}
            assert verdict.evidence.suite == "edge"
        monkeypatch.setattr(evaluator_module, "CHECK_JOB", f"{ME}:fake_no_gpu")
        with pytest.raises(HarnessUnavailable, match="no CUDA GPU"):
            ev.check("silu_and_mul", baseline, candidate)


def fake_accept(request: dict[str, Any]) -> dict[str, Any]:
    return Verdict(
        accepted=True, message="accepted", cases_checked=3, suites=["tuning"]
    ).model_dump()


def fake_impossible_bench(request: dict[str, Any]) -> dict[str, Any]:
    assert request["baseline"] and request["shapes"] and request["seed"]
    evidence = Evidence(op="silu_and_mul", dims=request["shapes"][0], dtype="float16")
    return BenchReport(
        op="silu_and_mul",
        mode=request["mode"],
        device="fake",
        candidate=request["candidate"]["path"],
        baseline=request["baseline"]["path"],
        copy_bandwidth_gbps=3000.0,
        shapes=[],
        rejection=Verdict.reject("impossible_time", "faster than memory allows", evidence),
    ).model_dump()


def test_evaluate_turns_a_bench_rejection_into_the_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evaluator_module, "CHECK_JOB", f"{ME}:fake_accept")
    monkeypatch.setattr(evaluator_module, "BENCH_JOB", f"{ME}:fake_impossible_bench")
    baseline, candidate = SILU.folder / "production.cu", SILU.folder / "naive.cu"
    with Evaluator(deadline_s=30) as ev:
        result = ev.evaluate(
            "silu_and_mul", baseline, candidate, time_shapes=[{"tokens": 4, "d": 64}]
        )
    assert result.verdict.reason == "impossible_time" and not result.verdict.accepted
    assert result.verdict.cases_checked == 3 and result.verdict.suites == ["tuning"]
    assert result.verdict.evidence is not None and result.verdict.evidence.dims == {
        "tokens": 4,
        "d": 64,
    }
    assert result.bench is not None and result.bench.rejection is not None
    assert result.seconds > 0


ORPHANING_PARENT = """
import sys
from astra_graph.harness.worker import Worker

if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])
    w = Worker()
    print(w.call("test_worker:pid", None, deadline_s=60), flush=True)
    w.call("test_worker:sleep", 600, deadline_s=600)
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in state  # a zombie has exited; its reaper may be slow


def test_worker_exits_when_its_parent_dies(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(ORPHANING_PARENT)
    parent = subprocess.Popen(
        [sys.executable, str(script), str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(0.5)  # the child is now inside the 600 s job
        assert not _gone(child)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(child)


def test_a_worker_that_cannot_start_is_the_harness_failing_not_the_candidate() -> None:
    baseline, candidate = SILU.folder / "production.cu", SILU.folder / "naive.cu"
    with Evaluator(deadline_s=30) as ev:
        ev.worker = Worker(startup_timeout_s=1e-6)  # no process is ready within a microsecond
        with pytest.raises(HarnessUnavailable, match="could not start"):
            ev.check("silu_and_mul", baseline, candidate)
        ev.worker.close()


def test_a_worker_starting_when_the_run_is_interrupted_is_killed() -> None:
    """A worker's start (a CUDA context: seconds) is a wait on the interrupt path too: the
    child is killed and the start raises, instead of waiting up to STARTUP_TIMEOUT_S."""
    with Worker() as fresh:
        cancel_jobs()
        try:
            with pytest.raises(JobCancelled, match="worker start"):
                fresh.start()
        finally:
            allow_jobs()
        assert not fresh.alive and fresh.starts == 1
        assert fresh.call(f"{ME}:sleep", 0.01, deadline_s=60) == "woke"


def test_a_lock_held_elsewhere_is_given_up_on_an_interrupt() -> None:
    """``holding`` waits for a busy evaluator's lock only until the run is interrupted."""
    lock = threading.Lock()
    lock.acquire()
    raised: list[BaseException] = []

    def wait() -> None:
        try:
            with holding(lock, "bench"):
                pass
        except BaseException as exc:  # the test reads what the thread got
            raised.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    try:
        time.sleep(0.3)
        assert thread.is_alive()  # still waiting for the lock
        cancel_jobs()
        thread.join(timeout=30)
    finally:
        allow_jobs()
        lock.release()
    assert len(raised) == 1 and isinstance(raised[0], JobCancelled)
    with holding(lock, "bench"):  # a free lock is taken as ``with lock`` would
        assert lock.locked()
    assert not lock.locked()
