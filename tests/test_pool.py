"""The GPU pool on the CPU: pinning each worker, dispatch to idle slots, failures kept local.

Slots hold scripted evaluators (``fake_evaluator``), except where a real worker process is the
point (pinning, crash isolation); the real kernels' version is ``test_pool_gpu.py``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from astra_graph.harness.backends import open_pool
from astra_graph.harness.evaluator import Evaluator, HarnessUnavailable
from astra_graph.harness.pool import (
    GpuPool,
    PoolConfigError,
    Slot,
    backend_choice,
    local_pool,
    select_gpus,
    visible_gpus,
)
from astra_graph.harness.worker import (
    CANCEL_POLL_S,
    JobCancelled,
    WorkerCrashed,
    allow_jobs,
    cancel_jobs,
)
from astra_graph.kernel.catalog import kernels_root
from astra_graph.kernel.contract import load_contract
from astra_graph.loop.agents.finalize import sanitizer_report
from astra_graph.loop.best import Best
from fake_evaluator import FakeEvaluator
from kernel_sources import VECTORIZED, marked

SPEC = load_contract(kernels_root() / "silu_and_mul")
BASELINE = SPEC.folder / "naive.cu"
# A bound on a failing call only: a passing one returns in milliseconds. It covers starting a
# replacement worker (a fresh interpreter importing NumPy and the harness), which took over 10 s
# on this 2-core machine under pytest-xdist with other sessions' load.
WAIT_S = 60.0


def write(tmp_path: Path, name: str, **marks: object) -> Path:
    path = tmp_path / f"{name}.cu"
    path.write_text(marked(VECTORIZED, **marks))
    return path


class GatedEvaluator(FakeEvaluator):
    """A fake whose checks wait at a gate, and which records how many of its calls overlap."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        super().__init__()
        self.gate = gate
        self.running = 0
        self.most_at_once = 0
        self.closed = False
        self._lock = threading.Lock()

    def check(self, op: Any, baseline: Path, candidate: Path, **kwargs: Any) -> Any:
        with self._lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            if self.gate is not None:
                assert self.gate.wait(WAIT_S), "the gate was never opened"
            return super().check(op, baseline, candidate, **kwargs)
        finally:
            with self._lock:
                self.running -= 1

    def close(self) -> None:
        self.closed = True


class UnavailableEvaluator(FakeEvaluator):
    """A slot whose worker cannot start: every call raises HarnessUnavailable."""

    closed = False

    def check(self, *args: Any, **kwargs: Any) -> Any:
        raise HarnessUnavailable("no CUDA GPU: device 1 is lost")

    bench = check

    def close(self) -> None:
        self.closed = True


def pool_of(*evaluators: Any) -> GpuPool:
    return GpuPool([Slot(gpu=str(i), evaluator=e) for i, e in enumerate(evaluators)])


# --- choosing GPUs and the backend ------------------------------------------------------------


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, GPU-abc ,")
    assert visible_gpus() == ["2", "GPU-abc"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []


def test_no_nvidia_smi_means_no_visible_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert visible_gpus() == []


def test_gpus_flag_picks_visible_gpus_by_index() -> None:
    visible = ["GPU-a", "GPU-b", "GPU-c"]
    assert select_gpus(None, visible) == visible
    assert select_gpus("all", visible) == visible
    assert select_gpus("2,0", visible) == ["GPU-c", "GPU-a"]
    assert select_gpus(None, []) == [""]  # one unpinned worker: it says why it has no GPU


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ("1,x", "--gpus: 'x' is not a GPU index"),
        ("3", "--gpus: GPU 3 is not visible (visible: 0, 1)"),
        ("1,1", "--gpus: GPU 1 is named twice"),
        ("-1", "--gpus: '-1' is not a GPU index"),
    ],
)
def test_bad_gpus_flag_is_one_clear_error(choice: str, message: str) -> None:
    with pytest.raises(PoolConfigError) as caught:
        select_gpus(choice, ["a", "b"])
    assert str(caught.value).startswith(message)


