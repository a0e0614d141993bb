"""The whole domain on the host (issue 22): domain shapes, values from the whole type, the domain
rule for ``requires``, the light protocol for shapes beyond memory, the fp32 bias rule.

NumPy kernels stand in for CUDA ones (as in test_verify_protocol.py); each wrong kernel here is
written the way the red team's went wrong, and each assertion fails without the defence.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from astra_graph.harness import domain, scenarios, verify
from astra_graph.harness.cases import Case, make_case
from astra_graph.harness.compare import FP32_BIAS_LIMIT
from astra_graph.harness.errors import Rejected
from astra_graph.harness.payload import CheckRequest, KernelPayload, OperationPayload
from astra_graph.harness.plan import CaseSpec, plan_cases, preflight
from astra_graph.harness.verify import check_case, light_case, run_check
from astra_graph.kernel.contract import load_contract
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import load_implementation
from test_verify_protocol import (
    MERGE,
    RMSNORM,
    SILU,
    SILU_IMPL,
    NumpyKernel,
    _f64,
    _rejected,
    _silu32,
    _store,
    rmsnorm_good,
    silu_good,
)

SPECS = (SILU, RMSNORM, MERGE)


# --- domain shapes -------------------------------------------------------------------------------


def test_shipped_contracts_state_a_maximum_for_every_dim() -> None:
    for spec in SPECS:
        for name, dim in spec.contract.dims.items():
            assert dim.max is not None, (spec.name, name)
        assert (spec.contract.dims["tokens"].max or 0) >= 65536
    assert (MERGE.contract.dims["heads"].max or 0) >= 256
    assert (MERGE.contract.dims["head_dim"].max or 0) >= 1024
    assert (RMSNORM.contract.dims["hidden"].max or 0) >= 32768


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_domain_shapes_reach_every_limit_of_the_contract(spec: Any) -> None:
    shapes = domain.domain_shapes(spec, "float16", np.random.default_rng(0))
    kinds = {s.kind for s in shapes}
    assert {"min", "max", "grid_65535", "non_multiple", "sample", "bytes_2^31"} <= kinds
    for shape in shapes:
        assert spec.contract.shape_problem(shape.dims) is None, shape
    for name, dim in spec.contract.dims.items():
        values = {s.dims[name] for s in shapes}
        assert dim.min in values or domain.dim_bounds(spec, name)[0] in values
        assert dim.max in values, (spec.name, name)
        low, high = domain.dim_bounds(spec, name)
        if low <= 65535 < high:  # both sides of gridDim.y's limit
            assert any(v <= 65535 for v in values if v > 60000) and 65536 in values
    largest = max(domain.largest_arg_elements(spec, s.dims) for s in shapes)
    widest = {n: domain.dim_bounds(spec, n)[1] for n in spec.contract.dims}
    if domain.largest_arg_elements(spec, widest) > domain.OFFSET_LIMIT:
        assert largest > domain.OFFSET_LIMIT  # 32-bit element offsets overflow there
    else:
        assert largest == domain.largest_arg_elements(spec, widest)


def test_non_multiples_and_the_sample_change_with_the_seed() -> None:
    seen = set()
    for seed in range(6):
        shapes = domain.domain_shapes(MERGE, "float16", np.random.default_rng(seed))
        odd = [s.dims for s in shapes if s.kind == "non_multiple"]
        for dims in odd:
            assert any((v // 8) % 2 == 1 or v % 8 for v in dims.values()), (
                dims
            )  # never only powers of two
        seen |= {repr(s.dims) for s in shapes if s.kind in ("sample", "non_multiple")}
    assert len(seen) >= 20


def test_memory_estimates_grow_with_the_shape_and_light_is_smaller() -> None:
    small, large = {"tokens": 4, "d": 64}, {"tokens": 4096, "d": 8192}
    for dims in (small, large):
        assert domain.light_check_bytes(SILU, dims, "float16") < domain.full_check_bytes(
            SILU, dims, "float16"
        )
    assert domain.full_check_bytes(SILU, large, "float16") > 1000 * domain.full_check_bytes(
        SILU, small, "float16"
    )


def test_plan_adds_the_domain_suite_with_the_seed_last() -> None:
    cases = plan_cases(SILU, ["edge"], [], np.random.default_rng(5), domain=True, seed=123)
    kinds = [c for c in cases if c.suite == domain.DOMAIN_SUITE]
    assert kinds and all(c.seed == 123 and c.kind for c in kinds)
    assert {c.dtype for c in kinds} == set(SILU.contract.dtypes)
    first = next(i for i, c in enumerate(cases) if c.suite == domain.DOMAIN_SUITE)
    assert all(c.suite == domain.DOMAIN_SUITE for c in cases[first:])
    assert not [c for c in plan_cases(SILU, ["edge"], [], np.random.default_rng(5)) if c.kind]
    # the 2^31 shapes once per element width: bf16 overflows its offsets where fp16 does
    crossing = [c.dtype for c in kinds if c.kind.endswith("2^31")]
    assert crossing and set(crossing) == {SILU.contract.dtypes[0]}


# --- the domain rule for requires ----------------------------------------------------------------


class NarrowKernel(NumpyKernel):
    """A kernel whose ``requires`` stops at ``tokens <= 32768`` (the contract allows 65536)."""

    def unsupported(self, dims: Mapping[str, int]) -> str | None:
        return "tokens <= 32768" if dims["tokens"] > 32768 else None


def test_a_requires_narrower_than_the_domain_is_rejected_naming_clause_and_domain() -> None:
    cases = plan_cases(SILU, ["edge"], [], np.random.default_rng(1), domain=True)
    found = preflight(NarrowKernel(silu_good), cases, "sm_90", spec=SILU)
    assert found.reason == "domain" and found.case is not None
    assert "requires tokens <= 32768" in found.problem and "tokens <= 65536" in found.problem
    partial = preflight(NarrowKernel(silu_good), cases, "sm_90", spec=SILU, partial=True)
    assert partial.case is None and partial.kernel_domain == ("tokens <= 32768",)
    assert partial.excluded and all(cases[i].dims["tokens"] > 32768 for i in partial.excluded)


def test_a_grid_refused_at_a_domain_shape_is_a_domain_rejection() -> None:
    # gridDim.y = tokens: refused above 65535, which only the domain suite reaches
    kernel = NumpyKernel(silu_good, lambda dims: ((1, dims["tokens"], 1), (128, 1, 1), 0))
    cases = plan_cases(SILU, ["tuning"], [], np.random.default_rng(2), domain=True)
    found = preflight(kernel, cases, "sm_90", spec=SILU)
    assert found.reason == "domain" and found.case is not None
    assert found.case.dims["tokens"] > 65535 and "inside the contract's domain" in found.problem


def _request(suites: list[str], **kw: Any) -> dict[str, Any]:
    cand = load_implementation(SILU.folder / "naive.cu", SILU.contract)
    return CheckRequest(
        op=OperationPayload.of(SILU),
        baseline=KernelPayload.of(SILU_IMPL),
        candidate=KernelPayload.of(cand),
        suites=suites,
        **kw,
    ).model_dump()


def _host_check(
    body: Any, kernel_type: type = NumpyKernel, host_bytes: int = 2 << 20, **kw: Any
) -> dict[str, Any]:
    import astra_graph.harness.verify as verify

    verify.DOMAIN_HOST_BYTES, kept = host_bytes, verify.DOMAIN_HOST_BYTES
    try:
        return _run_on_host(body, kernel_type, **kw)
    finally:
        verify.DOMAIN_HOST_BYTES = kept


def _run_on_host(body: Any, kernel_type: type, **kw: Any) -> dict[str, Any]:
    def loader(spec: Any, impl: Any, dtype: str, tunables: Any = None) -> NumpyKernel:
        if impl.path.name == "naive.cu":
            return kernel_type(body)
        return NumpyKernel(silu_good)

    return run_check(
        _request(["edge"], **kw), rng=np.random.default_rng(0), loader=loader, arch="sm_90"
    )


def test_run_check_runs_the_domain_on_the_host_and_notes_what_did_not_fit() -> None:
    verdict = _host_check(silu_good, random_shapes=False)
    assert verdict["accepted"], verdict
    assert "domain shapes" in verdict["message"]
    notes = " | ".join(verdict["notes"])
    assert "domain suite:" in notes and "skipped domain shape" in notes  # 2^31 elements
    off = _host_check(silu_good, random_shapes=False, domain=False)
    assert off["accepted"] and off["cases_checked"] < verdict["cases_checked"]


def test_a_kernel_wrong_only_beyond_4x_the_suites_is_rejected_in_the_domain() -> None:
    def capped(case: Case, _: int) -> None:  # a capped grid without a row loop
        beyond = case.arrays["out"][32768:].copy()
        silu_good(case, 0)
        case.arrays["out"][32768:] = beyond  # rows past 32768 never written

    # the domain alone finds it (light protocol: 65536 rows in 48 MiB)
    verdict = _host_check(capped, host_bytes=48 << 20, random_shapes=False)
    assert not verdict["accepted"] and verdict["evidence"]["suite"] == "domain"
    assert verdict["evidence"]["seed"] is not None
    assert verdict["evidence"]["index"][0] >= 32768


def test_a_narrow_requires_is_rejected_by_run_check_unless_partial_kernels_are_allowed() -> None:
    verdict = _host_check(silu_good, NarrowKernel)
    assert verdict["reason"] == "domain" and "tokens <= 32768" in verdict["message"]
    allowed = _host_check(silu_good, NarrowKernel, partial_kernels=True)
    assert allowed["accepted"] and allowed["kernel_domain"] == ["tokens <= 32768"]


def test_domain_shapes_the_oracle_cannot_launch_are_left_out_and_said(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # an imported operation's original is its domain: FlashInfer's MergeState cannot launch
    # heads * head_dim / 8 > 1024 threads, and was refused against itself there (H100)
    folder = tmp_path / "silu_and_mul"
    shutil.copytree(SILU.folder, folder)
    contract = folder / "contract.toml"
    contract.write_text('oracle = "original.cu"\n' + contract.read_text())
    naive = (folder / "naive.cu").read_text()
    (folder / "original.cu").write_text(naive.replace("block = BLOCK", "block = d"))
    spec = load_contract(folder)
    widths: list[int] = []
    # the original runs only on a GPU: here the float64 reference stands in for it
    monkeypatch.setattr(
        verify, "reference_with_own_error", lambda spec, d, xp, i, p: spec.reference(xp, i, p)
    )

    def recorded(case: Case, _: int) -> None:
        widths.append(case.arrays["out"].shape[1])
        silu_good(case, 0)

    def loader(spec: Any, impl: Any, dtype: str, tunables: Any = None) -> NumpyKernel:
        return NumpyKernel(recorded)

    naive_impl = load_implementation(folder / "naive.cu", spec.contract)
    request = CheckRequest(
        op=OperationPayload.of(spec),
        baseline=KernelPayload.of(naive_impl),
        candidate=KernelPayload.of(naive_impl),
        suites=["edge"],
    ).model_dump()
    verdict = run_check(request, rng=np.random.default_rng(0), loader=loader, arch="sm_90")
    assert verdict["accepted"], verdict
    said = [n for n in verdict["notes"] if "cannot launch there" in n]
    assert said and "original.cu" in said[0] and "threads per block" in said[0], verdict["notes"]
    assert any("random shape(s) drawn again" in n for n in verdict["notes"]), verdict["notes"]
    suite = {shape["d"] for shape in spec.contract.suite("edge")}  # run as given, always
    beyond = [w for w in widths if w > 1024 and w not in suite]
    assert widths and not beyond  # no random or domain shape past the oracle's block
    # the same contract without an oracle runs the wider rows (the rule is the oracle's only)
    widths.clear()
    plain = run_check(_request(["edge"]), rng=np.random.default_rng(0), loader=loader, arch="sm_90")
    assert plain["accepted"] and not any("cannot launch there" in n for n in plain["notes"])
    assert any(w > 1024 and w not in suite for w in widths)


# --- the light protocol ---------------------------------------------------------------------------


def test_light_protocol_finds_unwritten_rows_and_wrong_rows_past_a_chunk(monkeypatch: Any) -> None:
    import astra_graph.harness.verify as verify

    monkeypatch.setattr(verify, "LIGHT_CHUNK_ELEMENTS", 4096)  # several chunks on a small shape
    dims = {"tokens": 300, "d": 64}
    case = CaseSpec(domain.DOMAIN_SUITE, dims, "float16", kind="max", seed=9)
    assert light_case(SILU, NumpyKernel(silu_good), case, np.random.default_rng(1)) < 1

    def skips_tail(c: Case, _: int) -> None:
        out = _silu32(c)
        _store(c, "out", out)
        c.arrays["out"][250:] = np.float16(0.5)

    with pytest.raises(Rejected) as caught:
        light_case(SILU, NumpyKernel(skips_tail), case, np.random.default_rng(1))
    verdict = caught.value.verdict
    evidence = verdict.evidence
    assert evidence is not None and evidence.index is not None
    assert verdict.reason == "mismatch" and evidence.index[0] >= 250
    assert evidence.seed == 9 and "(domain: max)" in verdict.message

    def leaves_tail(c: Case, _: int) -> None:
        out = _silu32(c)
        poison = c.arrays["out"][299:].copy()
        _store(c, "out", out)
        c.arrays["out"][299:] = poison

    with pytest.raises(Rejected) as caught:
        light_case(SILU, NumpyKernel(leaves_tail), case, np.random.default_rng(1))
    assert caught.value.verdict.reason == "unwritten_output"


# --- values from the whole type ---------------------------------------------------------------


def test_type_values_are_exact_in_each_type() -> None:
    for name, largest in (("float16", 65504.0), ("bfloat16", 3.3895313892515355e38)):
        element = DTYPES[name]
        values = scenarios.type_values(element)
        stored = element.to_float64(np, element.from_float64(np, np.asarray(values)))
        assert np.isnan(stored[0]) and list(stored[1:3]) == [np.inf, -np.inf]
        assert np.signbit(stored[4]) and not np.signbit(stored[3])
        assert stored[5] > 0 and stored[5] == values[5]  # the smallest subnormal survives
        assert stored[7] == largest == -stored[8]
    assert scenarios.type_values(DTYPES["float32"])[7] == float(np.finfo(np.float32).max)
    assert math.isinf(3.3895313892515355e38**2 * np.float32(1)) or (
        np.float32(3.3895313892515355e38) ** 2 == np.inf
    )


def test_type_values_of_fp8_e4m3fn_are_its_own_and_have_no_infinity() -> None:
    # an FP8 input (FlashInfer's RMSNormQuant scale) had no layout: the check died (H100)
    element = DTYPES["float8_e4m3fn"]
    values = scenarios.type_values(element)
    stored = element.to_float64(np, element.from_float64(np, np.asarray(values)))
    assert math.isnan(values[0]) and not any(math.isinf(v) for v in values)
    assert np.isnan(stored[0])
    finite = stored[1:]
    assert list(finite) == values[1:]  # every value is one of the type's, exactly
    assert finite.max() == 448.0 == -finite.min()
    assert 2.0**-9 in values and -(2.0**-6 - 2.0**-9) in values  # the subnormal ends


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_input_meets_every_special_value_and_structured_rows(spec: Any) -> None:
    dims = {n: max(d.min, 256) for n, d in spec.contract.dims.items()} | {"tokens": 512}
    names = scenarios.scenario_names(spec)
    for arg in spec.contract.args:
        if arg.role != "output":
            assert f"whole_type_{arg.name}" in names
    assert set(scenarios.STRUCTURED) <= set(names)
    case = make_case(spec, dims, "bfloat16", np.random.default_rng(3))
    labels = scenarios.apply(spec, case.arrays, "bfloat16", np.random.default_rng(4))
    for arg in spec.contract.args:
        if arg.role == "output":
            continue
        values = (
            DTYPES["bfloat16"].to_float64(np, case.arrays[arg.name])
            if arg.dtype == "T"
            else (case.arrays[arg.name].astype(np.float64))
        )
        if len(arg.shape) > 1:  # every non-finite value the input's domain holds, no other
            for name in ("nan", "inf", "-inf"):
                met = (np.isnan(values) if name == "nan" else values == float(name)).any()
                assert met == (name in arg.non_finite), (arg.name, name)
        else:  # a 1-D input: one value per scenario row
            assert (~np.isfinite(values)).any() or (values == 0).any(), arg.name
        assert (np.abs(values) == 3.3895313892515355e38).any() or arg.dtype != "T"
    rows = labels[512]
    zero = names.index("zero_prefix") + 1
    first = spec.contract.args[[a.role for a in spec.contract.args].index("input")]
    if first.shape[0] == "tokens" and (rows == zero).any():
        row = int(np.nonzero(rows == zero)[0][0])
        assert (case.arrays[first.name].reshape(512, -1)[row, :1] == 0).all()


def test_a_nan_squashed_to_zero_is_rejected_naming_the_scenario() -> None:
    def squashes(case: Case, launch: int) -> None:
        silu_good(case, launch)
        out = case.arrays["out"]
        out[np.isnan(out.astype(np.float32))] = 0

    verdict = _rejected(SILU, squashes, {"tokens": 64, "d": 512})
    assert verdict.reason == "mismatch" and "whole_type_x" in verdict.evidence.detail


def test_a_zero_prefix_taken_as_a_zero_row_is_rejected() -> None:
    def shortcut(case: Case, launch: int) -> None:
        silu_good(case, launch)
        x = case.arrays["x"].astype(np.float32)
        lazy = (x[:, :16] == 0).all(axis=1)
        case.arrays["out"][lazy] = 0

    verdict = _rejected(SILU, shortcut, {"tokens": 256, "d": 512})
    assert verdict.reason == "mismatch" and "zero_prefix" in verdict.evidence.detail


def test_rmsnorm_reference_states_the_fp32_overflow_and_a_correct_kernel_meets_it() -> None:
    x = np.full((1, 16), 1e30)
    out = RMSNORM.reference(np, {"input": x, "residual": x, "weight": np.ones(16)}, {"eps": 1e-6})
    assert (out["input"] == 0).all() and (out["residual"] == 2e30).all()
    small = np.ones((1, 16))
    out = RMSNORM.reference(
        np, {"input": small, "residual": small, "weight": np.ones(16)}, {"eps": 0.0}
    )
    assert np.allclose(out["input"], 1.0)
    for seed in range(2):
        case = CaseSpec("tuning", {"tokens": 64, "hidden": 256}, "bfloat16", {"eps": 1e-6})
        kernel = NumpyKernel(rmsnorm_good)
        assert check_case(RMSNORM, kernel, kernel, case, np.random.default_rng(seed)) < 1


# --- the fp32 bias rule -------------------------------------------------------------------------


def _merge(bias: float) -> Any:
    def body(case: Case, _: int) -> None:
        inputs = {k: _f64(case, k) for k in ("v_a", "v_b")}
        inputs |= {k: case.arrays[k].astype(np.float64) for k in ("s_a", "s_b")}
        with np.errstate(invalid="ignore", over="ignore"):
            ref = MERGE.reference(np, inputs, case.scalars)
        _store(case, "v_merged", ref["v_merged"])
        case.arrays["s_merged"][...] = (ref["s_merged"] + bias).astype(np.float32)

    return body


def test_a_systematic_fp32_bias_is_rejected_and_rounding_noise_is_not() -> None:
    dims = {"tokens": 256, "heads": 32, "head_dim": 8}
    case = CaseSpec("tuning", dims, "float16")
    good = NumpyKernel(_merge(0.0))
    assert check_case(MERGE, good, good, case, np.random.default_rng(1)) < 1
    with pytest.raises(Rejected) as caught:
        check_case(MERGE, NumpyKernel(_merge(1.5e-6)), good, case, np.random.default_rng(1))
    verdict = caught.value.verdict
    assert verdict.reason == "mismatch" and "'s_merged'" in verdict.message
    assert "precision loss" in verdict.message
    assert FP32_BIAS_LIMIT < 0.06  # below the smallest shift the red-team bias gives


# --- thresholds in the code ----------------------------------------------------------------------

THRESHOLD_SOURCE = """
#define WIDE 4096
constexpr int FEW = 100;
template <typename T>
__global__ void k(T* out, const T* x, int d, int tokens, int heads) {
    const int vectors = d / 8;
    if (vectors > 512) { return; }          // d = 4096
    if ((long long)d >= WIDE) { return; }   // d = 4096, through a #define and a cast
    if (tokens < FEW) { return; }           // tokens = 100, through a constexpr
    if (64 < heads && heads < 128) { return; }
    for (int i = threadIdx.x; i < d; i += blockDim.x) {}  // no constant: not a threshold
}
"""


def test_code_thresholds_are_read_with_a_parser_through_locals_defines_and_casts() -> None:
    from astra_graph.harness.thresholds import code_thresholds

    found = {(t.dim, t.value) for t in code_thresholds(THRESHOLD_SOURCE, MERGE_LIKE)}
    assert found == {("d", 4096.0), ("tokens", 100.0), ("heads", 64.0), ("heads", 128.0)}


def test_requires_thresholds_and_the_values_on_both_sides() -> None:
    from astra_graph.harness.thresholds import requires_thresholds, threshold_values

    found = requires_thresholds(
        ["hidden % 8 == 0", "hidden * 4 <= 227 * 1024 - 1024", "tokens <= 32768"], RMSNORM
    )
    assert [(t.dim, t.value) for t in found] == [("hidden", 57856.0), ("tokens", 32768.0)]
    tokens = found[1]
    assert threshold_values(RMSNORM, tokens, domain.dim_bounds(RMSNORM, "tokens")) == [
        32768,
        32769,
    ]
    hidden = found[0]  # beyond the contract's 32768: no shape
    assert threshold_values(RMSNORM, hidden, domain.dim_bounds(RMSNORM, "hidden")) == []


def test_the_plan_puts_each_threshold_on_both_sides_at_the_dims_multiple() -> None:
    from astra_graph.harness.thresholds import Threshold

    wide = Threshold("d", 4100.0, "code: d > 4100")
    cases = plan_cases(SILU, ["edge"], [], np.random.default_rng(3), domain=True, thresholds=[wide])
    at = sorted({c.dims["d"] for c in cases if c.kind.startswith("threshold")})
    assert at == [4096, 4104] and all(v % 8 == 0 for v in at)


def _merge_like() -> Any:
    """silu's contract with heads as a dim and scalars for d, tokens and heads (any names)."""
    data = SILU.contract.model_dump()
    data["dims"]["heads"] = {"min": 1, "max": 256}
    data["scalars"] += [
        {"name": "tokens", "dtype": "int32", "value": "tokens"},
        {"name": "heads", "dtype": "int32", "value": "heads"},
    ]
    data["suites"] = {k: [dict(s, heads=8) for s in v] for k, v in data["suites"].items()}
    from astra_graph.kernel.contract import Contract, OperationSpec

    return OperationSpec(contract=Contract.model_validate(data), folder=SILU.folder)


