"""float8_e4m3fn as a contract element type: its values, its rounding, its poison, its signature
spelling, and how an E4M3 output compares with a float64 reference (NumPy only)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from astra_graph.harness.compare import output_error
from astra_graph.harness.poison import nan_poison, still_holds
from astra_graph.kernel.catalog import resolve
from astra_graph.kernel.dtypes import DTYPES, FP8_E4M3_MAX, FP8_E4M3_NAN, FP8_E4M3_VALUES
from astra_graph.kernel.signature import TYPE_ALIASES

FP8 = DTYPES["float8_e4m3fn"]


def test_the_table_has_e4m3fn_values() -> None:
    assert FP8_E4M3_VALUES[0x7E] == FP8_E4M3_MAX == 448.0
    assert FP8_E4M3_VALUES[0x38] == 1.0  # exponent 7 = bias, mantissa 0
    assert FP8_E4M3_VALUES[0x01] == 2.0**-9  # the smallest subnormal
    assert FP8_E4M3_VALUES[0x08] == 2.0**-6  # the smallest normal
    assert FP8_E4M3_VALUES[0x80] == 0.0 and math.copysign(1.0, FP8_E4M3_VALUES[0x80]) == -1.0
    nan_codes = [c for c in range(256) if math.isnan(FP8_E4M3_VALUES[c])]
    assert nan_codes == [FP8_E4M3_NAN, FP8_E4M3_NAN | 0x80]
    finite = FP8_E4M3_VALUES[:FP8_E4M3_NAN]
    assert np.all(np.diff(finite) > 0), "codes 0x00 .. 0x7E ascend"
    assert not np.any(np.isinf(FP8_E4M3_VALUES))


def test_every_finite_code_round_trips() -> None:
    codes = np.array([c for c in range(256) if c not in (FP8_E4M3_NAN, FP8_E4M3_NAN | 0x80)])
    values = FP8.to_float64(np, codes.astype(np.uint8))
    np.testing.assert_array_equal(FP8.from_float64(np, values), codes)


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (1.0625, 0x38),  # tie between 1 and 1.125: the even mantissa (1)
        (1.1875, 0x3A),  # tie between 1.125 and 1.25: the even mantissa (1.25)
        (1.07, 0x39),  # nearer 1.125
        (232.0, 0x76),  # tie between 224 and 240 at the top binade: 224 (even)
        (2.0**-10, 0x00),  # half the smallest subnormal: a tie, to zero (even)
        (3 * 2.0**-10, 0x02),  # a subnormal tie: to the even step
        (464.0, 0x7E),  # beyond 448: saturates (CUDA's __NV_SATFINITE)
        (1e30, 0x7E),
        (-1e30, 0xFE),
        (math.inf, 0x7E),
        (-0.0, 0x80),
        (math.nan, FP8_E4M3_NAN),
    ],
)
def test_rounding_is_nearest_even_and_saturating(value: float, code: int) -> None:
    assert int(FP8.from_float64(np, np.array([value]))[0]) == code


def test_rounding_agrees_with_a_brute_force_nearest() -> None:
    rng = np.random.default_rng(2)
    values = rng.standard_normal(20_000) * np.exp(rng.uniform(-9, 6, 20_000))
    codes = FP8.from_float64(np, values)
    finite = FP8_E4M3_VALUES[:FP8_E4M3_NAN]
    magnitude = np.minimum(np.abs(values), FP8_E4M3_MAX)
    nearest = np.min(np.abs(finite[None, :] - magnitude[:, None]), axis=1)
    got = np.abs(FP8.to_float64(np, codes))
    np.testing.assert_array_equal(np.abs(got - magnitude), nearest)
    assert np.all((codes >> 7) == (values < 0))


def test_poison_is_the_nan_with_either_sign() -> None:
    rng = np.random.default_rng(1)
    poison = nan_poison(np, rng, FP8, (64, 32))
    assert poison.dtype == np.uint8
    assert set(np.unique(poison).tolist()) == {FP8_E4M3_NAN, FP8_E4M3_NAN | 0x80}
    written = FP8.from_float64(np, np.linspace(-500, 500, 64 * 32).reshape(64, 32))
    assert not still_holds(np, written, poison).any(), "a saturating conversion never gives NaN"


def test_the_cuda_spelling_is_known_to_the_signature_check() -> None:
    assert TYPE_ALIASES[FP8.ctype] == "float8_e4m3fn"


def test_an_e4m3_output_within_one_ulp_passes_and_two_ulps_fail() -> None:
    spec, _ = resolve("per_token_fp8_quant")
    contract = spec.contract
    out = next(a for a in contract.args if a.name == "out")
    reference = np.array([1.0, 1.3, -3.1, 200.0, 0.01, 2.0**-8])
    exact = FP8.from_float64(np, reference)
    result = output_error(contract, out, "float16", exact, reference)
    assert result.finding is None and result.exact_fraction == 1.0
    one_up = (exact.astype(np.int16) + 1).astype(np.uint8)  # one ulp away from the nearest
    assert output_error(contract, out, "float16", one_up, reference).finding is None
    two_up = (exact.astype(np.int16) + 2).astype(np.uint8)
    finding = output_error(contract, out, "float16", two_up, reference).finding
    assert finding is not None and finding.reason == "mismatch"
    nan = np.full_like(exact, FP8_E4M3_NAN)
    assert output_error(contract, out, "float16", nan, reference).finding is not None
