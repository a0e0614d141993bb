"""Time a candidate against a baseline, per shape, inside the evaluation worker.

:func:`run_bench` is the worker's entry point: it takes a plain dict (see :class:`BenchRequest`)
and returns ``BenchReport.model_dump()``. For each shape it

1. builds random inputs for each side (and, for device mode on short kernels, enough extra
   copies to keep the data cold inside a CUDA graph; see :mod:`astra_graph.harness.timing`),
   every copy with its own inputs, in ``timed_copies.TIMING_INPUT_SETS`` sets that alternate
   from one timed sample to the next (``harness.timed_copies``), the copies of each argument as
   rows of one array,
2. writes NaN poisons with random payloads (the check's kind) over the outputs before every
   timed sample, and records every sample's outputs (a fingerprint per input set),
3. times both sides interleaved, in ``device`` or ``per-call`` mode,
4. checks what the timed calls left: ``TIMED_CHECKED_COPIES`` copies drawn after timing
   against the float64 reference of the inputs the last sample gave them, their pure inputs
   bit-identical, and every sample's fingerprint equal to the last one's on the same inputs
   (``timing_replay``: the kernel behaves differently when timed), and
5. compares the achieved bandwidth with the roof, the device's achievable bandwidth for the
   shape's read:write mix: in device mode, a time implying more than
   :data:`roofline.IMPOSSIBLE_MARGIN` x the roof is impossible; and, in device mode, times the
   shape's same-bytes copy floor (a minimal kernel moving the same bytes) and launch floor (an
   empty kernel on the same grid) in the same rounds, so each shape says which floor it is near
   and how far it is from each (:func:`roofline.limit_of`).

Either failure sets ``rejection`` on the report; the evaluator turns it into the verdict.
Per-call mode is exempt from the impossibility check: its data stays in L2 by design.
"""

from __future__ import annotations

import secrets
import time
from functools import cache
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from astra_graph.harness import roofline, selection, timing
from astra_graph.harness.bench_request import BenchRequest
from astra_graph.harness.domain import plannable_gpu_bytes
from astra_graph.harness.kernel_resources import resources_of
from astra_graph.harness.payload import operation_spec
from astra_graph.harness.results import (
    BenchReport,
    Evidence,
    Measurement,
    ShapeTiming,
    TimingMode,
    Verdict,
)
from astra_graph.harness.timed_copies import TIMED_CHECKED_COPIES, TimedCopies
from astra_graph.kernel.contract import ContractError, OperationSpec

if TYPE_CHECKING:  # annotations only: the launch module is imported where the GPU is used
    from astra_graph.harness.launch import Launchable
    from astra_graph.kernel.header import Implementation


