"""The Ray backend on a local Ray instance with two logical GPUs and the fake evaluator.

Ray is in the dev extra, so CI runs these; elsewhere (the GPU machine, which has no Ray) they
skip with that reason, as the notebook test does without nbformat. The
instance is started once for the module (about ten seconds on a small machine). Each actor
holds a ``fake_evaluator.FakeEvaluator``, imported on the Ray workers through ``PYTHONPATH``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from astra_graph.harness.pool import GpuPool, PoolConfigError
from astra_graph.harness.ray_backend import (
    ActorEvaluator,
    ray_pool,
    restore_paths,
    ship,
    unpack,
)
from astra_graph.harness.results import Verdict
from astra_graph.harness.worker import WorkerCrashed
from astra_graph.kernel.catalog import kernels_root
from astra_graph.kernel.contract import load_contract
from fake_evaluator import FakeEvaluator
from kernel_sources import VECTORIZED, marked

ray = pytest.importorskip("ray", reason="the dev extra (ray) is needed")

SPEC = load_contract(kernels_root() / "silu_and_mul")
BASELINE = SPEC.folder / "naive.cu"
FAKE = "fake_evaluator:FakeEvaluator"
LOGICAL_GPUS = 2


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    ray.init(
        num_cpus=2,
        num_gpus=LOGICAL_GPUS,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}},
    )
    yield
    ray.shutdown()


@pytest.fixture
def pool(cluster: None) -> Iterator[GpuPool]:
    with ray_pool(FAKE) as made:
        yield made


def write(tmp_path: Path, name: str, **marks: object) -> Path:
    path = tmp_path / f"{name}.cu"
    path.write_text(marked(VECTORIZED, **marks))
    return path


def test_one_actor_per_cluster_gpu_each_with_its_own_gpu(pool: GpuPool) -> None:
    assert pool.backend == "ray" and len(pool) == LOGICAL_GPUS
    assert sorted(s.gpu for s in pool.slots) == ["ray:0", "ray:1"]


def test_answers_match_the_in_process_evaluator(pool: GpuPool, tmp_path: Path) -> None:
    local = FakeEvaluator()
    cases = [
        write(tmp_path, "faster", speedup=1.7),
        write(tmp_path, "wrong", reject="mismatch"),
        write(tmp_path, "heldout", heldout="reject"),
        write(tmp_path, "impossible", timing="impossible"),
    ]
    for candidate in cases:
        for suites in (("tuning", "edge"), ("heldout",)):
            remote = pool.check(SPEC, BASELINE, candidate, suites=suites)
            assert remote == local.check(SPEC, BASELINE, candidate, suites=suites)
        remote_bench = pool.bench(SPEC, candidate, against=BASELINE, dtypes=["float16"])
        local_bench = local.bench(SPEC, candidate, against=BASELINE, dtypes=["float16"])
        assert remote_bench == local_bench
        assert remote_bench.candidate == str(candidate)  # the driver's path, not the actor's
    flagged = write(tmp_path, "racy", sanitize="racecheck")
    assert pool.sanitize(SPEC, flagged) == local.sanitize(SPEC, flagged)
    assert not all(r.ok for r in pool.sanitize(SPEC, flagged).results)


def test_concurrent_calls_use_both_actors(pool: GpuPool, tmp_path: Path) -> None:
    candidate = write(tmp_path, "c", speedup=1.2)
    reports = []
    threads = [
        threading.Thread(
            target=lambda: reports.append(pool.bench(SPEC, candidate, against=BASELINE))
        )
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(reports) == 8
    assert all(r.geomean_speedup == pytest.approx(1.2) for r in reports)
    assert sum(s.calls for s in pool.slots) == 8


def test_harness_errors_cross_the_cluster_as_themselves(pool: GpuPool, tmp_path: Path) -> None:
    with pytest.raises(WorkerCrashed) as caught:
        pool.bench(SPEC, write(tmp_path, "crash", timing="crash"), against=BASELINE)
    assert caught.value.exitcode == -11
    assert len(pool) == LOGICAL_GPUS  # a crashing candidate retires no GPU


def test_a_lost_actor_retires_its_slot_only(pool: GpuPool, tmp_path: Path) -> None:
    lost = pool.slots[0].evaluator
    assert isinstance(lost, ActorEvaluator)
    ray.kill(lost.actor)
    candidate = write(tmp_path, "c", speedup=1.1)
    for _ in range(3):
        assert pool.check(SPEC, BASELINE, candidate).accepted
    assert pool.slots[0].retired is not None and "cluster worker lost" in pool.slots[0].retired
    assert len(pool) == 1 and pool.slots[1].calls >= 3


def test_a_shipment_is_evaluated_from_its_own_copy(tmp_path: Path) -> None:
    candidate = write(tmp_path, "c", speedup=1.3)
    shipment = ship(SPEC, BASELINE, candidate)
    assert "contract.toml" in shipment.op_files and "reference.py" in shipment.op_files
    op_dir, local = unpack(shipment, tmp_path / "actor")
    assert (op_dir / "contract.toml").read_bytes() == (SPEC.folder / "contract.toml").read_bytes()
    copy = Path(local[str(candidate)])
    assert copy != candidate and copy.read_text() == candidate.read_text()
    verdict = Verdict.reject("compile_error", f"{copy}: error: expected ';'", log=f"in {op_dir}")
    back = restore_paths(verdict, local)
    assert back["message"] == f"{candidate}: error: expected ';'"
    assert back["log"] == f"in {SPEC.folder}"


def test_a_changed_file_is_a_new_shipment(tmp_path: Path) -> None:
    candidate = write(tmp_path, "c", speedup=1.3)
    before = ship(SPEC, BASELINE, candidate).key
    candidate.write_text(marked(VECTORIZED, speedup=1.4))
    assert ship(SPEC, BASELINE, candidate).key != before


def test_more_actors_than_cluster_gpus_is_refused(cluster: None) -> None:
    with pytest.raises(PoolConfigError, match="the Ray cluster has 2 GPU"):
        ray_pool(FAKE, actors=3)
