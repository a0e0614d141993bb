"""The check job: is a candidate's output right, on fresh inputs, every time, for every case?

:func:`run_check` is the worker job behind ``Evaluator.check``. The protocol and the reason for
each step are in docs/VERIFICATION.md; in short, before any kernel runs it compiles both kernels
(``compile_error``; the baseline failing is bad input) and checks every planned case's shape and
launch geometry against the candidate's ``requires`` and the device's limits
(``interface_mismatch``, :func:`harness.plan.preflight`). Then, per case (suite shape, random
shape or extra shape, x dtype; see :mod:`harness.plan`), :func:`check_case`:

1. draws inputs from a seed no prompt ever sees, with special values in a random half of the
   rows and varied row magnitudes (:mod:`harness.scenarios`), computes the float64 reference and
   runs the baseline on separate copies (its error statistics are the precision yardstick);
2. places every argument in an :class:`~astra_graph.harness.poison.Arena` between guard bands of
   fresh random bits, and launches the candidate a random number of unchecked times;
3. run 1: outputs poisoned with quiet NaNs of random, never canonical payloads;
   ``unwritten_output`` for an element still holding its poison's bits (arithmetic only makes
   canonical NaNs), ``mismatch`` outside the tolerance or on a loss of precision
   (:func:`harness.compare.precision_problem`);
4. run 2, same buffers: the outputs hold the correct result for the inputs just checked and the
   inputs change in a random 1/16 of their elements; a replayed or skipped result is a
   ``mismatch`` ("still holds the result for the previous inputs");
5. run 3, freshly allocated buffers at other addresses (other order, offsets at the contract's
   alignment only), the same inputs as run 2: the result must match run 2's bit for bit
   (``nondeterministic`` if it differs but passes, ``mismatch`` if it fails; skipped for
   contracts that allow atomics).

After every launch, unchecked ones included: ``crashed``/``launch_error`` (a fault, a refused
launch), ``out_of_bounds`` (a guard band changed: which argument, how far past its end or
before its start), ``input_mutated`` (a pure input not bit-identical). A held-out case's
rejection message names no shape (see :data:`HIDDEN_SUITES`).
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from astra_graph.harness import scenarios
from astra_graph.harness.buckets import rows_dim
from astra_graph.harness.compare import (
    Finding,
    OutputError,
    array_module,
    bits,
    bound_key,
    first_difference,
    index_of,
    output_error,
    precision_problem,
    value_at,
)
from astra_graph.harness.domain import (
    DOMAIN_SUITE,
    full_check_bytes,
    light_check_bytes,
    plannable_gpu_bytes,
)
from astra_graph.harness.errors import BaselineError, NoGpu, Rejected
from astra_graph.harness.geometry import launch_problem
from astra_graph.harness.oracle import reference_with_own_error
from astra_graph.harness.payload import CheckRequest, operation_spec
from astra_graph.harness.plan import CaseSpec, plan_cases, preflight
from astra_graph.harness.poison import Arena, nan_poison, still_holds
from astra_graph.harness.results import Evidence, RejectReason, Verdict
from astra_graph.harness.thresholds import (
    MAX_THRESHOLDS,
    ParserUnavailable,
    Threshold,
    code_thresholds,
    requires_thresholds,
)
from astra_graph.kernel.contract import HIDDEN_SUITES, OperationSpec
from astra_graph.kernel.dtypes import DTYPES, DType
from astra_graph.kernel.header import Implementation, load_implementation

LARGE_CASE_BYTES = 256 * 1024 * 1024
"""After a case this large the memory pool's cached blocks are released."""
STALE_DETAIL = (
    "every failing element still holds the correct result for the previous inputs: the kernel "
    "replayed a cached result or did not recompute when its inputs changed"
)

PROFILE: dict[str, float] | None = None
"""Seconds per protocol step, summed over cases, while a benchmark sets this to a dict
(benchmarks/harness_latency.py reports what each defence costs from it); None: not measured."""

_RNG: Any = None


@contextmanager
def _step(name: str, xp: Any) -> Iterator[None]:
    """Time one protocol step into :data:`PROFILE` (GPU work included), when it is set."""
    if PROFILE is None:
        yield
        return
    _synchronize(xp)
    started = time.perf_counter()
    yield
    _synchronize(xp)
    PROFILE[name] = PROFILE.get(name, 0.0) + time.perf_counter() - started


def _rng() -> Any:
    """One generator per worker, seeded from the OS: no prompt or log ever shows the seed."""
    global _RNG
    if _RNG is None:
        import cupy

        _RNG = cupy.random.default_rng(secrets.randbits(63))
    return _RNG


