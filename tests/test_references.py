"""The float64 references: hand-computed cases and independent formulas, numpy and cupy."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from astra_graph.kernel.catalog import kernels_root
from astra_graph.kernel.contract import load_contract

Reference = Callable[..., dict[str, Any]]


def reference(op: str) -> Reference:
    return load_contract(kernels_root() / op).reference


@pytest.fixture(autouse=True)
def _floating_point_warnings_are_errors() -> Iterator[None]:
    """A reference must not warn (NaN from -inf - -inf, overflow) on any input it documents."""
    with warnings.catch_warnings(), np.errstate(divide="raise", invalid="raise", over="raise"):
        warnings.simplefilter("error")
        yield


# --- silu_and_mul ------------------------------------------------------------------------------


def test_silu_and_mul_hand_computed() -> None:
    x = np.array([[0.0, 1.0, 2.0, 3.0], [-1.0, 4.0, 0.5, -2.0]])
    out = reference("silu_and_mul")(np, {"x": x}, {"d": 2})["out"]
    sigmoid_1 = 0.7310585786300049  # 1 / (1 + e^-1)
    sigmoid_minus_1 = 1.0 - sigmoid_1
    sigmoid_4 = 0.9820137900379085
    expected = np.array(
        [[0.0, 1.0 * sigmoid_1 * 3.0], [-1.0 * sigmoid_minus_1 * 0.5, -8.0 * sigmoid_4]]
    )
    np.testing.assert_allclose(out, expected, rtol=1e-15, atol=0)


def test_silu_and_mul_matches_tanh_form_of_the_logistic() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(scale=3.0, size=(5, 2 * 24))
    a, b = x[:, :24], x[:, 24:]
    expected = a * 0.5 * (1.0 + np.tanh(a / 2.0)) * b  # sigmoid(a) = (1 + tanh(a/2)) / 2
    out = reference("silu_and_mul")(np, {"x": x}, {"d": 24})["out"]
    assert out.shape == (5, 24)
    np.testing.assert_allclose(out, expected, rtol=1e-13, atol=1e-300)


def test_silu_and_mul_saturates_without_warnings_for_large_negative_inputs() -> None:
    x = np.array([[-10000.0, 10000.0, 2.0, 3.0]])
    with np.errstate(over="ignore"):  # exp(10000) overflowing to inf is the documented path
        out = reference("silu_and_mul")(np, {"x": x}, {"d": 2})["out"]
    assert out[0, 0] == 0.0 and math.copysign(1.0, out[0, 0]) == -1.0
    assert out[0, 1] == 10000.0 * 3.0


def test_silu_and_mul_bound_spans_fp32_saturation_and_nothing_else() -> None:
    # a = -90: fp32's exp(90) overflows (silu -0), float64's silu is -90 e^-90 ~ -7.4e-38
    x = np.array([[-90.0, -90.0, -10000.0, 2.0, -np.inf, 3.0e38, np.inf, 3.0e38, 5.0, 3.0]])
    with np.errstate(over="ignore", invalid="ignore"):
        out = reference("silu_and_mul")(np, {"x": x}, {"d": 5})
    bound, value = out["out:bound"][0], out["out"][0]
    assert bound[0] == pytest.approx(90.0 * math.exp(-90.0) * 3.0e38, rel=1e-12)  # ~22
    assert value[0] == 0.0
    # times an infinite b: float64's -inf is the reference (fp32's NaN passes as the element
    # rule's NaN-where-infinite), never an open element
    assert value[1] == -np.inf and bound[1] == 0.0
    assert bound[2] == 0.0  # float64 saturates too: one answer
    assert bound[3] == 0.0  # unsaturated: the tolerance alone
    assert np.isnan(value[4]) and bound[4] == 0.0  # a = -inf: NaN in every precision


# --- merge_attn_states_lse -----------------------------------------------------------------------


def merge_inputs(s_a: list[float], s_b: list[float], head_dim: int = 4) -> dict[str, np.ndarray]:
    """One token, ``len(s_a)`` heads, v filled with distinct non-zero values."""
    heads = len(s_a)
    v_a = np.arange(1, heads * head_dim + 1, dtype=np.float64).reshape(1, heads, head_dim)
    v_b = -0.5 * v_a[:, :, ::-1] + 7.0
    return {
        "v_a": v_a,
        "s_a": np.array([s_a], dtype=np.float64),
        "v_b": v_b,
        "s_b": np.array([s_b], dtype=np.float64),
    }


def merge(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    params = {"tokens": 1, "heads": inputs["s_a"].shape[1], "head_dim": inputs["v_a"].shape[2]}
    return reference("merge_attn_states_lse")(np, inputs, params)


def test_merge_hand_computed() -> None:
    inputs = merge_inputs([1.0, 3.0], [1.0, 1.0])
    out = merge(inputs)
    v_a, v_b = inputs["v_a"][0], inputs["v_b"][0]
    # head 0: equal LSEs, equal weights, the mean; merged LSE log2(2^1 + 2^1) = 2
    np.testing.assert_allclose(out["v_merged"][0, 0], (v_a[0] + v_b[0]) / 2, rtol=1e-15)
    assert out["s_merged"][0, 0] == pytest.approx(2.0, rel=1e-15)
    # head 1: weights 2^3 : 2^1 = 0.8 : 0.2; merged LSE log2(8 + 2) = log2(10)
    np.testing.assert_allclose(out["v_merged"][0, 1], 0.8 * v_a[1] + 0.2 * v_b[1], rtol=1e-15)
    assert out["s_merged"][0, 1] == pytest.approx(math.log2(10.0), rel=1e-15)


def test_merge_matches_natural_log_softmax() -> None:
    rng = np.random.default_rng(11)
    tokens, heads, head_dim = 3, 5, 16
    inputs = {
        "v_a": rng.normal(size=(tokens, heads, head_dim)),
        "s_a": rng.uniform(-5, 15, size=(tokens, heads)),
        "v_b": rng.normal(size=(tokens, heads, head_dim)),
        "s_b": rng.uniform(-5, 15, size=(tokens, heads)),
    }
    params = {"tokens": tokens, "heads": heads, "head_dim": head_dim}
    out = reference("merge_attn_states_lse")(np, inputs, params)
    # independent formulation: natural-log LSEs, a two-way softmax, logaddexp for the LSE
    ln_a, ln_b = inputs["s_a"] * math.log(2), inputs["s_b"] * math.log(2)
    ln_total = np.logaddexp(ln_a, ln_b)
    p_a, p_b = np.exp(ln_a - ln_total), np.exp(ln_b - ln_total)
    expected_v = p_a[..., None] * inputs["v_a"] + p_b[..., None] * inputs["v_b"]
    np.testing.assert_allclose(out["v_merged"], expected_v, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["s_merged"], ln_total / math.log(2), rtol=1e-14)
    np.testing.assert_allclose(out["s_merged"], np.logaddexp2(inputs["s_a"], inputs["s_b"]))


def test_merge_one_side_empty_gives_the_other_side_exactly() -> None:
    inputs = merge_inputs([-np.inf, 2.5, -np.inf], [0.75, -np.inf, -3.0])
    out = merge(inputs)
    np.testing.assert_array_equal(out["v_merged"][0, 0], inputs["v_b"][0, 0])
    np.testing.assert_array_equal(out["v_merged"][0, 1], inputs["v_a"][0, 1])
    np.testing.assert_array_equal(out["v_merged"][0, 2], inputs["v_b"][0, 2])
    np.testing.assert_array_equal(out["s_merged"][0], [0.75, 2.5, -3.0])


def test_merge_both_sides_empty_gives_zero_and_minus_infinity() -> None:
    inputs = merge_inputs([-np.inf, 1.0], [-np.inf, 1.0])
    out = merge(inputs)
    np.testing.assert_array_equal(out["v_merged"][0, 0], np.zeros(4))
    assert out["s_merged"][0, 0] == -np.inf
    assert np.all(np.isfinite(out["v_merged"][0, 1])) and out["s_merged"][0, 1] == 2.0


def test_merge_large_magnitude_lse() -> None:
    inputs = merge_inputs([30000.0, -20000.0, 150.0], [-20000.0, 30000.0, 130.0])
    with np.errstate(under="ignore"):  # 2^-50000 underflowing to 0 is the intended weight
        out = merge(inputs)
    np.testing.assert_array_equal(out["v_merged"][0, 0], inputs["v_a"][0, 0])
    np.testing.assert_array_equal(out["v_merged"][0, 1], inputs["v_b"][0, 1])
    np.testing.assert_array_equal(out["s_merged"][0, :2], [30000.0, 30000.0])
    assert out["s_merged"][0, 2] == pytest.approx(150.0 + math.log2(1.0 + 2.0**-20), rel=1e-15)
    w = 2.0**-20
    expected = (inputs["v_a"][0, 2] + w * inputs["v_b"][0, 2]) / (1.0 + w)
    np.testing.assert_allclose(out["v_merged"][0, 2], expected, rtol=1e-15)


def test_merge_bound_follows_the_terms_and_opens_where_they_overflow_fp32() -> None:
    inputs = merge_inputs([0.0, 0.0, 0.0], [0.0, -130.0, 0.0])
    inputs["v_a"][0, 0, 0] = 1000.0
    inputs["v_b"][0, 0, 0] = -1000.0  # cancelling terms: a result near 0, terms of 500
    inputs["v_b"][0, 1, 0] = 3.0e38  # a weight of 2^-130: flushed to zero by ex2.approx.ftz
    inputs["v_a"][0, 2, 0] = inputs["v_b"][0, 2, 0] = 3.3e38  # the sum reaches fp32's max
    with np.errstate(under="ignore"):
        bound = merge(inputs)["v_merged:bound"]
    assert bound.shape == inputs["v_a"].shape
    assert 1000.0 * 2.0**-20 <= bound[0, 0, 0] < 1000.0 * 2.0**-17
    assert bound[0, 1, 0] >= 3.0e38 * 2.0**-130 > 0.2  # the flushed weight's term
    assert np.isinf(bound[0, 2, 0])
    assert np.all(bound[0, 0, 1:] < 1e-4)
    # opposite signs near the largest value: the weighted sum is 0, defined, never open
    inputs["v_b"][0, 2, 0] = -3.3e38
    with np.errstate(under="ignore"):
        bound = merge(inputs)["v_merged:bound"]
    assert np.isfinite(bound[0, 2, 0])


def test_merge_bound_is_nothing_where_one_side_has_no_weight() -> None:
    # s_b far below s_a: the result is v_a exactly, whatever the weights' own errors
    inputs = merge_inputs([-20000.0, 1.0], [-30000.0, -np.inf])
    inputs["v_b"][...] = 3.0e38
    with np.errstate(under="ignore"):
        bound = merge(inputs)["v_merged:bound"]
    v_a = inputs["v_a"][0]
    assert np.all(bound[0, 0] <= 2.0**-21 * np.abs(v_a[0]))
    assert np.all(bound[0, 1] == 0.0)  # an empty side


def test_merge_bound_is_zero_where_an_input_is_not_finite() -> None:
    inputs = merge_inputs([-np.inf, 1.0], [2.0, 1.0])
    inputs["v_a"][0, 1, 0] = np.inf
    with np.errstate(invalid="ignore"):
        bound = merge(inputs)["v_merged:bound"]
    assert bound[0, 1, 0] == 0.0
    assert np.all(np.isfinite(bound))


# --- fused_add_rmsnorm ---------------------------------------------------------------------------


def test_fused_add_rmsnorm_bound_opens_only_rows_whose_fp32_square_sum_overflows() -> None:
    hidden = 4
    inputs = {
        "input": np.array([[1.0, 2.0, 3.0, 4.0], [1.0e20, 2.0, 3.0, 4.0]]),
        "residual": np.zeros((2, hidden)),
        "weight": np.ones(hidden),
    }
    out = reference("fused_add_rmsnorm")(np, inputs, {"hidden": hidden, "eps": 1e-6})
    assert np.all(out["input:bound"][0] == 0.0)
    assert np.all(np.isinf(out["input:bound"][1]))
    np.testing.assert_array_equal(out["input"][1], [0.0, 0.0, 0.0, 0.0])  # fp32: rsqrt(inf)
    # a row holding an infinite input is the same in every precision: not open
    inputs["input"][1, 0] = np.inf
    with np.errstate(invalid="ignore"):
        out = reference("fused_add_rmsnorm")(np, inputs, {"hidden": hidden, "eps": 1e-6})
    assert np.all(out["input:bound"][1] == 0.0)
    assert "residual:bound" not in out


def test_fused_add_rmsnorm_matches_explicit_loops() -> None:
    inp = [[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]]
    res = [[0.5, 1.0, -1.5], [-1.0, 2.0, 4.0]]
    weight = [1.0, 0.5, -2.0]
    eps = 1e-5
    expected_input, expected_residual = [], []
    for row_in, row_res in zip(inp, res, strict=True):
        x = [a + b for a, b in zip(row_in, row_res, strict=True)]
        mean_square = sum(v * v for v in x) / len(x)
        expected_residual.append(x)
        expected_input.append(
            [v / math.sqrt(mean_square + eps) * w for v, w in zip(x, weight, strict=True)]
        )
    out = reference("fused_add_rmsnorm")(
        np,
        {"input": np.array(inp), "residual": np.array(res), "weight": np.array(weight)},
        {"hidden": 3, "eps": eps},
    )
    assert {"input", "residual"} <= set(out), "both in-place arguments must be returned"
    np.testing.assert_array_equal(out["residual"], expected_residual)
    np.testing.assert_allclose(out["input"], expected_input, rtol=1e-14)
    # first row by hand: x = (1.5, -1, -1), mean square 4.25/3
    scale = 1.0 / math.sqrt(4.25 / 3 + eps)
    assert out["input"][0, 0] == pytest.approx(1.5 * scale, rel=1e-15)
    assert out["input"][0, 2] == pytest.approx(2.0 * scale, rel=1e-15)


def test_fused_add_rmsnorm_uses_eps_and_does_not_modify_its_inputs() -> None:
    inputs = {
        "input": np.array([[0.0, 0.0]]),
        "residual": np.array([[1e-4, -1e-4]]),
        "weight": np.array([1.0, 1.0]),
    }
    before = {k: v.copy() for k, v in inputs.items()}
    small = reference("fused_add_rmsnorm")(np, inputs, {"hidden": 2, "eps": 1e-6})["input"]
    large = reference("fused_add_rmsnorm")(np, inputs, {"hidden": 2, "eps": 1.0})["input"]
    np.testing.assert_allclose(small, [[1e-4 / math.sqrt(1e-8 + 1e-6), -1e-4 / math.sqrt(1.01e-6)]])
    np.testing.assert_allclose(
        large, [[1e-4 / math.sqrt(1.0 + 1e-8), -1e-4 / math.sqrt(1.0 + 1e-8)]]
    )
    for name, array in inputs.items():
        np.testing.assert_array_equal(array, before[name])


# --- rms_norm ------------------------------------------------------------------------------------


def test_rms_norm_matches_explicit_loops_and_leaves_the_input_alone() -> None:
    rows = [[1.0, -2.0, 0.5, 4.0], [3.0, 0.25, -1.0, 1e-3]]
    weight = [1.0, 0.5, -2.0, 1.5]
    eps = 1e-5
    expected = []
    for row in rows:
        mean_square = sum(v * v for v in row) / len(row)
        expected.append(
            [v / math.sqrt(mean_square + eps) * w for v, w in zip(row, weight, strict=True)]
        )
    inputs = {"input": np.array(rows), "weight": np.array(weight)}
    before = {k: v.copy() for k, v in inputs.items()}
    out = reference("rms_norm")(np, inputs, {"hidden": 4, "eps": eps})
    assert set(out) == {"out"}
    np.testing.assert_allclose(out["out"], expected, rtol=1e-14)
    # first row by hand: mean square (1 + 4 + 0.25 + 16) / 4 = 5.3125
    assert out["out"][0, 3] == pytest.approx(4.0 * 1.5 / math.sqrt(5.3125 + eps), rel=1e-15)
    for name, array in inputs.items():
        np.testing.assert_array_equal(array, before[name])


def test_rms_norm_uses_eps() -> None:
    inputs = {"input": np.array([[1e-4, -1e-4]]), "weight": np.array([1.0, 1.0])}
    small = reference("rms_norm")(np, inputs, {"hidden": 2, "eps": 1e-6})["out"]
    large = reference("rms_norm")(np, inputs, {"hidden": 2, "eps": 1.0})["out"]
    np.testing.assert_allclose(small, [[1e-4 / math.sqrt(1.01e-6), -1e-4 / math.sqrt(1.01e-6)]])
    np.testing.assert_allclose(
        large, [[1e-4 / math.sqrt(1.0 + 1e-8), -1e-4 / math.sqrt(1.0 + 1e-8)]]
    )


# --- gelu_and_mul, gelu_tanh_and_mul -------------------------------------------------------------


def test_gelu_and_mul_hand_computed() -> None:
    # erf(1/sqrt(2)) = 0.6826894921370859 (the one-sigma probability of a normal distribution)
    x = np.array([[0.0, 1.0, -1.0, 2.0, 3.0, 0.5]])
    out = reference("gelu_and_mul")(np, {"x": x}, {"d": 3})["out"]
    one_sigma = 0.6826894921370859
    expected = [0.0, 0.5 * (1 + one_sigma) * 3.0, -0.5 * (1 - one_sigma) * 0.5]
    np.testing.assert_allclose(out, [expected], rtol=1e-15, atol=0)


def _normal_cdf_by_simpson(value: float, steps: int = 20_000) -> float:
    """Phi(value) as the integral of the normal density from -12 (where Phi < 1e-32), by
    Simpson's rule: independent of any erf implementation."""
    grid = np.linspace(-12.0, value, steps + 1)
    density = np.exp(-grid * grid / 2.0) / math.sqrt(2.0 * math.pi)
    weights = np.ones(steps + 1)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    return float(np.sum(weights * density) * (grid[1] - grid[0]) / 3.0)


