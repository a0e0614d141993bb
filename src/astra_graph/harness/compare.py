"""Pure comparison of a kernel's outputs with the float64 reference (NumPy or CuPy arrays).

Element rule: ``abs(got - ref) <= atol + rtol * abs(ref)`` with the contract's tolerance for the
output's type. An infinite output passes only where the reference, rounded once to the output's
type, is the same infinity (a result beyond fp16's range rounds to inf; that is right). A NaN
output passes only where the reference itself is NaN. A finite output against an infinite
reference fails.

Precision rules, on outputs of at least :data:`STATS_MIN_ELEMENTS` elements, each against the
baseline kernel's statistics on the same inputs (docs/VERIFICATION.md gives the measurements):

* **mean error**: the mean of ``error / allowed`` may be at most ``contract.error_ratio`` times
  the baseline's (floored at the error of the correctly rounded reference and at
  :data:`RATIO_FLOOR`);
* **correctly rounded fraction** (fp16 and bf16 outputs, see
  :data:`ROUNDED_RULES_MAX_ITEMSIZE`): the fraction of elements whose bits equal the reference
  rounded once to the output type may fall at most :data:`EXACT_DROP_LIMIT` below the
  baseline's. A kernel that computes in fp32 and rounds once gets nearly every element exactly
  right; double rounding, rounding toward zero or a low-precision reduction loses a large share
  while its mean error stays inside a loose ratio;
* **bias** (every floating output; fp32 ones with :data:`FP32_BIAS_LIMIT`): the mean *signed*
  ``error / allowed``, and the mean error
  signed by the reference (positive = away from zero), may differ from the baseline's by at
  most :data:`BIAS_LIMIT` plus :data:`BIAS_SIGMAS` standard errors. Correct rounding errors cancel;
  a systematic loss does not.

On CuPy arrays of fp16, bf16 or fp32, an output with no failing element is summarised by one
kernel (:mod:`harness.compare_gpu`, the same rule); a failing one, and every other case, goes
through the element-wise path here, which names the element and the reason.

**Error bounds.** A reference may return, beside an output ``name``, an array ``name:bound``
(:func:`bound_key`; float64, the output's shape): at each element, how far a correct evaluation
of the contract's formula in fp32 can land from the float64 value beyond the tolerance, ``inf``
where the contract leaves the element open. It states what float64 cannot: cancellation (the
rounding of large terms in a small result), weights that fp32 flushes to zero, intermediates
past fp32's range that make one evaluation order inf and another finite. An element within
``bound`` of the reference plus the tolerance at ``|reference| + bound``, or anywhere where the
bound is ``inf``, and outside the tolerance alone, is compared as equal to the reference (it
counts as exact in the statistics; such elements are the few where fp32 and float64 part ways,
while every element the tolerance accepts keeps its error in the statistics). Elements whose
bound is 0 keep the element rule above unchanged.

For an ``inout`` argument the elements can hold their input value only where the kernel did not
change them: when *every* failing element still holds its input bits the argument reads as not
written (``unwritten_output``); a kernel that also wrote wrong values elsewhere wrote it wrong
(``mismatch``), whatever some elements happen to hold. Failing elements whose reference
overflows the output type are left out of that test (a saturating write of the largest finite
value looks like an input drawn over the whole type); when no other element fails, it is a
``mismatch``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from astra_graph.harness import compare_gpu
from astra_graph.harness.results import Evidence, RejectReason
from astra_graph.kernel.contract import Contract, OperationSpec, TensorArg
from astra_graph.kernel.dtypes import DType

STATS_MIN_ELEMENTS = 1024
"""Outputs smaller than this are checked against the tolerance only: the statistics of fewer
elements are too noisy to compare."""
RATIO_FLOOR = 0.05
"""Least baseline error the mean-error rule assumes (mean error / allowed), for references that
are exactly representable, where even the rounding error is zero."""
EXACT_DROP_LIMIT = 0.02
"""Largest drop of the correctly rounded fraction below the baseline's. Measured on the H100
(docs/VERIFICATION.md): correct kernels of every operation (block shapes, warp per row, fast
intrinsics, fp64 accumulation) stay within 0.005 of the production kernel; double rounding
loses ~0.27, rounding toward zero ~0.5."""
BIAS_LIMIT = 0.01
"""Largest difference of mean signed error (in units of the tolerance) from the baseline's,
beyond the statistical term. Correct kernels measured within 0.002 (docs/VERIFICATION.md)."""
BIAS_SIGMAS = 5.0
"""Standard errors of the two means allowed on top of :data:`BIAS_LIMIT`."""
ROUNDED_RULES_MAX_ITEMSIZE = 2
"""The correctly-rounded-fraction and bias rules apply to outputs of at most this many bytes
(fp16, bf16): computed in fp32 and stored narrower, every correct kernel rounds nearly the same
value once, so its result is almost always the correctly rounded one. An fp32 output computed
in fp32 legitimately differs in its last bits between correct kernels (operation order,
intrinsics), so for it the correctly rounded fraction is not compared, and the bias rule has its
own limit (:data:`FP32_BIAS_LIMIT`)."""
FP32_BIAS_LIMIT = 0.04
"""The bias rule for outputs wider than :data:`ROUNDED_RULES_MAX_ITEMSIZE` (fp32): the largest
difference of mean signed error from the baseline's, in tolerance units, beyond the statistical
term. Correct fp32 kernels differ in their last bits, but not systematically: the approximate
``ex2``/``lg2`` instructions err by at most ~2^-22 relative, ~0.03 of the merge LSE's tolerance
(atol 1e-5) even if every error had one sign, while a red-team kernel adding 1.5e-6 to every
LSE shifts the mean by ~0.09 (0.06 at the largest LSEs). To be confirmed by the H100 run of every
correct variant (tests/test_correct_kernels_gpu.py), as the fp16 limits were."""
BOUND_SUFFIX = ":bound"
"""A reference's key for an output's error bound: ``f"{name}{BOUND_SUFFIX}"``."""
CHUNK_ELEMENTS = 1 << 24
"""Outputs are compared in stretches of this many elements (~10 float64 temporaries each)."""


class Finding(Evidence):
    """Evidence plus the rejection reason it supports."""

    reason: RejectReason

    def evidence(self) -> Evidence:
        return Evidence.model_validate(self.model_dump(exclude={"reason"}))


def bound_key(name: str) -> str:
    """The key of output ``name``'s error bound in a reference's outputs."""
    return f"{name}{BOUND_SUFFIX}"


def array_module(array: Any) -> Any:
    """``cupy`` for a CuPy array, else ``numpy``."""
    if type(array).__module__.startswith("cupy"):
        return sys.modules["cupy"]
    return np


def bits(xp: Any, array: Any) -> Any:
    """The array's elements as unsigned integers of the same width (a view)."""
    return array.view(xp.dtype(f"uint{array.dtype.itemsize * 8}"))


