"""The GPU pool with real workers and kernels: each worker sees one GPU, evaluations run side by
side, and a faulting kernel takes down its own worker only.

With one GPU visible the pool gets two workers on it (what is tested then is the isolation, not
the pinning to different devices).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from astra_graph.harness.evaluator import Evaluator
from astra_graph.harness.pool import GpuPool, local_pool, visible_gpus
from astra_graph.harness.results import Verdict
from astra_graph.kernel.catalog import resolve

pytestmark = pytest.mark.gpu

SILU, _ = resolve("silu_and_mul")
FIXTURES = Path(__file__).parent / "fixtures" / "bad_kernels"
DEADLINE_S = 120.0


def device_seen(_: Any) -> dict[str, Any]:
    """A job for the worker: how many devices it sees and which one it uses."""
    import cupy

    # the full PCI address: on some hosts every GPU has bus number 0 (seen on an H200 x2)
    return {"count": cupy.cuda.runtime.getDeviceCount(), "bus": cupy.cuda.Device(0).pci_bus_id}


def pid(_: Any) -> int:
    return os.getpid()


@pytest.fixture(scope="module")
def pool() -> Iterator[GpuPool]:
    visible = visible_gpus()
    gpus = visible[:2] if len(visible) >= 2 else [*visible, *visible][:2] or ["", ""]
    with local_pool(gpus) as made:
        yield made


def worker(pool: GpuPool, i: int) -> Any:
    evaluator = pool.slots[i].evaluator
    assert isinstance(evaluator, Evaluator)
    return evaluator.worker


def test_each_worker_sees_exactly_its_gpu(pool: GpuPool) -> None:
    seen = [
        worker(pool, i).call("test_pool_gpu:device_seen", None, deadline_s=DEADLINE_S)
        for i in range(2)
    ]
    assert all(s["count"] == 1 for s in seen)
    if pool.slots[0].gpu != pool.slots[1].gpu:
        assert seen[0]["bus"] != seen[1]["bus"]


def test_a_fault_on_one_gpu_leaves_the_other_worker_running(pool: GpuPool) -> None:
    naive, crash = SILU.folder / "naive.cu", FIXTURES / "out_of_bounds.cu"
    for i in range(2):  # both warm, so both take work at once
        assert pool.slots[i].evaluator.check(SILU, naive, naive, suites=("edge",)).accepted
    before = [
        worker(pool, i).call("test_pool_gpu:pid", None, deadline_s=DEADLINE_S) for i in range(2)
    ]
    verdicts: dict[str, Verdict] = {}

    def check(name: str, candidate: Path) -> None:
        verdicts[name] = pool.check(SILU, naive, candidate, suites=("edge",))

    threads = [
        threading.Thread(target=check, args=("crash", crash)),
        threading.Thread(target=check, args=("good", SILU.folder / "production.cu")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_S)
    assert verdicts["crash"].reason == "crashed", verdicts["crash"].message
    assert verdicts["good"].accepted, verdicts["good"].message
    after = [
        worker(pool, i).call("test_pool_gpu:pid", None, deadline_s=DEADLINE_S) for i in range(2)
    ]
    assert sorted(a == b for a, b in zip(before, after, strict=True)) == [False, True]
    assert len(pool) == 2
    report = pool.bench(SILU, SILU.folder / "production.cu", against=naive, dtypes=["float16"])
    assert report.rejection is None and (report.geomean_speedup or 0) > 1.0