def test_gelu_and_mul_matches_the_normal_cdf_by_quadrature() -> None:
    # gelu(a) = a * Phi(a), the standard normal distribution function
    a = np.array([-4.0, -1.5, -0.3, 0.2, 0.9, 2.5])
    b = np.linspace(0.5, 3.0, a.size)
    phi = np.array([_normal_cdf_by_simpson(float(v)) for v in a])
    out = reference("gelu_and_mul")(np, {"x": np.concatenate([a, b])[None, :]}, {"d": a.size})
    np.testing.assert_allclose(out["out"][0], a * phi * b, rtol=1e-10)


def test_gelu_tanh_and_mul_hand_computed_and_close_to_the_exact_gelu() -> None:
    x = np.array([[1.0, -2.0, 10000.0, -10000.0, 2.0, 0.5, 3.0, -1.0]])
    out = reference("gelu_tanh_and_mul")(np, {"x": x}, {"d": 4})["out"][0]
    inner = math.sqrt(2.0 / math.pi) * (1.0 + 0.044715)
    assert out[0] == pytest.approx(0.5 * (1.0 + math.tanh(inner)) * 2.0, rel=1e-15)
    # saturation: gelu(a) = a for large a, -0 for large negative a
    assert out[2] == 10000.0 * 3.0
    assert out[3] == 0.0 and math.copysign(1.0, out[3]) == 1.0  # -0 * -1
    exact = reference("gelu_and_mul")(np, {"x": x}, {"d": 4})["out"][0]
    # the tanh approximation is not the exact GELU, but within ~1e-3 absolute of it
    assert out[0] != exact[0]
    np.testing.assert_allclose(out, exact, atol=2e-3, rtol=0)


