"""The verification protocol on the host: NumPy kernels stand in for CUDA ones, case by case.

Each defence of docs/VERIFICATION.md has a kernel here that only it catches (the GPU fixtures in
tests/fixtures/bad_kernels/ are their CUDA counterparts).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest

from astra_graph.harness import plan as plan_module
from astra_graph.harness import scenarios
from astra_graph.harness import worker as worker_module
from astra_graph.harness.buckets import DECODE_MAX_ROWS, bucket_of
from astra_graph.harness.cases import Case, make_case
from astra_graph.harness.errors import Rejected
from astra_graph.harness.launch import LaunchError
from astra_graph.harness.payload import CheckRequest, KernelPayload, OperationPayload
from astra_graph.harness.plan import (
    RANDOM_SHAPE_MAX_BYTES,
    RANDOM_SHAPES_PER_PHASE,
    CaseSpec,
    draw_params,
    plan_cases,
    random_shapes,
)
from astra_graph.harness.poison import MIN_GUARD_BYTES, Arena, guard_bytes
from astra_graph.harness.verify import check_case, run_check
from astra_graph.kernel.catalog import resolve
from astra_graph.kernel.contract import OperationSpec
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import load_implementation

SILU, SILU_IMPL = resolve("silu_and_mul")
RMSNORM, RMSNORM_IMPL = resolve("fused_add_rmsnorm")
MERGE, MERGE_IMPL = resolve("merge_attn_states_lse")
SILU_DIMS = {"tokens": 6, "d": 1032}
RMS_DIMS = {"tokens": 8, "hidden": 520}


class NumpyKernel:
    """Stands in for a LoadedKernel: ``body(case, launch_number)`` fills the outputs."""

    def __init__(
        self, body: Callable[[Case, int], None], geometry: Any = ((1, 1, 1), (256, 1, 1), 0)
    ) -> None:
        self.body = body
        self.launches = 0
        self._geometry = geometry
        self.impl = None

    def unsupported(self, dims: Mapping[str, int]) -> str | None:
        return None

    def carried_state(self) -> str | None:
        return None

    def geometry(self, dims: Mapping[str, int]) -> Any:
        return self._geometry(dims) if callable(self._geometry) else self._geometry

    def launch(self, case: Case) -> None:
        self.launches += 1
        self.body(case, self.launches)


def _f64(case: Case, name: str) -> np.ndarray:
    return DTYPES[case.dtype].to_float64(np, case.arrays[name])


def _store(case: Case, name: str, values: np.ndarray) -> None:
    with np.errstate(over="ignore", invalid="ignore"):
        case.arrays[name][...] = DTYPES[case.dtype].from_float64(np, np.asarray(values))


def _silu32(case: Case) -> np.ndarray:
    x = _f64(case, "x").astype(np.float32)
    d = x.shape[1] // 2
    with np.errstate(over="ignore", invalid="ignore"):
        return x[:, :d] / (np.float32(1) + np.exp(-x[:, :d])) * x[:, d:]


def silu_good(case: Case, _: int) -> None:
    _store(case, "out", _silu32(case))


def rmsnorm_good(case: Case, _: int, eps: float | None = None, rounded_x: bool = False) -> None:
    x = (_f64(case, "input") + _f64(case, "residual")).astype(np.float32)
    mean_square = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
    use = np.float32(case.scalars["eps"] if eps is None else eps)
    scale = np.float32(1) / np.sqrt(mean_square + use)
    weight = _f64(case, "weight").astype(np.float32)
    _store(case, "residual", x)
    source = DTYPES[case.dtype].to_float64(np, case.arrays["residual"]) if rounded_x else x
    _store(case, "input", source * scale * weight)


def _case(spec: OperationSpec, dims: dict[str, int], **kw: Any) -> CaseSpec:
    params = kw.pop("params", None)
    if params is None:
        params = draw_params(spec, {}, np.random.default_rng(1))
    return CaseSpec(kw.pop("suite", "tuning"), dims, kw.pop("dtype", "float16"), params, **kw)


def _run(
    spec: OperationSpec,
    body: Callable[[Case, int], None],
    dims: dict[str, int],
    seed: int = 7,
    **kw: Any,
) -> float:
    good = rmsnorm_good if spec is RMSNORM else silu_good
    case = _case(spec, dims, **kw)
    return check_case(spec, NumpyKernel(body), NumpyKernel(good), case, np.random.default_rng(seed))


def _rejected(
    spec: OperationSpec, body: Callable[[Case, int], None], dims: dict[str, int], **kw: Any
):
    with pytest.raises(Rejected) as caught:
        _run(spec, body, dims, **kw)
    worker_module._retiring = False  # a sticky fault asks this (test) process to retire
    return caught.value.verdict


def _root(array: np.ndarray) -> tuple[np.ndarray, int]:
    """The arena's byte buffer under an argument's view, and the argument's offset in it."""
    root = array
    while root.base is not None and isinstance(root.base, np.ndarray):
        root = root.base
    return root.view(np.uint8).reshape(-1), array.ctypes.data - root.ctypes.data


