"""A supervised worker process that runs one job at a time, so that no candidate can hurt us.

The parent (:class:`Worker`) starts a child with multiprocessing's *spawn* method (a fresh
interpreter, never a fork of a process that may hold a CUDA context) whose entry point is this
module alone: the caller's ``__main__`` is hidden from spawn while the child starts, so a
script that calls ``optimize()`` without an ``if __name__ == "__main__":`` guard is not run a
second time inside the worker. The parent then sends it jobs named
``"module:function"``; the function takes one picklable request and returns a picklable result.
The child reuses its imports, its CUDA context and its caches across jobs.

Supervision, on the parent's side of a pipe:

* **deadline**: a job that has not answered ``deadline_s`` after it was sent is killed
  (:class:`WorkerTimeout`). With ``stall_s``, a job that goes that long without calling
  :func:`progress` is killed too, so a long check of many cases can still catch one hanging
  kernel quickly. The stall limit runs from the job's latest ``progress()`` (none: no limit);
  ``progress(watch=False)`` suspends it during slow but safe work.
* **death**: a child that exits (segfault, ``os._exit``, out of memory) raises
  :class:`WorkerCrashed` with its exit status and the tail of its output.
* **retirement**: a job that knows its process is damaged (a sticky CUDA error) calls
  :func:`retire`, or raises an exception whose ``sticky`` attribute is true; the child answers,
  then exits, and the next call starts a fresh one.

A worker whose parent dies exits within a second, even while a kernel hangs.

* **cancellation**: :func:`cancel_jobs` (the runner calls it on Ctrl-C or SIGTERM) makes every
  job in flight, in any thread, kill its child within :data:`CANCEL_POLL_S` and raise
  :class:`JobCancelled`, and every later call raise it at once, until :func:`allow_jobs`. A
  cancelled evaluation leaves no process on the GPU; the job is run again on resume. The other
  waits of an evaluation poll it too (:func:`jobs_cancelled`, :func:`holding`): a worker's
  start, a busy evaluator's lock, a pool's slot, and the tools' subprocesses of
  ``harness.deep``, so that an interrupt stops a run within a second wherever it waits.

The child's stdout and stderr (file descriptors 1 and 2, so C libraries and device ``printf``
included) go to a log file, emptied before every job and capped in size, never to the
parent's terminal; :meth:`Worker.log_tail` gives its end for verdicts and logs.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import math
import multiprocessing
import os
import resource
import signal
import sys
import tempfile
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterator, Mapping
from multiprocessing.connection import Connection
from typing import Any

LOG_LIMIT_BYTES = 64 * 1024 * 1024
"""Largest file the child may write (its log included); beyond it writes fail."""
TAIL_BYTES = 4000
STARTUP_TIMEOUT_S = 120.0
ORPHAN_POLL_S = 0.5
"""How often a worker checks that its parent is still alive."""
CANCEL_POLL_S = 0.1
"""How often a waiting parent looks for a cancellation: an interrupted run stops within it."""
CANCEL_REAP_S = 0.5
"""How long a cancelled job waits for its SIGKILLed child to be reaped. A child holding a CUDA
context can take seconds to die on a busy GPU (the driver tears the context down first); the
kill is already sent and certain, so an interrupted run does not wait for it beyond this;
multiprocessing reaps it later (``astra`` itself exits without waiting: ``cli._exit_now``)."""

KILL_REAP_S = 10.0
"""How long a killed child (a timeout, a crash) is waited for before the next job starts."""

_cancelled = threading.Event()


class WorkerError(RuntimeError):
    """A job did not complete normally; ``log`` is the tail of the worker's output."""

    def __init__(self, message: str, *, log: str = "", last_progress: Any = None) -> None:
        super().__init__(message)
        self.log = log
        self.last_progress = last_progress


class WorkerTimeout(WorkerError):
    """The job passed its deadline (or stalled) and the worker was killed."""


