"""Verdict logic on the CPU: NumPy arrays stand in for device buffers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from astra_graph.cli import main
from astra_graph.commands.check import describe
from astra_graph.harness import compare as compare_module
from astra_graph.harness.compare import (
    STATS_MIN_ELEMENTS,
    OutputError,
    compare_outputs,
    first_difference,
    output_error,
    precision_problem,
)
from astra_graph.harness.evaluator import Evaluator
from astra_graph.harness.poison import nan_poison, still_holds
from astra_graph.harness.results import Evidence, Verdict
from astra_graph.kernel.catalog import resolve
from astra_graph.kernel.contract import ContractError
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import Implementation, load_implementation
from astra_graph.kernel.signature import interface_problem, kernel_signature

SILU, _ = resolve("silu_and_mul")
RMSNORM, _ = resolve("fused_add_rmsnorm")
MERGE, _ = resolve("merge_attn_states_lse")
OUT = SILU.contract.args[0]
RNG = np.random.default_rng(20261122)


def _storage(dtype: str, values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return DTYPES[dtype].from_float64(np, np.asarray(values, dtype=np.float64))


def _rounded_case(dtype: str, n: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """A float64 reference and its correctly rounded output in storage form."""
    reference = RNG.normal(0.0, 2.0, size=(4, n // 4))
    return reference, _storage(dtype, reference)


# --- tolerance -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_correctly_rounded_output_passes_well_inside_tolerance(dtype: str) -> None:
    reference, got = _rounded_case(dtype)
    result = output_error(SILU.contract, OUT, dtype, got, reference)
    assert result.finding is None
    assert 0 < result.worst_ratio < 0.5
    assert result.mean_ratio == pytest.approx(result.rounding_ratio)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_one_element_outside_tolerance_is_a_mismatch_at_that_element(dtype: str) -> None:
    reference, got = _rounded_case(dtype)
    reference[2, 7] = 3.0
    got[2, 7] = _storage(dtype, np.array(3.5))
    result = output_error(SILU.contract, OUT, dtype, got, reference)
    assert result.finding is not None
    assert result.finding.reason == "mismatch"
    assert result.finding.index == [2, 7]
    assert result.finding.got == pytest.approx(3.5)
    assert result.finding.expected == 3.0
    assert result.finding.error == pytest.approx(0.5)
    tol = SILU.contract.tolerance[dtype]
    assert result.finding.allowed == pytest.approx(tol.atol + tol.rtol * 3.0)


def test_error_just_inside_and_just_outside_the_tolerance() -> None:
    s_out = MERGE.contract.args[5]
    tol = MERGE.contract.tolerance["float32"]
    reference = np.full((4, 512), 100.0)
    allowed = tol.atol + tol.rtol * 100.0
    inside = (reference + 0.9 * allowed).astype(np.float32)
    outside = (reference + 1.1 * allowed).astype(np.float32)
    result = output_error(MERGE.contract, s_out, "float16", inside, reference)
    assert result.finding is None and 0.85 < result.worst_ratio < 0.95
    assert output_error(MERGE.contract, s_out, "float16", outside, reference).finding is not None


# --- inf and NaN -----------------------------------------------------------------------------


def test_overflow_to_inf_matches_a_finite_reference_beyond_the_type_range() -> None:
    reference = np.array([[1e8, -1e8, 1.0, 2.0]])
    got = _storage("float16", reference)  # rounds to +inf, -inf
    assert np.isinf(got[0, :2].astype(np.float64)).all()
    result = output_error(SILU.contract, OUT, "float16", got, reference)
    assert result.finding is None


def test_inf_where_the_reference_is_finite_and_representable_fails() -> None:
    reference = np.array([[1.0, 2.0, 3.0, 4.0]])
    got = _storage("float16", np.array([[1.0, np.inf, 3.0, 4.0]]))
    result = output_error(SILU.contract, OUT, "float16", got, reference)
    assert result.finding is not None and result.finding.index == [0, 1]
    assert result.worst_ratio == np.inf


def test_inf_equals_inf_and_wrong_sign_or_finite_fails() -> None:
    s_out = MERGE.contract.args[5]
    assert s_out.name == "s_merged"
    reference = np.array([[-np.inf, np.inf, 5.0]])
    good = np.array([[-np.inf, np.inf, 5.0]], dtype=np.float32)
    assert output_error(MERGE.contract, s_out, "float16", good, reference).finding is None
    wrong_sign = np.array([[np.inf, np.inf, 5.0]], dtype=np.float32)
    assert output_error(MERGE.contract, s_out, "float16", wrong_sign, reference).finding
    finite = np.array([[-3.4e38, np.inf, 5.0]], dtype=np.float32)
    found = output_error(MERGE.contract, s_out, "float16", finite, reference).finding
    assert found is not None and found.index == [0, 0]


def test_nan_output_never_passes_against_a_number() -> None:
    reference, got = _rounded_case("bfloat16")
    got[1, 3] = 0x7FC0  # a bf16 NaN
    found = output_error(SILU.contract, OUT, "bfloat16", got, reference).finding
    assert found is not None and found.reason == "mismatch" and found.index == [1, 3]


def test_nan_passes_where_the_reference_is_infinite_and_a_number_does_not() -> None:
    """gelu(a) * b with a = -22.3 and b = inf: fp32 rounds gelu(a) to -0 and gives NaN, the
    float64 reference gives -inf; a finite value there (a squashed input) still fails."""
    reference = np.array([[-np.inf, 1.0]])
    got = _storage("float16", np.array([[np.nan, 1.0]]))
    assert output_error(SILU.contract, OUT, "float16", got, reference).finding is None
    got = _storage("float16", np.array([[0.0, 1.0]]))
    found = output_error(SILU.contract, OUT, "float16", got, reference).finding
    assert found is not None and found.index == [0, 0]


def test_an_infinity_passes_only_where_the_tolerance_reaches_it() -> None:
    """fp16's largest is 65504 and 65520 rounds to inf: a reference of 65519.997 rounds to
    65504, fp32 math one ulp above it to inf; far from the edge, or of the other sign, inf
    fails."""
    reference = np.array([[65519.997, 60000.0]])
    got = _storage("float16", np.array([[np.inf, 60000.0]]))
    assert output_error(SILU.contract, OUT, "float16", got, reference).finding is None
    got = _storage("float16", np.array([[-np.inf, 60000.0]]))
    assert output_error(SILU.contract, OUT, "float16", got, reference).finding is not None
    got = _storage("float16", np.array([[65504.0, np.inf]]))
    found = output_error(SILU.contract, OUT, "float16", got, reference).finding
    assert found is not None and found.index == [0, 1]


def test_nan_passes_where_the_reference_rounds_to_infinity() -> None:
    """A bf16 rotation of values near the largest: float64 gives -4.9e38 (-inf in bf16), fp32
    math inf - inf."""
    reference = np.array([[-4.9e38, 1.0]])
    got = _storage("bfloat16", np.array([[np.nan, 1.0]]))
    assert output_error(SILU.contract, OUT, "bfloat16", got, reference).finding is None


def test_nan_passes_only_where_the_reference_is_nan_or_infinite() -> None:
    reference = np.array([[np.nan, 1.0]])
    got = _storage("float16", np.array([[np.nan, 1.0]]))
    assert output_error(SILU.contract, OUT, "float16", got, reference).finding is None
    got = _storage("float16", np.array([[0.0, 1.0]]))
    assert output_error(SILU.contract, OUT, "float16", got, reference).finding is not None


# --- error bounds ----------------------------------------------------------------------------


def test_an_error_bound_widens_the_tolerance_only_where_it_is_set() -> None:
    reference, got = _rounded_case("float16")
    reference[1, 3] = reference[2, 5] = 1.0
    got[1, 3] = got[2, 5] = _storage("float16", np.array(1.25))
    bound = np.zeros_like(reference)
    bound[1, 3] = 0.3
    result = output_error(SILU.contract, OUT, "float16", got, reference, bound=bound)
    assert result.finding is not None and result.finding.index == [2, 5]
    bound[2, 5] = 0.2  # 0.25 off: beyond tolerance + 0.2
    result = output_error(SILU.contract, OUT, "float16", got, reference, bound=bound)
    assert result.finding is not None and result.finding.index == [2, 5]
    bound[2, 5] = 0.3
    assert output_error(SILU.contract, OUT, "float16", got, reference, bound=bound).finding is None


def test_an_infinite_bound_leaves_the_element_open_and_a_zero_bound_keeps_the_rule() -> None:
    reference, got = _rounded_case("float16")
    got[0, 0] = _storage("float16", np.array(np.nan))
    got[0, 1] = _storage("float16", np.array(np.inf))
    bound = np.zeros_like(reference)
    result = output_error(SILU.contract, OUT, "float16", got, reference, bound=bound)
    assert result.finding is not None and result.finding.index == [0, 0]
    bound[0, :2] = np.inf
    assert output_error(SILU.contract, OUT, "float16", got, reference, bound=bound).finding is None


def test_compare_outputs_reads_the_bound_from_the_reference() -> None:
    reference, got = _rounded_case("float16")
    reference[0, 0] = 1.0
    got[0, 0] = _storage("float16", np.array(2.0))
    found, _ = compare_outputs(SILU, {}, {"out": got}, {"out": reference}, "float16")
    assert found is not None
    bound = np.zeros_like(reference)
    bound[0, 0] = 1.5
    found, _ = compare_outputs(
        SILU, {}, {"out": got}, {"out": reference, "out:bound": bound}, "float16"
    )
    assert found is None


@pytest.mark.parametrize("op", ["merge_attn_states_lse", "rotary_embedding"])
def test_a_shipped_bound_keeps_the_precision_rules_on_every_element(op: str) -> None:
    """Merge's and rotary's bounds are above 0 at every element: the elements the tolerance
    accepts must keep their error, or a kernel rounding toward zero would read as exact."""
    spec, _ = resolve(op)
    contract = spec.contract
    dims = contract.suite("tuning")[0]
    rng = np.random.default_rng(11)
    inputs = {}
    for arg in contract.args:
        if arg.role == "output":
            continue
        shape = contract.shape_of(arg, dims)
        inputs[arg.name] = (
            rng.integers(0, shape[0], size=shape).astype(np.float64)
            if arg.name == "positions"
            else rng.uniform(-5.0, 15.0, size=shape)
            if arg.name.startswith("s_")
            else rng.normal(size=shape)
        )
    if op == "rotary_embedding":  # whole positions inside the cache
        inputs["positions"] = rng.integers(0, 8192, size=inputs["positions"].shape).astype(float)
    outputs = spec.reference(np, inputs, contract.scalar_values(dims))
    arg = next(
        a
        for a in contract.args
        if a.written
        and contract.dtype_of(a, "float16").floating
        and contract.dtype_of(a, "float16").itemsize == 2
    )
    reference, bound = outputs[arg.name], outputs[f"{arg.name}:bound"]
    assert np.all(bound > 0)
    rounded = _storage("float16", reference)
    values = DTYPES["float16"].to_float64(np, rounded)
    toward = np.where(
        np.abs(values) > np.abs(reference), np.nextafter(rounded, np.float16(0)), rounded
    ).astype(np.float16)
    base = output_error(contract, arg, "float16", rounded, reference, bound=bound)
    cand = output_error(contract, arg, "float16", toward, reference, bound=bound)
    assert cand.finding is None
    assert precision_problem(contract, cand, base) is not None


def test_settling_spans_the_comparison_stretches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compare_module, "CHUNK_ELEMENTS", 1000)
    reference, got = _rounded_case("float16")
    bound = np.zeros_like(reference)
    for flat in (5, 999, 1000, 3071):  # stretch edges
        index = np.unravel_index(flat, reference.shape)
        reference[index] = 1.0
        got[index] = _storage("float16", np.array(1.5))
    result = output_error(SILU.contract, OUT, "float16", got, reference, bound=bound)
    assert result.finding is not None and result.finding.index == [0, 5]
    bound[np.unravel_index(5, reference.shape)] = 1.0
    bound[np.unravel_index(999, reference.shape)] = 1.0
    bound[np.unravel_index(1000, reference.shape)] = 1.0
    result = output_error(SILU.contract, OUT, "float16", got, reference, bound=bound)
    assert result.finding is not None
    assert result.finding.index == list(np.unravel_index(3071, reference.shape))
    bound[np.unravel_index(3071, reference.shape)] = 1.0
    assert output_error(SILU.contract, OUT, "float16", got, reference, bound=bound).finding is None


def test_a_bound_of_another_shape_is_an_error() -> None:
    reference, got = _rounded_case("float16")
    with pytest.raises(ValueError, match="error bound has shape"):
        output_error(SILU.contract, OUT, "float16", got, reference, bound=np.zeros(3))


# --- unwritten outputs -----------------------------------------------------------------------


def test_inout_element_still_equal_to_its_input_is_unwritten() -> None:
    dtype = "float16"
    shape = (3, 64)
    before = {
        "input": _storage(dtype, RNG.normal(size=shape)),
        "residual": _storage(dtype, RNG.normal(size=shape)),
        "weight": _storage(dtype, RNG.normal(1.0, 0.25, size=shape[1])),
    }
    f64 = {k: DTYPES[dtype].to_float64(np, v) for k, v in before.items()}
    reference = RMSNORM.reference(np, f64, {"eps": 1e-6, "hidden": shape[1]})
    got = {name: _storage(dtype, reference[name]) for name in ("input", "residual")}
    evidence, worst = compare_outputs(RMSNORM, before, got, reference, dtype)
    assert evidence is None and worst < 1
    got["residual"] = before["residual"].copy()  # the bug the paper's extracted kernel had
    evidence, _ = compare_outputs(RMSNORM, before, got, reference, dtype)
    assert evidence is not None
    assert evidence.reason == "unwritten_output"
    assert evidence.arg == "residual"
    # the same inputs given as float64 give the same answer
    evidence, _ = compare_outputs(RMSNORM, f64, got, reference, dtype)
    assert evidence is not None and evidence.reason == "unwritten_output"


def test_a_saturated_element_equal_to_its_input_is_a_mismatch_not_unwritten() -> None:
    """-65504 + -65504 overflows fp16: a kernel rounding toward zero writes -65504, which is the
    residual's own input there; that element is no evidence of a missing write."""
    residual_arg = next(a for a in RMSNORM.contract.args if a.name == "residual")
    before = _storage("float16", RNG.normal(size=(4, 64)))
    before[2, 5] = np.float16(-65504.0)
    reference = DTYPES["float16"].to_float64(np, before) + RNG.normal(size=before.shape)
    reference[2, 5] = -131008.0
    got = _storage("float16", reference)
    got[2, 5] = np.float16(-65504.0)  # saturated: written, and wrong
    finding = output_error(RMSNORM.contract, residual_arg, "float16", got, reference, before)
    assert finding.finding is not None and finding.finding.reason == "mismatch"
    # the same element left unwritten beside a row that really was never written: unwritten
    got[1] = before[1]
    finding = output_error(RMSNORM.contract, residual_arg, "float16", got, reference, before)
    assert finding.finding is not None and finding.finding.reason == "unwritten_output"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_poison_is_nans_with_random_never_canonical_payloads(dtype: str) -> None:
    element = DTYPES[dtype]
    rng = np.random.default_rng(5)
    first = nan_poison(np, rng, element, (4, 256))
    assert np.isnan(element.to_float64(np, first)).all()
    payloads = np.unique(first.view(f"uint{element.itemsize * 8}"))
    assert payloads.size >= 16  # random per element: no fill a kernel could recognise
    canonical_nan = element.from_float64(np, np.array([np.nan] * first.size).reshape(4, 256))
    assert still_holds(np, first, first).all()
    assert not still_holds(np, canonical_nan, first).any()  # arithmetic's NaN is never it
    gpu_nan = np.full(first.shape, 0xFFFF >> 1, dtype=f"uint{element.itemsize * 8}")
    gpu_nan |= gpu_nan >> 1  # all-ones payload (CUDA's canonical NaN)
    assert not still_holds(np, gpu_nan.view(first.dtype), first).any()
    again = nan_poison(np, rng, element, (4, 256))
    assert still_holds(np, again, first).mean() < 0.2  # a fresh draw for every check