# --- correct kernels pass every run ------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_correct_kernels_pass_every_run(dtype: str) -> None:
    for seed in range(3):
        assert 0 < _run(SILU, silu_good, SILU_DIMS, seed=seed, dtype=dtype, unchecked=seed) < 1
        assert 0 < _run(RMSNORM, rmsnorm_good, RMS_DIMS, seed=seed, dtype=dtype) < 1


def test_merge_with_every_scenario_in_one_case_passes() -> None:
    def merge_good(case: Case, _: int) -> None:
        inputs = {k: _f64(case, k) for k in ("v_a", "v_b")}
        inputs |= {k: case.arrays[k].astype(np.float64) for k in ("s_a", "s_b")}
        ref = MERGE.reference(np, inputs, case.scalars)
        _store(case, "v_merged", ref["v_merged"])
        case.arrays["s_merged"][...] = ref["s_merged"].astype(np.float32)

    kernel = NumpyKernel(merge_good)
    case = _case(MERGE, {"tokens": 12, "heads": 3, "head_dim": 24}, dtype="bfloat16")
    assert check_case(MERGE, kernel, kernel, case, np.random.default_rng(3)) < 1


# --- special values in every case, row magnitudes, parameters --------------------------------


def test_every_scenario_appears_in_rows_and_half_the_rows_stay_plain() -> None:
    rng = np.random.default_rng(0)
    for rows in (1, 2, 5, 6, 50):
        labels = scenarios.row_labels(rows, 3, rng)
        assert labels.shape == (rows,) and set(labels) <= {0, 1, 2, 3}
        if rows >= 6:
            assert set(labels) == {0, 1, 2, 3}
            assert abs(int((labels == 0).sum()) - rows / 2) <= 1


def test_special_values_and_row_scales_are_applied() -> None:
    from astra_graph.harness.cases import make_case

    rng = np.random.default_rng(4)
    data = make_case(RMSNORM, {"tokens": 64, "hidden": 1024}, "float16", rng)
    labels = scenarios.apply(RMSNORM, data.arrays, "float16", rng)[64]
    x = _f64(Case(data.dims, "float16", data.arrays, data.scalars), "input")
    big = np.abs(x) >= 20000
    assert big.any() and set(np.nonzero(big.any(axis=1))[0]) <= set(np.nonzero(labels)[0])
    plain = x[labels == 0]
    rms = np.sqrt(np.mean(plain**2, axis=1))
    assert rms.min() < 0.01 and rms.max() > 1.0  # rows scaled by 1e-3 .. 10


def test_parameters_are_drawn_in_their_range_unless_given() -> None:
    rng = np.random.default_rng(2)
    drawn = [draw_params(RMSNORM, {}, rng)["eps"] for _ in range(200)]
    assert min(drawn) >= 1e-7 and max(drawn) <= 1e-4 and len(set(drawn)) > 100
    assert all(float(np.float32(e)) == e for e in drawn)
    assert draw_params(RMSNORM, {"eps": 1e-5}, rng)["eps"] == float(np.float32(1e-5))
    assert draw_params(SILU, {}, rng) == {}


def rmsnorm_hardcoded_eps(case: Case, launch: int) -> None:
    rmsnorm_good(case, launch, eps=1e-6)


def rmsnorm_ignores_eps(case: Case, launch: int) -> None:
    rmsnorm_good(case, launch, eps=0.0)