@cache
def _timer() -> timing.Timer:
    """One timer (stream, L2 flush buffer) per worker process."""
    return timing.Timer()


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
    sides: list[TimedCopies],
    dims: dict[str, int],
    dtype: str,
    rng: Any,
    mix: roofline.Traffic,
) -> tuple[list[Measurement], Measurement | None, Measurement | None]:
    """(one measurement per side, the copy floor's and the launch floor's, or None for those two
    in per-call mode and beyond the minimal kernel's reach)."""
    import cupy

    timer = _timer()
    for side in sides:
        side.add_copies(dims, dtype, rng, 1)
    # inputs and references are made on the default stream; the timer's stream does not wait
    cupy.cuda.Device().synchronize()
    if request.mode == "per-call":
        return timer.per_call_mode([s.subject(f"side{i}") for i, s in enumerate(sides)]), None, None
    # one estimate per side, used both to size the copies and (in device_mode) to choose a graph
    # of copies over single-launch nodes: two estimates on either side of the threshold once
    # left rotating copies that a single launch never runs, failing the re-check of a correct
    # kernel
    estimates = [timer.estimate_us(s.subject(f"side{i}")) for i, s in enumerate(sides)]
    estimate = min(estimates)
    floor_copies = 1
    if estimate < timing.GRAPH_THRESHOLD_US:  # a graph launches each copy once per replay
        # every side grows to the same number of copies at most, with room for each of them
        per_copy = sum(side.bytes_per_copy(dims, dtype) for side in sides)
        room = _copies_room(cupy, held=1, bytes_per_copy=per_copy)
        for side in sides:
            cold = timing.copies_for_cold_data(side.cases[0].nbytes, timer.l2_bytes)
            side.add_copies(dims, dtype, rng, timing.graph_copies(estimate, cold, room))
        floor_bytes = mix.read_bytes + mix.write_bytes
        cold = timing.copies_for_cold_data(floor_bytes, timer.l2_bytes)
        floor_room = max(1, _copies_room(cupy, held=0, bytes_per_copy=floor_bytes))
        floor_copies = timing.graph_copies(estimate, cold, floor_room)
    if not mix.fits_minimal_kernel:  # beyond 32-bit indices: bandwidth-bound in any case
        cupy.cuda.Device().synchronize()
        subjects = [s.subject(f"side{i}", fingerprinted=i == 0) for i, s in enumerate(sides)]
        measured = timer.device_mode(subjects, budget_s=request.budget_s, estimates=estimates)
        return measured, None, None
    minimal = roofline.MinimalCopies(mix, floor_copies)
    floor, launch = minimal.subject(), minimal.launch_subject()
    # the references are still being computed on the default stream, and the floor's buffers
    # may reuse their temporaries' memory: nothing runs on the timer's stream before they are
    # done (a floor launched before this synchronisation corrupted references on the H100)
    cupy.cuda.Device().synchronize()
    # the floors' own estimates are shorter; the sides' decide copies or nodes for all, so that
    # the floors are timed the same way as the kernels they bound
    floor_estimates = [max(timer.estimate_us(f), estimate) for f in (floor, launch)]
    subjects = [s.subject(f"side{i}", fingerprinted=i == 0) for i, s in enumerate(sides)]
    measured = timer.device_mode(
        [*subjects, floor, launch],
        budget_s=request.budget_s,
        estimates=[*estimates, *floor_estimates],
    )
    return measured[:-2], measured[-2], measured[-1]


def run_bench(request: dict[str, Any]) -> dict[str, Any]:
    """Time the request's candidate (and baseline) on its shapes; ``BenchReport.model_dump()``.

    The steps, in the order the timing protocol runs them: check the request, measure the copy
    bandwidth (unless overridden), start the clock, then per dtype compile both sides
    (:func:`_compile_sides`) and time each shape (:func:`_bench_shape`), freeing the memory
    pool after each dtype; last the geomean and the notes (:func:`_summarise`)."""
    import cupy

    from astra_graph.harness import worker
    from astra_graph.harness.compile import gpu_arch
    from astra_graph.harness.errors import NoGpu

    if gpu_arch() is None:
        raise NoGpu("no CUDA GPU visible to the evaluation worker")
    try:
        req = BenchRequest.model_validate(request)
    except ValidationError as exc:
        raise ContractError(f"bench request: {str(exc).splitlines()[0]}") from None
    spec = operation_spec(req.op)
    candidate = req.candidate.implementation(spec.contract)
    baseline = req.baseline.implementation(spec.contract) if req.baseline else None
    shapes = _shapes(req, spec)
    dtypes = req.dtypes or spec.contract.dtypes[:1]
    for dtype in dtypes:
        if dtype not in spec.contract.dtypes:
            raise ContractError(f"dtype {dtype!r}: expected one of {spec.contract.dtypes}")
    if req.copy_gbps is not None:
        copy_gbps = req.copy_gbps
    else:
        copy_gbps, _ = roofline.copy_bandwidth_gbps()
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
        cand_kernel, base_kernel = _compile_sides(req, spec, candidate, baseline, dtype)
        if dtype == dtypes[0]:
            report.resources["candidate"] = resources_of(cand_kernel, largest)
            if base_kernel is not None:
                report.resources["baseline"] = resources_of(base_kernel, largest)
        for dims in shapes:
            kernels = [k for k in (cand_kernel, base_kernel) if k is not None]
            if _bench_shape(req, spec, report, kernels, dims, dtype, rng, copy_gbps):
                report.seconds = time.perf_counter() - started
                return report.model_dump()
        cupy.get_default_memory_pool().free_all_blocks()
    _summarise(req, report)
    report.clock = _timer().clock.report()
    report.seconds = time.perf_counter() - started
    return report.model_dump()


