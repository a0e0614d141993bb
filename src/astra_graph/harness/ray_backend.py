"""The cluster backend: evaluations as tasks on Ray actors, one actor per GPU of the cluster.

Why Ray: ML teams already run it on their GPU clusters (it schedules by GPU, isolates each
actor's ``CUDA_VISIBLE_DEVICES``, restarts nothing behind our back), so astra-graph brings no
scheduler of its own; within one host the local pool (``harness.pool``) needs nothing installed.
Ray is an optional extra (``pip install 'astra-graph[ray]'``), imported only here.

Each :class:`EvaluationActor` reserves one GPU (``num_gpus=1``) and keeps one harness
:class:`~astra_graph.harness.evaluator.Evaluator` (a warm worker process) for its lifetime; the
driver's :class:`GpuPool` sends each ``check``/``bench`` to an idle actor, so a candidate and its
baseline are timed in one call on one GPU exactly as in the local pool.

Files travel with the call: a cluster node need not share the driver's disk. The driver sends
the operation's folder, the baseline and the candidate as bytes (:class:`Shipment`); the actor
writes them under a private folder, evaluates there and writes the driver's paths back into the
result, so verdicts and reports name the files the user knows.

An actor that dies (its node lost, killed) raises ``HarnessUnavailable`` in the driver, which
retires that slot only. ``RAY_ADDRESS`` names an existing cluster; without it a local Ray
instance is started on this host (as in the tests, with the fake evaluator).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from astra_graph.harness.deep import SanitizerReport
from astra_graph.harness.evaluator import HarnessUnavailable, operation
from astra_graph.harness.pool import GpuPool, PoolConfigError, Slot
from astra_graph.harness.protocol import EvaluatorLike
from astra_graph.harness.results import BenchReport, Verdict
from astra_graph.harness.worker import JobFailed, WorkerCrashed, WorkerTimeout
from astra_graph.kernel.contract import ContractError, OperationSpec, load_contract

DEFAULT_FACTORY = "astra_graph.harness.evaluator:Evaluator"
"""What each actor evaluates with: ``module:callable`` returning an evaluator (tests: a fake)."""
MAX_OPERATION_BYTES = 8 * 1024 * 1024
"""Largest operation folder shipped to an actor (contracts, references and kernels are KiB)."""
INSTALL_HINT = "pip install 'astra-graph[ray]'"


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise PoolConfigError(f"--backend ray: Ray is not installed ({INSTALL_HINT})") from None
    return ray


# --- what travels ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Shipment:
    """The files one evaluation needs, as bytes, with the driver's paths for the way back."""

    op_name: str
    op_folder: str
    op_files: dict[str, bytes]
    """Relative path -> contents, every regular file of the operation's folder."""
    kernels: dict[str, bytes]
    """The driver's path of the baseline / candidate -> contents."""

    @property
    def key(self) -> str:
        digest = hashlib.sha256(self.op_folder.encode())
        for name, data in sorted({**self.op_files, **self.kernels}.items()):
            digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
        return digest.hexdigest()[:16]


def operation_files(folder: Path) -> dict[str, bytes]:
    """Every regular file under an operation's folder (caches excluded), size-checked."""
    found: dict[str, bytes] = {}
    total = 0
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        data = path.read_bytes()
        total += len(data)
        if total > MAX_OPERATION_BYTES:
            raise PoolConfigError(
                f"{folder}: more than {MAX_OPERATION_BYTES} bytes to ship to a cluster worker"
            )
        found[str(path.relative_to(folder))] = data
    return found


def ship(spec: OperationSpec, *paths: Path | None) -> Shipment:
    return Shipment(
        op_name=spec.name,
        op_folder=str(spec.folder),
        op_files=operation_files(Path(spec.folder)),
        kernels={str(p): Path(p).read_bytes() for p in paths if p is not None},
    )


def unpack(shipment: Shipment, root: Path) -> tuple[Path, dict[str, str]]:
    """Write a shipment under ``root``: (the operation's local folder, driver path -> local)."""
    where = root / shipment.key
    op_dir = where / "op" / Path(shipment.op_folder).name
    local = {}
    for rel, data in shipment.op_files.items():
        target = op_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    for i, (original, data) in enumerate(sorted(shipment.kernels.items())):
        target = where / "kernels" / str(i) / Path(original).name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        local[original] = str(target)
    local[shipment.op_folder] = str(op_dir)
    return op_dir, local


def restore_paths(result: BaseModel, local: Mapping[str, str]) -> dict[str, Any]:
    """The result as JSON data with every local path replaced by the driver's path."""
    text = result.model_dump_json()
    for original, here in sorted(local.items(), key=lambda item: -len(item[1])):
        text = text.replace(json.dumps(here)[1:-1], json.dumps(original)[1:-1])
    return json.loads(text)


# --- the actor's side ------------------------------------------------------------------------


def _factory(target: str) -> Callable[[], Any]:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _error_envelope(exc: Exception) -> dict[str, Any]:
    """An exception as plain data: the harness's exceptions take keyword arguments that
    pickling by ``args`` would lose, so they cross the cluster as fields and are rebuilt."""
    return {
        "error": type(exc).__name__,
        "message": str(exc),
        "log": getattr(exc, "log", ""),
        "exitcode": getattr(exc, "exitcode", None),
        "type_name": getattr(exc, "type_name", ""),
        "trace": getattr(exc, "trace", ""),
    }