def test_a_hard_coded_eps_is_caught_when_eps_varies() -> None:
    assert _run(RMSNORM, rmsnorm_hardcoded_eps, RMS_DIMS, params={"eps": 1e-6}) < 1  # old check
    verdict = _rejected(RMSNORM, rmsnorm_hardcoded_eps, RMS_DIMS, params={"eps": 8e-5})
    assert verdict.reason == "mismatch" and verdict.evidence.arg == "input"


def test_ignoring_eps_is_caught_on_rows_of_small_magnitude() -> None:
    verdict = _rejected(
        RMSNORM, rmsnorm_ignores_eps, {"tokens": 64, "hidden": 520}, params={"eps": 1e-6}
    )
    assert verdict.reason == "mismatch"


# --- poisons, stale outputs and fresh buffers, unchecked launches -----------------------------


def silu_writes_nothing(case: Case, _: int) -> None:
    pass


def silu_skips_last(case: Case, _: int) -> None:
    case.arrays["out"].reshape(-1)[:-1] = DTYPES[case.dtype].from_float64(
        np, _silu32(case).reshape(-1)[:-1].astype(np.float64)
    )


_CACHE: dict[object, np.ndarray] = {}


def _replays(key_of: Callable[[Case], object]) -> Callable[[Case, int], None]:
    def body(case: Case, _: int) -> None:
        key = key_of(case)
        if key not in _CACHE:
            silu_good(case, 0)
            _CACHE[key] = case.arrays["out"].copy()
        case.arrays["out"][...] = _CACHE[key]

    return body


silu_replays_by_address = _replays(lambda case: case.arrays["out"].ctypes.data)
silu_replays_by_content = _replays(lambda case: case.arrays["x"].reshape(-1)[:4].tobytes())


_SEEN: dict[int, int] = {}


def silu_right_for_three_launches_per_buffer(case: Case, _: int) -> None:
    """Right on the first three launches on a buffer, then skips the work."""
    address = case.arrays["x"].ctypes.data
    _SEEN[address] = _SEEN.get(address, 0) + 1
    if _SEEN[address] <= 3:
        silu_good(case, 0)


def silu_wrong_unless_256_aligned(case: Case, _: int) -> None:
    silu_good(case, 0)
    if case.arrays["out"].ctypes.data % 256:
        case.arrays["out"].reshape(-1)[-1] = 0


def test_unwritten_elements_hold_both_random_poisons() -> None:
    verdict = _rejected(SILU, silu_skips_last, SILU_DIMS, suite="edge")
    assert verdict.reason == "unwritten_output"
    assert verdict.evidence.index == [5, 1031] and "1 of 6192" in verdict.evidence.detail
    assert _rejected(SILU, silu_writes_nothing, SILU_DIMS).reason == "unwritten_output"


@pytest.mark.parametrize("body", [silu_replays_by_address, silu_replays_by_content])
def test_a_replayed_result_is_caught_when_the_inputs_change_in_the_same_buffers(
    body: Callable[[Case, int], None],
) -> None:
    _CACHE.clear()
    verdict = _rejected(SILU, body, SILU_DIMS, seed=0)  # a seed that leaves x's first 4 alone
    assert verdict.reason == "mismatch"
    assert "previous inputs" in verdict.message and "replayed" in verdict.evidence.detail


def test_random_unchecked_launches_come_before_the_checked_ones() -> None:
    _SEEN.clear()
    assert _run(SILU, silu_right_for_three_launches_per_buffer, SILU_DIMS, unchecked=0) < 1
    _SEEN.clear()
    # runs 1 and 2 share the buffers: two unchecked launches make run 2 the fourth
    verdict = _rejected(SILU, silu_right_for_three_launches_per_buffer, SILU_DIMS, unchecked=2)
    assert verdict.reason in ("mismatch", "unwritten_output")


class CountingKernel(NumpyKernel):
    """Computes every launch right but keeps a launch count in a "module variable": the
    state a launch counter needs before it can misbehave on some later launch."""

    def carried_state(self) -> str | None:
        return f"module variable 'count' is {self.launches}, not 0" if self.launches else None


