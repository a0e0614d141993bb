"""The production GELU activations' fp32 accuracy over every fp16 and bf16 input, on the host.

``gelu`` of kernels/gelu_and_mul/production.cu (the exact GELU) and of
kernels/gelu_tanh_and_mul/production.cu (the tanh approximation) is emulated here step by step in
NumPy float32 for all 65536 bit patterns of each input type. Products and sums round as the
GPU's ``__fmul_rn``/``__fadd_rn`` do (the kernels spell every step as such an intrinsic, so the
compiler contracts nothing); ``__fmaf_rn`` is rounded once from its exact value (:func:`fma32`);
``fminf``/``fmaxf`` ignore a NaN as CUDA's do; the hardware approximations ``ex2.approx.ftz`` and
``rcp.approx.ftz`` are the correctly rounded result moved by every whole number of fp32 ulps up to
their error bounds (:data:`EX2_ULPS`, :data:`RCP_ULPS`), with subnormals flushed. The constants are
read from each kernel's ``#define`` lines, so the test follows the source.

Each emulated activation g(a) is held, for every a, to what the harness's element rule
(``harness.compare``: |out - ref| <= atol + rtol |ref| with the contract's tolerance, and its rules
for infinities and NaN) demands of it for EVERY b of the type: out = round_T(fl32(g b)) rounds
twice more, so (:func:`allowed_error`)

    |g - G| <= ((rtol - c) |G| + (atol - s_T - 2^-149) / b_max) / (1 + c),
    c = u_T (1 + 2^-24) + 2^-24,

with G the operation's own float64 reference at b = 1, u_T the output type's unit roundoff, s_T half
its smallest subnormal and b_max its largest finite value: the relative terms do not depend on b,
the absolute one is tightest at b_max (bf16's 3.4e38 included, a value the harness's whole_type
scenarios draw). A result beyond the type's range is then inf where the reference plus its
tolerance is too, which the rule accepts. The special values are matched in kind
(:func:`violations`): G NaN needs NaN, G = +-inf the same infinity, G = 0 needs 0 (else b = inf
gives an infinity against a NaN reference), and a nonzero g has G's sign (else b = inf gives the
other infinity); a g of 0 against a tiny G is fine (b = inf: NaN where the reference is infinite).

Besides that bound, each activation is checked against the form it replaced (erfcf, and expf with
an IEEE division, both with the library function correctly rounded: their best case) and against
a tighter relative limit, so a change that stays inside the tolerance but loses the correctly
rounded outputs the harness's precision rules compare is caught; and the cancelling forms of
vLLM and FlashInfer fail the same check, which shows that it can fail.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np
import pytest

from astra_graph.harness.scenarios import type_values
from astra_graph.kernel.catalog import resolve
from astra_graph.kernel.dtypes import DTYPES

F32 = np.float32
TYPES = ("float16", "bfloat16")
EX2_ULPS = 2
"""ex2.approx.f32's error bound, in fp32 ulps of the result (CUDA documents exp2f, which is this
instruction plus a fix-up for subnormal results, within 2 ulps); tests/
test_gelu_activation_accuracy_gpu.py checks the bound on the GPU itself."""
RCP_ULPS = 1
"""rcp.approx.f32's error bound, in fp32 ulps (PTX: at most 1 ulp over its whole range)."""
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
"""Half an ulp of 1 in the output type (10 and 7 stored mantissa bits): the relative error of
rounding a normal fp32 value to it."""
FP32_UNIT_ROUNDOFF = 2.0**-24
FP32_SUBNORMAL_HALF_STEP = 2.0**-150
"""Half the smallest fp32 subnormal: the absolute error of an fp32 product that underflows."""
NORMAL_Q_LIMIT = 2.0**-122
"""gelu_and_mul computes Q(|a|) and then a * Q: below this |G|, Q (|G| / |a|, |a| < 2^4) is an
fp32 subnormal whose absolute rounding the bound covers; above it the relative error is a few ulps
and :data:`GELU_RELATIVE_LIMIT` applies."""
GELU_RELATIVE_LIMIT = 2.0**-20
"""Largest relative error of the exact GELU, ex2 and rcp at their bounds included (measured
6.4e-7, 9.5e-7 allowed; the erfcf form it replaced reached 1.2e-5): the fp16 rounding of the
product (2^-11 relative) then differs from the correctly rounded one for about 0.1% of the
elements at most, far from the harness's 2% limit on that fraction
(``compare.EXACT_DROP_LIMIT``)."""
GELU_TANH_RELATIVE_LIMIT = 2.0**-17
"""The same for the tanh approximation (measured 4.9e-6 at a = -10, 7.6e-6 allowed): its tail
multiplies x's rounding by |x| <= 128, as the reference formula's own conditioning does."""

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
_DEFINE = re.compile(
    r"^#define\s+(\w+)\s+(-?(?:0x[0-9a-fA-F.]+p[-+]?\d+|[0-9.]+(?:e[-+]?\d+)?))f\b"
)