# --- bitwise comparisons ---------------------------------------------------------------------


def test_first_difference_is_bitwise() -> None:
    a = np.array([0.0, 1.0, np.nan, 4.0], dtype=np.float32)
    assert first_difference(np, a, a.copy()) is None  # NaN == NaN bitwise
    b = a.copy()
    b[0] = -0.0
    assert first_difference(np, a, b) == 0
    c = a.copy()
    c[3] = np.nextafter(np.float32(4.0), np.float32(5.0))
    assert first_difference(np, a, c) == 3


# --- error-ratio rule ------------------------------------------------------------------------


def _errors(dtype: str, relative_bias: float, n: int = 8192) -> tuple[OutputError, OutputError]:
    reference, rounded = _rounded_case(dtype, n)
    biased = _storage(dtype, reference * (1 + relative_bias))
    base = output_error(SILU.contract, OUT, dtype, rounded, reference)
    cand = output_error(SILU.contract, OUT, dtype, biased, reference)
    return base, cand


def test_precision_downgrade_within_tolerance_fails_the_error_ratio() -> None:
    base, cand = _errors("float16", 1.2e-3)  # well inside rtol 2e-3 with the rounding
    assert cand.finding is None
    problem = precision_problem(SILU.contract, cand, base)
    assert problem is not None and "precision loss" in problem


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fp32_level_differences_pass_and_a_fraction_of_an_ulp_of_bias_fails(dtype: str) -> None:
    base, cand = _errors(dtype, 1e-6)  # another fp32 operation order: rare rounding flips
    assert precision_problem(SILU.contract, cand, base) is None
    base, cand = _errors(dtype, 2e-4 if dtype == "float16" else 2e-3)  # ~0.4 ulp, systematic
    assert cand.finding is None  # inside the tolerance
    problem = precision_problem(SILU.contract, cand, base)
    assert problem is not None and "correctly rounded" in problem