class SemaphoreKernel(NumpyKernel):
    """A grid-wide semaphore that the last block resets: back to its value after each launch."""

    def __init__(self, body: Callable[[Case, int], None]) -> None:
        super().__init__(body)
        self.semaphore = 0

    def launch(self, case: Case) -> None:
        self.semaphore += 4  # every block arrives ...
        super().launch(case)
        self.semaphore = 0  # ... and the last one resets it

    def carried_state(self) -> str | None:
        return None if self.semaphore == 0 else "module variable 'semaphore' changed"


def test_a_kernel_that_keeps_state_between_launches_is_rejected_at_its_first_launch() -> None:
    case = _case(SILU, SILU_DIMS, unchecked=0)
    kernel = CountingKernel(silu_good)
    with pytest.raises(Rejected) as caught:
        check_case(SILU, kernel, NumpyKernel(silu_good), case, np.random.default_rng(3))
    verdict = caught.value.verdict
    assert verdict.reason == "carried_state" and "'count'" in verdict.message
    assert kernel.launches == 1  # rejected after the first launch, right as its output was
    semaphore = SemaphoreKernel(silu_good)
    assert check_case(SILU, semaphore, NumpyKernel(silu_good), case, np.random.default_rng(3)) < 1
    assert semaphore.launches == 3


def test_buffers_at_other_addresses_with_only_the_guaranteed_alignment() -> None:
    verdict = _rejected(SILU, silu_wrong_unless_256_aligned, SILU_DIMS)
    assert verdict.reason == "mismatch" and "other addresses" in verdict.message


# --- guard bands ----------------------------------------------------------------------------


def _overrun(offset_bytes: int, copy_neighbour: bool = False) -> Callable[[Case, int], None]:
    def body(case: Case, _: int) -> None:
        silu_good(case, 0)
        memory, start = _root(case.arrays["out"])
        at = start + case.arrays["out"].nbytes + offset_bytes
        memory[at] = memory[at + 1] if copy_neighbour else memory[at] ^ 0xFF

    return body