def kernel_constants(op: str) -> dict[str, np.float32]:
    """The float ``#define`` constants of ``kernels/<op>/production.cu``, each exact in fp32."""
    constants = {}
    for line in (KERNELS / op / "production.cu").read_text().splitlines():
        if m := _DEFINE.match(line):
            text = m[2]
            value = float.fromhex(text) if "0x" in text else float(text)
            assert float(F32(value)) == value, f"{m[1]} = {text} is not an fp32 value"
            constants[m[1]] = F32(value)
    return constants


# --- fp32 arithmetic as the GPU does it ---------------------------------------------------------


def fma32(a: np.ndarray, b: np.ndarray | np.float32, c: np.ndarray | np.float32) -> np.ndarray:
    """fma(a, b, c) in fp32 rounded once, to nearest even: a * b is exact in float64, the sum's
    float64 rounding error comes from TwoSum, and where the float64 sum sits exactly halfway
    between two fp32 values the error decides the side (rounding the float64 sum alone would
    round twice there)."""
    a64 = np.asarray(a, F32).astype(np.float64)
    b64 = np.asarray(b, F32).astype(np.float64)
    c64 = np.asarray(c, F32).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        product = a64 * b64
        total = product + c64
        back = total - c64
        error = (product - back) + (c64 - (total - back))
        rounded = total.astype(F32)
        below = np.nextafter(rounded, F32(-np.inf))
        above = np.nextafter(rounded, F32(np.inf))
        wide = rounded.astype(np.float64)
        low_tie = total == (wide + below.astype(np.float64)) / 2
        high_tie = total == (wide + above.astype(np.float64)) / 2
    rounded = np.where(low_tie & (error < 0), below, rounded)
    return np.where(high_tie & (error > 0), above, rounded)


def _flush(values: np.ndarray) -> np.ndarray:
    """Subnormals to zero of the same sign (the .ftz of the hardware approximations)."""
    return np.where(np.abs(values) < F32(2.0**-126), values * F32(0), values)


def _moved(values: np.ndarray, ulps: int) -> np.ndarray:
    """Finite values moved by ``ulps`` fp32 steps (an infinity or NaN stays)."""
    for _ in range(abs(ulps)):
        step = np.nextafter(values, F32(np.inf if ulps > 0 else -np.inf))
        values = np.where(np.isfinite(values), step, values)
    return values


def ex2_approx(x: np.ndarray, ulps: int = 0) -> np.ndarray:
    """ex2.approx.ftz.f32: 2^x correctly rounded, moved by ``ulps``, subnormals flushed."""
    with np.errstate(over="ignore"):
        exact = np.exp2(_flush(x).astype(np.float64)).astype(F32)
    return _flush(_moved(exact, ulps))


def rcp_approx(x: np.ndarray, ulps: int = 0) -> np.ndarray:
    """rcp.approx.ftz.f32: 1/x correctly rounded, moved by ``ulps``, subnormals flushed."""
    with np.errstate(divide="ignore"):
        exact = (1.0 / _flush(x).astype(np.float64)).astype(F32)
    return _flush(_moved(exact, ulps))


# --- the kernels' activations, step by step -----------------------------------------------------


class Activation(Protocol):
    """An emulated activation: g(a) with ex2 and rcp off by the given ulps."""

    def __call__(self, a: np.ndarray, ex2_ulps: int = 0, rcp_ulps: int = 0) -> np.ndarray: ...


