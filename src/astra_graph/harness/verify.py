"""Verification: is a candidate's output right, on fresh inputs, every time, for every case?

Two layers:

* :func:`output_error` / :func:`compare_outputs` compare arrays (NumPy or CuPy, so the verdict
  logic is tested on the CPU) with the float64 reference, element by element:
  ``abs(got - ref) <= atol + rtol * abs(ref)`` with the contract's tolerance for the output's
  type. An infinite output passes only where the reference, rounded once to the output's type,
  is the same infinity (a result beyond fp16's range rounds to inf; that is right). A NaN output
  passes only where the reference itself is NaN. A finite output against an infinite reference
  fails. For ``inout`` arguments a failing element still equal to its input value was not
  written: ``unwritten_output``.
* :func:`run_check` is the worker job behind :meth:`Evaluator.check`: for every case (suite
  shape x dtype, plus each ``[[specials]]`` scenario on a few shapes) it draws fresh inputs from
  a seed no prompt ever sees, runs the reference (float64, on the GPU) and the baseline on
  separate copies, runs the candidate twice with its outputs poisoned first with a NaN of an
  unusual payload and then with a finite constant, and rejects with the first of:
  ``launch_error``/``crashed`` (checked after every launch; ``crashed`` also for a write into the
  guard bands around the candidate's buffers), ``input_mutated`` (a pure input not
  bit-identical afterwards), ``unwritten_output`` (an element still holding the poison after both
  runs), ``nondeterministic`` (the two runs differ in any bit; skipped when the contract allows
  atomics), ``mismatch`` (outside the tolerance, or a precision downgrade, below). Before any
  case: ``compile_error`` and ``interface_mismatch`` (also for a suite shape that the candidate's
  ``requires`` excludes). A held-out case's rejection message names no shape (see
  :data:`HIDDEN_SUITES`).

The error-ratio rule catches a precision downgrade that the tolerance alone lets through. A
kernel's error on one output is the *mean* over elements of ``error / allowed``; the mean
measures systematic loss of precision and, unlike the worst element, is not decided by one
unlucky rounding. The candidate's mean may be at most ``contract.error_ratio`` times the
baseline's on the same inputs, where the baseline's is floored at the error of the reference
itself rounded once to the output type (no kernel can beat that) and at :data:`RATIO_FLOOR`
(for references exactly representable in the output type), so a perfect baseline does not make
ordinary rounding fail. The rule applies to outputs of at least
:data:`RATIO_MIN_ELEMENTS` elements, where the mean is statistically stable.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from astra_graph.contract import (
    Contract,
    Implementation,
    OperationSpec,
    Special,
    TensorArg,
    load_implementation,
)
from astra_graph.dtypes import DType
from astra_graph.models import Evidence, RejectReason, Verdict

RATIO_MIN_ELEMENTS = 1024
"""Outputs smaller than this are checked against the tolerance only, not the error ratio."""
RATIO_FLOOR = 0.05
"""Least baseline error the rule assumes (mean error / allowed), for references that are exactly
representable, where even the rounding error is zero."""
SPECIAL_SHAPES_PER_SUITE = 1
"""Each special-value scenario runs on this many shapes of every suite checked."""
CHUNK_ELEMENTS = 1 << 24
"""Outputs are compared in stretches of this many elements (~10 float64 temporaries each)."""
LARGE_CASE_BYTES = 256 * 1024 * 1024
"""After a case this large the memory pool's cached blocks are released."""

_NAN_POISON_BITS = {
    "float16": 0x7E5A,
    "bfloat16": 0x7FE5,
    "float32": 0x7FC5A5A5,
    "float64": 0x7FF8A5A5A5A5A5A5,
}
"""First poison: quiet NaNs with a payload arithmetic never produces (GPUs make canonical NaNs)."""
_FINITE_POISON = -1234.5
"""Second poison, for floating types: exactly representable in each of them."""
_INT_POISON = {1: 0x5A, 2: 0x5A5A, 4: 0x5A5A5A5A, 8: 0x5A5A5A5A5A5A5A5A}
GUARD_BYTES = 4096
"""Guard band before and after each of the candidate's buffers: an out-of-bounds write that does
not fault (it lands in memory the process owns, such as the reference) is caught there."""
_GUARD_BITS = {1: 0xC3, 2: 0xC3C3, 4: 0xC3C3C3C3, 8: 0xC3C3C3C3C3C3C3C3}