@pytest.mark.parametrize(
    ("offset", "copy"), [(0, False), (10, True), (64 * 1024, False), (MIN_GUARD_BYTES // 2, False)]
)
def test_writes_past_the_end_are_out_of_bounds(offset: int, copy: bool) -> None:
    verdict = _rejected(SILU, _overrun(offset, copy), SILU_DIMS, suite="edge")
    assert verdict.reason == "out_of_bounds"
    assert "out-of-bounds write around 'out'" in verdict.message
    assert f"bytes {offset} to {offset + 1} past its end" in verdict.evidence.detail


def test_a_write_before_an_input_is_out_of_bounds_not_a_mutation() -> None:
    def body(case: Case, _: int) -> None:
        silu_good(case, 0)
        memory, start = _root(case.arrays["x"])
        memory[start - 3] ^= 0xFF

    verdict = _rejected(SILU, body, SILU_DIMS)
    assert verdict.reason == "out_of_bounds" and verdict.evidence.arg == "x"
    assert "up to 3 bytes before its start" in verdict.evidence.detail


def test_guards_are_wide_random_and_refilled() -> None:
    assert guard_bytes(10) == MIN_GUARD_BYTES
    assert guard_bytes(5 << 20) == 5 << 20
    rng = np.random.default_rng(0)
    arrays: dict[str, np.ndarray] = {"a": np.zeros(100, np.float16), "b": np.ones(10, np.float32)}
    arena = Arena(np, rng, arrays, ["a", "b"])
    assert arena.views["a"].ctypes.data % 256 == 0 and arena.damage() is None
    first = [e.copy() for e in arena.expected]
    assert len(np.unique(first[0])) == 256  # random bytes, not one fill value
    arena.refill()
    assert not np.array_equal(first[0], arena.expected[0])
    arg = SILU.contract.args[0]
    args = [arg.model_copy(update={"name": "a"}), arg.model_copy(update={"name": "b"})]
    moved = arena.relocated(arrays, args)
    assert all(moved.views[n].ctypes.data % 16 == 0 for n in arrays)
    assert any(moved.views[n].ctypes.data % 256 for n in arrays)
    assert np.array_equal(moved.views["b"], arrays["b"])


def test_input_mutation_is_still_named() -> None:
    def body(case: Case, _: int) -> None:
        silu_good(case, 0)
        case.arrays["x"].view(np.uint16)[0, 0] ^= 1  # a changed bit (a stored 0 may be drawn)

    verdict = _rejected(SILU, body, SILU_DIMS)
    assert verdict.reason == "input_mutated" and "'x' was modified" in verdict.message


# --- precision ------------------------------------------------------------------------------


def silu_double_rounding(case: Case, _: int) -> None:
    x = _f64(case, "x").astype(np.float32)
    d = x.shape[1] // 2
    element = DTYPES[case.dtype]
    with np.errstate(over="ignore", invalid="ignore"):
        silu = element.to_float64(np, element.from_float64(np, x[:, :d] / (1 + np.exp(-x[:, :d]))))
        _store(case, "out", silu.astype(np.float32) * x[:, d:])


def rmsnorm_residual_toward_zero(case: Case, launch: int) -> None:
    x = (_f64(case, "input") + _f64(case, "residual")).astype(np.float64)
    rmsnorm_good(case, launch)
    rounded = _f64(case, "residual")
    bits = case.arrays["residual"].view(np.uint16)
    away = (np.abs(rounded) > np.abs(x)) & np.isfinite(rounded)
    bits[...] = np.where(away, bits - 1, bits)  # truncation: one ulp back toward zero


def rmsnorm_normalises_the_rounded_sum(case: Case, launch: int) -> None:
    rmsnorm_good(case, launch, rounded_x=True)


@pytest.mark.parametrize(
    ("spec", "body", "dims"),
    [
        (SILU, silu_double_rounding, {"tokens": 16, "d": 1024}),
        (RMSNORM, rmsnorm_residual_toward_zero, {"tokens": 16, "hidden": 1024}),
        (RMSNORM, rmsnorm_normalises_the_rounded_sum, {"tokens": 16, "hidden": 1024}),
    ],
)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_systematic_precision_loss_is_caught(
    spec: OperationSpec, body: Callable[[Case, int], None], dims: dict[str, int], dtype: str
) -> None:
    verdict = _rejected(spec, body, dims, dtype=dtype)
    assert verdict.reason == "mismatch"  # precision loss, or outside the tolerance at an outlier


def test_held_out_precision_loss_names_no_shape() -> None:
    verdict = _rejected(
        RMSNORM,
        rmsnorm_normalises_the_rounded_sum,
        {"tokens": 16, "hidden": 1024},
        suite="heldout",
    )
    assert "held-out shape (float16)" in verdict.message and "1024" not in verdict.message
    assert "precision loss" in verdict.message


# --- labels -----------------------------------------------------------------------------------


def rmsnorm_no_residual(case: Case, launch: int) -> None:
    before = case.arrays["residual"].copy()
    rmsnorm_good(case, launch)
    case.arrays["residual"][...] = before


def rmsnorm_residual_wrong_some_equal_input(case: Case, launch: int) -> None:
    before = case.arrays["residual"].copy()
    rmsnorm_good(case, launch)
    _store(case, "residual", _f64(case, "residual") * 0.5)
    case.arrays["residual"][:, 0] = before[:, 0]  # these happen to equal the input's bits


def test_inout_never_written_is_unwritten_but_written_wrong_is_a_mismatch() -> None:
    verdict = _rejected(RMSNORM, rmsnorm_no_residual, RMS_DIMS)
    assert verdict.reason == "unwritten_output" and verdict.evidence.arg == "residual"
    verdict = _rejected(RMSNORM, rmsnorm_residual_wrong_some_equal_input, RMS_DIMS)
    assert verdict.reason == "mismatch" and verdict.evidence.arg == "residual"


def test_a_refused_launch_and_a_fault() -> None:
    def refused(case: Case, _: int) -> None:
        raise LaunchError("launch refused: too many resources requested")

    def faults(case: Case, _: int) -> None:
        raise LaunchError("kernel failed: illegal address", sticky=True, code=700)

    assert _rejected(SILU, refused, SILU_DIMS).reason == "launch_error"
    assert _rejected(SILU, faults, SILU_DIMS).reason == "crashed"


def test_nondeterminism_is_allowed_when_the_contract_says_so() -> None:
    def alternates(case: Case, launch: int) -> None:
        _store(case, "out", _silu32(case) * np.float32(1.0 + (launch % 2) * 2.0**-20))

    assert _rejected(SILU, alternates, SILU_DIMS).reason == "nondeterministic"
    relaxed = SILU.model_copy(
        update={"contract": SILU.contract.model_copy(update={"deterministic": False})}
    )
    case = _case(relaxed, SILU_DIMS)
    kernel = NumpyKernel(alternates)
    assert check_case(relaxed, kernel, NumpyKernel(silu_good), case, np.random.default_rng(1)) < 1


# --- the plan: random shapes, preflight ------------------------------------------------------


def test_random_shapes_stay_inside_every_constraint_and_cover_both_phases() -> None:
    rng = np.random.default_rng(11)
    for spec in (SILU, RMSNORM, MERGE):
        for _ in range(5):
            shapes = random_shapes(spec, rng, lambda dims: dims["tokens"] != 300, "float16")
            assert len(shapes) == 2 * RANDOM_SHAPES_PER_PHASE
            rows = [s["tokens"] for s in shapes]
            assert sum(r <= DECODE_MAX_ROWS for r in rows) == RANDOM_SHAPES_PER_PHASE
            for dims in shapes:
                assert spec.contract.shape_problem(dims) is None and dims["tokens"] != 300
                assert spec.contract.bytes_for(dims, "float16") <= RANDOM_SHAPE_MAX_BYTES
                assert bucket_of(spec, dims, "float16")


def _suite_max(spec: Any, name: str) -> int:
    return max(
        d[name] for suite in ("tuning", "heldout", "edge") for d in spec.contract.suite(suite)
    )


def test_every_check_draws_each_dim_in_its_top_stratum_and_beyond_the_suites() -> None:
    # red-team kernels wrong only beyond the suites' largest tokens or heads, or only for hidden
    # above 16392, passed while draws stopped at the suites' largest values or were log-uniform
    for spec in (SILU, RMSNORM, MERGE):
        beyond: dict[str, int] = {}
        for seed in range(40):
            rng = np.random.default_rng(seed)
            shapes = random_shapes(spec, rng, lambda dims: True, "float16")
            for name, dim in spec.contract.dims.items():
                _, high = plan_module._dim_range(spec, name)
                top = [s[name] for s in shapes if s[name] >= high / plan_module.TOP_STRATUM]
                assert top, (spec.name, name, seed, shapes)
                if dim.max is None:
                    assert high == plan_module.RANDOM_BEYOND_SUITES * _suite_max(spec, name)
                    beyond[name] = beyond.get(name, 0) + any(
                        s[name] > _suite_max(spec, name) for s in shapes
                    )
                else:
                    assert high == dim.max
        # every unbounded dim goes past the suites' largest value in most checks (the shipped
        # contracts now bound every dim: the domain suite covers up to their maxima)
        assert all(count >= 30 for count in beyond.values()), (spec.name, beyond)


def test_equal_lse_ties_both_sides_exactly_and_the_reference_averages() -> None:
    (tie,) = [sp for sp in MERGE.contract.specials if sp.name == "equal_lse"]
    assert tie.same_as == {"s_b": "s_a"}
    dims = {"tokens": 64, "heads": 8, "head_dim": 16}
    case = make_case(MERGE, dims, "float16", np.random.default_rng(4))
    index = MERGE.contract.specials.index(tie) + 1
    labels = scenarios.apply(MERGE, case.arrays, "float16", np.random.default_rng(5))
    rows = np.nonzero(labels[64] == index)[0]
    s_a, s_b = case.arrays["s_a"][rows], case.arrays["s_b"][rows]
    tied = s_a == s_b
    assert 0 < tied.mean() < 1  # its fraction of the positions, in its rows only
    plain = np.nonzero(labels[64] == 0)[0]
    assert not (case.arrays["s_a"][plain] == case.arrays["s_b"][plain]).any()
    inputs = {
        k: v.astype(np.float64) for k, v in case.arrays.items() if k in ("v_a", "v_b", "s_a", "s_b")
    }
    out = MERGE.reference(np, inputs, {})
    r, h = rows[np.nonzero(tied)[0][0]], np.nonzero(tied)[1][0]
    mean = (inputs["v_a"][r, h] + inputs["v_b"][r, h]) / 2
    assert (
        np.allclose(out["v_merged"][r, h], mean)
        and out["s_merged"][r, h] == inputs["s_a"][r, h] + 1
    )


def test_a_tie_needs_two_inputs_of_one_shape() -> None:
    from astra_graph.kernel.contract import Contract

    data = MERGE.contract.model_dump()
    data["specials"] = [{"name": "bad", "same_as": {"s_b": "v_a"}}]
    with pytest.raises(ValueError, match="same_as: 's_b' and 'v_a' differ"):
        Contract.model_validate(data)
    data["specials"] = [{"name": "empty"}]
    with pytest.raises(ValueError, match="values or same_as"):
        Contract.model_validate(data)


def test_random_shapes_differ_between_checks_and_are_not_suite_shapes() -> None:
    listed = {repr(d) for s in ("tuning", "heldout", "edge") for d in MERGE.contract.suite(s)}
    seen = set()
    for seed in range(4):
        cases = plan_cases(MERGE, ["edge"], [], np.random.default_rng(seed))
        drawn = [c for c in cases if c.suite == "random"]
        assert len(drawn) == 2 * RANDOM_SHAPES_PER_PHASE * len(MERGE.contract.dtypes)
        seen |= {repr(c.dims) for c in drawn}
        assert {c.unchecked for c in cases} <= {0, 1, 2, 3}
    assert len(seen) >= 8 and not seen & listed


def _request(candidate: str, suites: list[str]) -> dict[str, Any]:
    spec, impl = SILU, SILU_IMPL
    cand = load_implementation(spec.folder / "naive.cu", spec.contract, source=candidate)
    return CheckRequest(
        op=OperationPayload.of(spec),
        baseline=KernelPayload.of(impl),
        candidate=KernelPayload.of(cand),
        suites=suites,
    ).model_dump()


def test_run_check_on_the_host_accepts_and_rejects_a_zero_grid_before_any_launch() -> None:
    made: list[NumpyKernel] = []

    def loader(spec: Any, impl: Any, dtype: str, tunables: Any = None) -> NumpyKernel:
        geometry: Any = ((1, 1, 1), (256, 1, 1), 0)  # a fixed geometry or one computed from dims
        if "ZERO_GRID" in impl.source:
            geometry = lambda dims: ((dims["tokens"] // 64, 1, 1), (256, 1, 1), 0)  # noqa: E731
        made.append(NumpyKernel(silu_good, geometry))
        return made[-1]

    source = (SILU.folder / "naive.cu").read_text()
    verdict = run_check(
        _request(source, ["edge"]),
        rng=np.random.default_rng(0),
        loader=loader,
        arch="sm_90",
    )
    assert verdict["accepted"], verdict
    assert "4 random shapes" in verdict["message"]
    made.clear()
    verdict = run_check(
        _request(source + "// ZERO_GRID\n", ["edge"]),
        rng=np.random.default_rng(0),
        loader=loader,
        arch="sm_90",
    )
    assert verdict["reason"] == "interface_mismatch" and "expected >= 1" in verdict["message"]
    assert all(kernel.launches == 0 for kernel in made)  # decided before anything ran


def test_a_request_keeps_the_infinities_of_special_scenarios() -> None:
    from astra_graph.harness.payload import operation_spec

    request = CheckRequest(
        op=OperationPayload.of(MERGE),
        baseline=KernelPayload.of(MERGE_IMPL),
        candidate=KernelPayload.of(MERGE_IMPL),
        suites=["edge"],
    ).model_dump()
    spec = operation_spec(CheckRequest.model_validate(request).op)
    assert spec.contract == MERGE.contract
    assert spec.contract.specials[0].values["s_a"] == [-np.inf]


@pytest.mark.parametrize("unchecked", [0, 1])
def test_a_kernel_whose_launches_alternate_is_nondeterministic_whichever_launch_is_run_1(
    unchecked: int,
) -> None:
    def alternates(case: Case, launch: int) -> None:
        _store(case, "out", _silu32(case) * np.float32(1.0 + (launch % 2) * 2.0**-10))

    verdict = _rejected(SILU, alternates, {"tokens": 16, "d": 1024}, unchecked=unchecked)
    assert verdict.reason == "nondeterministic"  # not the precision loss run 1 may show