def test_backend_comes_from_the_flag_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ASTRA_BACKEND", raising=False)
    assert backend_choice(None) == "local"
    monkeypatch.setenv("ASTRA_BACKEND", "Ray")
    assert backend_choice(None) == "ray"
    assert backend_choice("local") == "local"
    monkeypatch.setenv("ASTRA_BACKEND", "slurm")
    with pytest.raises(PoolConfigError, match="ASTRA_BACKEND: unknown backend 'slurm'"):
        backend_choice(None)
    with pytest.raises(PoolConfigError, match="--backend: unknown backend 'k8s'"):
        backend_choice("k8s")


def test_gpus_flag_is_refused_with_the_ray_backend() -> None:
    with pytest.raises(PoolConfigError, match="--gpus: chooses GPUs of this host"):
        open_pool("ray", "0,1")


# --- real worker processes: pinning and isolation ---------------------------------------------


@pytest.fixture
def pinned_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[GpuPool]:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    with local_pool(select_gpus(None, visible_gpus())) as pool:
        yield pool


def pid(_: Any) -> int:
    """A job for the worker (imported there by name)."""
    return os.getpid()


def worker_of(slot: Slot) -> Any:
    assert isinstance(slot.evaluator, Evaluator)
    return slot.evaluator.worker


def test_each_worker_sees_only_its_own_gpu(pinned_pool: GpuPool) -> None:
    seen = [
        worker_of(s).call("os:getenv", "CUDA_VISIBLE_DEVICES", deadline_s=WAIT_S)
        for s in pinned_pool.slots
    ]
    assert seen == ["4", "6"]


def test_a_dead_worker_is_replaced_on_its_gpu_and_the_other_keeps_running(
    pinned_pool: GpuPool,
) -> None:
    first, second = (worker_of(s) for s in pinned_pool.slots)
    pids = [w.call("test_pool:pid", None, deadline_s=WAIT_S) for w in (first, second)]
    with pytest.raises(WorkerCrashed):
        first.call("os:_exit", 3, deadline_s=WAIT_S)
    assert second.call("test_pool:pid", None, deadline_s=WAIT_S) == pids[1]
    assert first.call("test_pool:pid", None, deadline_s=WAIT_S) != pids[0]
    assert first.call("os:getenv", "CUDA_VISIBLE_DEVICES", deadline_s=WAIT_S) == "4"


# --- dispatch ---------------------------------------------------------------------------------