class Finding(Evidence):
    """Evidence plus the rejection reason it supports."""

    reason: RejectReason

    def evidence(self) -> Evidence:
        return Evidence.model_validate(self.model_dump(exclude={"reason"}))


class BaselineError(RuntimeError):
    """The baseline itself failed to compile or launch: bad input, not the candidate's fault."""


class NoGpu(RuntimeError):
    """The worker sees no CUDA device."""


def array_module(array: Any) -> Any:
    """``cupy`` for a CuPy array, else ``numpy``."""
    if type(array).__module__.startswith("cupy"):
        return sys.modules["cupy"]
    return np


def _bits(xp: Any, array: Any) -> Any:
    return array.view(xp.dtype(f"uint{array.dtype.itemsize * 8}"))


def _index(shape: tuple[int, ...], flat: int) -> list[int]:
    return [int(i) for i in np.unravel_index(flat, shape)]


def _value_at(xp: Any, element: DType | None, array: Any, flat: int) -> float:
    """One element's value as a float (converting only that element from storage form)."""
    one = array.reshape(-1)[flat : flat + 1]
    return float((one if element is None else element.to_float64(xp, one))[0])


@dataclass
class OutputError:
    """How one output compares with the reference."""

    arg: str
    finding: Finding | None
    worst_ratio: float
    """Largest ``error / allowed`` over the elements (inf when an element fails outright)."""
    mean_ratio: float
    """Mean ``error / allowed`` over elements where output and reference are finite."""
    rounding_ratio: float
    """The same mean for the reference rounded once to the output type (the unavoidable error)."""
    elements: int


@dataclass
class _Elementwise:
    """Per-element comparison of one stretch of an output (flat arrays)."""

    value: Any
    reference: Any
    error: Any
    allowed: Any
    ok: Any
    ratio: Any
    rounding: Any
    measurable: Any


def _elementwise(xp: Any, element: DType, tol: Any, got: Any, ref: Any) -> _Elementwise:
    with np.errstate(invalid="ignore", over="ignore"):
        finite_ref = xp.isfinite(ref)
        allowed = xp.where(finite_ref, tol.atol + tol.rtol * xp.abs(ref), 0.0)
        value = element.to_float64(xp, got)
        rounded = element.to_float64(xp, element.from_float64(xp, ref))
        error = xp.abs(value - ref)
        ok = (
            (error <= allowed)
            | (xp.isinf(value) & (value == rounded))
            | (xp.isnan(value) & xp.isnan(ref))
        )
        measurable = ok & xp.isfinite(value) & finite_ref & (allowed > 0)
        divisor = xp.where(allowed > 0, allowed, 1.0)
        ratio = xp.where(measurable, error / divisor, 0.0)
        rounding = xp.where(measurable, xp.abs(rounded - ref) / divisor, 0.0)
    return _Elementwise(value, ref, error, allowed, ok, ratio, rounding, measurable)