def gelu_production(k: dict[str, np.float32]) -> Activation:
    """``gelu`` of gelu_and_mul's production kernel with the constants ``k``."""

    def gelu(a: np.ndarray, ex2_ulps: int = 0, rcp_ulps: int = 0) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            t = np.fmin(np.abs(a), k["GELU_CLAMP"])
            t2 = t * t
            yh = t2 * k["HALF_LOG2E_HI"]
            s = k["GELU_EXP_SHIFT"] - yh
            ys = k["GELU_EXP_SHIFT"] - s
            yl = fma32(t2, k["HALF_LOG2E_LO"], fma32(t2, k["HALF_LOG2E_HI"], -ys))
            w = fma32(yl, -k["LN2_UNSHIFTED"], k["GELU_EXP_UNSHIFT"])
            n = np.full_like(t, k["GELU_N4"])
            for name in ("GELU_N3", "GELU_N2", "GELU_N1", "GELU_N0"):
                n = fma32(n, t, k[name])
            d = np.full_like(t, k["GELU_D5"])
            for name in ("GELU_D4", "GELU_D3", "GELU_D2", "GELU_D1", "GELU_D0"):
                d = fma32(d, t, k[name])
            q = ((ex2_approx(s, ex2_ulps) * n) * rcp_approx(d, rcp_ulps)) * w
            h = np.where(a >= 0, F32(1), F32(0))
            return a * np.abs(h - q)

    return gelu


def gelu_tanh_production(k: dict[str, np.float32]) -> Activation:
    """``gelu`` of gelu_tanh_and_mul's production kernel with the constants ``k``."""

    def gelu(a: np.ndarray, ex2_ulps: int = 0, rcp_ulps: int = 0) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            ac = np.fmin(np.fmax(a, -k["TANH_CLAMP"]), k["TANH_CLAMP"])
            a2 = ac * ac
            kk = fma32(a2, k["TANH_K2"], k["TANH_K1"])
            x = ac * kk
            xlo = fma32(ac, kk, -x)
            c = fma32(xlo, k["LN2_SCALED"], k["TANH_SCALE"])
            den = fma32(ex2_approx(x, ex2_ulps), c, k["TANH_SCALE"])
            return (a * k["TANH_SCALE"]) * rcp_approx(den, rcp_ulps)

    return gelu


def _correctly_rounded(function: Callable[[float], float], x: np.ndarray) -> np.ndarray:
    """A float64 library function of fp32 arguments, rounded to fp32: a library's best case."""
    with np.errstate(invalid="ignore"):
        exact = np.asarray(np.frompyfunc(function, 1, 1)(x.astype(np.float64)), np.float64)
        return exact.astype(F32)


def gelu_erfcf_form(a: np.ndarray, *_: int) -> np.ndarray:
    """The previous production form, 0.5f * a * erfcf(-a * 0.70710678f), erfcf correctly rounded."""
    with np.errstate(invalid="ignore", over="ignore"):
        return (F32(0.5) * a) * _correctly_rounded(math.erfc, -a * F32(0.70710678118654752))


def gelu_erf_form(a: np.ndarray, *_: int) -> np.ndarray:
    """vLLM's and FlashInfer's 0.5f * a * (1.0f + erff(a * M_SQRT1_2)), erff correctly rounded."""
    with np.errstate(invalid="ignore", over="ignore"):
        erf = _correctly_rounded(math.erf, a * F32(math.sqrt(0.5)))
        return (F32(0.5) * a) * (F32(1) + erf)


def _tanh_inner(a: np.ndarray) -> np.ndarray:
    # 0.79788456f * (a + 0.044715f * a * a * a), left to right (no contraction: its best case)
    return F32(0.79788456080286536) * (a + ((F32(0.044715) * a) * a) * a)


def gelu_tanh_expf_form(a: np.ndarray, *_: int) -> np.ndarray:
    """The previous production form, a / (1.0f + expf(-2.0f * u)), expf correctly rounded."""
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp((F32(-2) * _tanh_inner(a)).astype(np.float64)).astype(F32)
        return a / (F32(1) + e)


def gelu_tanh_cancelling_form(a: np.ndarray, *_: int) -> np.ndarray:
    """vLLM's and FlashInfer's 0.5f * a * (1.0f + tanhf(u)), tanhf correctly rounded."""
    with np.errstate(invalid="ignore", over="ignore"):
        return (F32(0.5) * a) * (F32(1) + _correctly_rounded(math.tanh, _tanh_inner(a)))


# --- the bound and the check --------------------------------------------------------------------


def all_values(dtype: str) -> np.ndarray:
    """Every bit pattern of the 16-bit type, as the fp32 values the kernels convert them to."""
    patterns = np.arange(1 << 16, dtype=np.uint32)
    if dtype == "float16":
        return patterns.astype(np.uint16).view(np.float16).astype(F32)
    return (patterns << 16).view(F32)  # bfloat16: the top half of an fp32


