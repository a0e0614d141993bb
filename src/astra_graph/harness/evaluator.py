"""The evaluation entry point: check (and time) candidates in a supervised worker process.

:class:`Evaluator` owns one :class:`~astra_graph.harness.worker.Worker` and reuses it (one CUDA
context, warm caches) across any number of candidates. What a candidate does on the GPU can only
end in a verdict: a hang is killed at the deadline (``timeout``), a fault or a dead worker is
``crashed`` and the next evaluation gets a fresh worker.

Cheap checks run here, in the calling process: the candidate's header and the one interface
rule (``harness.validation.interface_check``: parameter list, requirements, launch geometry at the
worker's GPU's architecture, asked only after the parameter list passed, so a mismatch needs no
GPU) (``interface_mismatch``). Everything else runs in the worker: compile (``compile_error``),
launch, verification (:func:`verify.run_check`) and timing
(``astra_graph.harness.bench:run_bench``).

Check and bench requests carry the same typed payload (``harness.payload``): the operation's
folder and validated contract, and each implementation's path, source, tunables and parse; the
worker rebuilds everything from them and reads no file the caller could change in between.
Files are parsed through ``kernel.loaded`` (once per version of a file), so the coding step's
parse of a candidate is the one the check, the timing and the worker use.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from astra_graph.harness import deep
from astra_graph.harness.bench_request import BenchRequest
from astra_graph.harness.compile import DEFAULT_ARCH, gpu_arch
from astra_graph.harness.deep import SanitizerReport
from astra_graph.harness.payload import CheckRequest, KernelPayload, OperationPayload
from astra_graph.harness.protocol import EvaluatorLike
from astra_graph.harness.results import (
    BenchReport,
    Evaluation,
    Evidence,
    RejectReason,
    TimingMode,
    Verdict,
)
from astra_graph.harness.validation import interface_check
from astra_graph.harness.worker import (
    JobFailed,
    Worker,
    WorkerCrashed,
    WorkerError,
    WorkerTimeout,
    holding,
)
from astra_graph.kernel import loaded
from astra_graph.kernel.catalog import find_operation
from astra_graph.kernel.contract import (
    CONTRACT_FILE,
    HIDDEN_SUITES,
    SUITE_NAMES,
    ContractError,
    OperationSpec,
    load_contract,
)
from astra_graph.kernel.header import Implementation

log = structlog.get_logger(__name__)

CHECK_JOB = "astra_graph.harness.verify:run_check"
ARCH_JOB = "astra_graph.harness.evaluator:worker_arch"
GPU_JOB = "astra_graph.harness.evaluator:worker_gpu"
BENCH_JOB = "astra_graph.harness.bench:run_bench"
BAD_INPUT_ERRORS = {"BaselineError", "ContractError"}
"""Job failures that are the caller's fault: raised here as ContractError."""
UNAVAILABLE_ERRORS = {"NoGpu", "NvrtcUnavailable"}
"""Job failures that mean the machine cannot evaluate: raised here as HarnessUnavailable."""
STARTUP_S = 60.0
"""Deadline of the one-line jobs that only ask the worker about its GPU."""
DEFAULT_STALL_S = 20.0
"""A kernel launch (plus its synchronisation) that takes this long is taken to hang.

The check holds only the stretches in which a kernel runs to this limit (compiling and the
reference do not count), and no launch of a checked shape takes more than milliseconds."""


def worker_gpu(_: object) -> str | None:
    """Worker job: the ``sm_XY`` of the GPU the worker sees, None when it sees none."""
    return gpu_arch()


def worker_arch(_: object) -> str:
    """Worker job: the ``sm_XY`` its GPU compiles for (``compile.gpu_arch``)."""
    return gpu_arch() or DEFAULT_ARCH


class HarnessUnavailable(RuntimeError):
    """No GPU (or no NVRTC) where the worker runs: nothing can be evaluated."""