def _reject(
    reason: RejectReason,
    message: str,
    case: CaseSpec,
    spec: OperationSpec,
    *,
    kind: str = "",
    **fields: Any,
) -> Rejected:
    """The rejection of one case; ``message`` becomes generic for held-out shapes.

    ``kind`` (e.g. ``precision loss``) is the part of the message a held-out rejection keeps.
    """
    evidence = Evidence(
        op=spec.name, dims=case.dims, dtype=case.dtype, suite=case.suite, seed=case.seed, **fields
    )
    if not evidence.detail:
        evidence.detail = message
    if case.suite in HIDDEN_SUITES:
        arg = f" in {fields['arg']!r}" if fields.get("arg") else ""
        what = f"{reason.replace('_', ' ')}{f' ({kind})' if kind else ''}{arg}"
        text = f"{what} at a held-out shape ({case.dtype})"
    else:
        suite = f"{case.suite}: {case.kind}" if case.kind else case.suite
        text = f"{message} at {spec.contract.label(case.dims)} {case.dtype} ({suite})"
    return Rejected(Verdict.reject(reason, text, evidence))


def _synchronize(xp: Any) -> None:
    if xp is not np:
        from astra_graph.harness.launch import synchronize

        synchronize()


def _launch_checked(xp: Any, kernel: Any, data: Any, case: CaseSpec, spec: OperationSpec) -> None:
    """Launch and synchronise; a refused launch is launch_error, a fault crashes the worker."""
    from astra_graph.harness import worker
    from astra_graph.harness.launch import LaunchError

    worker.progress(case.progress("run"))  # the stall limit holds while the kernel runs
    try:
        kernel.launch(data)
        _synchronize(xp)
    except LaunchError as exc:
        if exc.sticky:
            worker.retire()
            raise _reject("crashed", f"CUDA fault: {exc}", case, spec, detail=str(exc)) from None
        raise _reject("launch_error", str(exc), case, spec, detail=str(exc)) from None
    worker.progress(watch=False)
    carried = kernel.carried_state()  # harness.module_state: no launch leaves state behind
    if carried is not None:
        raise _reject("carried_state", carried, case, spec, detail=carried)


class _CaseCheck:
    """The state of one case's check: inputs, reference, arenas, and the findings' wording."""

    def __init__(self, spec: OperationSpec, case: CaseSpec, xp: Any) -> None:
        self.spec, self.case, self.xp = spec, case, xp
        args = spec.contract.args
        self.inputs = [a for a in args if a.role != "output"]
        self.written = [a for a in args if a.written]
        self.outputs = [a for a in self.written if a.role == "output"]
        self.elements: dict[str, DType] = {
            a.name: spec.contract.dtype_of(a, case.dtype) for a in args
        }
        self.labels: dict[int, np.ndarray] = {}

    def reject(self, reason: RejectReason, message: str, **fields: Any) -> Rejected:
        index = fields.get("index")
        scenario = scenarios.scenario_of(self.labels, self.spec, index or [])
        if scenario:
            fields["detail"] = f"{fields.get('detail') or message} [scenario {scenario}]"
        return _reject(reason, message, self.case, self.spec, **fields)

    def reference(self, inputs: Mapping[str, Any], scalars: Mapping[str, Any]) -> dict[str, Any]:
        f64 = {
            a.name: self.elements[a.name].to_float64(self.xp, inputs[a.name]) for a in self.inputs
        }
        reference = reference_with_own_error(self.spec, self.case.dtype, self.xp, f64, scalars)
        missing = [a.name for a in self.written if a.name not in reference]
        if missing:
            raise ValueError(f"{self.spec.name}: the reference returns no {missing[0]!r}")
        return reference

    def after_run(self, arena: Arena, expected_inputs: Mapping[str, Any], what: str) -> None:
        """Guard bands intact and pure inputs bit-identical, or the rejection."""
        damage = arena.damage()
        if damage is not None:
            name, where = damage
            raise self.reject(
                "out_of_bounds",
                f"out-of-bounds write around {name!r}",
                kind="guard band written",
                arg=name,
                detail=f"the guard band around {name!r} was written ({where}) {what}",
            )
        pure = [a for a in self.inputs if a.role == "input"]
        changed = [
            (bits(self.xp, arena.views[a.name]) != bits(self.xp, expected_inputs[a.name])).any()
            for a in pure
        ]
        if not changed or not bool(self.xp.stack(changed).any()):  # one sync for all inputs
            return
        for arg in pure:
            flat = first_difference(self.xp, arena.views[arg.name], expected_inputs[arg.name])
            if flat is not None:
                element = self.elements[arg.name]
                raise self.reject(
                    "input_mutated",
                    f"input {arg.name!r} was modified",
                    arg=arg.name,
                    index=index_of(arena.views[arg.name].shape, flat),
                    got=value_at(self.xp, element, arena.views[arg.name], flat),
                    expected=value_at(self.xp, element, expected_inputs[arg.name], flat),
                    detail=f"inputs that are not inout must be bit-identical after the run {what}",
                )

    def finding(self, found: Finding, message: str) -> Rejected:
        return self.reject(
            found.reason,
            message,
            **found.evidence().model_dump(
                include={"arg", "index", "got", "expected", "error", "allowed", "detail"}
            ),
        )


