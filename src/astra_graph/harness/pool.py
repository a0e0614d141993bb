"""A pool of evaluators, one per GPU: evaluations go to whichever GPU is idle.

:class:`GpuPool` answers the same ``check``/``bench`` calls as one
:class:`~astra_graph.harness.evaluator.Evaluator`, so the graph, the tuner and the many-kernels
driver use it unchanged; it is safe to call from many threads at once (best-of-K branches,
several kernels). Each call waits for an idle slot, runs on it, and frees it.

Why speedups stay honest: a speedup is only ever formed inside one ``bench`` call, which times
the candidate and its baseline interleaved in one worker on one GPU (``against=``). Absolute
times from different slots are never divided by each other.

Failure is local to a slot. A kernel that crashes or hangs kills that slot's worker process
only; the slot's evaluator starts a fresh worker on the same GPU for its next call and every
other slot keeps its warm worker. A slot whose worker cannot start at all (the GPU is gone, the
driver refuses it: ``HarnessUnavailable``) is retired for the rest of the pool's life and the
call moves to another slot; only when every slot is retired does the pool raise.

Slots are local evaluators pinned with ``CUDA_VISIBLE_DEVICES`` (:func:`local_pool`), or
proxies to Ray actors on a cluster (``harness.ray_backend``, built on this module);
``harness.backends.open_pool`` picks between them. This module never imports LangGraph or Ray.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import structlog

from astra_graph.harness import evaluator as evaluator_module
from astra_graph.harness.compile import DEFAULT_ARCH
from astra_graph.harness.evaluator import HarnessUnavailable
from astra_graph.harness.protocol import EvaluatorLike
from astra_graph.harness.results import BenchReport, Verdict
from astra_graph.harness.worker import CANCEL_POLL_S, JobCancelled, jobs_cancelled
from astra_graph.kernel.contract import OperationSpec

log = structlog.get_logger(__name__)

Backend = Literal["local", "ray"]
BACKENDS: tuple[Backend, ...] = ("local", "ray")
BACKEND_ENV = "ASTRA_BACKEND"
"""Environment variable choosing the backend when no flag does (``local`` or ``ray``)."""
NVIDIA_SMI_TIMEOUT_S = 20.0
T = TypeVar("T")


class PoolConfigError(ValueError):
    """A bad ``--gpus`` or ``--backend`` (or ``ASTRA_BACKEND``): the message names which."""


@dataclass
class Slot:
    """One GPU of the pool and the evaluator that owns it."""

    gpu: str
    """How the GPU is named to its worker (a ``CUDA_VISIBLE_DEVICES`` entry, or a Ray actor)."""
    evaluator: EvaluatorLike
    calls: int = 0
    busy_s: float = 0.0
    retired: str | None = None
    """Why the slot no longer takes work, or None."""


# --- which GPUs ------------------------------------------------------------------------------


def visible_gpus() -> list[str]:
    """The GPUs this process may use, each as a ``CUDA_VISIBLE_DEVICES`` entry for a worker.

    ``CUDA_VISIBLE_DEVICES`` itself when it is set; otherwise every GPU ``nvidia-smi`` lists,
    by UUID (a UUID names the same GPU whatever ``CUDA_DEVICE_ORDER`` says). Empty when there is
    no GPU or no ``nvidia-smi``. The parent never creates a CUDA context to find out.
    """
    declared = os.environ.get("CUDA_VISIBLE_DEVICES")
    if declared is not None:
        return [entry.strip() for entry in declared.split(",") if entry.strip()]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        listed = subprocess.run(
            [smi, "--query-gpu=uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in listed.splitlines() if line.strip()]


def select_gpus(choice: str | None, visible: Sequence[str]) -> list[str]:
    """The GPUs ``--gpus`` names: ``all`` (or None), or indices into the visible GPUs (``0,1``).

    Raises PoolConfigError for anything else. With no GPU visible, ``all`` gives one unpinned
    slot (its worker then says there is no GPU, as a lone Evaluator does).
    """
    if choice is None or choice.strip() == "all":
        return list(visible) or [""]
    picked: list[str] = []
    for part in choice.split(","):
        text = part.strip()
        if not text.isdigit():
            raise PoolConfigError(
                f"--gpus: {text!r} is not a GPU index; expected 'all' or indices such as 0,1"
            )
        index = int(text)
        if index >= len(visible):
            shown = ", ".join(str(i) for i in range(len(visible))) or "none"
            raise PoolConfigError(f"--gpus: GPU {index} is not visible (visible: {shown})")
        if visible[index] in picked:
            raise PoolConfigError(f"--gpus: GPU {index} is named twice")
        picked.append(visible[index])
    return picked


def backend_choice(flag: str | None) -> Backend:
    """The backend a flag names, else ``ASTRA_BACKEND``, else ``local``."""
    name = flag if flag is not None else os.environ.get(BACKEND_ENV, "local")
    where = "--backend" if flag is not None else BACKEND_ENV
    for backend in BACKENDS:
        if name.strip().lower() == backend:
            return backend
    raise PoolConfigError(f"{where}: unknown backend {name!r}; expected one of {list(BACKENDS)}")


# --- the pool --------------------------------------------------------------------------------


class GpuPool(EvaluatorLike):
    """Evaluations over several slots, each used by one call at a time; a context manager."""

    def __init__(self, slots: Sequence[Slot], *, backend: Backend = "local") -> None:
        if not slots:
            raise PoolConfigError("--gpus: no GPU chosen")
        self.slots = list(slots)
        self.backend = backend
        self._idle: deque[Slot] = deque(self.slots)
        self._changed = threading.Condition()

    def __enter__(self) -> GpuPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return len([s for s in self.slots if s.retired is None])

    @property
    def width(self) -> int:
        """The slots that take work: how many calls run at once."""
        return len(self)

    def close(self) -> None:
        for slot in self.slots:
            slot.evaluator.close()

    def arch(self) -> str:
        """The GPUs' architecture as the first slot's evaluator reports it (a pool holds one
        host's GPUs, of one kind), for the interface check and the local compile check; the
        target ``DEFAULT_ARCH`` when that evaluator cannot say."""
        arch = getattr(self.slots[0].evaluator, "arch", None)
        return str(arch()) if callable(arch) else DEFAULT_ARCH

    def describe(self) -> str:
        """One line for the CLI: backend and the slots that take work."""
        active = [s.gpu or "(default GPU)" for s in self.slots if s.retired is None]
        return f"{self.backend} pool, {len(active)} GPU(s): {', '.join(active)}"

    @contextmanager
    def _slot(self) -> Iterator[Slot]:
        """An idle slot for one call: waits while all are busy; HarnessUnavailable when every
        slot is retired, JobCancelled when the run is interrupted while it waits."""
        with self._changed:
            while not self._idle:
                if all(s.retired is not None for s in self.slots):
                    reasons = "; ".join(f"{s.gpu or 'default'}: {s.retired}" for s in self.slots)
                    raise HarnessUnavailable(f"no GPU of the pool can evaluate ({reasons})")
                # bounded, so that an interrupted run does not wait for another call's slot
                if not self._changed.wait(CANCEL_POLL_S) and jobs_cancelled():
                    raise JobCancelled("no slot taken: the run was interrupted")
            slot = self._idle.popleft()
        started = time.monotonic()
        try:
            yield slot
        finally:
            with self._changed:
                slot.calls += 1
                slot.busy_s += time.monotonic() - started
                if slot.retired is None:
                    self._idle.append(slot)
                self._changed.notify_all()

    def _retire(self, slot: Slot, reason: str) -> None:
        with self._changed:
            slot.retired = reason
            self._changed.notify_all()
        log.warning("gpu_retired", gpu=slot.gpu, reason=reason)
        slot.evaluator.close()

    def _dispatch(self, call: Callable[[EvaluatorLike], T]) -> T:
        """Run ``call`` on an idle slot; move on to another when the slot cannot evaluate."""
        while True:
            with self._slot() as slot:
                try:
                    return call(slot.evaluator)
                except HarnessUnavailable as exc:
                    if len(self.slots) == 1:
                        raise  # nothing to move to: the caller hears the reason as it is
                    self._retire(slot, str(exc))

    # The keywords pass through unchanged (``**kwargs``), so the defaults stay the slot
    # evaluator's own and are not restated here.
    def check(self, op: OperationSpec, baseline: Path, candidate: Path, **kwargs: Any) -> Verdict:
        """``Evaluator.check`` on an idle slot."""
        return self._dispatch(lambda e: e.check(op, baseline, candidate, **kwargs))

    def bench(self, op: OperationSpec, candidate: Path, **kwargs: Any) -> BenchReport:
        """``Evaluator.bench`` on an idle slot: ``candidate`` and ``against`` are timed together
        there, interleaved, in one worker on one GPU."""
        return self._dispatch(lambda e: e.bench(op, candidate, **kwargs))

    def sanitize(self, op: Any, candidate: Path, **kwargs: Any) -> Any:
        """``Evaluator.sanitize`` (compute-sanitizer's memcheck and racecheck) on an idle slot,
        so the final pick of a pooled run is sanitized like a lone evaluator's."""
        # not in the protocol (see harness/protocol.py); every slot evaluator we build has it
        return self._dispatch(lambda e: getattr(e, "sanitize")(op, candidate, **kwargs))  # noqa: B009


def local_pool(
    gpus: Sequence[str], make: Callable[[str | None], EvaluatorLike] | None = None
) -> GpuPool:
    """One slot per GPU on this host, its evaluator's worker pinned to that GPU.

    ``make(gpu)`` builds a slot's evaluator (default: :func:`harness_evaluator`); an empty entry
    is an unpinned worker.
    """
    build = make or harness_evaluator
    return GpuPool([Slot(gpu=gpu, evaluator=build(gpu or None)) for gpu in gpus])


def harness_evaluator(gpu: str | None) -> EvaluatorLike:
    """The harness's Evaluator pinned to ``gpu``; unpinned (exactly a lone ``Evaluator()``, as
    on a machine without ``nvidia-smi``) for None."""
    return evaluator_module.Evaluator(gpu=gpu) if gpu is not None else evaluator_module.Evaluator()