def index_of(shape: tuple[int, ...], flat: int) -> list[int]:
    return [int(i) for i in np.unravel_index(flat, shape)]


def value_at(xp: Any, element: DType | None, array: Any, flat: int) -> float:
    """One element's value as a float (converting only that element from storage form)."""
    one = array.reshape(-1)[flat : flat + 1]
    return float((one if element is None else element.to_float64(xp, one))[0])


def first_difference(xp: Any, a: Any, b: Any) -> int | None:
    """Flat index of the first element whose bits differ, or None when identical."""
    differs = (bits(xp, a) != bits(xp, b)).reshape(-1)
    if not bool(differs.any()):
        return None
    return int(xp.argmax(differs))


@dataclass
class OutputError:
    """How one output compares with the reference."""

    arg: str
    finding: Finding | None
    worst_ratio: float
    """Largest ``error / allowed`` over the elements (inf when an element fails outright)."""
    mean_ratio: float
    """Mean ``error / allowed`` over measurable elements (output and reference finite)."""
    rounding_ratio: float
    """The same mean for the reference rounded once to the output type (the unavoidable error)."""
    elements: int
    measured: int = 0
    """Measurable elements: the statistics below are over these."""
    exact_fraction: float = 1.0
    """Fraction whose value equals the reference rounded once to the output type."""
    bias: float = 0.0
    """Mean signed ``(got - ref) / allowed``."""
    magnitude_bias: float = 0.0
    """Mean ``(got - ref) / allowed`` signed by the reference (negative = toward zero)."""
    bias_std_err: float = 0.0
    """Standard error of either bias (from the spread of the signed ratio)."""
    itemsize: int = 2
    """Bytes per element of the output's type (which precision rules apply)."""