def _copy_written(check: _CaseCheck, arena: Arena) -> dict[str, Any]:
    return {a.name: arena.views[a.name].copy() for a in check.written}


def _baseline_errors(
    check: _CaseCheck, baseline: Any, data: Any, pristine: Mapping[str, Any], reference: Any
) -> dict[str, OutputError]:
    from astra_graph.harness import worker
    from astra_graph.harness.cases import Case
    from astra_graph.harness.compile import CompileFailed
    from astra_graph.harness.launch import LaunchError

    xp, spec, case = check.xp, check.spec, check.case
    if baseline is None or baseline.unsupported(case.dims) is not None:
        return {}
    arrays = {
        a.name: pristine[a.name].copy()
        if a.role != "output"
        else xp.empty_like(data.arrays[a.name])
        for a in spec.contract.args
    }
    worker.progress(case.progress("baseline run"))
    try:
        baseline.launch(Case(data.dims, data.dtype, arrays, data.scalars))
        _synchronize(xp)
    except LaunchError as exc:
        if exc.sticky:
            worker.retire()
        raise BaselineError(f"baseline {baseline.impl.path}: {exc}") from None
    except CompileFailed as exc:  # a baseline built per shape (specialize): its fault alone
        raise BaselineError(f"baseline at {dict(case.dims)}: {exc}") from None
    worker.progress(watch=False)
    return {
        a.name: output_error(
            spec.contract,
            a,
            case.dtype,
            arrays[a.name],
            reference[a.name],
            bound=reference.get(bound_key(a.name)),
        )
        for a in check.written
    }


def check_case(
    spec: OperationSpec, candidate: Any, baseline: Any, case: CaseSpec, rng: Any
) -> float:
    """Run one case (module docstring, steps 1-5); the worst error ratio, or raises Rejected.

    ``candidate`` and ``baseline`` (which may be None) are LoadedKernels, or any object with
    ``launch(case)`` and ``unsupported(dims)``; with a NumPy ``rng`` the whole case runs on the
    host (the CPU tests use kernels written in NumPy).
    """
    from astra_graph.harness.cases import Case, make_case

    xp = array_module(rng.random(1))
    contract = spec.contract
    check = _CaseCheck(spec, case, xp)
    with _step("inputs", xp):
        data = make_case(spec, case.dims, case.dtype, rng, case.params)
    with _step("special values and row magnitudes", xp):
        check.labels = scenarios.apply(spec, data.arrays, case.dtype, rng)
    with _step("reference and baseline", xp):
        pristine = {a.name: data.arrays[a.name].copy() for a in check.inputs}
        reference = check.reference(pristine, data.scalars)
        base_errors = _baseline_errors(check, baseline, data, pristine, reference)

    names = [a.name for a in contract.args]
    with _step("guard bands: arena", xp):
        arena = Arena(xp, rng, data.arrays, names)

    def launch(arena: Arena, inputs: Mapping[str, Any], what: str, checked: bool = True) -> None:
        for arg in check.inputs:
            if arg.role == "inout":
                arena.views[arg.name][...] = inputs[arg.name]
        _launch_checked(
            xp, candidate, Case(data.dims, data.dtype, arena.views, data.scalars), case, spec
        )
        if checked:  # the guards and inputs also show what the unchecked launches before did
            with _step("guard bands: check and refill (inside the runs)", xp):
                check.after_run(arena, inputs, what)
                arena.refill()

    with _step("unchecked launches", xp):
        for _ in range(case.unchecked):
            launch(arena, pristine, "(an unchecked launch)", checked=False)

    with _step("run 1: poisoned outputs, comparison, precision", xp):
        worst, pending = _poisoned_run(check, arena, launch, pristine, reference, base_errors, rng)
    with _step("run 2: stale outputs, changed inputs", xp):
        changed = scenarios.perturbed(pristine, list(check.inputs), rng)
        reference_changed = check.reference(changed, data.scalars)
        stale = {
            a.name: check.elements[a.name].from_float64(xp, reference[a.name])
            for a in check.outputs
        }
        for arg in check.inputs:
            arena.views[arg.name][...] = changed[arg.name]
        for name, values in stale.items():
            arena.views[name][...] = values
        launch(arena, changed, "(the run after the inputs changed)")
        second_run = _copy_written(check, arena)
        worst = max(worst, _compare(check, second_run, reference_changed, changed, None, stale))
        del stale, reference
    with _step("run 3: buffers at other addresses", xp):
        fresh = {a.name: changed[a.name] for a in check.inputs}
        for arg in check.outputs:
            fresh[arg.name] = nan_poison(
                xp, rng, check.elements[arg.name], second_run[arg.name].shape
            )
        moved = arena.relocated(fresh, list(contract.args))
        del arena, fresh
        launch(moved, changed, "(the run on buffers at other addresses)")
        worst = max(worst, _moved_run(check, moved, second_run, reference_changed, changed))
    if pending is not None:  # run 1's comparison, after runs 2 and 3 showed it deterministic
        raise pending
    if data.nbytes > LARGE_CASE_BYTES and xp is not np:
        del data, pristine, changed, second_run, moved, reference_changed
        xp.get_default_memory_pool().free_all_blocks()
    return worst