def test_calls_run_on_different_gpus_at_once(tmp_path: Path) -> None:
    gate = threading.Event()
    slots = [GatedEvaluator(gate), GatedEvaluator(gate)]
    pool = pool_of(*slots)
    candidate = write(tmp_path, "c")
    threads = [
        threading.Thread(target=pool.check, args=(SPEC, BASELINE, candidate)) for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + WAIT_S
    while sum(s.running for s in slots) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    both_running = [s.running for s in slots]
    gate.set()
    for thread in threads:
        thread.join(WAIT_S)
    assert both_running == [1, 1]
    assert [s.most_at_once for s in slots] == [1, 1]


def test_one_slot_never_runs_two_calls_at_once(tmp_path: Path) -> None:
    slot = GatedEvaluator()
    pool = pool_of(slot)
    candidate = write(tmp_path, "c")
    threads = [
        threading.Thread(target=pool.check, args=(SPEC, BASELINE, candidate)) for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert len(slot.checks) == 6 and slot.most_at_once == 1


def test_work_goes_to_the_idle_gpu_while_one_is_busy(tmp_path: Path) -> None:
    gate = threading.Event()
    busy, idle = GatedEvaluator(gate), GatedEvaluator()
    pool = pool_of(busy, idle)
    candidate = write(tmp_path, "c")
    held = threading.Thread(target=pool.check, args=(SPEC, BASELINE, candidate))
    held.start()
    deadline = time.monotonic() + WAIT_S
    while busy.running == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    for _ in range(3):
        assert pool.check(SPEC, BASELINE, candidate).accepted
    gate.set()
    held.join(WAIT_S)
    assert len(idle.checks) == 3 and len(busy.checks) == 1
    assert [s.calls for s in pool.slots] == [1, 3]


def test_candidate_and_baseline_are_timed_in_one_call_on_one_slot(tmp_path: Path) -> None:
    slots = [FakeEvaluator(), FakeEvaluator()]
    pool = pool_of(*slots)
    candidate = write(tmp_path, "c", speedup=1.5)
    report = pool.bench(SPEC, candidate, against=BASELINE)
    assert report.geomean_speedup == pytest.approx(1.5)
    timed = [b for s in slots for b in s.benches]
    assert len(timed) == 1 and timed[0]["against"] == BASELINE


# --- failures stay local ----------------------------------------------------------------------


def test_a_crash_while_timing_is_the_callers_and_retires_no_gpu(tmp_path: Path) -> None:
    first, second = FakeEvaluator(), FakeEvaluator()
    pool = pool_of(first, second)
    with pytest.raises(WorkerCrashed):
        pool.bench(SPEC, write(tmp_path, "bad", timing="crash"), against=BASELINE)
    assert len(pool) == 2
    good = write(tmp_path, "good", speedup=1.2)
    for _ in range(4):
        pool.bench(SPEC, good, against=BASELINE)
    assert len(first.benches) >= 2 and len(second.benches) >= 2


def test_a_gpu_that_cannot_evaluate_is_retired_and_the_call_moves_on(tmp_path: Path) -> None:
    lost, healthy = UnavailableEvaluator(), FakeEvaluator()
    pool = pool_of(lost, healthy)
    candidate = write(tmp_path, "c", reject="mismatch")
    verdict = pool.check(SPEC, BASELINE, candidate, suites=("tuning",))
    assert verdict.reason == "mismatch"
    assert pool.slots[0].retired == "no CUDA GPU: device 1 is lost" and lost.closed
    assert len(pool) == 1
    pool.check(SPEC, BASELINE, candidate, suites=("tuning",))
    assert len(healthy.checks) == 2


def test_when_every_gpu_is_retired_the_pool_says_why(tmp_path: Path) -> None:
    pool = pool_of(UnavailableEvaluator(), UnavailableEvaluator())
    with pytest.raises(HarnessUnavailable, match=r"no GPU of the pool can evaluate \(0: no CUDA"):
        pool.check(SPEC, BASELINE, write(tmp_path, "c"))
    lone = pool_of(UnavailableEvaluator())
    with pytest.raises(HarnessUnavailable, match=r"^no CUDA GPU: device 1 is lost$"):
        lone.check(SPEC, BASELINE, write(tmp_path, "c"))
    assert len(lone) == 1  # a lone slot reports the reason as a lone Evaluator does


def test_close_closes_every_slot() -> None:
    slots = [GatedEvaluator(), GatedEvaluator()]
    with pool_of(*slots):
        pass
    assert all(s.closed for s in slots)


def test_final_pick_of_a_pooled_run_is_sanitized_on_a_slot(tmp_path: Path) -> None:
    """finalize runs compute-sanitizer through the evaluator it is given: through a pool (every
    CLI run's evaluator) the tools must run on a slot, not be reported as unavailable."""
    slots = [FakeEvaluator(), FakeEvaluator()]
    candidate = write(tmp_path, "c", sanitize="racecheck")
    with pool_of(*slots) as pool:
        report = sanitizer_report(pool, SPEC, Best(round=1, path=str(candidate)))
    assert report is not None
    assert {(r.tool, r.ok) for r in report.results} == {("memcheck", True), ("racecheck", False)}
    assert sum(len(s.sanitized) for s in slots) == 1


def test_a_call_waiting_for_a_busy_slot_stops_on_an_interrupt(tmp_path: Path) -> None:
    """A branch waiting for the one slot another branch holds must not wait out that call when
    the run is interrupted (issue 26: no wait on the interrupt path without a bound)."""
    gate = threading.Event()
    pool = pool_of(GatedEvaluator(gate))
    candidate = write(tmp_path, "held")
    holder = threading.Thread(target=pool.check, args=(SPEC, BASELINE, candidate))
    holder.start()
    raised: list[BaseException] = []

    def waiting() -> None:
        try:
            pool.check(SPEC, BASELINE, candidate)
        except BaseException as exc:  # the test reads what the thread got
            raised.append(exc)

    waiter = threading.Thread(target=waiting)
    try:
        waiter.start()
        time.sleep(0.3)
        cancel_jobs()
        sent = time.monotonic()
        waiter.join(timeout=WAIT_S)
        stopped_after = time.monotonic() - sent
    finally:
        allow_jobs()
        gate.set()
        holder.join(timeout=WAIT_S)
    assert len(raised) == 1 and isinstance(raised[0], JobCancelled)
    assert stopped_after < CANCEL_POLL_S * 5  # the poll's period, with room for the scheduler
