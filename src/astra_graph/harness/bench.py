"""Time a candidate against a baseline, per shape, inside the evaluation worker.

:func:`run_bench` is the worker's entry point: it takes a plain dict (see :class:`BenchRequest`)
and returns ``BenchReport.model_dump()``. For each shape it

1. builds random inputs for each side (and, for device mode on short kernels, enough extra
   copies to keep the data cold inside a CUDA graph; see :mod:`astra_graph.harness.timing`),
   the copies of each argument as rows of one array (:class:`_Side`),
2. computes the float64 reference of the copies it will check, and keeps pristine copies of
   in-place arguments to restore, and NaN poisons with random payloads (the check's kind) to
   write over the outputs, before every timed sample,
3. times both sides interleaved, in ``device`` or ``per-call`` mode,
4. re-checks the candidate's outputs left by the timed calls: the first and last copy against
   the reference, and every copy between (clones of the first: same inputs) bit for bit against
   the first, so a kernel cannot replay a cached answer or skip work while it is being timed on
   any copy, and
5. compares the achieved bandwidth with the roof, the device's achievable bandwidth for the
   shape's read:write mix: in device mode, a time implying more than
   :data:`roofline.IMPOSSIBLE_MARGIN` x the roof is impossible; and, in device mode, times the
   shape's latency floor (a minimal kernel moving the same bytes) in the same rounds, so each
   shape says which limit it is up against (:func:`roofline.limit_of`).

Either failure sets ``rejection`` on the report; the evaluator turns it into the verdict.
Per-call mode is exempt from the impossibility check: its data stays in L2 by design.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from typing import Any

from pydantic import Field, ValidationError

from astra_graph import selection
from astra_graph.contract import ContractError, OperationSpec
from astra_graph.harness import occupancy, roofline, timing
from astra_graph.harness.payload import JobPayload, operation_spec
from astra_graph.harness.poison import nan_poison
from astra_graph.models import (
    BenchReport,
    Evidence,
    Measurement,
    RejectReason,
    ResourceReport,
    ShapeTiming,
    TimingMode,
    Verdict,
)

TIMING_POISONS = 2
"""Random-payload NaN patterns per output, written over it in turn before each timed sample: a
fixed fill byte (0xFF until 2026-11-24) told a kernel that it was being timed, not checked."""
BATCH_ROW_ALIGN = 256
"""Each input copy starts at a multiple of this many bytes in its batch (cudaMalloc's
alignment), whatever the shape's size."""


class BenchRequest(JobPayload):
    """What the evaluator asks the worker to time (``Evaluator.bench_request`` builds it): the
    payload a check request carries too (``harness.payload``), plus the timing settings."""

    mode: TimingMode = "device"
    shapes: list[dict[str, int]] | None = None
    """The tuning suite's when None."""
    dtypes: list[str] | None = None
    """Element types to time; the contract's first when None."""
    seed: int | None = None
    """Seed of the timed inputs; a fresh one from the OS when None."""
    budget_s: float = Field(timing.BUDGET_S, gt=0)
    """Device-mode sampling budget per shape."""
    copy_gbps: float | None = Field(None, gt=0)
    """Override the measured copy bandwidth (tests of the impossibility check)."""


@cache
def _timer() -> timing.Timer:
    """One timer (stream, L2 flush buffer) per worker process."""
    return timing.Timer()