@dataclass
class _Elementwise:
    """Per-element comparison of one stretch of an output (flat arrays)."""

    value: Any
    reference: Any
    error: Any
    allowed: Any
    ok: Any
    signed: Any
    rounding: Any
    exact: Any
    measurable: Any


def _elementwise(
    xp: Any, element: DType, tol: Any, got: Any, ref: Any, statistics: bool = True
) -> _Elementwise:
    with np.errstate(invalid="ignore", over="ignore"):
        finite_ref = xp.isfinite(ref)
        allowed = xp.where(finite_ref, tol.atol + tol.rtol * xp.abs(ref), 0.0)
        value = element.to_float64(xp, got)
        rounded = element.to_float64(xp, element.from_float64(xp, ref))
        error = xp.abs(value - ref)
        # At the edges of the output type the fp32 math of a correct kernel and the float64
        # reference part ways; two rules keep them together, and neither lets a finite value
        # stand where the reference is not (a non-finite input squashed still fails):
        # - an infinity passes where the reference moved by its tolerance rounds to it: at
        #   65519.997 the reference rounds to fp16's 65504, fp32 math one ulp higher to inf
        #   (fused_add_rmsnorm at 65536x32768 on the H100);
        # - NaN passes where the reference in the output type is infinite: fp32 overflows or
        #   rounds a factor of an infinite input to zero where float64 does not (gelu(a) for
        #   a < -13.5 times b = inf; a rotation of values near bf16's largest, inf - inf).
        reach = element.to_float64(xp, element.from_float64(xp, ref + xp.copysign(allowed, ref)))
        ok = (
            (error <= allowed)
            | (xp.isinf(value) & ((value == rounded) | (value == reach)))
            | (xp.isnan(value) & (xp.isnan(ref) | xp.isinf(rounded)))
        )
        measurable = ok & xp.isfinite(value) & finite_ref & (allowed > 0)
        divisor = xp.where(allowed > 0, allowed, 1.0)
        signed = xp.where(measurable, (value - ref) / divisor, 0.0)
        if not statistics:  # the tolerance only: a run whose statistics nobody compares
            return _Elementwise(value, ref, error, allowed, ok, signed, None, None, measurable)
        rounding = xp.where(measurable, xp.abs(rounded - ref) / divisor, 0.0)
        exact = measurable & (value == rounded)
    return _Elementwise(value, ref, error, allowed, ok, signed, rounding, exact, measurable)