def _compile_sides(
    req: BenchRequest,
    spec: OperationSpec,
    candidate: Implementation,
    baseline: Implementation | None,
    dtype: str,
) -> tuple[Launchable, Launchable | None]:
    """The candidate's and the baseline's kernels for ``dtype`` (the baseline's None when there
    is none); a baseline that does not compile or does not match the interface is a
    BaselineError, the candidate's failures propagate as they are."""
    from astra_graph.harness.errors import BaselineError
    from astra_graph.harness.launch import CompileFailed, InterfaceMismatch, load_kernel

    base_tunables = req.baseline.tunables if req.baseline else {}
    cand_kernel = load_kernel(spec, candidate, dtype, req.candidate.tunables)
    base_kernel = None
    if baseline is not None:
        try:
            base_kernel = load_kernel(spec, baseline, dtype, base_tunables)
        except (CompileFailed, InterfaceMismatch) as exc:
            raise BaselineError(f"baseline: {exc}") from None
    return cand_kernel, base_kernel


def _bench_shape(
    req: BenchRequest,
    spec: OperationSpec,
    report: BenchReport,
    kernels: list[Launchable],
    dims: dict[str, int],
    dtype: str,
    rng: Any,
    copy_gbps: float,
) -> bool:
    """Time one shape and add its timing (or a note, or a rejection) to ``report``.

    A shape some side's requirements exclude gets a note and is skipped. A launch failure sets
    the rejection and skips the shape; a sticky one (the CUDA context is dead) retires the
    worker and returns True: nothing more can run in this process, so the caller returns the
    report as it is."""
    from astra_graph.harness import worker
    from astra_graph.harness.launch import LaunchError, synchronize

    unmet = [k.unsupported(dims) for k in kernels]
    if any(unmet):
        label = spec.contract.label(dims)
        report.notes.append(f"{label} {dtype}: skipped, requires {next(u for u in unmet if u)}")
        return False
    worker.progress({"step": "timing", "dims": dims, "dtype": dtype})
    sides = [TimedCopies(k, spec) for k in kernels]
    mix = roofline.traffic(spec.contract, dims, dtype)
    try:
        measured, floor, launch = _time_shape(req, sides, dims, dtype, rng, mix)
        synchronize(_timer().stream)
    except LaunchError as exc:
        report.rejection = _launch_failure(spec, dims, dtype, exc)
        if exc.sticky:  # the context is dead: nothing more can run in this process
            worker.retire()
            return True
        return False
    # the override, when given, stands for every roof; else the measured roof of the mix
    mix_roof = copy_gbps if req.copy_gbps is not None else roofline.achievable_gbps(mix)[0]
    roof = mix_roof
    if req.copy_gbps is None:  # an override stands as given
        roof = roofline.shape_roof_gbps(roof, spec.contract.bytes_for(dims, dtype), floor)
    shape = _shape_timing(spec, dims, dtype, measured, roof, (floor, launch), req.mode, mix_roof)
    report.shapes.append(shape)
    if report.rejection is None:
        report.rejection = _rejection(spec, sides[0], shape, mix_roof)
    del sides
    return False


def _summarise(req: BenchRequest, report: BenchReport) -> None:
    """The geomean speedup over the shapes that have one, and the notes on the whole run: graph
    timing of short kernels, and the shapes whose times missed the precision target."""
    pairs = [(s.speedup, s.speedup_err or 0.0) for s in report.shapes if s.speedup]
    if pairs:
        report.geomean_speedup, report.geomean_speedup_err = timing.geomean_speedup(pairs)
    copies = [timing.method_copies(s.candidate.method) for s in report.shapes]
    if req.mode == "device" and any(c is not None for c in copies):
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