def _raise_for_caller(exc: JobFailed) -> None:
    """Re-raise a job failure that is bad input or a missing GPU, in the caller's terms."""
    if exc.type_name in BAD_INPUT_ERRORS:
        raise ContractError(str(exc).removeprefix(f"{exc.type_name}: ")) from None
    if exc.type_name in UNAVAILABLE_ERRORS:
        raise HarnessUnavailable(str(exc).removeprefix(f"{exc.type_name}: ")) from None


def operation(op: str | Path | OperationSpec) -> OperationSpec:
    """An operation given as a spec, a folder holding ``contract.toml``, or a name in kernels/."""
    if isinstance(op, OperationSpec):
        return op
    path = Path(op)
    if (path / CONTRACT_FILE).is_file():
        return load_contract(path)
    folder = find_operation(str(op))
    if folder is not None:
        return load_contract(folder)
    raise ContractError(f"{op}: not an operation name or a folder with {CONTRACT_FILE}")


def _shapes_checked(
    spec: OperationSpec, extra_shapes: Iterable[Mapping[str, int]]
) -> list[dict[str, int]]:
    shapes = [dict(s) for s in extra_shapes]
    for i, dims in enumerate(shapes):
        problem = spec.contract.shape_problem(dims)
        if problem:
            raise ContractError(f"extra_shapes[{i}]: {problem}")
    return shapes


def _evidence_from_progress(spec: OperationSpec, info: Any, detail: str) -> Evidence:
    """Evidence for a timeout or crash: the case the worker last said it was running."""
    fields = info if isinstance(info, dict) else {}
    return Evidence(
        op=spec.name,
        dims=fields.get("dims") or {},
        dtype=fields.get("dtype"),
        suite=fields.get("suite"),
        detail=detail if not fields.get("step") else f"{detail} (during {fields['step']})",
    )