def output_error(
    contract: Contract,
    arg: TensorArg,
    dtype: str,
    got: Any,
    reference: Any,
    before: Any = None,
    *,
    stale_reason: RejectReason = "unwritten_output",
    stale_detail: str = "every failing element still holds its input value: never written",
    statistics: bool = True,
    bound: Any = None,
) -> OutputError:
    """Compare one output (storage dtype) with its float64 reference.

    ``bound`` is the reference's error bound for this output (module docstring), or None.

    ``before`` is what the buffer held before the run (storage dtype, or float64): an ``inout``
    argument's input, or the stale result a buffer held. When every failing element still holds
    it (elements whose reference overflows the type aside: module docstring), the finding is
    ``stale_reason`` with ``stale_detail``; otherwise ``mismatch`` at the
    worst element. The work goes in stretches of :data:`CHUNK_ELEMENTS`, so memory stays bounded
    however large the output. Without ``statistics`` only the tolerance and the worst element
    are computed (the precision fields stay at their defaults), in about half the GPU work.
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
    if bound is not None:
        ref = _settled(xp, element, tol, got, ref, xp.asarray(bound, dtype=xp.float64))
    if xp is not np and compare_gpu.supports(element.name):
        summary = compare_gpu.summarize(element.name, got, ref, tol.atol, tol.rtol)
        if not summary.bad:  # a failing output is named by the element-wise path below
            return _from_summary(arg.name, element, int(got.size), summary, statistics)
    flat_got, flat_ref = got.reshape(-1), ref.reshape(-1)
    flat_before = None if before is None else xp.asarray(before).reshape(-1)
    totals = _Totals()
    for start in range(0, flat_got.size, CHUNK_ELEMENTS):
        stop = min(start + CHUNK_ELEMENTS, flat_got.size)
        part = _elementwise(
            xp, element, tol, flat_got[start:stop], flat_ref[start:stop], statistics
        )
        at, sums = _stretch_sums(xp, part, statistics)
        bad = ~part.ok
        # one copy to the host per stretch, not one synchronisation per statistic
        bad_here = totals.add(start, at, sums.get() if hasattr(sums, "get") else sums)
        if flat_before is not None and bad_here:
            earlier = flat_before[start:stop]
            if earlier.dtype == got.dtype:
                same = bits(xp, flat_got[start:stop]) == bits(xp, earlier)
            else:
                same = part.value == earlier.astype(xp.float64)
            # An element whose reference overflows the type says nothing of a missing write: a
            # saturating kernel writes the largest finite value there, which an input drawn
            # over the whole type may hold (fused_add_rmsnorm rounding toward zero, -65504 +
            # -65504 in fp16, on the H100).
            judged = bad & ~_overflows(xp, element, flat_ref[start:stop])
            kept = judged & same
            kept_here = int(xp.count_nonzero(kept))
            if kept_here and totals.stale_at < 0:
                totals.stale_at = start + int(xp.argmax(kept))
            totals.stale += kept_here
            totals.judged += int(xp.count_nonzero(judged))
    finding = None
    if totals.failing:
        all_stale = flat_before is not None and 0 < totals.stale == totals.judged
        flat = totals.stale_at if all_stale else totals.worst
        one = _elementwise(xp, element, tol, flat_got[flat : flat + 1], flat_ref[flat : flat + 1])
        finding = Finding(
            reason=stale_reason if all_stale else "mismatch",
            op=contract.name,
            dtype=dtype,
            arg=arg.name,
            index=index_of(got.shape, flat),
            got=float(one.value[0]),
            expected=float(one.reference[0]),
            error=float(one.error[0]),
            allowed=float(one.allowed[0]),
            detail=stale_detail if all_stale else totals.mismatch_detail(),
        )
    return totals.result(arg.name, finding, int(got.size), element.itemsize)


def _settled(xp: Any, element: DType, tol: Any, got: Any, ref: Any, bound: Any) -> Any:
    """The reference with each element that fails the plain tolerance but is accepted by the
    error bound replaced by the output's own value (within the bound plus the tolerance at
    ``|reference| + bound``, or anywhere where the bound is inf): a copy when any element is
    settled, else ``ref`` itself (no float64 copy on the common path); in stretches of
    :data:`CHUNK_ELEMENTS` so the temporaries stay bounded.

    Only elements the tolerance alone rejects are settled: an element it accepts keeps its
    reference, so the precision statistics still see its error (settling every element with a
    bound counted them all as exact, and hid a kernel rounding toward zero)."""
    if bound.shape != ref.shape:
        raise ValueError(f"error bound has shape {bound.shape}, expected {ref.shape}")
    settled = None  # copied at the first settled element: most comparisons settle none
    flat_got, flat_ref, flat_bound = got.reshape(-1), ref.reshape(-1), bound.reshape(-1)
    for start in range(0, flat_ref.size, CHUNK_ELEMENTS):
        stop = min(start + CHUNK_ELEMENTS, flat_ref.size)
        part_bound = flat_bound[start:stop]
        if not bool((part_bound > 0).any()):
            continue
        part_ref = flat_ref[start:stop]
        value = element.to_float64(xp, flat_got[start:stop])
        with np.errstate(invalid="ignore", over="ignore"):
            error = xp.abs(value - part_ref)
            plain = (error <= tol.atol + tol.rtol * xp.abs(part_ref)) | (value == part_ref)
            reach = xp.abs(part_ref) + part_bound  # the tolerance applies at the far end too
            allowed = tol.atol + tol.rtol * reach + part_bound
            accept = ~plain & (xp.isinf(part_bound) | ((part_bound > 0) & (error <= allowed)))
        if not bool(accept.any()):
            continue
        if settled is None:
            settled = ref.copy()
            flat_ref = settled.reshape(-1)
        flat_ref[start:stop] = xp.where(accept, value, flat_ref[start:stop])
    return ref if settled is None else settled


def _stretch_sums(xp: Any, part: _Elementwise, statistics: bool) -> tuple[Any, Any]:
    """One stretch's worst element (index, on the device) and its sums, stacked in one array
    in the order :meth:`_Totals.add` reads them (zeros for the statistics when not asked)."""
    ratio = xp.abs(part.signed)
    score = xp.where(part.ok, ratio, xp.inf)
    at = xp.argmax(score)
    zero = xp.zeros((), dtype=xp.float64)
    with np.errstate(invalid="ignore"):
        sums = xp.stack(
            [
                score[at],
                part.measurable.sum(dtype=xp.float64),
                part.exact.sum(dtype=xp.float64) if statistics else zero,
                ratio.sum() if statistics else zero,
                part.rounding.sum() if statistics else zero,
                part.signed.sum() if statistics else zero,
                (part.signed * part.signed).sum() if statistics else zero,
                (part.signed * xp.sign(xp.where(part.measurable, part.reference, 0.0))).sum()
                if statistics
                else zero,
                (~part.ok).sum(dtype=xp.float64),
            ]
        )
    return at, sums


def _overflows(xp: Any, element: DType, ref: Any) -> Any:
    """Where a finite reference rounds past the output type's finite values."""
    with np.errstate(invalid="ignore", over="ignore"):
        rounded = element.to_float64(xp, element.from_float64(xp, ref))
        return xp.isfinite(ref) & ~xp.isfinite(rounded)