def output_error(
    contract: Contract,
    arg: TensorArg,
    dtype: str,
    got: Any,
    reference: Any,
    original: Any = None,
) -> OutputError:
    """Compare one output (storage dtype) with its float64 reference.

    ``original`` is the argument's value before the run (storage dtype, or float64) for
    ``inout`` arguments: a failing element equal to it was never written. The work goes in
    stretches of :data:`CHUNK_ELEMENTS`, so memory stays bounded however large the output.
    """
    xp = array_module(got)
    element: DType = contract.dtype_of(arg, dtype)
    tol = contract.tolerance[element.name]
    ref = xp.asarray(reference, dtype=xp.float64)
    if ref.shape != got.shape:
        raise ValueError(
            f"{contract.name}: reference output {arg.name!r} has shape {ref.shape}, "
            f"expected {got.shape}"
        )
    flat_got, flat_ref = got.reshape(-1), ref.reshape(-1)
    flat_original = None if original is None else xp.asarray(original).reshape(-1)
    worst_ratio, worst, count, ratio_sum, rounding_sum = 0.0, -1, 0, 0.0, 0.0
    stale_at: int | None = None
    for start in range(0, flat_got.size, CHUNK_ELEMENTS):
        stop = min(start + CHUNK_ELEMENTS, flat_got.size)
        part = _elementwise(xp, element, tol, flat_got[start:stop], flat_ref[start:stop])
        score = xp.where(part.ok, part.ratio, xp.inf)
        at = int(xp.argmax(score))
        if worst < 0 or float(score[at]) > worst_ratio:
            worst_ratio, worst = float(score[at]), start + at
        count += int(xp.count_nonzero(part.measurable))
        ratio_sum += float(part.ratio.sum())
        rounding_sum += float(part.rounding.sum())
        if flat_original is not None and stale_at is None and not bool(part.ok.all()):
            before = flat_original[start:stop]
            if before.dtype == got.dtype:
                same = _bits(xp, flat_got[start:stop]) == _bits(xp, before)
            else:
                same = part.value == before.astype(xp.float64)
            stale = ~part.ok & same
            if bool(stale.any()):
                stale_at = start + int(xp.argmax(stale))
    finding = None
    if worst_ratio == np.inf:  # some element failed (a stale one included)
        reason: RejectReason = "mismatch" if stale_at is None else "unwritten_output"
        flat = worst if stale_at is None else stale_at
        one = _elementwise(xp, element, tol, flat_got[flat : flat + 1], flat_ref[flat : flat + 1])
        finding = Finding(
            reason=reason,
            op=contract.name,
            dtype=dtype,
            arg=arg.name,
            index=_index(got.shape, flat),
            got=float(one.value[0]),
            expected=float(one.reference[0]),
            error=float(one.error[0]),
            allowed=float(one.allowed[0]),
            detail=(
                "still holds its input value: never written"
                if reason == "unwritten_output"
                else "outside the tolerance"
            ),
        )
    return OutputError(
        arg=arg.name,
        finding=finding,
        worst_ratio=worst_ratio,
        mean_ratio=ratio_sum / count if count else 0.0,
        rounding_ratio=rounding_sum / count if count else 0.0,
        elements=int(got.size),
    )


def compare_outputs(
    spec: OperationSpec,
    case_inputs_f64: Mapping[str, Any],
    got: Mapping[str, Any],
    reference: Mapping[str, Any],
    dtype: str,
) -> tuple[Evidence | None, float]:
    """(first failing evidence or None, worst ``error / allowed`` over all written arguments).

    ``got`` maps every output and inout argument to its array after the run (storage dtype);
    ``reference`` to its float64 reference; ``case_inputs_f64`` holds the inputs before the run
    (float64 or storage dtype; used for ``inout`` arguments). The evidence is a
    :class:`Finding` (an Evidence with ``reason``); its ``dims`` are left for the caller.
    """
    worst = 0.0
    first: Finding | None = None
    for arg in spec.contract.args:
        if not arg.written:
            continue
        original = case_inputs_f64.get(arg.name) if arg.role == "inout" else None
        result = output_error(
            spec.contract, arg, dtype, got[arg.name], reference[arg.name], original
        )
        worst = max(worst, result.worst_ratio)
        if first is None and result.finding is not None:
            first = result.finding
    return first, worst


def ratio_problem(
    contract: Contract, candidate: OutputError, baseline: OutputError | None
) -> str | None:
    """Why the candidate's mean error breaks the error-ratio rule against the baseline, or None."""
    if baseline is None or candidate.elements < RATIO_MIN_ELEMENTS:
        return None
    floor = max(baseline.mean_ratio, candidate.rounding_ratio, RATIO_FLOOR)
    limit = contract.error_ratio * floor
    if candidate.mean_ratio <= limit:
        return None
    return (
        f"precision loss: mean error {candidate.mean_ratio:.3g} of the tolerance on "
        f"{candidate.arg!r}, baseline {baseline.mean_ratio:.3g}, limit "
        f"{contract.error_ratio:g} x {floor:.3g} = {limit:.3g}"
    )


