"""Issue 25's serving operations on the host: the whole check protocol with NumPy stand-ins.

Each operation (rms_norm, gelu_and_mul, gelu_tanh_and_mul, rotary_embedding,
per_token_fp8_quant) goes through ``check_case`` on its edge and held-out shapes with a NumPy
kernel computing what the CUDA kernels compute (fp32 math, one rounding), so the contract, the
reference, the harness's int64 inputs, the layout dim and the float8_e4m3fn output type are
exercised end to end without a GPU; and one wrong kernel per new rule is rejected for its reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from astra_graph.harness import scenarios
from astra_graph.harness import worker as worker_module
from astra_graph.harness.cases import Case, make_case
from astra_graph.harness.errors import Rejected
from astra_graph.harness.plan import CaseSpec, draw_params, random_shapes
from astra_graph.harness.verify import check_case
from astra_graph.kernel.catalog import resolve
from astra_graph.kernel.contract import OperationSpec
from astra_graph.kernel.dtypes import DTYPES, FP8_E4M3_MAX
from test_verify_protocol import NumpyKernel

Body = Callable[[Case, int], None]
FP8 = DTYPES["float8_e4m3fn"]
FP32_MIN_SCALE = np.float32(1.0) / (np.float32(FP8_E4M3_MAX) * np.float32(512.0))


def _f32(case: Case, name: str) -> np.ndarray:
    arg = next(a for a in SPECS[case_op(case)].contract.args if a.name == name)
    element = SPECS[case_op(case)].contract.dtype_of(arg, case.dtype)
    return element.to_float64(np, case.arrays[name]).astype(np.float32)


def _store(case: Case, name: str, values: np.ndarray) -> None:
    arg = next(a for a in SPECS[case_op(case)].contract.args if a.name == name)
    element = SPECS[case_op(case)].contract.dtype_of(arg, case.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        case.arrays[name][...] = element.from_float64(np, np.asarray(values, dtype=np.float64))


def case_op(case: Case) -> str:
    """The operation a case belongs to, from its argument names."""
    names = set(case.arrays)
    for op, spec in SPECS.items():
        if names == {a.name for a in spec.contract.args}:
            return op
    raise AssertionError(f"no operation has the arguments {sorted(names)}")


# --- fp32 stand-ins of the CUDA kernels ---------------------------------------------------------


def rms_norm_good(case: Case, _: int) -> None:
    x = _f32(case, "input")
    mean_square = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
    scale = np.float32(1) / np.sqrt(mean_square + np.float32(case.scalars["eps"]))
    _store(case, "out", x * scale * _f32(case, "weight"))


def _gated(case: Case, gelu: Callable[[np.ndarray], np.ndarray]) -> None:
    x = _f32(case, "x")
    d = x.shape[1] // 2
    with np.errstate(over="ignore", invalid="ignore"):
        _store(case, "out", (gelu(x[:, :d]) * x[:, d:]).astype(np.float32))


_ERFC = np.frompyfunc(math.erfc, 1, 1)
SQRT_2_OVER_PI = np.float32(math.sqrt(2.0 / math.pi))


def gelu_good(case: Case, _: int) -> None:
    # the kernels' cancellation-free form: a/2 * erfc(-a / sqrt(2))
    _gated(case, lambda a: 0.5 * a * np.asarray(_ERFC(-a / np.float32(math.sqrt(2.0))), np.float32))


def _tanh_inner(a: np.ndarray) -> np.ndarray:
    return SQRT_2_OVER_PI * (a + np.float32(0.044715) * a * a * a)


def gelu_tanh_good(case: Case, _: int) -> None:
    # the kernels' cancellation-free form: a / (1 + exp(-2u))
    _gated(case, lambda a: a / (np.float32(1) + np.exp(np.float32(-2) * _tanh_inner(a))))


def gelu_tanh_cancelling(case: Case, _: int) -> None:
    """vLLM's and FlashInfer's form, a/2 * (1 + tanh(u)) in fp32: wrong in the negative tail."""
    _gated(case, lambda a: 0.5 * a * (np.float32(1) + np.tanh(_tanh_inner(a))))


def _rotary(case: Case, neox: bool | None = None, rotate_key: bool = True) -> None:
    head_size = int(case.scalars["head_size"])
    half = head_size // 2
    layout = bool(case.scalars["is_neox"]) if neox is None else neox
    rows = _f32(case, "cos_sin_cache")[case.arrays["positions"]]
    cos, sin = rows[:, None, :half], rows[:, None, half:]
    for name in ("query", "key") if rotate_key else ("query",):
        h = _f32(case, name).reshape(case.arrays[name].shape[0], -1, head_size)
        x, y = (h[..., :half], h[..., half:]) if layout else (h[..., 0::2], h[..., 1::2])
        out = np.empty_like(h)
        if layout:
            out[..., :half], out[..., half:] = x * cos - y * sin, y * cos + x * sin
        else:
            out[..., 0::2], out[..., 1::2] = x * cos - y * sin, y * cos + x * sin
        _store(case, name, out.reshape(case.arrays[name].shape))


def rotary_good(case: Case, _: int) -> None:
    _rotary(case)


def _fp8(case: Case, floor: bool = True, toward_zero: bool = False) -> None:
    x = _f32(case, "x")
    scale = np.max(np.abs(x), axis=-1) / np.float32(FP8_E4M3_MAX)
    if floor:
        scale = np.maximum(scale, FP32_MIN_SCALE)
    with np.errstate(divide="ignore", invalid="ignore"):
        quotient = x / scale[:, None]
    _store(case, "scale", scale)
    if toward_zero:  # the E4M3 value next to the quotient on zero's side
        values = FP8.to_float64(np, FP8.from_float64(np, quotient.astype(np.float64)))
        over = np.abs(values) > np.abs(quotient)
        codes = FP8.from_float64(np, values).astype(np.int16)
        codes = np.where(over & (codes & 0x7F > 0), codes - 1, codes).astype(np.uint8)
        case.arrays["out"][...] = codes
        return
    _store(case, "out", quotient)


def fp8_good(case: Case, _: int) -> None:
    _fp8(case)


SPECS: dict[str, OperationSpec] = {
    op: resolve(op)[0]
    for op in (
        "rms_norm",
        "gelu_and_mul",
        "gelu_tanh_and_mul",
        "rotary_embedding",
        "per_token_fp8_quant",
    )
}
GOOD: dict[str, Body] = {
    "rms_norm": rms_norm_good,
    "gelu_and_mul": gelu_good,
    "gelu_tanh_and_mul": gelu_tanh_good,
    "rotary_embedding": rotary_good,
    "per_token_fp8_quant": fp8_good,
}
SMALL_SHAPE_BYTES = 1 << 20
"""Shapes that move at most this many bytes (the contract's ``bytes_moved``) are checked here:
the NumPy stand-ins and the host erfc are slow on prefill shapes; the GPU tests run every shape."""


def _small_shapes(spec: OperationSpec) -> list[dict[str, int]]:
    c = spec.contract
    shapes = c.suite("edge") + c.suite("heldout") + c.suite("tuning")
    return [dims for dims in shapes if c.bytes_for(dims, "float16") <= SMALL_SHAPE_BYTES]


def _run(op: str, body: Body, dims: dict[str, int], dtype: str, seed: int = 5) -> float:
    spec = SPECS[op]
    params = draw_params(spec, {}, np.random.default_rng(seed))
    case = CaseSpec("edge", dims, dtype, params, unchecked=seed % 2)
    return check_case(
        spec, NumpyKernel(body), NumpyKernel(GOOD[op]), case, np.random.default_rng(seed)
    )


def _rejected(op: str, body: Body, dims: dict[str, int], dtype: str = "float16") -> Any:
    with pytest.raises(Rejected) as caught:
        _run(op, body, dims, dtype)
    worker_module._retiring = False  # a sticky fault asks this (test) process to retire
    return caught.value.verdict


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", sorted(GOOD))
def test_fp32_kernels_pass_every_small_suite_shape(op: str, dtype: str) -> None:
    shapes = _small_shapes(SPECS[op])
    assert len(shapes) >= 3, "too few shapes to mean anything"
    for seed, dims in enumerate(shapes):
        ratio = _run(op, GOOD[op], dims, dtype, seed=seed)
        assert 0 <= ratio <= 1, (dims, ratio)


def test_rotary_covers_both_layouts_and_the_wrong_one_is_a_mismatch() -> None:
    spec = SPECS["rotary_embedding"]
    layouts = {
        dims["neox"] for s in ("tuning", "heldout", "edge") for dims in spec.contract.suite(s)
    }
    assert layouts == {0, 1}
    gptj = {"tokens": 3, "num_heads": 3, "num_kv_heads": 1, "head_size": 48, "neox": 0}
    verdict = _rejected("rotary_embedding", lambda case, _: _rotary(case, neox=True), gptj)
    assert verdict.reason == "mismatch"
    neox = {**gptj, "neox": 1}
    verdict = _rejected("rotary_embedding", lambda case, _: _rotary(case, neox=False), neox)
    assert verdict.reason == "mismatch"


def test_rotary_that_skips_the_key_leaves_it_unwritten() -> None:
    dims = {"tokens": 5, "num_heads": 7, "num_kv_heads": 3, "head_size": 80, "neox": 1}
    verdict = _rejected("rotary_embedding", lambda case, _: _rotary(case, rotate_key=False), dims)
    assert verdict.reason == "unwritten_output"
    assert verdict.evidence is not None and verdict.evidence.arg == "key"


def test_random_shapes_draw_both_rotary_layouts() -> None:
    spec = SPECS["rotary_embedding"]
    rng = np.random.default_rng(0)
    drawn = [d for _ in range(20) for d in random_shapes(spec, rng, lambda d: True, "float16")]
    assert {d["neox"] for d in drawn} == {0, 1}
    assert all(spec.contract.shape_problem(d) is None for d in drawn)


def test_fp8_without_the_scale_floor_fails_on_zero_rows() -> None:
    dims = {"tokens": 64, "hidden": 272}
    verdict = _rejected("per_token_fp8_quant", lambda case, _: _fp8(case, floor=False), dims)
    # 0 / 0 gives NaN, and E4M3's one NaN is also the poison's bits: the NaN rows of 'out' read
    # as never written; a wrong 'scale' (0) is a mismatch. Either way the kernel is rejected.
    assert verdict.reason in {"mismatch", "unwritten_output"}
    assert verdict.evidence is not None and verdict.evidence.arg in {"out", "scale"}


def test_fp8_rounding_toward_zero_is_a_precision_loss_inside_the_tolerance() -> None:
    dims = {"tokens": 16, "hidden": 4096}
    verdict = _rejected("per_token_fp8_quant", lambda case, _: _fp8(case, toward_zero=True), dims)
    # every element within one E4M3 ulp: only the correctly-rounded-fraction rule sees it
    assert verdict.reason == "mismatch" and "precision loss" in verdict.message, verdict.message


def test_the_cancelling_tanh_form_fails_in_the_tail_where_the_kernels_form_does_not() -> None:
    # a = -4.5 (u ~ -6.8): 1 + tanh(u) in fp32 is ~1% off; b = 10000 makes the product count
    x = np.zeros((1, 16), dtype=np.float16)
    x[0, :8], x[0, 8:] = -4.5, 10000.0
    spec = SPECS["gelu_tanh_and_mul"]
    reference = spec.reference(np, {"x": x.astype(np.float64)}, {"d": 8})["out"]
    case = Case({"tokens": 1, "d": 8}, "float16", {"x": x, "out": np.empty((1, 8), np.float16)}, {})
    tolerance = spec.contract.tolerance["float16"]
    allowed = tolerance.atol + tolerance.rtol * np.abs(reference)
    for body, inside in ((gelu_tanh_good, True), (gelu_tanh_cancelling, False)):
        body(case, 1)
        error = np.abs(case.arrays["out"].astype(np.float64) - reference)
        assert bool(np.all(error <= allowed)) is inside


# --- the references at the edges of the type (the whole_type scenarios) -----------------------


def _stand_in(
    op: str, arrays: dict[str, np.ndarray], dims: dict[str, int], body: Body, shape: tuple[int, ...]
) -> Any:
    """The stand-in's output (of ``shape``) for ``arrays`` (bf16 storage), as float64."""
    (out,) = {a.name for a in SPECS[op].contract.args if a.role == "output"}
    scalars = {"eps": 1e-6} if op == "rms_norm" else {}
    case = Case(dims, "bfloat16", {**arrays, out: np.empty(shape, np.uint16)}, scalars)
    body(case, 1)
    return BF16.to_float64(np, case.arrays[out])


BF16 = DTYPES["bfloat16"]
BF16_LARGEST = 3.3895313892515355e38


def test_rms_norm_reference_states_the_fp32_sum_of_squares_overflow() -> None:
    # row 0: one element whose square (4e38) overflows fp32, so the whole row's rsqrt is 0 and
    # an inf element gives NaN; row 1: 1e19 squared (1e38) stays finite, the row is normalised
    hidden = 8
    rows = np.ones((3, hidden))
    rows[0, 0], rows[1, 0], rows[2, 1] = 2e19, 1e19, math.inf
    rows[2, 0] = 2e19
    x = BF16.from_float64(np, rows)
    weight = BF16.from_float64(np, np.ones(hidden))
    inputs = {"input": BF16.to_float64(np, x), "weight": BF16.to_float64(np, weight)}
    reference = SPECS["rms_norm"].reference(np, inputs, {"eps": 1e-6, "hidden": hidden})["out"]
    assert (reference[0] == 0).all() and (reference[1, 1:] > 0).all()
    assert math.isnan(reference[2, 1]) and (reference[2, [0, *range(2, hidden)]] == 0).all()
    dims = {"tokens": 3, "hidden": hidden}
    with np.errstate(over="ignore", invalid="ignore"):
        kernel = _stand_in("rms_norm", {"input": x, "weight": weight}, dims, rms_norm_good, x.shape)
    same = (kernel == BF16.to_float64(np, BF16.from_float64(np, reference))) | (
        np.isnan(kernel) & np.isnan(reference)
    )
    assert same.all()


def test_gelu_tanh_reference_follows_the_fp32_form_into_the_far_tail() -> None:
    # a = -8: 1 + tanh(u) is exactly 0 in float64 (u ~ -24.6) but a * exp(2u) ~ -3e-21 is not,
    # and b = bf16's largest makes it ~ -1e18; a = -15: exp(-2u) overflows fp32, the result is
    # -0; -inf / inf is NaN; +inf passes through
    a = np.array([-8.0, -15.0, -math.inf, math.inf])
    b = np.array([BF16_LARGEST, BF16_LARGEST, 1.0, 1.0])
    x = BF16.from_float64(np, np.concatenate([a, b])[None, :])
    d = len(a)
    reference = SPECS["gelu_tanh_and_mul"].reference(np, {"x": BF16.to_float64(np, x)}, {})["out"]
    assert reference[0, 0] < -1e17 and reference[0, 1] == 0 and np.signbit(reference[0, 1])
    assert math.isnan(reference[0, 2]) and reference[0, 3] == math.inf
    dims = {"tokens": 1, "d": d}
    kernel = _stand_in("gelu_tanh_and_mul", {"x": x}, dims, gelu_tanh_good, (1, d))
    tolerance = SPECS["gelu_tanh_and_mul"].contract.tolerance["bfloat16"]
    finite = np.isfinite(reference)
    error = np.abs(kernel[finite] - reference[finite])
    assert (error <= tolerance.atol + tolerance.rtol * np.abs(reference[finite])).all()
    assert np.isnan(kernel[0, 2]) and kernel[0, 3] == math.inf


def test_fp8_quant_inputs_stay_finite_so_a_nan_in_out_is_always_poison() -> None:
    spec = SPECS["per_token_fp8_quant"]
    assert next(a for a in spec.contract.args if a.name == "x").non_finite == []
    dims = {"tokens": 64, "hidden": 4096}
    case = make_case(spec, dims, "bfloat16", np.random.default_rng(7))
    scenarios.apply(spec, case.arrays, "bfloat16", np.random.default_rng(8))
    x = BF16.to_float64(np, case.arrays["x"])
    assert np.isfinite(x).all() and (np.abs(x) == BF16_LARGEST).any()

    def writes_a_nan(case: Case, launch: int) -> None:
        fp8_good(case, launch)
        case.arrays["out"][0, 0] = 0x7F  # E4M3's positive NaN

    verdict = _rejected("per_token_fp8_quant", writes_a_nan, {"tokens": 5, "hidden": 272})
    # the poison's sign decides which: its own bits read as unwritten, the other NaN as a
    # mismatch (no finite row's reference is NaN); never accepted
    assert verdict.reason in {"unwritten_output", "mismatch"}
    assert verdict.evidence is not None and verdict.evidence.arg == "out"