def _poisoned_run(
    check: _CaseCheck,
    arena: Arena,
    launch: Callable[[Arena, Mapping[str, Any], str], None],
    pristine: Mapping[str, Any],
    reference: Mapping[str, Any],
    base_errors: Mapping[str, OutputError],
    rng: Any,
) -> tuple[float, Rejected | None]:
    """Run 1: outputs poisoned with random-payload NaNs; (worst ratio, its comparison's
    rejection, held back).

    Arithmetic only produces canonical NaNs, so an element that still holds its poison's bits
    was not written (``unwritten_output``, raised at once). A comparison failure is returned,
    not raised: the caller raises it after runs 2 and 3, so that a kernel whose launches differ
    is called ``nondeterministic`` whichever launch happened to be run 1.
    """
    xp = check.xp
    poison = {
        a.name: nan_poison(xp, rng, check.elements[a.name], arena.views[a.name].shape)
        for a in check.outputs
    }
    for name, values in poison.items():
        arena.views[name][...] = values
    launch(arena, pristine, "(checked run 1)")
    run = _copy_written(check, arena)
    for arg in check.outputs:
        kept = still_holds(xp, run[arg.name], poison[arg.name]).reshape(-1)
        if bool(kept.any()):
            flat = int(xp.argmax(kept))
            raise check.reject(
                "unwritten_output",
                f"output {arg.name!r} has elements the kernel never wrote",
                arg=arg.name,
                index=index_of(run[arg.name].shape, flat),
                expected=value_at(xp, None, reference[arg.name], flat),
                detail=f"{int(kept.sum())} of {kept.size} elements kept their poison",
            )
    try:
        return _compare(check, run, reference, pristine, base_errors), None
    except Rejected as rejected:
        return 0.0, rejected


def _moved_run(
    check: _CaseCheck,
    moved: Arena,
    second_run: Mapping[str, Any],
    reference: Mapping[str, Any],
    inputs: Mapping[str, Any],
) -> float:
    """Run 3's result: bit for bit run 2's (same inputs; deterministic contracts), and right."""
    xp = check.xp
    third_run = _copy_written(check, moved)
    differs = next(
        (
            (arg, flat)
            for arg in check.written
            if (flat := first_difference(xp, third_run[arg.name], second_run[arg.name])) is not None
        ),
        None,
    )
    deterministic = check.spec.contract.deterministic
    if differs is None and deterministic:
        return 0.0
    worst = _compare(
        check, third_run, reference, inputs, None, None, " on buffers at other addresses"
    )
    if differs is not None and deterministic:
        arg, flat = differs
        element = check.elements[arg.name]
        raise check.reject(
            "nondeterministic",
            f"two runs on the same inputs differ in {arg.name!r}",
            arg=arg.name,
            index=index_of(third_run[arg.name].shape, flat),
            got=value_at(xp, element, third_run[arg.name], flat),
            expected=value_at(xp, element, second_run[arg.name], flat),
            detail="the second run, in freshly allocated buffers at other addresses (got), vs "
            "the first (expected): a race, state kept between launches, or a result that "
            "depends on addresses",
        )
    return worst


def _compare(
    check: _CaseCheck,
    run: Mapping[str, Any],
    reference: Mapping[str, Any],
    inputs: Mapping[str, Any],
    base_errors: Mapping[str, OutputError] | None,
    stale: Mapping[str, Any] | None = None,
    where: str = "",
) -> float:
    """Compare one run's written arguments with the reference; the worst ratio, or raises.

    The precision statistics are computed only where they are compared: with ``base_errors``
    (run 1, against the baseline's)."""
    worst = 0.0
    for arg in check.written:
        if arg.role == "inout":
            result = output_error(
                check.spec.contract,
                arg,
                check.case.dtype,
                run[arg.name],
                reference[arg.name],
                inputs[arg.name],
                statistics=base_errors is not None,
                bound=reference.get(bound_key(arg.name)),
            )
        elif stale is not None:
            result = output_error(
                check.spec.contract,
                arg,
                check.case.dtype,
                run[arg.name],
                reference[arg.name],
                stale[arg.name],
                stale_reason="mismatch",
                stale_detail=STALE_DETAIL,
                statistics=False,
                bound=reference.get(bound_key(arg.name)),
            )
        else:
            result = output_error(
                check.spec.contract,
                arg,
                check.case.dtype,
                run[arg.name],
                reference[arg.name],
                statistics=base_errors is not None,
                bound=reference.get(bound_key(arg.name)),
            )
        worst = max(worst, result.worst_ratio)
        if result.finding is not None:
            found = result.finding
            if found.reason == "mismatch" and found.detail == STALE_DETAIL:
                message = f"{arg.name!r} still holds the result for the previous inputs"
            elif found.reason == "mismatch":
                message = f"{arg.name!r} differs from the reference{where}"
            else:
                message = f"{arg.name!r} was not written"
            raise check.finding(found, message)
        if base_errors is not None:
            problem = precision_problem(check.spec.contract, result, base_errors.get(arg.name))
            if problem:
                raise check.reject("mismatch", problem, kind="precision loss", arg=arg.name)
    return worst