# --- rotary_embedding ----------------------------------------------------------------------------


def _rotary_inputs(positions: list[int], heads: int, kv_heads: int, head_size: int) -> dict:
    rng = np.random.default_rng(5)
    tokens = len(positions)
    return {
        "positions": np.array(positions, dtype=np.float64),
        "query": rng.normal(size=(tokens, heads * head_size)),
        "key": rng.normal(size=(tokens, kv_heads * head_size)),
        "cos_sin_cache": rng.uniform(-1, 1, size=(16, head_size)),
    }


def _rotary(inputs: dict, head_size: int, neox: int) -> dict:
    params = {"head_size": head_size, "num_heads": 0, "num_kv_heads": 0, "is_neox": neox}
    return reference("rotary_embedding")(np, inputs, params)


def test_rotary_neox_and_gptj_pairs_by_hand() -> None:
    inputs = _rotary_inputs([3], heads=1, kv_heads=1, head_size=4)
    q, cache = inputs["query"][0], inputs["cos_sin_cache"][3]
    c0, c1, s0, s1 = cache
    neox = _rotary(inputs, 4, 1)["query"][0]
    # NeoX: pairs (0, 2) and (1, 3), i.e. the two halves
    assert neox[0] == pytest.approx(q[0] * c0 - q[2] * s0, rel=1e-15)
    assert neox[2] == pytest.approx(q[2] * c0 + q[0] * s0, rel=1e-15)
    assert neox[1] == pytest.approx(q[1] * c1 - q[3] * s1, rel=1e-15)
    gptj = _rotary(inputs, 4, 0)["query"][0]
    # GPT-J: pairs (0, 1) and (2, 3), interleaved
    assert gptj[0] == pytest.approx(q[0] * c0 - q[1] * s0, rel=1e-15)
    assert gptj[1] == pytest.approx(q[1] * c0 + q[0] * s0, rel=1e-15)
    assert gptj[3] == pytest.approx(q[3] * c1 + q[2] * s1, rel=1e-15)