def _raise_envelope(data: Mapping[str, Any]) -> None:
    """Raise in the driver what the actor's evaluator raised (same class for the harness's)."""
    kind, message, log = data["error"], data["message"], data["log"]
    if kind == "WorkerTimeout":
        raise WorkerTimeout(message, log=log)
    if kind == "WorkerCrashed":
        raise WorkerCrashed(message, exitcode=data["exitcode"], log=log)
    if kind == "JobFailed":
        text = message.removeprefix(f"{data['type_name']}: ")
        raise JobFailed(data["type_name"], text, data["trace"], log=log)
    if kind == "ContractError":
        raise ContractError(message)
    if kind == "HarnessUnavailable":
        raise HarnessUnavailable(message)
    raise RuntimeError(f"cluster worker: {kind}: {message}")


class EvaluationActor:
    """Runs on a cluster worker holding one GPU; Ray wraps it with ``ray.remote(num_gpus=1)``.

    Every answer is a dict: the result as JSON data with the driver's paths, or an error
    envelope (``"error"`` set)."""

    def __init__(self, factory: str = DEFAULT_FACTORY) -> None:
        self.evaluator = _factory(factory)()
        self.root = Path(tempfile.mkdtemp(prefix="astra-ray-"))

    def gpu(self) -> str:
        """The GPU Ray gave this actor, as its ``CUDA_VISIBLE_DEVICES``."""
        return os.environ.get("CUDA_VISIBLE_DEVICES", "")

    def check(
        self, shipment: Shipment, baseline: str, candidate: str, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        op_dir, local = unpack(shipment, self.root)
        try:
            verdict = self.evaluator.check(
                load_contract(op_dir), Path(local[baseline]), Path(local[candidate]), **kwargs
            )
        except Exception as exc:  # sent back and raised in the driver
            return _error_envelope(exc)
        return restore_paths(verdict, local)

    def bench(
        self, shipment: Shipment, candidate: str, against: str | None, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        op_dir, local = unpack(shipment, self.root)
        try:
            report = self.evaluator.bench(
                load_contract(op_dir),
                Path(local[candidate]),
                against=Path(local[against]) if against else None,
                **kwargs,
            )
        except Exception as exc:  # sent back and raised in the driver
            return _error_envelope(exc)
        return restore_paths(report, local)

    def sanitize(
        self, shipment: Shipment, candidate: str, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        op_dir, local = unpack(shipment, self.root)
        try:
            report = self.evaluator.sanitize(
                load_contract(op_dir), Path(local[candidate]), **kwargs
            )
        except Exception as exc:  # sent back and raised in the driver
            return _error_envelope(exc)
        return restore_paths(report, local)

    def close(self) -> None:
        self.evaluator.close()
        shutil.rmtree(self.root, ignore_errors=True)


# --- the driver's side -----------------------------------------------------------------------


class ActorEvaluator(EvaluatorLike):
    """The evaluator protocol for one actor: ships the files, waits for the answer.

    The harness's exceptions (bad input, a crash or hang while timing) are raised here as they
    were there; the actor's own death is ``HarnessUnavailable`` (the pool retires the slot).
    """

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def _call(self, method: str, *args: Any) -> dict[str, Any]:
        ray = _ray()
        try:
            data: dict[str, Any] = ray.get(getattr(self.actor, method).remote(*args))
        except ray.exceptions.RayError as exc:
            raise HarnessUnavailable(
                f"cluster worker lost: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            ) from None
        if "error" in data:
            _raise_envelope(data)
        return data

    def check(self, op: Any, baseline: Path, candidate: Path, **kwargs: Any) -> Verdict:
        spec = operation(op)
        shipment = ship(spec, Path(baseline), Path(candidate))
        if "extra_shapes" in kwargs:
            kwargs["extra_shapes"] = [dict(d) for d in kwargs["extra_shapes"]]
        data = self._call("check", shipment, str(baseline), str(candidate), kwargs)
        return Verdict.model_validate(data)

    def bench(self, op: Any, candidate: Path, **kwargs: Any) -> BenchReport:
        spec = operation(op)
        against = kwargs.pop("against", None)
        shipment = ship(spec, Path(candidate), Path(against) if against else None)
        data = self._call(
            "bench", shipment, str(candidate), str(against) if against else None, kwargs
        )
        return BenchReport.model_validate(data)

    def sanitize(self, op: Any, candidate: Path, **kwargs: Any) -> SanitizerReport:
        spec = operation(op)
        data = self._call("sanitize", ship(spec, Path(candidate)), str(candidate), kwargs)
        return SanitizerReport.model_validate(data)

    def close(self) -> None:
        ray = _ray()
        with contextlib.suppress(ray.exceptions.RayError):  # a lost actor has nothing to close
            ray.get(self.actor.close.remote())
        ray.kill(self.actor)


def ray_pool(factory: str = DEFAULT_FACTORY, actors: int | None = None) -> GpuPool:
    """A pool of one actor per GPU of the Ray cluster (or ``actors`` of them).

    Connects to ``RAY_ADDRESS`` if set, else starts a local Ray instance on this host.
    Raises PoolConfigError when Ray is missing or the cluster has no GPU.
    """
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), log_to_driver=False)
    gpus = int(ray.cluster_resources().get("GPU", 0))
    count = actors if actors is not None else gpus
    if count < 1 or count > gpus:
        raise PoolConfigError(
            f"--backend ray: the Ray cluster has {gpus} GPU(s); {count} actor(s) requested"
        )
    remote = ray.remote(num_gpus=1, max_restarts=0)(EvaluationActor)
    handles = [remote.remote(factory) for _ in range(count)]
    names = ray.get([h.gpu.remote() for h in handles])
    slots = [
        Slot(gpu=f"ray:{name or i}", evaluator=ActorEvaluator(h))
        for i, (h, name) in enumerate(zip(handles, names, strict=True))
    ]
    return GpuPool(slots, backend="ray")