class WorkerCrashed(WorkerError):
    """The worker process died during the job."""

    def __init__(self, message: str, *, exitcode: int | None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.exitcode = exitcode


class JobCancelled(KeyboardInterrupt):
    """The job was cancelled (:func:`cancel_jobs`) and its child killed. A KeyboardInterrupt,
    not a WorkerError: the candidate did nothing wrong, and no verdict may record it."""


def cancel_jobs() -> None:
    """Cancel every job in flight in this process and refuse new ones (signal-handler safe)."""
    _cancelled.set()


def allow_jobs() -> None:
    """Accept jobs again (a new run in the same process)."""
    _cancelled.clear()


def jobs_cancelled() -> bool:
    """Whether :func:`cancel_jobs` is in force: every wait on behalf of a run (a slot, a lock, a
    tool's subprocess) polls this and raises :class:`JobCancelled`, so that none outlasts an
    interrupt by more than :data:`CANCEL_POLL_S`."""
    return _cancelled.is_set()


@contextlib.contextmanager
def holding(lock: threading.Lock, what: str) -> Iterator[None]:
    """``with lock:``, unless the run is interrupted while waiting for it: JobCancelled then.
    A plain ``with lock`` would wait for whichever thread holds it, however long."""
    while not lock.acquire(timeout=CANCEL_POLL_S):
        if _cancelled.is_set():
            raise JobCancelled(f"{what}: not started, the run was interrupted")
    try:
        yield
    finally:
        lock.release()


class JobFailed(WorkerError):
    """The job raised an exception; the worker itself is fine."""

    def __init__(self, type_name: str, message: str, trace: str, **kwargs: Any) -> None:
        super().__init__(f"{type_name}: {message}", **kwargs)
        self.type_name = type_name
        self.trace = trace


# --- child side ------------------------------------------------------------------------------

_parent: Connection | None = None
_retiring = False


def progress(info: Any = None, *, watch: bool = True) -> None:
    """Tell the parent the job is alive; ``info`` (if not None) says where it is.

    With ``watch`` the parent's stall timer restarts; without it the timer is suspended until the
    next call (use it before slow but safe work, such as compiling, so that only the stretches
    that run untrusted kernels are held to the stall limit). A no-op outside a worker, so job
    functions can also be called directly.
    """
    if _parent is not None:
        _parent.send(("progress", info, watch))


def retire() -> None:
    """Ask for this worker to be replaced after the current job (its CUDA context is dead)."""
    global _retiring
    _retiring = True


def _resolve(target: str) -> Callable[[Any], Any]:
    module_name, _, func_name = target.partition(":")
    func = getattr(importlib.import_module(module_name), func_name, None)
    if not callable(func):
        raise LookupError(f"{target}: no such function")
    return func


def _is_sticky(exc: BaseException) -> bool:
    """A fault that leaves this process's CUDA context unusable: a LaunchError that says so, or
    a raw CuPy error with a sticky status (a fault surfacing at a plain synchronize)."""
    if getattr(exc, "sticky", False):
        return True
    status = getattr(exc, "status", None)
    if status is None:
        return False
    from astra_graph.harness.launch import STICKY_CUDA_ERRORS

    return status in STICKY_CUDA_ERRORS


def _exit_when_orphaned(parent_pid: int) -> None:
    """Watchdog thread: end this worker if its parent dies, even in the middle of a hung job.

    (CuPy waits for the GPU without holding the GIL, so this thread runs during a hang.)
    """
    while os.getppid() == parent_pid:
        time.sleep(ORPHAN_POLL_S)
    os._exit(70)


def _serve(conn: Connection, log_path: str, env: dict[str, str]) -> None:
    """The child's main loop: set the environment, redirect output, then answer jobs until told
    to stop. ``env`` is applied before any job can touch CUDA, which reads
    ``CUDA_VISIBLE_DEVICES`` once, when the process first initialises it."""
    global _parent
    os.environ.update(env)
    threading.Thread(
        target=_exit_when_orphaned, args=(os.getppid(),), daemon=True, name="orphan-watchdog"
    ).start()
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an over-long write fails instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (LOG_LIMIT_BYTES, LOG_LIMIT_BYTES))
    faulthandler.enable()  # a segfault leaves its Python stack in the log
    _parent = conn
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        _, target, request = message
        os.ftruncate(1, 0)
        try:
            reply = ("ok", _resolve(target)(request), _retiring)
            conn.send(reply)
        except BaseException as exc:  # the job's failure is reported, never fatal here
            if _is_sticky(exc):
                retire()
            conn.send(
                (
                    "error",
                    type(exc).__name__,
                    str(exc),
                    "".join(traceback.format_exception(exc)[-20:]),
                    _retiring,
                )
            )
        if _retiring:
            return


# --- parent side -----------------------------------------------------------------------------


def _signal_name(exitcode: int | None) -> str:
    if exitcode is None:
        return "unknown status"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


@contextlib.contextmanager
def _caller_main_hidden() -> Iterator[None]:
    """While a child is spawned, ``__main__`` is an empty module: spawn then has neither a path
    nor a module name to re-run in the child (it would re-import the caller's script, running
    any unguarded top-level code, such as an ``optimize()`` call, once more)."""
    caller_main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = caller_main