def reference_gelu(op: str, a: np.ndarray) -> np.ndarray:
    """The operation's own float64 reference at b = 1: gelu(a) exactly as the harness has it."""
    spec, _ = resolve(op)
    with np.errstate(invalid="ignore", over="ignore"):  # the signalling NaN patterns, exp
        x = np.concatenate([a.astype(np.float64), np.ones(a.size)])[None, :]
        return np.asarray(spec.reference(np, {"x": x}, {"d": a.size})["out"][0], np.float64)


def allowed_error(op: str, dtype: str, reference: np.ndarray) -> np.ndarray:
    """How far g may be from the float64 G for every b of ``dtype`` to pass (module docstring)."""
    tolerance = resolve(op)[0].contract.tolerance[dtype]
    specials = [v for v in type_values(DTYPES[dtype]) if math.isfinite(v) and v > 0]
    largest, smallest = max(specials), min(specials)  # +-the largest finite, the least subnormal
    c = UNIT_ROUNDOFF[dtype] * (1 + FP32_UNIT_ROUNDOFF) + FP32_UNIT_ROUNDOFF
    absolute = tolerance.atol - smallest / 2 - 2 * FP32_SUBNORMAL_HALF_STEP
    return ((tolerance.rtol - c) * np.abs(reference) + absolute / largest) / (1 + c)