def first_difference(xp: Any, a: Any, b: Any) -> int | None:
    """Flat index of the first element whose bits differ, or None when identical."""
    differs = (_bits(xp, a) != _bits(xp, b)).reshape(-1)
    if not bool(differs.any()):
        return None
    return int(xp.argmax(differs))


def poison_bits(element: DType, first: bool) -> int:
    """The bits an output is filled with before the first or the second checked run."""
    if not element.floating:
        bits = _INT_POISON[element.itemsize]
        return bits if first else bits ^ 0xFF
    if first:
        return _NAN_POISON_BITS[element.name]
    value = element.from_float64(np, np.asarray([_FINITE_POISON], dtype=np.float64))
    return int(_bits(np, value)[0])


def fill_poison(xp: Any, array: Any, element: DType, first: bool) -> None:
    """Poison an output before a checked run."""
    _bits(xp, array).fill(poison_bits(element, first))


def poison_matches(xp: Any, array: Any, element: DType, first: bool) -> Any:
    """Boolean mask of the elements still holding that run's poison."""
    return _bits(xp, array) == poison_bits(element, first)


# --- the worker job --------------------------------------------------------------------------


@dataclass(frozen=True)
class CaseSpec:
    suite: str
    dims: dict[str, int]
    dtype: str
    special: Special | None = None

    def progress(self, step: str) -> dict[str, Any]:
        return {
            "step": step if self.special is None else f"{step}, scenario {self.special.name}",
            "suite": self.suite,
            "dims": self.dims,
            "dtype": self.dtype,
        }


def plan_cases(
    contract: Contract, suites: list[str], extra_shapes: list[dict[str, int]]
) -> list[CaseSpec]:
    """Every (suite shape, dtype) case, then each special scenario on a few shapes per suite."""
    shaped = [(suite, dims) for suite in suites for dims in contract.suite(suite)]
    shaped += [("extra", dims) for dims in extra_shapes]
    cases = [CaseSpec(suite, dims, dtype) for suite, dims in shaped for dtype in contract.dtypes]
    for special in contract.specials:
        for suite in suites:
            for dims in contract.suite(suite)[:SPECIAL_SHAPES_PER_SUITE]:
                cases += [CaseSpec(suite, dims, dtype, special) for dtype in contract.dtypes]
    return cases


_SPECS: dict[str, OperationSpec] = {}
_RNG: Any = None


def _operation(request: Mapping[str, Any]) -> OperationSpec:
    key = repr(sorted(request.items()))
    if key not in _SPECS:
        _SPECS[key] = OperationSpec(
            contract=Contract.model_validate(request["contract"]), folder=Path(request["folder"])
        )
    return _SPECS[key]


def _rng() -> Any:
    """One generator per worker, seeded from the OS: no prompt or log ever shows the seed."""
    global _RNG
    if _RNG is None:
        import cupy

        _RNG = cupy.random.default_rng(secrets.randbits(63))
    return _RNG


def _implementation(request: Mapping[str, str], contract: Contract) -> Implementation:
    return load_implementation(Path(request["path"]), contract, source=request["source"])