MERGE_LIKE = _merge_like()


def test_a_domain_case_out_of_memory_is_skipped_and_noted_not_a_harness_failure() -> None:
    def exhausts(case: Case, launch: int) -> None:
        if case.dims["tokens"] > 32768:
            raise MemoryError("out of memory allocating 1 GiB")  # as CuPy's OutOfMemoryError
        silu_good(case, launch)

    verdict = _host_check(exhausts, host_bytes=48 << 20, random_shapes=False)
    assert verdict["accepted"], verdict
    assert any("out of GPU memory" in note for note in verdict["notes"])


def test_the_plannable_gpu_memory_counts_the_pools_unused_blocks_and_frees_none() -> None:
    from types import SimpleNamespace

    from astra_graph.harness.domain import MEMORY_HEADROOM, plannable_gpu_bytes

    freed: list[bool] = []
    pool = SimpleNamespace(free_bytes=lambda: 200 << 20, free_all_blocks=lambda: freed.append(True))
    fake = SimpleNamespace(
        get_default_memory_pool=lambda: pool,
        cuda=SimpleNamespace(runtime=SimpleNamespace(memGetInfo=lambda: (1000 << 20, 80 << 30))),
    )
    assert plannable_gpu_bytes(fake) == int(MEMORY_HEADROOM * (1200 << 20))
    assert not freed  # freeing the pool before every timed shape made each allocate afresh