def _shape_timing(
    spec: OperationSpec,
    dims: dict[str, int],
    dtype: str,
    measured: list[Measurement],
    roof_gbps: float,
    floors: tuple[Measurement | None, Measurement | None],
    mode: TimingMode,
    impossible_roof_gbps: float,
) -> ShapeTiming:
    """One shape's timing; ``roof_gbps`` is the shape's roof (the profile's percent and limit),
    ``floors`` the copy and launch floors, ``impossible_roof_gbps`` the cached roof the
    impossible-time rule measures against."""
    nbytes = spec.contract.bytes_for(dims, dtype)
    cand = measured[0]
    base = measured[1] if len(measured) > 1 else None
    achieved = roofline.achieved_gbps(nbytes, cand.median_us)
    floor, launch = floors
    limit = roofline.limit_of(
        cand.median_us,
        nbytes,
        roof_gbps,
        floor.median_us if floor else None,
        launch.median_us if launch else None,
    )
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
        copy_floor=floor,
        launch_floor=launch,
        bandwidth_floor_us=roofline.floor_us(nbytes, roof_gbps),
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
    spec: OperationSpec, candidate: TimedCopies, shape: ShapeTiming, roof_gbps: float
) -> Verdict | None:
    """Why the timed runs show the candidate wrong or impossibly fast, or None.

    ``timing_replay`` (the kernel behaves differently when timed) when a copy chosen after
    timing (:data:`TIMED_CHECKED_COPIES`) holds outputs unlike the reference of the inputs the
    last sample gave it, or when two samples on the same inputs left different outputs;
    ``input_mutated`` when a pure input changed under timing; ``carried_state`` when a module
    variable is not back at its value at load after the timed launches (harness.module_state)."""
    where = f"{shape.label} {shape.dtype}"
    for index in _copies_to_check(candidate):
        rejected = _timed_copy_rejection(spec, candidate, shape, index)
        if rejected is not None:
            return rejected
        del candidate.references[index]
    # bit-identical samples are only asked of operations whose contract demands determinism
    unlike = candidate.first_unlike_sample() if spec.contract.deterministic else None
    if unlike is not None:  # the checked outputs are right, but not every sample computed them
        sample, samples = unlike
        detail = (
            f"timed sample {sample + 1} of {samples} left outputs unlike those of the last "
            "sample on the same inputs, which match the reference: not every timed launch "
            "computed the answer"
        )
        return Verdict.reject(
            "timing_replay",
            f"{where}: the timed runs' outputs differ between samples: "
            "the kernel behaves differently when timed",
            Evidence(op=spec.name, dims=shape.dims, dtype=shape.dtype, detail=detail),
        )
    # after the output checks, which name what the timed launches did wrong where they did
    carried = candidate.kernel.carried_state()
    if carried is not None:
        return Verdict.reject(
            "carried_state",
            f"{where}: after timing, {carried}",
            Evidence(op=spec.name, dims=shape.dims, dtype=shape.dtype, detail=carried),
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


def _copies_to_check(candidate: TimedCopies) -> list[int]:
    """:data:`TIMED_CHECKED_COPIES` of the launched copies (all, where fewer were launched),
    drawn after timing so that the kernel cannot know which will be checked, in order."""
    import numpy as np

    launched = candidate.launched()
    chooser = np.random.default_rng(secrets.randbits(63))
    count = min(TIMED_CHECKED_COPIES, len(launched))
    return sorted(int(i) for i in chooser.choice(launched, size=count, replace=False))


def _timed_copy_rejection(
    spec: OperationSpec, candidate: TimedCopies, shape: ShapeTiming, index: int
) -> Verdict | None:
    """``input_mutated`` when a pure input of the timed copy ``index`` changed under timing,
    ``timing_replay`` when the outputs the last sample left on it are unlike the reference of
    its inputs, or None."""
    where = f"{shape.label} {shape.dtype}"
    mutated = candidate.mutated_input(index)
    if mutated is not None:
        detail = f"input {mutated!r} of timed copy {index} changed during timing"
        return Verdict.reject(
            "input_mutated",
            f"{where}: {detail}",
            Evidence(op=spec.name, dims=shape.dims, dtype=shape.dtype, arg=mutated, detail=detail),
        )
    candidate.expect(index)
    found = candidate.check(index)
    if found is None:
        return None
    reason, evidence = found
    evidence.detail = (
        f"{reason}: output left by the timed calls (last sample) on copy {index} (of "
        f"{len(candidate.cases)}, input set {candidate.current + 1} of "
        f"{len(candidate.sets)}) differs from the reference of its inputs. "
        f"{evidence.detail}".strip()
    )
    return Verdict.reject(
        "timing_replay",
        f"{where}: the timed runs' output is wrong ({evidence.arg or 'output'}): the "
        "kernel behaves differently when timed",
        evidence,
    )


def _copies_room(cupy: Any, held: int, bytes_per_copy: int) -> int:
    """Copies of ``bytes_per_copy`` there is room for: the ``held`` ones already allocated and
    as many more as :func:`~harness.domain.plannable_gpu_bytes` holds."""
    return held + plannable_gpu_bytes(cupy) // max(bytes_per_copy, 1)