class _Side:
    """One implementation's inputs for one shape: copies, references, pristine in-place data.

    The copies of each argument are the rows of one batch array (``copies x shape``), so that
    restoring every copy's in-place arguments before a graph replay, or poisoning every copy's
    outputs, is one operation per argument instead of one per copy (with 256 copies the
    per-copy restores were most of the timing of an in-place operation's small shapes)."""

    def __init__(self, kernel: Any, spec: OperationSpec) -> None:
        self.kernel = kernel
        self.spec = spec
        self.cases: list[Any] = []
        self.batches: dict[str, Any] = {}
        """Argument name -> its copies, one per row."""
        self.pristine: dict[str, Any] = {}
        """In-place argument name -> its copies before any launch."""
        self.references: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        self._bound: dict[int, tuple[Any, Any, list[Any], int]] = {}
        self._poisons: dict[str, list[Any]] = {}
        """Output name -> NaN patterns as large as its batch (:data:`TIMING_POISONS`)."""
        self._poisoned = 0
        self.fingerprints: list[Any] = []
        """One device scalar per timed sample: the sum of the written elements' bits."""

    @property
    def in_place(self) -> list[str]:
        return [a.name for a in self.spec.contract.args if a.role == "inout"]

    @property
    def outputs(self) -> list[str]:
        return [a.name for a in self.spec.contract.args if a.role == "output"]

    def add_copies(self, dims: Mapping[str, int], dtype: str, rng: Any, total: int) -> None:
        """Grow to ``total`` input copies. The first and the last (the ones re-checked after
        timing) hold their own random contents; those between are clones of the first."""
        import cupy

        from astra_graph.harness.cases import Case, make_case

        if len(self.cases) >= total:
            return
        if self.cases:  # the first copy as it was before any launch
            first = {n: self._pristine_view(n, 0) for n in self.batches}
        else:
            first = make_case(self.spec, dims, dtype, rng).arrays
        last = make_case(self.spec, dims, dtype, rng).arrays if total > 1 else first
        batches, views = {}, {}
        for arg in self.spec.contract.args:
            source = first[arg.name]
            # rows padded to the allocator's alignment: every copy starts as cudaMalloc's would
            row = -(-source.nbytes // BATCH_ROW_ALIGN) * BATCH_ROW_ALIGN // source.itemsize
            batch = cupy.empty((total, row), dtype=source.dtype)
            if arg.role != "output":
                batch[: total - 1, : source.size] = source.reshape(-1)  # one copy for the clones
                batch[total - 1, : source.size] = last[arg.name].reshape(-1)
            batches[arg.name] = batch
            views[arg.name] = [batch[i, : source.size].reshape(source.shape) for i in range(total)]
        self.batches = batches
        self.pristine = {n: batches[n].copy() for n in self.in_place}
        self._bound, self.references = {}, {}
        self._poisons = {
            a.name: [
                nan_poison(cupy, rng, self.spec.contract.dtype_of(a, dtype), batches[a.name].shape)
                for _ in range(TIMING_POISONS)
            ]
            for a in self.spec.contract.args
            if a.role == "output"
        }
        scalars = self.spec.contract.scalar_values(dims)
        self.cases = [
            Case(dict(dims), dtype, {n: v[i] for n, v in views.items()}, scalars)
            for i in range(total)
        ]

    def _pristine_view(self, name: str, index: int) -> Any:
        """Copy ``index`` of an argument before any launch (in-place ones from the pristine
        batch; the others are never written by a correct kernel)."""
        view = self.cases[index].arrays[name]
        if name not in self.pristine:
            return view
        return self.pristine[name][index, : view.size].reshape(view.shape)

    def poison(self, stream: Any) -> None:
        """Write NaNs with random payloads over every copy's pure outputs, the next of the
        patterns each time (in-place arguments are restored instead)."""
        self._poisoned += 1
        with stream:
            for name in self.outputs:
                patterns = self._poisons[name]
                self.batches[name][...] = patterns[self._poisoned % len(patterns)]

    def expect(self, index: int) -> None:
        """Compute, before any timed call, the reference for copy ``index``."""
        import cupy

        case = self.cases[index]
        contract = self.spec.contract
        inputs = {}
        for arg in contract.args:
            if arg.role != "output":
                source = self._pristine_view(arg.name, index)
                inputs[arg.name] = contract.dtype_of(arg, case.dtype).to_float64(cupy, source)
        reference = self.spec.reference(cupy, inputs, case.scalars)
        self.references[index] = (inputs, reference)

    def launch(self, index: int, stream: Any) -> None:
        """Launch on copy ``index``. The first launch of a copy goes through the harness's
        checked path (geometry, shared-memory attribute); later ones reuse its geometry and
        argument list, so that a timed call costs the host one driver call and no Python
        arithmetic, as close as Python allows to the C++ launch of a framework op."""
        bound = self._bound.get(index)
        if bound is None:
            case = self.cases[index]
            self.kernel.launch(case, stream)
            grid, block, smem = self.kernel.geometry(case.dims)
            self._bound[index] = (grid, block, self.kernel.arguments(case), smem)
            return
        grid, block, args, smem = bound
        try:
            self.kernel.function(grid, block, args, shared_mem=smem, stream=stream)
        except Exception as exc:  # CuPy's CUDARuntimeError / CUDADriverError
            from astra_graph.harness.launch import STICKY_CUDA_ERRORS, LaunchError

            code = getattr(exc, "status", None)
            raise LaunchError(
                f"launch of {self.kernel.compiled.entry}: {exc}",
                sticky=code in STICKY_CUDA_ERRORS,
                code=code,
            ) from None

    def restore(self, index: int, stream: Any) -> None:
        with stream:
            for name, batch in self.pristine.items():
                self.batches[name][index] = batch[index]  # the padding too: one copy per row

    def restore_all(self, stream: Any) -> None:
        with stream:
            for name, batch in self.pristine.items():
                self.batches[name][...] = batch

    def subject(self, name: str, fingerprinted: bool = False) -> timing.Subject:
        """A timing subject; ``fingerprinted``: record each sample's outputs (afresh)."""
        self.fingerprints = []
        return timing.Subject(
            name=name,
            launch=self.launch,
            copies=len(self.cases),
            restore=self.restore if self.in_place else None,
            restore_all=self.restore_all if self.in_place else None,
            poison=self.poison if self.outputs else None,
            after_sample=self.fingerprint if fingerprinted else None,
        )

    def fingerprint(self, stream: Any) -> None:
        """Record (on the stream, no synchronisation) the sum of the bits of every copy's
        written elements: equal after every sample for a kernel that computes every time.
        Every copy's row, so a sample that skips work on any copy shows."""
        total = None
        with stream:
            for arg in self.spec.contract.args:
                if arg.written:
                    array = self.cases[0].arrays[arg.name]
                    bits = self.batches[arg.name][:, : array.size]
                    part = bits.view(f"uint{8 * array.itemsize}").sum(dtype="uint64")
                    total = part if total is None else total + part
        if total is not None:
            self.fingerprints.append(total)

    def first_unlike_sample(self) -> tuple[int, int] | None:
        """(the first timed sample whose outputs differ from the last's, the number of samples),
        or None. The last sample's outputs are the ones the re-check compares."""
        sums = [int(value) for value in self.fingerprints]  # one read each, after timing
        unlike = [k for k, value in enumerate(sums) if value != sums[-1]] if sums else []
        return (unlike[0], len(sums)) if unlike else None

    def first_unlike_clone(self) -> int | None:
        """The first copy between the first and the last (a clone of the first: the same
        inputs) whose outputs, as the timed calls left them, are not bit for bit the first's;
        or None. One comparison per written argument over the whole batch."""
        last = len(self.cases) - 1
        if last < 2:
            return None
        differs = None
        for arg in self.spec.contract.args:
            if arg.written:  # the elements only: each row's padding holds its own bytes
                span = self.cases[0].arrays[arg.name].nbytes
                bits = self.batches[arg.name].view("uint8")[:, :span]
                unlike = (bits[1:last] != bits[0]).any(axis=1)
                differs = unlike if differs is None else differs | unlike
        if differs is None or not bool(differs.any()):
            return None
        return 1 + int(differs.argmax())

    def check(
        self, index: int, reference_of: int | None = None
    ) -> tuple[RejectReason, Evidence] | None:
        """Why copy ``index``'s outputs, as the timed calls left them, are wrong (against the
        reference of copy ``reference_of``, by default its own); or None."""
        from astra_graph.harness.compare import compare_outputs

        case = self.cases[index]
        inputs, reference = self.references[index if reference_of is None else reference_of]
        written = {a.name: case.arrays[a.name] for a in self.spec.contract.args if a.written}
        found, _ = compare_outputs(self.spec, inputs, written, reference, case.dtype)
        if found is None:
            return None
        evidence = found.evidence()
        evidence.dims, evidence.dtype = dict(case.dims), case.dtype
        return found.reason, evidence


def _function_attribute(function: Any, name: str, fallback: int) -> int:
    """A loaded kernel's attribute as the driver reports it, else ``fallback``."""
    try:
        return int(getattr(function, name))
    except Exception:  # no such attribute in this CuPy, or the driver refused
        return fallback


@cache
def gpu_limits() -> occupancy.SmLimits:
    """The per-SM limits this process's GPU reports (raises without one)."""
    import cupy

    runtime = cupy.cuda.runtime
    device = cupy.cuda.Device().id
    return occupancy.device_limits(
        lambda name: int(runtime.deviceGetAttribute(getattr(runtime, f"cudaDevAttr{name}"), device))
    )


def driver_blocks_per_sm(kernel: Any, threads: int, dynamic_smem: int) -> int:
    """Resident blocks per SM by the CUDA driver's occupancy calculator, for a loaded kernel
    (``launch.LoadedKernel``) launched with ``threads`` per block and ``dynamic_smem`` bytes."""
    import cupy

    kernel.allow_dynamic_smem(dynamic_smem)
    handle = kernel.function.kernel.ptr  # the CUfunction of the cupy.RawKernel
    return int(
        cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(handle, threads, dynamic_smem)
    )


def _occupancy(
    kernel: Any, registers: int, threads: int, static_smem: int, dynamic_smem: int
) -> occupancy.Occupancy:
    """The driver calculator's occupancy, with the limit the arithmetic names for this device;
    the arithmetic alone (sm_90's limits), saying why, when the driver cannot answer."""
    try:
        limits = gpu_limits()
        blocks = driver_blocks_per_sm(kernel, threads, dynamic_smem)
    except Exception as exc:  # no GPU, or an object the driver does not know as a kernel
        alone = occupancy.estimate(registers, threads, static_smem, dynamic_smem)
        why = f"arithmetic for sm_90, no driver calculator: {type(exc).__name__}"
        return alone if alone.detail else replace(alone, detail=why)
    estimated = occupancy.estimate(registers, threads, static_smem, dynamic_smem, limits)
    return occupancy.from_driver(estimated, blocks, threads, limits)


def _resources(kernel: Any, dims: Mapping[str, int]) -> ResourceReport:
    """Registers, shared and local memory as the driver reports them for the loaded kernel
    (ptxas's log is the fallback, and the only source of spill sizes), plus the occupancy."""
    res = kernel.compiled.resources
    registers = _function_attribute(kernel.function, "num_regs", res.registers)
    static_smem = _function_attribute(kernel.function, "shared_size_bytes", res.static_smem_bytes)
    local = _function_attribute(kernel.function, "local_size_bytes", res.stack_frame_bytes)
    _, block, smem = kernel.geometry(dims)
    threads = math.prod(block)
    occ = _occupancy(kernel, registers, threads, static_smem, smem)
    return ResourceReport(
        registers=registers,
        static_smem_bytes=static_smem,
        dynamic_smem_bytes=smem,
        local_bytes=local,
        spill_bytes=res.spill_store_bytes + res.spill_load_bytes,
        threads_per_block=threads,
        occupancy=occ.fraction,
        occupancy_limit=occ.limiter,
        occupancy_detail=occ.detail,
    )


def _shapes(request: BenchRequest, spec: OperationSpec) -> list[dict[str, int]]:
    if request.shapes is None:
        return spec.contract.suite("tuning")
    for i, dims in enumerate(request.shapes):
        problem = spec.contract.shape_problem(dims)
        if problem:
            raise ContractError(f"shapes[{i}]: {problem}")
    return [dict(d) for d in request.shapes]


def _time_shape(
    request: BenchRequest,
    sides: list[_Side],
    dims: dict[str, int],
    dtype: str,
    rng: Any,
    mix: roofline.Traffic,
) -> tuple[list[Measurement], Measurement | None]:
    """(one measurement per side, the latency floor's or None in per-call mode)."""
    import cupy

    timer = _timer()
    for side in sides:
        side.add_copies(dims, dtype, rng, 1)
    # inputs and references are made on the default stream; the timer's stream does not wait
    cupy.cuda.Device().synchronize()
    if request.mode == "per-call":
        for side in sides:
            side.expect(0)
        cupy.cuda.Device().synchronize()
        return timer.per_call_mode([s.subject(f"side{i}") for i, s in enumerate(sides)]), None
    # one estimate per side, used both to size the copies and (in device_mode) to choose graphs
    # over events: two estimates on either side of the threshold once left rotating copies
    # that events never launch, failing the re-check of a correct kernel
    estimates = [timer.estimate_us(s.subject(f"side{i}")) for i, s in enumerate(sides)]
    estimate = min(estimates)
    floor_copies = 1
    if estimate < timing.GRAPH_THRESHOLD_US:  # a graph launches each copy once per replay
        for side in sides:
            cold = timing.copies_for_cold_data(side.cases[0].nbytes, timer.l2_bytes)
            side.add_copies(dims, dtype, rng, timing.graph_copies(estimate, cold))
        cold = timing.copies_for_cold_data(mix.read_bytes + mix.write_bytes, timer.l2_bytes)
        floor_copies = timing.graph_copies(estimate, cold)
    for side in sides:
        side.expect(0)
        side.expect(len(side.cases) - 1)
    if not mix.fits_minimal_kernel:  # beyond 32-bit indices: bandwidth-bound in any case
        cupy.cuda.Device().synchronize()
        subjects = [s.subject(f"side{i}", fingerprinted=i == 0) for i, s in enumerate(sides)]
        return timer.device_mode(subjects, budget_s=request.budget_s, estimates=estimates), None
    floor = roofline.MinimalCopies(mix, floor_copies).subject()
    # the references are still being computed on the default stream, and the floor's buffers
    # may reuse their temporaries' memory: nothing runs on the timer's stream before they are
    # done (a floor launched before this synchronisation corrupted references on the H100)
    cupy.cuda.Device().synchronize()
    # the floor's own estimate is shorter; the sides' decide graphs or events for all, so that
    # the floor is timed the same way as the kernels it bounds
    floor_estimate = max(timer.estimate_us(floor), estimate)
    subjects = [s.subject(f"side{i}", fingerprinted=i == 0) for i, s in enumerate(sides)]
    measured = timer.device_mode(
        [*subjects, floor], budget_s=request.budget_s, estimates=[*estimates, floor_estimate]
    )
    return measured[:-1], measured[-1]


def run_bench(request: dict[str, Any]) -> dict[str, Any]:
    """Time the request's candidate (and baseline) on its shapes; ``BenchReport.model_dump()``."""
    import cupy

    from astra_graph.harness import worker
    from astra_graph.harness.compile import gpu_arch
    from astra_graph.harness.errors import BaselineError, NoGpu
    from astra_graph.harness.launch import (
        CompileFailed,
        InterfaceMismatch,
        LaunchError,
        load_kernel,
        synchronize,
    )

    if gpu_arch() is None:
        raise NoGpu("no CUDA GPU visible to the evaluation worker")
    try:
        req = BenchRequest.model_validate(request)
    except ValidationError as exc:
        raise ContractError(f"bench request: {str(exc).splitlines()[0]}") from None
    spec = operation_spec(req.op)
    candidate = req.candidate.implementation(spec.contract)
    baseline = req.baseline.implementation(spec.contract) if req.baseline else None
    base_tunables = req.baseline.tunables if req.baseline else {}
    shapes = _shapes(req, spec)
    dtypes = req.dtypes or spec.contract.dtypes[:1]
    for dtype in dtypes:
        if dtype not in spec.contract.dtypes:
            raise ContractError(f"dtype {dtype!r}: expected one of {spec.contract.dtypes}")
    if req.copy_gbps is not None:
        copy_gbps = req.copy_gbps
    else:
        copy_gbps, _ = roofline.copy_bandwidth_gbps()

    def roof_for(mix: roofline.Traffic) -> float:
        """The override when given (it stands for every roof), else the measured mix."""
        return copy_gbps if req.copy_gbps is not None else roofline.achievable_gbps(mix)[0]

    report = BenchReport(
        op=spec.name,
        mode=req.mode,
        device=roofline.device_key()[1],
        gpu=roofline.gpu_info(),
        candidate=str(candidate.path),
        baseline=str(baseline.path) if baseline else None,
        copy_bandwidth_gbps=copy_gbps,
        shapes=[],
    )
    started = time.perf_counter()
    _timer().clock.reset()
    rng = cupy.random.default_rng(secrets.randbits(63) if req.seed is None else req.seed)
    largest = max(shapes, key=lambda d: spec.contract.bytes_for(d, dtypes[0]))
    for dtype in dtypes:
        worker.progress({"step": "compile", "dtype": dtype})
        cand_kernel = load_kernel(spec, candidate, dtype, req.candidate.tunables)
        base_kernel = None
        if baseline is not None:
            try:
                base_kernel = load_kernel(spec, baseline, dtype, base_tunables)
            except (CompileFailed, InterfaceMismatch) as exc:
                raise BaselineError(f"baseline: {exc}") from None
        if dtype == dtypes[0]:
            report.resources["candidate"] = _resources(cand_kernel, largest)
            if base_kernel is not None:
                report.resources["baseline"] = _resources(base_kernel, largest)
        for dims in shapes:
            kernels = [k for k in (cand_kernel, base_kernel) if k is not None]
            unmet = [k.unsupported(dims) for k in kernels]
            if any(unmet):
                label = spec.contract.label(dims)
                report.notes.append(
                    f"{label} {dtype}: skipped, requires {next(u for u in unmet if u)}"
                )
                continue
            worker.progress({"step": "timing", "dims": dims, "dtype": dtype})
            sides = [_Side(k, spec) for k in kernels]
            mix = roofline.traffic(spec.contract, dims, dtype)
            try:
                measured, floor = _time_shape(req, sides, dims, dtype, rng, mix)
                synchronize(_timer().stream)
            except LaunchError as exc:
                report.rejection = _launch_failure(spec, dims, dtype, exc)
                if exc.sticky:  # the context is dead: nothing more can run in this process
                    worker.retire()
                    report.seconds = time.perf_counter() - started
                    return report.model_dump()
                continue
            mix_roof = roof_for(mix)
            roof = mix_roof
            if req.copy_gbps is None:  # an override stands as given
                roof = roofline.shape_roof_gbps(roof, spec.contract.bytes_for(dims, dtype), floor)
            shape = _shape_timing(spec, dims, dtype, measured, roof, floor, req.mode, mix_roof)
            report.shapes.append(shape)
            if report.rejection is None:
                report.rejection = _rejection(spec, sides[0], shape, mix_roof)
            del sides
        cupy.get_default_memory_pool().free_all_blocks()
    pairs = [(s.speedup, s.speedup_err or 0.0) for s in report.shapes if s.speedup]
    if pairs:
        report.geomean_speedup, report.geomean_speedup_err = timing.geomean_speedup(pairs)
    if req.mode == "device" and any(s.candidate.method.startswith("graph") for s in report.shapes):
        report.notes.append(
            "short kernels timed inside CUDA graphs launching each input copy once; shapes whose "
            f"copies cannot exceed 2x L2 within {timing.MAX_COPIES} copies stay partly warm"
        )
    unsettled = [
        s.label
        for s in report.shapes
        for m in (s.candidate, s.baseline)
        if m is not None and m.rel_std_err > timing.TARGET_RSE
    ]
    if unsettled and req.mode == "device":
        report.notes.append(
            f"budget ran out before the {100 * timing.TARGET_RSE:.1f}% target on "
            f"{', '.join(dict.fromkeys(unsettled))}: see each time's +-"
        )
    report.clock = _timer().clock.report()
    report.seconds = time.perf_counter() - started
    return report.model_dump()


def _shape_timing(
    spec: OperationSpec,
    dims: dict[str, int],
    dtype: str,
    measured: list[Measurement],
    roof_gbps: float,
    floor: Measurement | None,
    mode: TimingMode,
    impossible_roof_gbps: float,
) -> ShapeTiming:
    """One shape's timing; ``roof_gbps`` is the shape's roof (the profile's percent and limit),
    ``impossible_roof_gbps`` the cached roof the impossible-time rule measures against."""
    nbytes = spec.contract.bytes_for(dims, dtype)
    cand = measured[0]
    base = measured[1] if len(measured) > 1 else None
    achieved = roofline.achieved_gbps(nbytes, cand.median_us)
    limit = roofline.limit_of(cand.median_us, nbytes, roof_gbps, floor.median_us if floor else None)
    shape = ShapeTiming(
        label=spec.contract.label(dims),
        dims=dims,
        dtype=dtype,
        bytes_moved=nbytes,
        candidate=cand,
        baseline=base,
        achieved_gbps=achieved,
        roofline_pct=roofline.roofline_pct(achieved, roof_gbps),
        impossible=mode == "device" and roofline.impossible(achieved, impossible_roof_gbps),
        roof_gbps=roof_gbps,
        latency_floor=floor,
        bound=limit.bound,
        limit=limit.text,
    )
    if base is not None:
        shape.speedup, shape.speedup_err = timing.speedup(base, cand)
        shape.call = selection.call(shape.speedup, shape.speedup_err)
    return shape


def _launch_failure(
    spec: OperationSpec, dims: dict[str, int], dtype: str, exc: Exception
) -> Verdict:
    """A launch refused or a kernel fault while timing (it passed the check: it behaves
    differently when timed, or the fault is intermittent)."""
    sticky = bool(getattr(exc, "sticky", False))
    message = f"{spec.contract.label(dims)} {dtype}: while timing: {exc}"
    evidence = Evidence(op=spec.name, dims=dims, dtype=dtype, detail=str(exc))
    return Verdict.reject("crashed" if sticky else "launch_error", message, evidence)


def _rejection(
    spec: OperationSpec, candidate: _Side, shape: ShapeTiming, roof_gbps: float
) -> Verdict | None:
    checks = [(index, index) for index in sorted(candidate.references)]
    if spec.contract.deterministic:  # the clones (first copy's inputs) must equal the first
        clone = candidate.first_unlike_clone()
        checks += [(clone, 0)] if clone is not None else []
    else:  # no bit-for-bit rule: each clone against the first copy's reference
        checks += [(k, 0) for k in range(1, len(candidate.cases) - 1)]
    for index, reference_of in checks:
        found = candidate.check(index, reference_of)
        if found is not None:
            reason, evidence = found
            evidence.detail = (
                f"output left by the timed calls (input copy {index}) differs from the "
                f"reference computed before timing. {evidence.detail}".strip()
            )
            return Verdict.reject(
                reason,
                f"{shape.label} {shape.dtype}: the timed runs' output is wrong "
                f"({evidence.arg or 'output'}): the kernel behaves differently when timed",
                evidence,
            )
    # bit-identical samples are only asked of operations whose contract demands determinism
    unlike = candidate.first_unlike_sample() if spec.contract.deterministic else None
    if unlike is not None:  # the checked outputs are right, but not every sample computed them
        sample, samples = unlike
        detail = (
            f"timed sample {sample + 1} of {samples} left outputs unlike those of the last "
            "sample, which match the reference: not every timed launch computed the answer"
        )
        return Verdict.reject(
            "mismatch",
            f"{shape.label} {shape.dtype}: the timed runs' outputs differ between samples: "
            "the kernel behaves differently when timed",
            Evidence(op=spec.name, dims=shape.dims, dtype=shape.dtype, detail=detail),
        )
    if shape.impossible:
        floor = roofline.floor_us(shape.bytes_moved, roof_gbps)
        detail = (
            f"{shape.candidate.median_us:.3f} us for {shape.bytes_moved} bytes is "
            f"{shape.achieved_gbps:.0f} GB/s, over {roofline.IMPOSSIBLE_MARGIN} x the "
            f"achievable bandwidth {roof_gbps:.0f} GB/s (floor {floor:.3f} us)"
        )
        return Verdict.reject(
            "impossible_time",
            f"{shape.label} {shape.dtype}: faster than memory allows: {detail}",
            Evidence(op=spec.name, dims=shape.dims, dtype=shape.dtype, detail=detail),
        )
    return None