class Rejected(Exception):
    """A case failed: ``verdict`` says why."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.message)
        self.verdict = verdict


HIDDEN_SUITES = ("heldout",)
"""Suites whose shapes no agent may see: a rejection's message names no shape or value for them
(the evidence keeps everything, for people; callers must not put it in prompts)."""


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
        op=spec.name,
        dims=case.dims,
        dtype=case.dtype,
        suite=case.suite,
        **fields,
    )
    if not evidence.detail:
        evidence.detail = message
    if case.special is not None:
        evidence.detail = f"{evidence.detail} [scenario {case.special.name}]"
    if case.suite in HIDDEN_SUITES:
        arg = f" in {fields['arg']!r}" if fields.get("arg") else ""
        what = f"{reason.replace('_', ' ')}{f' ({kind})' if kind else ''}{arg}"
        text = f"{what} at a held-out shape ({case.dtype})"
    else:
        text = f"{message} at {spec.contract.label(case.dims)} {case.dtype} ({case.suite})"
    return Rejected(Verdict.reject(reason, text, evidence))


@dataclass
class _Guarded:
    """A buffer holding one argument between two guard bands of known bits."""

    buffer: Any
    width: int
    """Elements in each band."""

    def damage(self, xp: Any) -> str | None:
        """Where the bands were written, or None when both are intact."""
        bits = _GUARD_BITS[self.buffer.dtype.itemsize]
        before = (_bits(xp, self.buffer[: self.width]) != bits).reshape(-1)
        after = (_bits(xp, self.buffer[-self.width :]) != bits).reshape(-1)
        if bool(before.any()):
            return f"{self.width - int(xp.argmax(before))} elements before its start"
        if bool(after.any()):
            last = self.width - 1 - int(xp.argmax(after[::-1]))
            return f"up to {last + 1} elements past its end"
        return None


def _guarded(xp: Any, array: Any) -> tuple[Any, _Guarded]:
    """A copy of ``array`` placed between guard bands (alignment kept: the band is 4 KiB)."""
    width = GUARD_BYTES // array.dtype.itemsize
    buffer = xp.empty(array.size + 2 * width, dtype=array.dtype)
    bits = _GUARD_BITS[array.dtype.itemsize]
    _bits(xp, buffer[:width]).fill(bits)
    _bits(xp, buffer[-width:]).fill(bits)
    view = buffer[width : width + array.size].reshape(array.shape)
    view[...] = array
    return view, _Guarded(buffer, width)


def _synchronize(xp: Any) -> None:
    if xp is not np:
        from astra_graph.harness.launch import synchronize

        synchronize()


def _launch_checked(
    xp: Any, kernel: Any, case_data: Any, case: CaseSpec, spec: OperationSpec
) -> None:
    """Launch and synchronise; a refused launch is launch_error, a fault crashes the worker."""
    from astra_graph.harness import worker
    from astra_graph.harness.launch import LaunchError

    worker.progress(case.progress("run"))  # the stall limit holds while the kernel runs
    try:
        kernel.launch(case_data)
        _synchronize(xp)
    except LaunchError as exc:
        if exc.sticky:
            worker.retire()
            raise _reject("crashed", f"CUDA fault: {exc}", case, spec, detail=str(exc)) from None
        raise _reject("launch_error", str(exc), case, spec, detail=str(exc)) from None
    worker.progress(watch=False)


def check_case(
    spec: OperationSpec,
    candidate: Any,
    baseline: Any,
    case: CaseSpec,
    params: Mapping[str, float],
    rng: Any,
) -> float:
    """Run one case; returns the worst error ratio or raises Rejected.

    ``candidate`` and ``baseline`` (which may be None) are LoadedKernels, or any object with
    ``launch(case)`` and ``unsupported(dims)``; with a NumPy ``rng`` the whole case runs on the
    host (the CPU tests use kernels written in NumPy).
    """
    from astra_graph.harness import worker
    from astra_graph.harness.launch import Case, LaunchError, make_case

    xp = array_module(rng.random(1))
    contract = spec.contract
    data = make_case(spec, case.dims, case.dtype, rng, params, case.special)
    guards: dict[str, _Guarded] = {}
    for arg in contract.args:
        data.arrays[arg.name], guards[arg.name] = _guarded(xp, data.arrays[arg.name])
    inputs = {a.name: data.arrays[a.name] for a in contract.args if a.role != "output"}
    pristine = {name: array.copy() for name, array in inputs.items()}
    inputs_f64 = {
        a.name: contract.dtype_of(a, case.dtype).to_float64(xp, inputs[a.name])
        for a in contract.args
        if a.role != "output"
    }
    reference = spec.reference(xp, inputs_f64, data.scalars)
    del inputs_f64
    written = [a for a in contract.args if a.written]
    missing = [a.name for a in written if a.name not in reference]
    if missing:
        raise ValueError(f"{contract.name}: the reference returns no {missing[0]!r}")

    base_errors: dict[str, OutputError] = {}
    if baseline is not None and baseline.unsupported(case.dims) is None:
        base_arrays = {
            a.name: (
                pristine[a.name].copy()
                if a.role != "output"
                else xp.empty_like(data.arrays[a.name])
            )
            for a in contract.args
        }
        base_case = Case(data.dims, data.dtype, base_arrays, data.scalars)
        worker.progress(case.progress("baseline run"))
        try:
            baseline.launch(base_case)
            _synchronize(xp)
        except LaunchError as exc:
            if exc.sticky:
                worker.retire()
            raise BaselineError(f"baseline {baseline.impl.path}: {exc}") from None
        for arg in written:
            base_errors[arg.name] = output_error(
                contract, arg, case.dtype, base_arrays[arg.name], reference[arg.name]
            )
        worker.progress(watch=False)
        del base_arrays, base_case

    elements = {a.name: contract.dtype_of(a, case.dtype) for a in contract.args}
    outputs = [a for a in written if a.role == "output"]
    runs: list[dict[str, Any]] = []
    for first in (True, False):
        for arg in outputs:
            fill_poison(xp, data.arrays[arg.name], elements[arg.name], first)
        for arg in contract.args:
            if arg.role == "inout":
                data.arrays[arg.name][...] = pristine[arg.name]
        _launch_checked(xp, candidate, data, case, spec)
        for arg in contract.args:
            damage = guards[arg.name].damage(xp)
            if damage:
                raise _reject(
                    "crashed",
                    f"out-of-bounds write around {arg.name!r}",
                    case,
                    spec,
                    kind="out-of-bounds write",
                    arg=arg.name,
                    detail=f"the guard band around {arg.name!r} was written: {damage}",
                )
        for arg in contract.args:
            if arg.role == "input":
                flat = first_difference(xp, data.arrays[arg.name], pristine[arg.name])
                if flat is not None:
                    element = elements[arg.name]
                    raise _reject(
                        "input_mutated",
                        f"input {arg.name!r} was modified",
                        case,
                        spec,
                        arg=arg.name,
                        index=_index(data.arrays[arg.name].shape, flat),
                        got=_value_at(xp, element, data.arrays[arg.name], flat),
                        expected=_value_at(xp, element, pristine[arg.name], flat),
                        detail="inputs that are not inout must be bit-identical after the run",
                    )
        runs.append({a.name: data.arrays[a.name].copy() for a in written})

    for arg in outputs:
        element = elements[arg.name]
        stale = (
            poison_matches(xp, runs[0][arg.name], element, True)
            & poison_matches(xp, runs[1][arg.name], element, False)
        ).reshape(-1)
        if bool(stale.any()):
            flat = int(xp.argmax(stale))
            raise _reject(
                "unwritten_output",
                f"output {arg.name!r} has elements the kernel never wrote",
                case,
                spec,
                arg=arg.name,
                index=_index(runs[0][arg.name].shape, flat),
                expected=_value_at(xp, None, reference[arg.name], flat),
                detail=f"{int(stale.sum())} of {stale.size} elements kept the poison value",
            )
    if contract.deterministic:
        for arg in written:
            flat = first_difference(xp, runs[0][arg.name], runs[1][arg.name])
            if flat is not None:
                element = elements[arg.name]
                raise _reject(
                    "nondeterministic",
                    f"two runs on the same inputs differ in {arg.name!r}",
                    case,
                    spec,
                    arg=arg.name,
                    index=_index(runs[0][arg.name].shape, flat),
                    got=_value_at(xp, element, runs[1][arg.name], flat),
                    expected=_value_at(xp, element, runs[0][arg.name], flat),
                    detail="second run (got) vs first run (expected), same inputs",
                )

    worst = 0.0
    for run in runs if not contract.deterministic else runs[:1]:
        for arg in written:
            original = pristine[arg.name] if arg.role == "inout" else None
            result = output_error(
                contract, arg, case.dtype, run[arg.name], reference[arg.name], original
            )
            worst = max(worst, result.worst_ratio)
            if result.finding is not None:
                found = result.finding
                raise _reject(
                    found.reason,
                    f"{arg.name!r} differs from the reference"
                    if found.reason == "mismatch"
                    else f"{arg.name!r} was not written",
                    case,
                    spec,
                    **found.evidence().model_dump(
                        include={"arg", "index", "got", "expected", "error", "allowed", "detail"}
                    ),
                )
            problem = ratio_problem(contract, result, base_errors.get(arg.name))
            if problem:
                raise _reject("mismatch", problem, case, spec, kind="precision loss", arg=arg.name)
    if data.nbytes > LARGE_CASE_BYTES and xp is not np:
        del data, inputs, pristine, reference, runs
        xp.get_default_memory_pool().free_all_blocks()
    return worst


def run_check(request: Mapping[str, Any]) -> dict[str, Any]:
    """Worker job: verify a candidate on every planned case; returns a Verdict as a dict.

    ``request``: ``op`` (folder, contract), ``baseline`` and ``candidate`` (path, source),
    ``suites``, ``extra_shapes``, ``tunables`` (the candidate's), ``params`` (contract
    parameters such as eps). Raises BaselineError when the baseline fails and NoGpu.
    """
    from astra_graph.harness import worker
    from astra_graph.harness.compile import gpu_arch
    from astra_graph.harness.launch import CompileFailed, InterfaceMismatch, load_kernel

    if gpu_arch() is None:
        raise NoGpu("no CUDA GPU visible to the evaluation worker")
    spec = _operation(request["op"])
    contract = spec.contract
    base_impl = _implementation(request["baseline"], contract)
    cand_impl = _implementation(request["candidate"], contract)
    cases = plan_cases(contract, list(request["suites"]), list(request["extra_shapes"]))
    params = dict(request.get("params") or {})

    candidates, baselines = {}, {}
    for dtype in contract.dtypes:
        worker.progress({"step": "compile", "dtype": dtype}, watch=False)
        try:
            baselines[dtype] = load_kernel(spec, base_impl, dtype)
        except (CompileFailed, InterfaceMismatch) as exc:
            raise BaselineError(f"baseline: {exc}") from None
        try:
            candidates[dtype] = load_kernel(spec, cand_impl, dtype, request.get("tunables"))
        except CompileFailed as exc:
            evidence = Evidence(op=spec.name, dtype=dtype, detail=str(exc))
            return Verdict.reject("compile_error", str(exc), evidence, log=exc.log).model_dump()
        except InterfaceMismatch as exc:
            evidence = Evidence(op=spec.name, dtype=dtype, detail=str(exc))
            return Verdict.reject("interface_mismatch", str(exc), evidence).model_dump()

    worst = 0.0
    for checked, case in enumerate(cases):
        worker.progress(case.progress("case"), watch=False)
        candidate = candidates[case.dtype]
        try:
            unmet = candidate.unsupported(case.dims)
            if unmet is not None:
                raise _reject(
                    "interface_mismatch",
                    f"the candidate does not support this shape (requires {unmet})",
                    case,
                    spec,
                    detail=f"requires {unmet}",
                )
            worst = max(
                worst, check_case(spec, candidate, baselines[case.dtype], case, params, _rng())
            )
        except Rejected as rejected:
            return rejected.verdict.model_copy(
                update={"cases_checked": checked, "suites": list(request["suites"])}
            ).model_dump()
    covered = [*request["suites"], *(["extra shapes"] if request["extra_shapes"] else [])]
    scenarios = sum(case.special is not None for case in cases)
    return Verdict(
        accepted=True,
        message=(
            f"accepted: {len(cases)} cases ({', '.join(covered)}; "
            f"{scenarios} with special values), worst error {worst:.2f} of the tolerance"
        ),
        cases_checked=len(cases),
        suites=list(request["suites"]),
        worst_error_ratio=worst,
    ).model_dump()