def test_the_exact_fraction_rule_on_both_sides_of_its_limit() -> None:
    reference, rounded = _rounded_case("float16", 1 << 14)
    base = output_error(SILU.contract, OUT, "float16", rounded, reference)
    for share, fails in (
        (compare_module.EXACT_DROP_LIMIT * 0.8, False),
        (compare_module.EXACT_DROP_LIMIT * 1.2, True),
    ):
        off = rounded.copy()
        step = int(1 / share)
        off.view(np.uint16).reshape(-1)[::step] ^= 1  # one ulp away in that share
        cand = output_error(SILU.contract, OUT, "float16", off, reference)
        assert cand.finding is None
        assert (precision_problem(SILU.contract, cand, base) is not None) is fails


def test_rounding_toward_zero_is_a_magnitude_bias() -> None:
    reference, rounded = _rounded_case("float16", 1 << 14)
    base = output_error(SILU.contract, OUT, "float16", rounded, reference)
    values = DTYPES["float16"].to_float64(np, rounded)
    toward = np.where(
        np.abs(values) > np.abs(reference), np.nextafter(rounded, np.float16(0)), rounded
    )
    cand = output_error(SILU.contract, OUT, "float16", toward.astype(np.float16), reference)
    assert cand.magnitude_bias < -0.05 and abs(cand.bias) < 0.02
    assert precision_problem(SILU.contract, cand, base) is not None