class Worker:
    """One supervised child process; started on first use and restarted after any failure."""

    def __init__(
        self,
        *,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._context = multiprocessing.get_context("spawn")
        self.env = dict(env or {})
        """Environment variables set in every child this worker starts (a GPU pool pins each
        worker to its GPU with ``CUDA_VISIBLE_DEVICES``)."""
        self._startup_timeout_s = startup_timeout_s
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        fd, self._log_path = tempfile.mkstemp(prefix="astra-worker-", suffix=".log")
        os.close(fd)
        self.last_progress: Any = None
        self.starts = 0
        """How many child processes this worker has started (tests use it)."""

    # lifecycle -----------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start the child now (otherwise the first call does), and wait until it is ready."""
        if self.alive:
            return
        self._discard()
        parent_end, child_end = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_serve,
            args=(child_end, self._log_path, self.env),
            daemon=True,
            name="astra-worker",
        )
        with _caller_main_hidden():
            process.start()
        child_end.close()
        self._process, self._conn = process, parent_end
        self.starts += 1
        if not self._ready(parent_end):
            self._kill()
            raise WorkerTimeout(
                f"worker did not start within {self._startup_timeout_s:.0f} s", log=self.log_tail()
            )
        try:
            parent_end.recv()
        except (EOFError, OSError):
            code = self._reap()
            raise WorkerCrashed(
                f"worker died while starting ({_signal_name(code)})",
                exitcode=code,
                log=self.log_tail(),
            ) from None

    def _ready(self, conn: Connection) -> bool:
        """Wait for the child's first message, up to the startup timeout; JobCancelled (the
        child killed) if the run is interrupted meanwhile: a CUDA start can take many seconds."""
        deadline = time.monotonic() + self._startup_timeout_s
        while True:
            if _cancelled.is_set():
                self._kill(CANCEL_REAP_S)
                raise JobCancelled("worker start: cancelled, the run was interrupted")
            if conn.poll(min(CANCEL_POLL_S, max(0.0, deadline - time.monotonic()))):
                return True
            if time.monotonic() >= deadline:
                return False

    def close(self) -> None:
        """Stop the child (politely, then by force) and remove the log file."""
        if self._conn is not None and self.alive:
            with contextlib.suppress(OSError):
                self._conn.send(("stop",))
            assert self._process is not None
            self._process.join(2.0)
        self._kill()
        if os.path.exists(self._log_path):
            os.unlink(self._log_path)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reap(self) -> int | None:
        assert self._process is not None
        self._process.join(5.0)
        if self._process.is_alive():  # stuck tearing down a faulted context: do not leave it
            self._process.kill()
            self._process.join(10.0)
        code = self._process.exitcode
        self._discard()
        return code

    def _kill(self, reap_s: float = KILL_REAP_S) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(reap_s)
        self._discard()

    def _discard(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._process is not None and not self._process.is_alive():
            self._process.close()
        self._process, self._conn = None, None

    # jobs ----------------------------------------------------------------------------------

    def log_tail(self, limit: int = TAIL_BYTES) -> str:
        """The end of the child's output for the current (or last) job."""
        try:
            with open(self._log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                size = log.tell()
                log.seek(max(0, size - limit))
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def call(
        self,
        target: str,
        request: Any,
        *,
        deadline_s: float,
        stall_s: float | None = None,
    ) -> Any:
        """Run ``target(request)`` in the child and return its result.

        Raises WorkerTimeout (child killed), WorkerCrashed (child died) or JobFailed (the job
        raised; the child lives on). After any of them the next call works.
        """
        if _cancelled.is_set():
            raise JobCancelled(f"{target}: not started, the run was interrupted")
        self.start()
        assert self._conn is not None
        self.last_progress = None
        try:
            self._conn.send(("call", target, request))
        except OSError:  # died between jobs: start over once
            self._kill()
            self.start()
            self._conn.send(("call", target, request))
        started = time.monotonic()
        last_sign = math.inf  # the stall limit starts with the job's first progress(watch=True)
        while True:
            now = time.monotonic()
            limit = started + deadline_s
            if stall_s is not None:
                limit = min(limit, last_sign + stall_s)
            if now >= limit:
                log = self.log_tail()
                self._kill()
                stalled = now < started + deadline_s
                what = f"no progress for {stall_s:.0f} s" if stalled else f"over {deadline_s:.0f} s"
                raise WorkerTimeout(
                    f"{target} killed: {what}", log=log, last_progress=self.last_progress
                )
            if _cancelled.is_set():
                self._kill(CANCEL_REAP_S)
                raise JobCancelled(f"{target}: cancelled, the run was interrupted")
            try:
                ready = self._conn.poll(min(limit - now, CANCEL_POLL_S))
            except BaseException:  # Ctrl-C in this thread: the child must not run on
                self._kill(CANCEL_REAP_S)
                raise
            if not ready:
                continue
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                log = self.log_tail()
                code = self._reap()
                raise WorkerCrashed(
                    f"worker died ({_signal_name(code)}) during {target}",
                    exitcode=code,
                    log=log,
                    last_progress=self.last_progress,
                ) from None
            kind = message[0]
            if kind == "progress":
                _, info, watch = message
                last_sign = time.monotonic() if watch else math.inf
                if info is not None:
                    self.last_progress = info
                continue
            retiring = message[-1]
            if retiring:
                self._reap()
            if kind == "ok":
                return message[1]
            _, type_name, text, trace, _ = message
            raise JobFailed(
                type_name, text, trace, log=self.log_tail(), last_progress=self.last_progress
            )