def test_rotary_bound_follows_the_products_and_opens_where_they_overflow_fp32() -> None:
    inputs = _rotary_inputs([3], heads=1, kv_heads=1, head_size=4)
    inputs["cos_sin_cache"][3] = [0.5, 0.5, 0.5, 0.5]
    inputs["query"][0] = [1000.0, 3.3e38, 1000.0, 3.3e38]
    inputs["cos_sin_cache"][3, 3] = 2.0  # pair (1, 3): |x c| + |y s| = 8.2e38, past fp32
    bound = _rotary(inputs, 4, 1)["query:bound"][0]
    assert bound[0] == pytest.approx(2.0**-22 * 1000.0, rel=1e-6)  # x c - y s = 0: cancelling
    assert np.isinf(bound[1]) and np.isinf(bound[3])
    assert np.all(_rotary(inputs, 4, 1)["key:bound"] < 1e-5)
    # products below fp32's largest whose sum is not: defined (0 here), never open
    inputs["query"][0] = [3.39e38, 1.0, 3.39e38, 1.0]
    inputs["cos_sin_cache"][3] = [0.75, 0.5, 0.75, 0.5]
    bound = _rotary(inputs, 4, 1)["query:bound"][0]
    assert np.all(np.isfinite(bound))


def test_rotary_by_true_angles_is_a_rotation_and_composes() -> None:
    # a cache of real angles: rotating by position p keeps each pair's length, and the GQA key
    # heads (fewer than the query heads) are rotated by the same rows
    head_size, positions = 8, [0, 5, 11]
    inputs = _rotary_inputs(positions, heads=4, kv_heads=2, head_size=head_size)
    theta = 10000.0 ** (-np.arange(head_size // 2) * 2.0 / head_size)
    angles = np.arange(16)[:, None] * theta[None, :]
    inputs["cos_sin_cache"] = np.concatenate([np.cos(angles), np.sin(angles)], axis=1)
    for neox in (0, 1):
        out = _rotary(inputs, head_size, neox)
        for name in ("query", "key"):
            before = inputs[name].reshape(3, -1, head_size)
            after = out[name].reshape(3, -1, head_size)
            np.testing.assert_allclose(np.sum(after**2, -1), np.sum(before**2, -1), rtol=1e-13)
            np.testing.assert_array_equal(after[0], before[0])  # position 0: the identity
            # the complex form: pair (x, y) as x + iy is multiplied by e^(i p theta)
            if neox:
                z0 = before[..., : head_size // 2] + 1j * before[..., head_size // 2 :]
                z1 = after[..., : head_size // 2] + 1j * after[..., head_size // 2 :]
            else:
                z0 = before[..., 0::2] + 1j * before[..., 1::2]
                z1 = after[..., 0::2] + 1j * after[..., 1::2]
            turn = np.exp(1j * np.array(positions)[:, None, None] * theta[None, None, :])
            np.testing.assert_allclose(z1, z0 * turn, rtol=1e-12, atol=1e-14)


# --- per_token_fp8_quant -------------------------------------------------------------------------


def test_fp8_quant_scales_each_row_to_448_and_floors_zero_rows() -> None:
    x = np.array([[1.0, -2.0, 0.5, 0.25], [0.0, 0.0, 0.0, 0.0], [1e-6, -3e-6, 0.0, 2e-6]])
    out = reference("per_token_fp8_quant")(np, {"x": x}, {"hidden": 4})
    floor = 1.0 / (448.0 * 512.0)
    np.testing.assert_array_equal(out["scale"], [2.0 / 448.0, floor, floor])
    np.testing.assert_allclose(out["out"][0], [224.0, -448.0, 112.0, 56.0], rtol=1e-15)
    np.testing.assert_array_equal(out["out"][1], 0.0)
    np.testing.assert_allclose(out["out"][2], x[2] / floor, rtol=1e-15)
    assert np.max(np.abs(out["out"])) <= 448.0


# --- every reference on the GPU ------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize(
    "op",
    [
        "silu_and_mul",
        "merge_attn_states_lse",
        "fused_add_rmsnorm",
        "rms_norm",
        "gelu_and_mul",
        "gelu_tanh_and_mul",
        "rotary_embedding",
        "per_token_fp8_quant",
    ],
)
def test_reference_gives_the_same_on_cupy(op: str) -> None:
    import cupy

    spec = load_contract(kernels_root() / op)
    contract = spec.contract
    dims = contract.suite("edge")[1]
    rng = np.random.default_rng(3)
    inputs = {
        arg.name: rng.normal(size=contract.shape_of(arg, dims))
        for arg in contract.args
        if arg.role != "output"
    }
    if op == "rotary_embedding":  # whole numbers inside the cache
        rows = contract.shape_of(contract.args[3], dims)[0]
        whole = rng.integers(0, rows, size=inputs["positions"].shape)
        inputs["positions"] = whole.astype(np.float64)
    if op == "merge_attn_states_lse":
        inputs["s_a"].ravel()[0] = -np.inf
        inputs["s_a"].ravel()[1] = inputs["s_b"].ravel()[1] = -np.inf
    params = contract.scalar_values(dims)
    on_host = spec.reference(np, inputs, params)
    on_device = spec.reference(cupy, {k: cupy.asarray(v) for k, v in inputs.items()}, params)
    assert set(on_host) == set(on_device)
    for name, expected in on_host.items():
        np.testing.assert_allclose(cupy.asnumpy(on_device[name]), expected, rtol=1e-13)