def test_perfect_baseline_does_not_make_rounding_fail() -> None:
    _, rounded = _rounded_case("float16", 8192)
    exact = DTYPES["float16"].to_float64(np, rounded)  # a reference the baseline meets exactly
    base = output_error(SILU.contract, OUT, "float16", rounded, exact)
    assert base.mean_ratio == 0.0 and base.rounding_ratio == 0.0
    one_ulp_off = rounded.copy()
    one_ulp_off.view(np.uint16).reshape(-1)[::100] += 1  # one element in 100 one ulp away
    cand = output_error(SILU.contract, OUT, "float16", one_ulp_off, exact)
    assert cand.finding is None and cand.mean_ratio > 0
    assert precision_problem(SILU.contract, cand, base) is None
    biased = _storage("float16", exact * (1 + 1.2e-3))
    cand = output_error(SILU.contract, OUT, "float16", biased, exact)
    assert cand.finding is None and precision_problem(SILU.contract, cand, base) is not None


def test_small_outputs_skip_the_error_ratio() -> None:
    base, cand = _errors("float16", 1.2e-3, n=STATS_MIN_ELEMENTS // 2)
    assert precision_problem(SILU.contract, cand, base) is None
    assert precision_problem(SILU.contract, cand, None) is None


# --- the plan --------------------------------------------------------------------------------


# --- interface check -------------------------------------------------------------------------

_SILU_HEADER = """// astra: entry = k<T>
// astra: grid = tokens
// astra: block = 256
"""


def _impl(body: str, tmp_path: Path) -> Implementation:
    path = tmp_path / "cand.cu"
    path.write_text(_SILU_HEADER + body)
    return load_implementation(path, SILU.contract)


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ("T* out, const T* __restrict__ x, int d", None),
        ("uint4* out, const void* x, unsigned d", None),
        ("T* out, const T* x", "takes 2 parameters"),
        ("T* out, const T* x, int d, int extra", "takes 4 parameters"),
        ("T* out, T x, int d", "must be a pointer"),
        ("T* out, const T* x, int* d", "must be a value"),
        ("float* out, const T* x, int d", "points to float32"),
        ("T* out, const T* x, long long d", "is int64"),
        ("T* out, const T* x, float d", "is float32"),
    ],
)
def test_parameter_list_is_checked_against_the_contract(
    params: str, problem: str | None, tmp_path: Path
) -> None:
    impl = _impl(f"template <typename T>\n__global__ void k({params}) {{}}\n", tmp_path)
    found = interface_problem(SILU, impl, "float16")
    assert found is None if problem is None else problem in (found or "")