class Evaluator(EvaluatorLike):
    """Checks and times candidates in one reusable worker; use as a context manager.

    Safe to share between threads: calls are served one at a time (the GPU is one resource,
    and timings must not overlap).

    ``gpu`` pins the worker to one GPU (``harness.pool`` runs one Evaluator per GPU).
    ``deadline_s`` bounds each call (a whole check or a whole bench); ``stall_s`` bounds each
    kernel run of a check, so that a hanging kernel is caught in seconds, not at the end of the
    whole deadline.
    """

    def __init__(
        self,
        deadline_s: float = 300.0,
        *,
        stall_s: float = DEFAULT_STALL_S,
        gpu: str | None = None,
    ) -> None:
        self.deadline_s = deadline_s
        self.stall_s = stall_s
        self.gpu = gpu
        """The GPU its worker sees (a ``CUDA_VISIBLE_DEVICES`` entry); None: the process's own."""
        self.worker = Worker(env={"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else None)
        self._lock = threading.Lock()  # one job at a time, whichever thread asks
        self._arch: str | None = None

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self.worker.close()

    def arch(self) -> str:
        """The worker's GPU architecture (asked once): a compile check outside the worker for
        this architecture fills the compile cache with the cubin the worker loads."""
        if self._arch is None:
            with self._lock:
                self._start_worker()
                self._arch = str(self.worker.call(ARCH_JOB, None, deadline_s=STARTUP_S))
        return self._arch

    def require_gpu(self) -> None:
        """Raise HarnessUnavailable unless the worker sees a GPU: a precondition a caller checks
        before it writes anything (``optimize()`` creates no run directory without one)."""
        with self._lock:
            self._start_worker()
            found = self.worker.call(GPU_JOB, None, deadline_s=STARTUP_S)
        if found is None:
            raise HarnessUnavailable("no CUDA GPU visible to the evaluation worker")
        self._arch = str(found)

    # --- checking --------------------------------------------------------------------------

    def _candidate(
        self,
        spec: OperationSpec,
        candidate: Path,
        tunables: Mapping[str, int] | None,
        shapes: Sequence[Mapping[str, int]],
    ) -> Implementation | Verdict:
        """The validated candidate, or the interface_mismatch verdict that rejects it: the one
        interface rule (``validation.interface_check``) on ``shapes`` at the worker's GPU's
        architecture, asked only once the signature passed (a mismatch needs no worker)."""
        try:
            impl = loaded.implementation(spec, candidate)  # the coding step's parse
        except ContractError as exc:
            if not Path(candidate).is_file():
                raise
            return Verdict.reject(
                "interface_mismatch", str(exc), Evidence(op=spec.name, detail=str(exc))
            )
        unknown = set(tunables or {}) - set(impl.header.tunables)
        if unknown:
            raise ContractError(f"{candidate}: tunables: unknown tunable {sorted(unknown)[0]!r}")
        for problem in interface_check(spec, impl, self.arch, shapes, tunables):
            return Verdict.reject(
                "interface_mismatch", problem.message, Evidence(op=spec.name, dtype=problem.dtype)
            )
        return impl

    def check(
        self,
        op: str | Path | OperationSpec,
        baseline: Path,
        candidate: Path,
        *,
        suites: Sequence[str] = SUITE_NAMES,
        extra_shapes: Iterable[Mapping[str, int]] = (),
        tunables: Mapping[str, int] | None = None,
        params: Mapping[str, float] | None = None,
        domain: bool = True,
        partial_kernels: bool = False,
    ) -> Verdict:
        """Verify ``candidate`` against the contract's reference and ``baseline``'s own error.

        ``domain`` adds the domain suite (``harness.domain``; off only to measure its cost);
        ``partial_kernels`` accepts a ``requires`` narrower than the contract's domain and
        records it in the verdict's ``kernel_domain``.
        Raises ContractError for bad input (unknown operation, a baseline that does not load,
        an unknown suite, shape or tunable); every problem of the candidate is a verdict.
        """
        spec = operation(op)
        base_impl = loaded.implementation(spec, baseline)
        for name in suites:
            if name not in SUITE_NAMES:
                raise ContractError(f"suites: unknown suite {name!r}, expected {list(SUITE_NAMES)}")
        shapes = _shapes_checked(spec, extra_shapes)
        if not suites and not shapes:
            raise ContractError("nothing to check: no suites and no extra shapes given")
        named = [d for s in suites if s not in HIDDEN_SUITES for d in spec.contract.suite(s)]
        found = self._candidate(spec, Path(candidate), tunables, [*named, *shapes])
        if isinstance(found, Verdict):
            return found
        request = CheckRequest(
            op=OperationPayload.of(spec),
            baseline=KernelPayload.of(base_impl),
            candidate=KernelPayload.of(found, dict(tunables or {})),
            suites=list(suites),
            extra_shapes=shapes,
            params=dict(params or {}),
            domain=domain,
            partial_kernels=partial_kernels,
        )
        return self._run_check(spec, request.model_dump())

    def _start_worker(self) -> None:
        """Start the worker before a job, so that a worker that cannot start is the harness's
        failure (HarnessUnavailable), never a verdict on the candidate."""
        try:
            self.worker.start()
        except WorkerError as exc:
            raise HarnessUnavailable(f"the evaluation worker could not start: {exc}") from None

    def _run_check(self, spec: OperationSpec, request: dict[str, Any]) -> Verdict:
        try:
            with holding(self._lock, "check"):
                self._start_worker()
                result = self.worker.call(
                    CHECK_JOB, request, deadline_s=self.deadline_s, stall_s=self.stall_s
                )
                log_tail = self.worker.log_tail()
        except WorkerTimeout as exc:
            return Verdict.reject(
                "timeout",
                f"killed: {exc}",
                _evidence_from_progress(spec, exc.last_progress, "the kernel did not finish"),
                log=exc.log,
            )
        except WorkerCrashed as exc:
            return Verdict.reject(
                "crashed",
                str(exc),
                _evidence_from_progress(spec, exc.last_progress, "the worker process died"),
                log=exc.log,
            )
        except JobFailed as exc:
            _raise_for_caller(exc)
            log.error("check job failed", error=str(exc), trace=exc.trace)
            return Verdict.reject(
                "crashed",
                f"evaluation failed: {exc}",
                _evidence_from_progress(spec, exc.last_progress, "the check raised"),
                log=exc.trace + exc.log,
            )
        verdict = Verdict.model_validate(result)
        if verdict.reason == "crashed" and not verdict.log:
            verdict.log = log_tail
        return verdict

    # --- compute-sanitizer -----------------------------------------------------------------

    def sanitize(
        self,
        op: str | Path | OperationSpec,
        candidate: Path,
        *,
        tunables: Mapping[str, int] | None = None,
    ) -> SanitizerReport:
        """memcheck and racecheck over small shapes, every dtype (``harness.deep``); each result
        says so when compute-sanitizer is not installed. Runs while no check or timing does."""
        spec = operation(op)
        loaded.implementation(spec, candidate)  # bad input is a ContractError
        results = []
        with holding(self._lock, "sanitize"):
            for dtype in spec.contract.dtypes:
                for result in deep.sanitize(spec, Path(candidate), dtype, tunables=tunables):
                    results.append(
                        result.model_copy(update={"summary": f"{dtype}: {result.summary}"})
                    )
        return SanitizerReport(results=results)

    def _sanitized(
        self,
        spec: OperationSpec,
        candidate: Path,
        tunables: Mapping[str, int] | None,
        verdict: Verdict,
    ) -> Verdict:
        """The verdict after memcheck and racecheck of an accepted candidate (see evaluate)."""
        started = time.monotonic()
        report = self.sanitize(spec, candidate, tunables=tunables)
        seconds = time.monotonic() - started
        if not report.available:
            note = (
                f"compute-sanitizer not installed: memcheck and racecheck not run ({seconds:.1f} s)"
            )
            return verdict.model_copy(update={"notes": [*verdict.notes, note]})
        failed = next((r for r in report.results if r.available and not r.ok), None)
        if failed is None:
            note = f"compute-sanitizer memcheck and racecheck passed in {seconds:.1f} s"
            return verdict.model_copy(update={"notes": [*verdict.notes, note]})
        reason: RejectReason = "nondeterministic" if "race" in failed.tool else "out_of_bounds"
        detail = "; ".join([failed.summary, *failed.first_errors[:3]])
        return Verdict.reject(
            reason,
            f"compute-sanitizer {failed.summary}",
            Evidence(op=spec.name, detail=detail),
        ).model_copy(
            update={
                "cases_checked": verdict.cases_checked,
                "suites": verdict.suites,
                "notes": [*verdict.notes, f"compute-sanitizer ran {seconds:.1f} s"],
            }
        )

    # --- timing ----------------------------------------------------------------------------

    def bench(
        self,
        op: str | Path | OperationSpec,
        candidate: Path,
        *,
        against: Path | None = None,
        mode: TimingMode = "device",
        shapes: Sequence[Mapping[str, int]] | None = None,
        dtypes: Sequence[str] | None = None,
        tunables: Mapping[str, int] | None = None,
    ) -> BenchReport:
        """Time ``candidate`` (and ``against``, interleaved) in the worker.

        Runs ``astra_graph.harness.bench:run_bench`` with the request of :meth:`bench_request`.
        A report whose ``rejection`` is set (impossible time, or timed outputs that fail the
        re-check) is returned as is; :meth:`evaluate` turns it into the verdict. Raises
        ContractError for bad input and WorkerError subclasses when the worker fails.
        """
        return self._bench(op, candidate, against, mode, shapes, dtypes, tunables)

    def bench_request(
        self,
        spec: OperationSpec,
        candidate: Implementation,
        against: Implementation | None,
        mode: TimingMode,
        shapes: Sequence[Mapping[str, int]] | None,
        dtypes: Sequence[str] | None,
        tunables: Mapping[str, int] | None,
    ) -> dict[str, Any]:
        """The dict ``run_bench`` receives (a ``BenchRequest``); shapes default to tuning.

        The seed comes from the OS, so the timed inputs are as unseen as the checked ones.
        """
        for dtype in dtypes or ():
            if dtype not in spec.contract.dtypes:
                raise ContractError(
                    f"dtypes: {dtype!r} is not one of the contract's {spec.contract.dtypes}"
                )
        timed = shapes if shapes is not None else spec.contract.suite("tuning")
        return BenchRequest(
            op=OperationPayload.of(spec),
            candidate=KernelPayload.of(candidate, dict(tunables or {})),
            baseline=KernelPayload.of(against) if against is not None else None,
            mode=mode,
            shapes=_shapes_checked(spec, timed),
            dtypes=list(dtypes) if dtypes else None,
            seed=secrets.randbits(63),
        ).model_dump()

    def _bench(
        self,
        op: str | Path | OperationSpec,
        candidate: Path,
        against: Path | None,
        mode: TimingMode,
        shapes: Sequence[Mapping[str, int]] | None,
        dtypes: Sequence[str] | None,
        tunables: Mapping[str, int] | None,
    ) -> BenchReport:
        spec = operation(op)
        cand = loaded.implementation(spec, candidate)  # parsed once per version of the file
        base = loaded.implementation(spec, against) if against else None
        request = self.bench_request(spec, cand, base, mode, shapes, dtypes, tunables)
        try:
            # no stall limit: timing reports no progress, and every candidate timed has
            # already passed the check on these shapes
            with holding(self._lock, "bench"):
                self._start_worker()
                result = self.worker.call(BENCH_JOB, request, deadline_s=self.deadline_s)
        except JobFailed as exc:
            _raise_for_caller(exc)
            raise
        return BenchReport.model_validate(result)

    # --- both ------------------------------------------------------------------------------

    def evaluate(
        self,
        op: str | Path | OperationSpec,
        baseline: Path,
        candidate: Path,
        *,
        suites: Sequence[str] = SUITE_NAMES,
        extra_shapes: Iterable[Mapping[str, int]] = (),
        time_shapes: Sequence[Mapping[str, int]] | None = None,
        mode: TimingMode = "device",
        tunables: Mapping[str, int] | None = None,
        sanitize: bool = True,
    ) -> Evaluation:
        """Check, then (if accepted) run compute-sanitizer on small shapes (``sanitize``), then
        time against ``baseline`` on ``time_shapes``.

        A memcheck finding turns the verdict into ``out_of_bounds``, a racecheck finding into
        ``nondeterministic`` (out-of-bounds reads and shared-memory races leave no trace in
        outputs); the tools' time, or their absence, is in the verdict's notes. A timed run that
        is faster than the bandwidth floor, or whose outputs fail the re-check after timing,
        turns the verdict into that rejection (``impossible_time``/``timing_replay``).
        """
        started = time.monotonic()
        spec = operation(op)
        verdict = self.check(
            spec, baseline, candidate, suites=suites, extra_shapes=extra_shapes, tunables=tunables
        )
        if verdict.accepted and sanitize:
            verdict = self._sanitized(spec, candidate, tunables, verdict)
        report = None
        if verdict.accepted:
            rejection = None
            try:
                report = self._bench(spec, candidate, baseline, mode, time_shapes, None, tunables)
                rejection = report.rejection
            except WorkerTimeout as exc:
                rejection = Verdict.reject(
                    "timeout",
                    f"killed while timing: {exc}",
                    _evidence_from_progress(spec, exc.last_progress, "timing did not finish"),
                    log=exc.log,
                )
            except WorkerCrashed as exc:
                rejection = Verdict.reject(
                    "crashed",
                    f"while timing: {exc}",
                    _evidence_from_progress(spec, exc.last_progress, "the worker process died"),
                    log=exc.log,
                )
            except JobFailed as exc:
                _raise_for_caller(exc)
                log.error("bench job failed", error=str(exc), trace=exc.trace)
                launch = exc.type_name == "LaunchError"
                reason: RejectReason = "launch_error" if launch else "crashed"
                rejection = Verdict.reject(
                    reason,
                    f"timing failed: {exc}",
                    _evidence_from_progress(spec, exc.last_progress, "while timing"),
                    log=exc.trace + exc.log,
                )
            if rejection is not None:
                verdict = rejection.model_copy(
                    update={"cases_checked": verdict.cases_checked, "suites": verdict.suites}
                )
        return Evaluation(
            candidate=str(candidate),
            verdict=verdict,
            bench=report,
            seconds=time.monotonic() - started,
        )