@dataclass
class _Totals:
    """The running sums of :func:`output_error` over the stretches of one output."""

    worst_ratio: float = 0.0
    worst: int = -1
    count: int = 0
    exact: int = 0
    ratio_sum: float = 0.0
    rounding_sum: float = 0.0
    signed_sum: float = 0.0
    signed_sq: float = 0.0
    magnitude_sum: float = 0.0
    failing: int = 0
    judged: int = 0
    """Failing elements whose reference does not overflow the type (:func:`_overflows`)."""
    stale: int = 0
    """Of those, the ones equal to what the buffer held before the run."""
    stale_at: int = -1

    def add(self, start: int, at: Any, sums: Any) -> int:
        """One stretch's sums (in :func:`output_error`'s order), the stretch starting at flat
        index ``start`` with its worst element at ``at`` (read from the device only when it is
        the worst so far); returns the stretch's failing elements."""
        (top, measured, exact, ratios, roundings, signed, squares, magnitude, bad) = (
            float(v) for v in sums
        )
        if self.worst < 0 or top > self.worst_ratio:
            self.worst_ratio, self.worst = top, start + int(at)
        self.count += int(measured)
        self.exact += int(exact)
        self.ratio_sum += ratios
        self.rounding_sum += roundings
        self.signed_sum += signed
        self.signed_sq += squares
        self.magnitude_sum += magnitude
        self.failing += int(bad)
        return int(bad)

    def mismatch_detail(self) -> str:
        if not self.stale:
            return "outside the tolerance"
        return (
            f"outside the tolerance ({self.failing} elements; {self.stale} of them equal to "
            "what the buffer held before the run)"
        )

    def result(
        self, name: str, finding: Finding | None, elements: int, itemsize: int
    ) -> OutputError:
        count = self.count
        mean_signed = self.signed_sum / count if count else 0.0
        variance = max(self.signed_sq / count - mean_signed**2, 0.0) if count else 0.0
        return OutputError(
            arg=name,
            finding=finding,
            worst_ratio=math.inf if self.failing else self.worst_ratio,
            mean_ratio=self.ratio_sum / count if count else 0.0,
            rounding_ratio=self.rounding_sum / count if count else 0.0,
            elements=elements,
            measured=count,
            exact_fraction=self.exact / count if count else 1.0,
            bias=mean_signed,
            magnitude_bias=self.magnitude_sum / count if count else 0.0,
            bias_std_err=math.sqrt(variance / count) if count else 0.0,
            itemsize=itemsize,
        )