def test_template_parameter_names_are_bound_from_the_entry(tmp_path: Path) -> None:
    body = (
        "template <int BLOCK, typename scalar_t>\n"
        "__global__ void __launch_bounds__(BLOCK) k(scalar_t* out, const scalar_t* x, int d) {}\n"
    )
    path = tmp_path / "cand.cu"
    path.write_text(_SILU_HEADER.replace("k<T>", "k<256, T>") + body)
    impl = load_implementation(path, SILU.contract)
    signature = kernel_signature(impl.source, "k")
    assert signature is not None
    names, params = signature
    assert names == ["BLOCK", "scalar_t"] and [p.pointer for p in params] == [True, True, False]
    assert interface_problem(SILU, impl, "bfloat16") is None
    fixed = impl.model_copy(update={"source": impl.source.replace("scalar_t* out", "__half* out")})
    assert "points to float16" in (interface_problem(SILU, fixed, "bfloat16") or "")


def test_kernel_made_by_a_macro_is_not_second_guessed(tmp_path: Path) -> None:
    # the entry's name is in the file, its definition is beyond a reading of the source
    impl = _impl("#define MAKE(name) __global__ void name(float a) {}\nMAKE(k)\n", tmp_path)
    assert interface_problem(SILU, impl, "float16") is None
    absent = _impl("#define MAKE(name) __global__ void name(float a) {}\nMAKE(k2)\n", tmp_path)
    assert "names no function" in (interface_problem(SILU, absent, "float16") or "")