def violations(g: np.ndarray, reference: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Where g fails for some b: special values by kind, the rest by the bound."""
    g64 = g.astype(np.float64)
    with np.errstate(invalid="ignore"):
        wrong_sign = (g64 != 0) & (np.sign(g64) != np.sign(reference))
        outside = ~np.isfinite(g64) | wrong_sign | ~(np.abs(g64 - reference) <= allowed)
    return np.select(
        [np.isnan(reference), np.isinf(reference), reference == 0],
        [~np.isnan(g64), g64 != reference, g64 != 0],
        outside,
    )


def mufu_corners() -> list[tuple[int, int]]:
    """(ex2, rcp) errors in ulps to emulate: none, and each corner of the bounds. Every later step
    is monotone in both results (products of positive factors, each rounded to nearest, which is
    monotone; then a * |h - q| or a * TANH_SCALE * rcp), so g over all errors within the bounds
    lies between its values at the corners, and so does its distance to G's far side."""
    return [(0, 0)] + [(e, r) for e in (-EX2_ULPS, EX2_ULPS) for r in (-RCP_ULPS, RCP_ULPS)]


def worst_relative(g: np.ndarray, reference: np.ndarray, floor: float = 0.0) -> float:
    """Largest |g - G| / |G| over finite nonzero G with |G| >= floor."""
    where = np.isfinite(reference) & (reference != 0) & (np.abs(reference) >= floor)
    where &= np.isfinite(g)
    return float(
        np.max(np.abs(g[where].astype(np.float64) - reference[where]) / np.abs(reference[where]))
    )


def _describe(a: np.ndarray, g: np.ndarray, reference: np.ndarray, bad: np.ndarray) -> str:
    at = np.flatnonzero(bad)[:5]
    return f"{int(bad.sum())} inputs fail, e.g. " + ", ".join(
        f"a={a[i]!r}: got {g[i]!r}, float64 {reference[i]!r}" for i in at
    )


CASES = {
    "gelu_and_mul": (gelu_production, GELU_RELATIVE_LIMIT, NORMAL_Q_LIMIT),
    "gelu_tanh_and_mul": (gelu_tanh_production, GELU_TANH_RELATIVE_LIMIT, 2.0**-126),
}
"""Per operation: the production activation's emulation, its relative limit and the |G| from
which the limit applies."""


@pytest.fixture(scope="module")
def references() -> dict[tuple[str, str], np.ndarray]:
    return {(op, t): reference_gelu(op, all_values(t)) for op in CASES for t in TYPES}


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("op", list(CASES))
def test_production_activation_passes_the_tolerance_for_every_input_and_every_b(
    references: dict[tuple[str, str], np.ndarray], op: str, dtype: str
) -> None:
    a, reference = all_values(dtype), references[op, dtype]
    allowed = allowed_error(op, dtype, reference)
    activation = CASES[op][0](kernel_constants(op))
    for ex2_ulps, rcp_ulps in mufu_corners():
        g = activation(a, ex2_ulps, rcp_ulps)
        bad = violations(g, reference, allowed)
        assert not bad.any(), f"ex2 {ex2_ulps:+d} ulps, rcp {rcp_ulps:+d}: " + _describe(
            a, g, reference, bad
        )


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("op", list(CASES))
def test_production_activation_keeps_a_few_fp32_ulps_and_beats_the_form_it_replaced(
    references: dict[tuple[str, str], np.ndarray], op: str, dtype: str
) -> None:
    a, reference = all_values(dtype), references[op, dtype]
    make, limit, floor = CASES[op]
    activation = make(kernel_constants(op))
    worst = max(worst_relative(activation(a, e, r), reference, floor) for e, r in mufu_corners())
    replaced = gelu_erfcf_form if op == "gelu_and_mul" else gelu_tanh_expf_form
    before = worst_relative(replaced(a), reference, floor)
    assert worst <= limit, f"relative error {worst:.3g} > {limit:.3g}"
    assert worst <= before, f"relative error {worst:.3g}, the replaced form's {before:.3g}"


@pytest.mark.parametrize("dtype", TYPES)
def test_the_cancelling_forms_fail_the_same_check(
    references: dict[tuple[str, str], np.ndarray], dtype: str
) -> None:
    # 1 + erf(x) and 1 + tanh(u) cancel for negative a: with the library function correctly
    # rounded, the product is 4% off at a = -5 (erf) and 30% (tanh), past both tolerances
    a = all_values(dtype)
    for op, cancelling in (
        ("gelu_and_mul", gelu_erf_form),
        ("gelu_tanh_and_mul", gelu_tanh_cancelling_form),
    ):
        reference = references[op, dtype]
        bad = violations(cancelling(a), reference, allowed_error(op, dtype, reference))
        assert bad.any(), op
        assert (a[bad] < 0).all()  # only in the negative tail
    # and the forms that replaced them pass (before the production rewrite, production itself)
    for op, form in (("gelu_and_mul", gelu_erfcf_form), ("gelu_tanh_and_mul", gelu_tanh_expf_form)):
        reference = references[op, dtype]
        assert not violations(form(a), reference, allowed_error(op, dtype, reference)).any()


def test_gelu_without_the_exponent_shift_fails_for_bf16_only(
    references: dict[tuple[str, str], np.ndarray],
) -> None:
    # with ex2's argument not shifted, exp(-a^2/2) below 2^-126 is flushed for |a| > 13.2 and
    # gelu(a) there (a normal or subnormal fp32 up to ~5e-39) becomes 0: times bf16's b near
    # 3.4e38 that is off by more than atol; fp16's b is at most 65504, where it is not
    constants = kernel_constants("gelu_and_mul")
    unshifted = gelu_production(
        {
            **constants,
            "GELU_EXP_SHIFT": F32(0),
            "GELU_EXP_UNSHIFT": F32(1),
            "LN2_UNSHIFTED": F32(math.log(2)),
        }
    )
    for dtype, fails in (("float16", False), ("bfloat16", True)):
        a, reference = all_values(dtype), references["gelu_and_mul", dtype]
        bad = violations(unshifted(a), reference, allowed_error("gelu_and_mul", dtype, reference))
        assert bool(bad.any()) is fails, dtype
        assert ((a[bad] < -13) & (a[bad] > -14.5)).all()


def test_kernel_constants_are_what_their_names_say() -> None:
    gelu = kernel_constants("gelu_and_mul")
    half_log2e = float(gelu["HALF_LOG2E_HI"]) + float(gelu["HALF_LOG2E_LO"])
    assert abs(half_log2e - math.log2(math.e) / 2) < 1e-15
    assert float(gelu["GELU_EXP_UNSHIFT"]) == 2.0 ** -float(gelu["GELU_EXP_SHIFT"])
    assert gelu["LN2_UNSHIFTED"] == F32(math.log(2) * float(gelu["GELU_EXP_UNSHIFT"]))
    tanh = kernel_constants("gelu_tanh_and_mul")
    k1 = -2 * math.sqrt(2 / math.pi) * math.log2(math.e)
    assert tanh["TANH_K1"] == F32(k1) and tanh["TANH_K2"] == F32(k1 * 0.044715)
    assert tanh["LN2_SCALED"] == F32(math.log(2) * float(tanh["TANH_SCALE"]))


def test_fma32_rounds_once() -> None:
    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24, halfway between two fp32 values: ties to even with
    # c = 0; with c = +-2^-80 the float64 sum rounds back onto the halfway point, and only the
    # sum's rounding error says on which side the exact value lies
    a = np.array([1 + 2.0**-12] * 3, F32)
    c = np.array([0.0, 2.0**-80, -(2.0**-80)], F32)
    got = fma32(a, a, c)
    assert got.tolist() == [1 + 2.0**-11, 1 + 2.0**-11 + 2.0**-23, 1 + 2.0**-11]