def _from_summary(
    name: str, element: DType, elements: int, summary: compare_gpu.Summary, statistics: bool
) -> OutputError:
    """The OutputError of an output with no failing element, from the GPU kernel's sums (the
    same fields the element-wise path fills, through the same :meth:`_Totals.result`; without
    ``statistics`` the same defaults)."""
    totals = _Totals(worst_ratio=summary.worst_ratio, count=summary.measured)
    if statistics:
        totals.exact = summary.exact
        totals.ratio_sum, totals.rounding_sum = summary.ratio_sum, summary.rounding_sum
        totals.signed_sum, totals.signed_sq = summary.signed_sum, summary.signed_sq
        totals.magnitude_sum = summary.magnitude_sum
    return totals.result(name, None, elements, element.itemsize)


def compare_outputs(
    spec: OperationSpec,
    inputs_before: Mapping[str, Any],
    got: Mapping[str, Any],
    reference: Mapping[str, Any],
    dtype: str,
) -> tuple[Finding | None, float]:
    """(first failing finding or None, worst ``error / allowed`` over all written arguments).

    ``got`` maps every output and inout argument to its array after the run (storage dtype);
    ``reference`` to its float64 reference; ``inputs_before`` holds the inputs before the run
    (float64 or storage dtype; used for ``inout`` arguments). The finding's ``dims`` are left
    for the caller. Tolerance only: no precision statistics (the timing re-check uses it).
    """
    worst = 0.0
    first: Finding | None = None
    for arg in spec.contract.args:
        if not arg.written:
            continue
        before = inputs_before.get(arg.name) if arg.role == "inout" else None
        result = output_error(
            spec.contract,
            arg,
            dtype,
            got[arg.name],
            reference[arg.name],
            before,
            statistics=False,
            bound=reference.get(bound_key(arg.name)),
        )
        worst = max(worst, result.worst_ratio)
        if first is None and result.finding is not None:
            first = result.finding
    return first, worst


def precision_problem(
    contract: Contract, candidate: OutputError, baseline: OutputError | None
) -> str | None:
    """Why the candidate's statistics show a loss of precision against the baseline's, or None.

    The three rules of the module docstring, checked in order; the message names the rule, the
    two figures and the limit.
    """
    if baseline is None or min(candidate.measured, baseline.measured) < STATS_MIN_ELEMENTS:
        return None
    name = repr(candidate.arg)
    floor = max(baseline.mean_ratio, candidate.rounding_ratio, RATIO_FLOOR)
    limit = contract.error_ratio * floor
    if candidate.mean_ratio > limit:
        return (
            f"precision loss: mean error {candidate.mean_ratio:.3g} of the tolerance on {name}, "
            f"baseline {baseline.mean_ratio:.3g}, limit {contract.error_ratio:g} x {floor:.3g} "
            f"= {limit:.3g}"
        )
    wide = candidate.itemsize > ROUNDED_RULES_MAX_ITEMSIZE
    if not wide and candidate.exact_fraction < baseline.exact_fraction - EXACT_DROP_LIMIT:
        return (
            f"precision loss: {candidate.exact_fraction:.1%} of {name} equal the correctly "
            f"rounded reference, baseline {baseline.exact_fraction:.1%} (at most "
            f"{EXACT_DROP_LIMIT:.0%} fewer allowed)"
        )
    noise = BIAS_SIGMAS * math.hypot(candidate.bias_std_err, baseline.bias_std_err)
    allowed = (FP32_BIAS_LIMIT if wide else BIAS_LIMIT) + noise
    for what, got, base in (
        ("mean signed error", candidate.bias, baseline.bias),
        ("mean error toward zero", candidate.magnitude_bias, baseline.magnitude_bias),
    ):
        if abs(got - base) > allowed:
            return (
                f"precision loss: {what} {got:+.4f} of the tolerance on {name}, baseline "
                f"{base:+.4f}, limit +-{allowed:.4f} around it"
            )
    return None