def test_evaluator_rejects_bad_interfaces_without_a_gpu(tmp_path: Path) -> None:
    baseline = SILU.folder / "production.cu"
    wrong = tmp_path / "wrong.cu"
    wrong.write_text(_SILU_HEADER + "template <typename T>\n__global__ void k(T* out) {}\n")
    bad_header = tmp_path / "bad_header.cu"
    bad_header.write_text("// astra: entry = k<T>\n// astra: grid = nonsense_dim\n")
    with Evaluator() as evaluator:
        verdict = evaluator.check("silu_and_mul", baseline, wrong)
        assert verdict.reason == "interface_mismatch" and "takes 1 parameters" in verdict.message
        verdict = evaluator.check("silu_and_mul", baseline, bad_header)
        assert verdict.reason == "interface_mismatch" and "nonsense_dim" in verdict.message
        with pytest.raises(ContractError, match="no_such_op"):
            evaluator.check("no_such_op", baseline, wrong)
        with pytest.raises(ContractError, match="unknown suite"):
            evaluator.check("silu_and_mul", baseline, wrong, suites=["visible"])
        with pytest.raises(ContractError, match="nothing to check"):
            evaluator.check("silu_and_mul", baseline, wrong, suites=())
        with pytest.raises(ContractError, match=r"extra_shapes\[0\]: d=12 is not a multiple"):
            evaluator.check("silu_and_mul", baseline, wrong, extra_shapes=[{"tokens": 1, "d": 12}])
        assert evaluator.worker.starts == 0  # all decided without starting a worker