LIGHT_CHUNK_ELEMENTS = 1 << 26
"""The light protocol computes the reference over row chunks of at most this many elements of
the largest argument (~0.5 GiB per float64 temporary), so its memory stays bounded however
large the shape."""


def _row_slice(spec: OperationSpec, arg: Any, array: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of a row-indexed argument (first shape entry the rows dim), else all."""
    return array[start:stop] if arg.shape[0] == rows_dim(spec) else array


def light_case(spec: OperationSpec, candidate: Any, case: CaseSpec, rng: Any) -> float:
    """A domain case too large for the whole protocol (``harness.domain``): one poisoned run in
    a guarded arena (``unwritten_output``, ``out_of_bounds``, ``input_mutated`` as in run 1),
    the reference computed and compared row chunk by row chunk (contracts whose rows are
    independent), tolerance only. Returns the worst error ratio or raises Rejected."""
    from astra_graph.harness.cases import Case, make_case

    xp = array_module(rng.random(1))
    contract = spec.contract
    check = _CaseCheck(spec, case, xp)
    data = make_case(spec, case.dims, case.dtype, rng, case.params)
    check.labels = scenarios.apply(spec, data.arrays, case.dtype, rng)
    before = {a.name: data.arrays[a.name].copy() for a in check.inputs if a.role == "inout"}
    arena = Arena(xp, rng, data.arrays, [a.name for a in contract.args])
    for arg in check.outputs:
        data.arrays[arg.name] = nan_poison(
            xp, rng, check.elements[arg.name], data.arrays[arg.name].shape
        )
        arena.views[arg.name][...] = data.arrays[arg.name]
    _launch_checked(
        xp, candidate, Case(data.dims, data.dtype, arena.views, data.scalars), case, spec
    )
    check.after_run(arena, data.arrays, "(a domain shape, checked once)")
    for arg in check.outputs:
        kept = still_holds(xp, arena.views[arg.name], data.arrays[arg.name]).reshape(-1)
        if bool(kept.any()):
            flat = int(xp.argmax(kept))
            raise check.reject(
                "unwritten_output",
                f"output {arg.name!r} has elements the kernel never wrote",
                arg=arg.name,
                index=index_of(arena.views[arg.name].shape, flat),
                detail=f"{int(kept.sum())} of {kept.size} elements kept their poison",
            )
        del kept
    rows = case.dims[rows_dim(spec)]
    widest = max(math.prod(contract.shape_of(a, case.dims)) for a in contract.args)
    step = max(1, LIGHT_CHUNK_ELEMENTS // max(1, widest // max(rows, 1)))
    pristine = {a.name: before.get(a.name, data.arrays[a.name]) for a in check.inputs}
    worst = 0.0
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        inputs = {a.name: _row_slice(spec, a, pristine[a.name], start, stop) for a in check.inputs}
        reference = check.reference(inputs, data.scalars)
        for arg in check.written:
            result = output_error(
                contract,
                arg,
                case.dtype,
                _row_slice(spec, arg, arena.views[arg.name], start, stop),
                reference[arg.name],
                inputs[arg.name] if arg.role == "inout" else None,
                statistics=False,
                bound=reference.get(bound_key(arg.name)),
            )
            worst = max(worst, result.worst_ratio)
            if result.finding is not None:
                found = result.finding
                if found.index and arg.shape[0] == rows_dim(spec):
                    found = found.model_copy(
                        update={"index": [found.index[0] + start, *found.index[1:]]}
                    )
                what = (
                    "differs from the reference"
                    if found.reason == "mismatch"
                    else "was not written"
                )
                raise check.finding(found, f"{arg.name!r} {what}")
        del reference, inputs
    del data, arena, before, pristine
    if xp is not np:
        xp.get_default_memory_pool().free_all_blocks()
    return worst


def _static_smem(kernel: Any) -> Callable[[Mapping[str, int]], int]:
    """The kernel's static shared memory at a shape: one number for one instantiation, each
    shape's own for a kernel built per shape (``specialize``), 0 where CuPy cannot say."""

    def at(dims: Mapping[str, int]) -> int:
        try:
            return int(kernel.at(dims).function.shared_size_bytes)
        except Exception:  # an attribute this CuPy lacks, or a build preflight reports itself
            return 0

    return at


def run_check(
    request: Mapping[str, Any],
    *,
    rng: Any = None,
    loader: Callable[..., Any] | None = None,
    arch: str | None = None,
) -> dict[str, Any]:
    """Worker job: verify a candidate on every planned case; returns a Verdict as a dict.

    ``request`` is a :class:`~astra_graph.harness.payload.CheckRequest` (as a dict). Raises
    BaselineError when the baseline fails, and NoGpu. ``rng``, ``loader`` and ``arch`` replace
    the GPU's generator, ``launch.load_kernel`` and the GPU's architecture (CPU tests).

    The steps, in order: compile both sides per dtype (:func:`_compile_sides`), find the
    candidate's thresholds (:func:`_thresholds`), plan the cases, preflight each dtype's cases
    (:func:`_preflight`), check every case (:func:`_check_cases`) and write the acceptance
    (:func:`_accepted`). The first step that rejects returns its verdict.
    """
    from astra_graph.harness.compile import DEFAULT_ARCH, gpu_arch
    from astra_graph.harness.launch import load_kernel

    if loader is None and gpu_arch() is None:
        raise NoGpu("no CUDA GPU visible to the evaluation worker")
    req = CheckRequest.model_validate(request)
    spec = operation_spec(req.op)
    contract = spec.contract
    load = loader or load_kernel
    cand_impl = req.candidate.implementation(contract)
    base_impl = req.baseline.implementation(contract) if req.baseline else None

    candidates, baselines, rejection = _compile_sides(req, spec, cand_impl, base_impl, load)
    if rejection is not None:
        return rejection

    target = arch or gpu_arch() or DEFAULT_ARCH
    oracle_refuses = _oracle_refusal(spec, target)

    redrawn: list[str] = []  # random draws the oracle cannot launch, drawn again

    def supported(dims: Mapping[str, int]) -> bool:
        if not all(kernel.unsupported(dims) is None for kernel in baselines.values()):
            return False
        refused = next(filter(None, (oracle_refuses(dims, d) for d in contract.dtypes)), None)
        if refused is not None:
            redrawn.append(f"{contract.label(dims)}: {refused}")
        return refused is None

    notes: list[str] = []
    found_thresholds = _thresholds(req, spec, cand_impl, notes)
    seed = secrets.randbits(63)
    planner = np.random.default_rng(seed)
    cases = plan_cases(
        spec,
        req.suites,
        req.extra_shapes,
        planner,
        params=req.params,
        supported=supported,
        random=req.random_shapes,
        domain=req.domain,
        seed=seed,
        thresholds=found_thresholds,
    )
    if redrawn:
        notes.append(
            f"{len(redrawn)} random shape(s) drawn again: the oracle ({contract.oracle}) cannot "
            f"launch there on {target}; first {redrawn[0]}"
        )
    cases = _inside_the_oracles_launch(cases, oracle_refuses, spec, target, notes)
    kernel_domain, excluded, rejection = _preflight(req, spec, candidates, cases, target)
    if rejection is not None:
        return rejection

    tally = _Tally()
    generator = rng if rng is not None else _rng()
    rejection = _check_cases(
        req, spec, candidates, baselines, cases, excluded, generator, tally, notes
    )
    if rejection is not None:
        return rejection
    return _accepted(req, cases, tally, kernel_domain, notes)


OracleRefusal = Callable[[Mapping[str, int], str], str | None]
"""``refusal(dims, dtype)``: why the oracle cannot launch at a shape, or None."""


def _oracle_refusal(spec: OperationSpec, arch: str) -> OracleRefusal:
    """``refusal(dims, dtype)``: why the contract's oracle (an imported operation's original,
    ``contract.oracle``) cannot launch at that shape on ``arch``, at ``dtype`` or at the type its
    reference runs it at (``ORACLE_DTYPE`` of reference.py), or None; always None without an
    oracle. Where the original cannot launch, the framework's own op raises, so no serving call
    reaches that shape: it is outside the operation's domain. The dims' ``min``/``max`` bound
    each dim alone, but launch limits are joint (FlashInfer's MergeState puts ``heads`` times
    ``head_dim / vec`` threads in a block; its fused norm ``hidden`` floats of shared memory), and
    the original checked against itself was refused at a random shape of 7176 threads a block
    (H100, 91c3432, the MergeRows fixture). The original's static shared memory is not known
    before it compiles and is not counted."""
    if spec.contract.oracle is None:
        return lambda dims, dtype: None
    header = load_implementation(spec.folder / spec.contract.oracle, spec.contract).header
    oracle_dtype = getattr(spec.reference, "__globals__", {}).get("ORACLE_DTYPE")

    def refusal(dims: Mapping[str, int], dtype: str) -> str | None:
        # a shape its requires excludes is no problem here: the contract's partial_kernels rule
        label = spec.contract.label(dims)
        types = dict.fromkeys([dtype, *([oracle_dtype] if oracle_dtype in DTYPES else [])])
        problems = (launch_problem(header, dims, DTYPES[at], {}, arch, label) for at in types)
        return next(filter(None, problems), None)

    return refusal


def _inside_the_oracles_launch(
    cases: list[CaseSpec],
    refusal: OracleRefusal,
    spec: OperationSpec,
    arch: str,
    notes: list[str],
) -> list[CaseSpec]:
    """The cases without the domain suite's shapes the oracle cannot launch (random shapes are
    drawn inside its launch already); how many were left out, and the first one's reason, go to
    the verdict's notes, so the narrower domain is never silent."""
    kept: list[CaseSpec] = []
    refused: list[str] = []
    for case in cases:
        problem = refusal(case.dims, case.dtype) if case.suite == DOMAIN_SUITE else None
        if problem is None:
            kept.append(case)
        else:
            label = spec.contract.label(case.dims)
            refused.append(f"{label} {case.dtype} ({case.kind}): {problem}")
    if refused:
        notes.append(
            f"{len(refused)} domain shape(s) left out: the oracle ({spec.contract.oracle}) cannot "
            f"launch there on {arch}, so the framework's op refuses them; first {refused[0]}"
        )
    return kept


def _compile_sides(
    req: CheckRequest,
    spec: OperationSpec,
    cand_impl: Implementation,
    base_impl: Implementation | None,
    load: Callable[..., Any],
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """Per dtype, the baseline's kernel then the candidate's: (candidates, baselines, None), or
    a rejection verdict (as a dict) for the candidate's compile error or interface mismatch.
    A baseline that does not compile or does not match the interface raises BaselineError."""
    from astra_graph.harness import worker
    from astra_graph.harness.launch import CompileFailed, InterfaceMismatch

    candidates: dict[str, Any] = {}
    baselines: dict[str, Any] = {}
    for dtype in spec.contract.dtypes:
        worker.progress({"step": "compile", "dtype": dtype}, watch=False)
        if base_impl is not None and req.baseline is not None:
            try:
                baselines[dtype] = load(spec, base_impl, dtype, req.baseline.tunables)
            except (CompileFailed, InterfaceMismatch) as exc:
                raise BaselineError(f"baseline: {exc}") from None
        try:
            candidates[dtype] = load(spec, cand_impl, dtype, req.candidate.tunables)
        except CompileFailed as exc:
            evidence = Evidence(op=spec.name, dtype=dtype, detail=str(exc))
            rejection = Verdict.reject("compile_error", str(exc), evidence, log=exc.log)
            return candidates, baselines, rejection.model_dump()
        except InterfaceMismatch as exc:
            evidence = Evidence(op=spec.name, dtype=dtype, detail=str(exc))
            rejection = Verdict.reject("interface_mismatch", str(exc), evidence)
            return candidates, baselines, rejection.model_dump()
    return candidates, baselines, None


def _thresholds(
    req: CheckRequest, spec: OperationSpec, cand_impl: Implementation, notes: list[str]
) -> list[Threshold]:
    """With the domain suite on: the thresholds in the candidate's ``requires`` and code (the
    domain suite tests each side of them); a missing parser or too many are noted."""
    found_thresholds: list[Threshold] = []
    if req.domain:
        found_thresholds = requires_thresholds(cand_impl.header.requires, spec)
        try:
            found_thresholds += code_thresholds(cand_impl.source, spec)
        except ParserUnavailable as exc:
            notes.append(str(exc))
        if len(found_thresholds) > MAX_THRESHOLDS:
            notes.append(
                f"{len(found_thresholds)} thresholds in the candidate; the first "
                f"{MAX_THRESHOLDS} tested"
            )
    return found_thresholds


def _preflight(
    req: CheckRequest,
    spec: OperationSpec,
    candidates: dict[str, Any],
    cases: list[CaseSpec],
    target: str,
) -> tuple[list[str], set[int], dict[str, Any] | None]:
    """Each dtype's cases through :func:`preflight` before any launch: (the partial kernel's
    domain, the ids of the cases outside it, None), or the rejection verdict (as a dict) of the
    first case the kernel cannot launch."""
    partial = req.partial_kernels or spec.contract.partial_kernels
    kernel_domain: list[str] = []
    excluded: set[int] = set()
    for dtype, candidate in candidates.items():
        of_dtype = [c for c in cases if c.dtype == dtype]
        found = preflight(
            candidate, of_dtype, target, _static_smem(candidate), spec=spec, partial=partial
        )
        if found.case is not None:
            verdict = _reject(
                found.reason, found.problem, found.case, spec, detail=found.problem
            ).verdict
            rejection = verdict.model_copy(update={"suites": list(req.suites)}).model_dump()
            return kernel_domain, excluded, rejection
        kernel_domain += [c for c in found.kernel_domain if c not in kernel_domain]
        excluded |= {id(of_dtype[i]) for i in found.excluded}
    return kernel_domain, excluded, None


@dataclass
class _Tally:
    """What the checked cases add up to: the worst error ratio, the cases run, and the domain
    suite's cases and seconds (reported in the notes)."""

    worst: float = 0.0
    run: int = 0
    domain_run: int = 0
    domain_seconds: float = 0.0


def _check_cases(
    req: CheckRequest,
    spec: OperationSpec,
    candidates: dict[str, Any],
    baselines: dict[str, Any],
    cases: list[CaseSpec],
    excluded: set[int],
    generator: Any,
    tally: _Tally,
    notes: list[str],
) -> dict[str, Any] | None:
    """Check every case not excluded, in plan order, with the full or the light protocol as the
    free memory allows (a domain shape that fits neither is skipped and noted, as is one that
    runs out of GPU memory); counts go to ``tally``. Returns the first rejection's verdict (as a
    dict, with the cases checked so far), or None."""
    from astra_graph.harness import worker

    contract = spec.contract
    xp = array_module(generator.random(1))
    for case in cases:
        if id(case) in excluded:
            continue
        worker.progress(case.progress("case"), watch=False)
        started = time.perf_counter()
        try:
            with _step(f"cases of suite {case.suite}", xp):
                mode = _protocol_for(spec, case, xp)
                if mode is None:
                    needed = light_check_bytes(spec, case.dims, case.dtype) / 2**20
                    notes.append(
                        f"skipped domain shape {contract.label(case.dims)} {case.dtype} "
                        f"({case.kind}): needs {needed:.0f} MiB, more than the free memory allows"
                    )
                    continue
                check = check_case if mode == "full" else _light
                tally.worst = max(
                    tally.worst,
                    check(spec, candidates[case.dtype], baselines.get(case.dtype), case, generator),
                )
        except Rejected as rejected:
            return rejected.verdict.model_copy(
                update={"cases_checked": tally.run, "suites": list(req.suites), "notes": notes}
            ).model_dump()
        except MemoryError:  # CuPy's OutOfMemoryError: the estimate fell short on this GPU
            if case.suite != DOMAIN_SUITE:
                raise
            if xp is not np:
                xp.get_default_memory_pool().free_all_blocks()
            notes.append(
                f"skipped domain shape {contract.label(case.dims)} {case.dtype} ({case.kind}): "
                "out of GPU memory"
            )
            continue
        tally.run += 1
        if case.suite == DOMAIN_SUITE:
            tally.domain_seconds += time.perf_counter() - started
            tally.domain_run += 1
    return None


def _accepted(
    req: CheckRequest,
    cases: list[CaseSpec],
    tally: _Tally,
    kernel_domain: list[str],
    notes: list[str],
) -> dict[str, Any]:
    """The accepting verdict (as a dict): what was checked, the worst error, and the notes."""
    shown = [*req.suites, *(["extra shapes"] if req.extra_shapes else [])]
    randoms = len({repr(c.dims) for c in cases if c.suite == "random"})
    if req.domain:
        notes.append(f"domain suite: {tally.domain_run} cases in {tally.domain_seconds:.2f} s")
    if kernel_domain:
        notes.append(f"partial kernel: its domain is {' and '.join(kernel_domain)}")
    return Verdict(
        accepted=True,
        message=(
            f"accepted: {tally.run} cases ({', '.join(shown)}, {randoms} random shapes, "
            f"{tally.domain_run} domain shapes; special values in every case), worst error "
            f"{tally.worst:.2f} of the tolerance"
        ),
        cases_checked=tally.run,
        suites=list(req.suites),
        worst_error_ratio=tally.worst,
        kernel_domain=kernel_domain,
        notes=notes,
    ).model_dump()


DOMAIN_HOST_BYTES = 16 << 20
"""Memory a domain case may use when a check runs on the host (NumPy, CPU tests): larger domain
shapes are skipped there and noted."""


def _free_bytes(xp: Any) -> int:
    """Memory a case may plan to use: on the GPU
    :func:`~harness.domain.plannable_gpu_bytes` (its free memory plus what the pool caches,
    less a margin); on the host :data:`DOMAIN_HOST_BYTES`."""
    if xp is np:
        return DOMAIN_HOST_BYTES
    return plannable_gpu_bytes(xp)


def _protocol_for(spec: OperationSpec, case: CaseSpec, xp: Any) -> str | None:
    """``full`` (the whole protocol), ``light`` (:func:`light_case`) or None (does not fit).

    Only domain cases are measured against the free memory: every other shape was chosen
    small (suites, random shapes under 64 MiB)."""
    if case.suite != DOMAIN_SUITE:
        return "full"
    budget = _free_bytes(xp)
    if full_check_bytes(spec, case.dims, case.dtype) <= budget:
        return "full"
    if spec.contract.rows_independent and light_check_bytes(spec, case.dims, case.dtype) <= budget:
        return "light"
    return None


def _light(spec: OperationSpec, candidate: Any, baseline: Any, case: CaseSpec, rng: Any) -> float:
    del baseline  # the light protocol compares with the reference only (tolerance)
    return light_case(spec, candidate, case, rng)