def test_cli_check_exit_codes_without_a_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = tmp_path / "wrong.cu"
    wrong.write_text(_SILU_HEADER + "template <typename T>\n__global__ void k(T* out) {}\n")
    assert main(["check", "silu_and_mul", str(wrong)]) == 1
    out = capsys.readouterr().out
    assert "REJECTED" in out and "interface_mismatch" in out
    assert main(["check", "silu_and_mul", str(tmp_path / "missing.cu")]) == 2
    assert "candidate file not found" in capsys.readouterr().err
    assert main(["check", "silu_and_mul", "fused_add_rmsnorm/naive"]) == 2
    assert "fused_add_rmsnorm" in capsys.readouterr().err


def test_cli_describes_a_rejection_with_its_evidence() -> None:
    evidence = Evidence(
        op="silu_and_mul",
        dims={"tokens": 3, "d": 24},
        dtype="bfloat16",
        suite="edge",
        arg="out",
        index=[2, 23],
        got=1.5,
        expected=1.25,
        error=0.25,
        allowed=0.021,
        detail="outside the tolerance [scenario large_magnitude]",
    )
    verdict = Verdict.reject("mismatch", "'out' differs from the reference at 3x24", evidence)
    verdict.cases_checked = 7
    _, impl = resolve("silu_and_mul")
    text = describe(verdict, impl, Path("cand.cu"))
    assert text.splitlines()[0] == "REJECTED cand.cu: mismatch"
    assert "shape tokens=3, d=24; dtype bfloat16; suite edge" in text
    assert "out[2, 23]  got 1.5  expected 1.25  error 0.25  allowed 0.021" in text
    assert "scenario large_magnitude" in text and "7 cases passed" in text
    no_element = evidence.model_copy(update={"index": None, "got": None})
    text = describe(verdict.model_copy(update={"evidence": no_element}), impl, Path("c.cu"))
    assert "  argument: out" in text and "element:" not in text


def test_chunked_comparison_gives_the_same_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    reference, got = _rounded_case("float16", 4096)
    reference[3, 1000] = 2.0
    got[3, 1000] = _storage("float16", np.array(2.5))
    whole = output_error(SILU.contract, OUT, "float16", got, reference)
    monkeypatch.setattr(compare_module, "CHUNK_ELEMENTS", 100)
    chunked = output_error(SILU.contract, OUT, "float16", got, reference)
    assert chunked.finding is not None and whole.finding is not None
    assert chunked.finding.index == whole.finding.index == [3, 1000]
    assert chunked.finding.got == whole.finding.got == 2.5
    assert chunked.mean_ratio == pytest.approx(whole.mean_ratio)
    assert chunked.rounding_ratio == pytest.approx(whole.rounding_ratio)
    original = got.copy()
    original[3, 1000] = got[3, 1000]
    stale = output_error(SILU.contract, OUT, "float16", got, reference, original)
    assert stale.finding is not None and stale.finding.reason == "unwritten_output"
    assert stale.finding.index == [3, 1000]


def test_fp32_outputs_answer_only_to_the_mean_error_rule() -> None:
    s_out = MERGE.contract.args[5]
    reference = RNG.normal(0.0, 10.0, size=(8, 512))
    rounded = reference.astype(np.float32)
    base = output_error(MERGE.contract, s_out, "float16", rounded, reference)
    last_bit = rounded.copy()
    last_bit.view(np.uint32)[...] ^= 1  # every element one fp32 ulp off: another correct order
    cand = output_error(MERGE.contract, s_out, "float16", last_bit, reference)
    assert cand.finding is None and cand.exact_fraction < 0.1
    assert precision_problem(MERGE.contract, cand, base) is None
