"""``astra import`` of fp8 quantisation and masked launchers, on the CPU.

The fixture tests/fixtures/framework/csrc/quant.cu was written for these tests in the style of
a serving framework (no framework code is copied): what each test reads of it is said there.
The launchers are parsed, never compiled (torch is not installed here); the device code
compiles with NVRTC for sm_90.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.framework.device import compile_device, device_source, torch_types
from astra_graph.framework.draft import contract_text, greatest_sizes, least_sizes
from astra_graph.framework.flatten import flatten
from astra_graph.framework.importer import dead_code
from astra_graph.framework.launchers import (
    Analysis,
    Unmapped,
    analyse,
    device_constants,
    dispatch_hints,
)
from astra_graph.framework.parse import Macro, RowOffset, Source, parse_source
from astra_graph.kernel import expr

# conftest.py says why
pytestmark = pytest.mark.usefixtures("plots_not_drawn", "default_search_path")

QUANT = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "quant.cu"
H100 = device_constants("sm_90", (13, 0))


def _source() -> Source:
    return parse_source(flatten(QUANT, []).text)


def _analyses(launcher_name: str) -> list[Analysis]:
    source = _source()
    launcher = next(x for x in source.launchers if x.name == launcher_name)
    return [
        analyse(launcher, launch, source.kernels, source.macros, H100, source.constants)
        for launch in launcher.launches
    ]


@pytest.mark.usefixtures("needs_nvrtc")
def test_device_code_compiles_as_the_frameworks_build_takes_it() -> None:
    """std names with only torch's headers included, numeric_limits of fp8, torch's
    C10_HOST_DEVICE on a constexpr variable, a constexpr member without an execution space, a
    __device__ lambda and `uint`: each once refused by NVRTC (vLLM 0.33.0's fp8 common.cu,
    layernorm_kernels.cu, merge_attn_states.cu)."""
    device = device_source(flatten(QUANT, []).text)
    assert "__host__ __device__ static constexpr T largest()" in device.text
    assert "__device__ static constexpr T fp8_max_v" in device.text
    assert "__host__ static constexpr T fp8_max_v" not in device.text
    assert "[=] __device__(" not in device.text and "auto quantize = [=]" in device.text
    entry = "fw::scaled_fp8_quant_kernel<astra_framework_t<__half>, c10::Float8_e4m3fn>"
    out = compile_device(device.text, [entry], "sm_90")
    assert out.ok, out.log


@pytest.mark.usefixtures("needs_nvrtc")
def test_fp8_numeric_limits_are_torchs_bit_patterns() -> None:
    source = torch_types() + (
        "using L = std::numeric_limits<c10::Float8_e4m3fn>;\n"
        "static_assert(L::max().x == 0x7E && L::lowest().x == 0xFE && L::min().x == 0x08);\n"
        "static_assert(L::epsilon().x == 0x20 && L::denorm_min().x == 0x01);\n"
        "static_assert(!L::has_infinity && L::quiet_NaN().x == 0x7F);\n"
        "__global__ void k(uint* out) { out[0] = C10_LIKELY(out[1] > 0u) ? 1u : 0u; }\n"
    )
    out = compile_device(source, ["k"], "sm_90")
    assert out.ok, out.log


def test_host_code_inside_a_preprocessor_block_is_removed() -> None:
    text = (
        "#ifndef USE_ROCM\nnamespace fw {\n"
        "inline int host_only(const std::string& s) { return 0; }\n"
        "__device__ int kept() { return 1; }\n"
        "}\n#endif\n"
    )
    device = device_source(text)
    assert "host_only" in device.removed_functions
    assert "__device__ int kept()" in device.text


def test_uint_gcd_an_axis_read_from_a_rank_and_an_absent_optional_integer() -> None:
    (found,) = _analyses("scaled_fp8_quant")
    kinds = {b.param: (b.kind, b.value, b.dtype) for b in found.bindings}
    assert kinds["hidden"][0] == "expr" and kinds["hidden"][2] == "int32"  # `const uint`
    env = {"tokens": 7, "hidden": 4096}
    # input.stride(input.dim() - 2): the rank is 2, so stride(0), a row
    assert expr.evaluate_int(kinds["in_stride"][1], env) == 4096
    assert expr.evaluate_int(kinds["rows"][1], env) == 7  # num_valid absent: numel / hidden
    assert "num_valid: optional integer, imported as absent" in found.notes
    # std::gcd(16 / sizeof(scalar_t), hidden): 8 halves, so 512 threads; 4 floats, 1024
    assert expr.evaluate_dims3(found.block, {**env, "elem_bytes": 2}) == (512, 1, 1)
    assert expr.evaluate_dims3(found.block, {**env, "elem_bytes": 4}) == (1024, 1, 1)
    assert expr.evaluate("gcd(12, 18)", {}) == 6


def test_an_fp8_type_named_by_its_dispatch_is_the_outputs_fixed_type() -> None:
    (found,) = _analyses("scaled_fp8_quant")
    assert found.entry == "fw::scaled_fp8_quant_kernel<astra_framework_t<T>, c10::Float8_e4m3fn>"
    assert found.tensors["out"].element == "float8_e4m3fn"
    assert found.dtypes == ("float32", "float16", "bfloat16")  # the fp8 dispatch is no T
    assert any(note.startswith("fp8_t: float8_e4m3fn") for note in found.notes)


def test_a_dispatch_naming_several_types_for_one_name_is_refused_with_its_reason() -> None:
    case = "X_PRIVATE_CASE_TYPE_USING_HINT(E, q_t, __VA_ARGS__)"
    cases = "CASE(S::Float8_e4m3fn, __VA_ARGS__) CASE(S::Float8_e4m3fnuz, __VA_ARGS__)"
    macros = {
        "CASE": Macro("CASE", ("E", "__VA_ARGS__"), case),
        "FW_DISPATCH_TWO": Macro("FW_DISPATCH_TWO", ("T", "__VA_ARGS__"), f"SW(T, {cases})"),
    }
    assert dispatch_hints("FW_DISPATCH_TWO", ("t", "[&] { k<q_t>(); }"), macros) == {
        "q_t": {"Float8_e4m3fn", "Float8_e4m3fnuz"}
    }
    source = parse_source(
        "template <typename q> __global__ void k(q* out, int n) {}\n"
        "void f(torch::Tensor& out) {\n  int n = out.size(0);\n"
        "  FW_DISPATCH_TWO(out.scalar_type(), [&] {\n"
        "    k<q_t><<<n, 1>>>(out.data_ptr<q_t>(), n);\n  });\n}\n"
    )
    launcher = source.launchers[0]
    two = r"FW_DISPATCH_TWO binds q_t to \['Float8_e4m3fn', 'Float8_e4m3fnuz'\]"
    with pytest.raises(Unmapped, match=two):
        analyse(launcher, launcher.launches[0], source.kernels, macros, H100)


def test_a_generic_lambdas_template_parameter_gives_one_launch_per_call() -> None:
    """``[&]<bool BATCHED>() {... kernel<scalar_t, BATCHED> ...}`` called as
    ``launch.template operator()<true>()`` under ``if (batched)``, and ``<false>`` otherwise."""
    launcher = next(x for x in _source().launchers if x.name == "masked_copy")
    assert [launch.template_args for launch in launcher.launches] == [
        ("scalar_t", "true"),
        ("scalar_t", "false"),
    ]
    assert [launch.conditions[0] for launch in launcher.launches] == [
        ("batched", True),
        ("batched", False),
    ]
    batched, flat = _analyses("masked_copy")
    assert flat.entry == "fw::masked_copy_kernel<astra_framework_t<T>, false>"
    env = {"tokens": 5, "d": 64}
    assert all(expr.evaluate(r, env) for r in flat.requires)
    assert expr.evaluate_dims3(flat.grid, env) == (5, 1, 1)  # the dim3 chosen at run time
    # the then-branch of `batched = input.dim() == 3` drafts input with three axes: its queries
    # alone (size(0), size(1), size(-1)) needed two, and the launch was never taken
    assert batched.shapes["input"] == ["tokens", "input_1", "d"]
    assert "input: rank 3, as the launch's condition states" in batched.notes
    env3 = {"tokens": 4, "input_1": 5, "d": 64}
    assert all(expr.evaluate(r, env3) for r in batched.requires)
    assert expr.evaluate_dims3(batched.grid, env3) == (5, 4, 1)  # (tokens lane, expert)
    assert flat.shapes["input"] == ["tokens", "d"]  # the else-branch states no rank


def test_a_dim_on_grid_y_gets_the_largest_size_the_original_can_launch() -> None:
    """The batched masked_copy puts its leading axis on ``gridDim.y``: past 65535 the original
    cannot launch, so the draft bounds that dim there (the domain check probes 16 times the
    suites' largest size, 65536, and refused the original against itself on the H100), while the
    flat launch, whose grid is x only, gets no bound."""
    batched, flat = _analyses("masked_copy")
    least = least_sizes(batched)
    suite = [{"tokens": 4096, "input_1": 64, "d": 4096}]
    assert greatest_sizes(batched, least, suite) == {"tokens": 65535}
    assert expr.evaluate_dims3(batched.grid, {**least, "tokens": 65535})[1] == 65535
    assert greatest_sizes(flat, least_sizes(flat), [{"tokens": 4096, "d": 4096}]) == {}
    text, notes = contract_text(batched, "masked_copy_1", "quant.cu")
    assert "[dims.tokens]\nmin = 1\nmax = 65535\n" in text
    assert any(n.startswith("dims.tokens: max 65535") for n in notes)


def test_a_bound_on_grid_y_ignores_the_requirements_and_stays_above_the_suites() -> None:
    """``d % 8 == 0`` admits only multiples of 8: were sizes it excludes counted as launching,
    the bisection could stop above 524288 (grid y 65536, a multiple of 8 that cannot launch).
    The bound is the largest size whose geometry fits, requirements aside; and a suite size
    above what the geometry allows gets no bound at all (the contract would refuse its suite)."""
    analysis = _single(
        "template <typename t> __global__ void k(t* out, int n, int d) {}\n"
        "void f(torch::Tensor& out) {\n"
        "  const int n = out.size(0);\n  const int d = out.size(1);\n"
        "  TORCH_CHECK(d % 8 == 0);\n"
        '  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "f", [&] {\n'
        "    k<scalar_t><<<dim3(n, d / 8), 32>>>(out.data_ptr<scalar_t>(), n, d);\n"
        "  });\n}\n"
    )
    assert any("% 8" in r for r in analysis.requires)
    least = least_sizes(analysis)
    bound = greatest_sizes(analysis, least, [{"n": 4096, "d": 65536}])
    assert bound == {"d": 524287}
    top = bound["d"] // 8 * 8  # the largest size the domain check would draw
    assert expr.evaluate_dims3(analysis.grid, {**least, "d": top})[1] <= 65535
    assert greatest_sizes(analysis, least, [{"n": 4096, "d": 8 * 65536}]) == {}


def test_the_dead_branch_of_a_macros_literal_flag_is_dead_code() -> None:
    taken, dead = _analyses("square")
    assert dead_code(taken) == ""
    assert dead_code(dead) == "dead code: never launched, its condition '!(true)' is false"


@pytest.mark.usefixtures("needs_nvrtc")
def test_astra_import_of_the_quant_fixture_validates_and_says_why_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(QUANT), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "4 of 5 launch sites imported (1 not applicable on sm_90)" in out
    for op in ("scaled_fp8_quant", "masked_copy_1", "masked_copy_2", "square_1"):
        assert main(["validate", str(tmp_path / op)]) == 0, op
    contract = (tmp_path / "scaled_fp8_quant" / "contract.toml").read_text()
    assert "[tolerance.float8_e4m3fn]" in contract


def _single(source_text: str) -> Analysis:
    source = parse_source(source_text)
    launcher = source.launchers[0]
    return analyse(launcher, launcher.launches[0], source.kernels, source.macros, H100)


def test_an_output_known_only_by_its_last_axis_is_not_drafted_as_one_row() -> None:
    """``out.size(-1)`` alone of an output the kernel writes row by row ([E, T, d] in vLLM's
    masked_moe_activation): a drafted [d] would be written past its end."""
    with pytest.raises(Unmapped, match=r"out: the kernel writes it .* only its last axis"):
        _single(
            "template <typename t> __global__ void k(t* out, const t* in, int d, int n) {}\n"
            "void f(torch::Tensor& out, torch::Tensor const& in) {\n"
            "  const int d = out.size(-1);\n  const int n = in.size(0);\n"
            '  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "f", [&] {\n'
            "    k<scalar_t><<<n, d>>>(out.data_ptr<scalar_t>(), in.data_ptr<scalar_t>(), d, n);\n"
            "  });\n}\n"
        )


def test_an_output_known_by_its_last_axis_takes_the_rows_of_the_one_fully_read_input() -> None:
    """The launcher reads ``in``'s leading size (``size(-2)``) and its ``size(-1)``, and only
    ``out.size(-1)``: out's rows are in's (the kernel writes the rows the launcher counts from
    in), its last axis its own. With two such inputs which rows out has is not stated, and it
    stays refused."""
    analysis = _single(
        "template <typename t> __global__ void k(t* out, const t* in, int d, int w, int n) {}\n"
        "void f(torch::Tensor& out, torch::Tensor const& in) {\n"
        "  const int d = out.size(-1);\n  const int n = in.size(-2);\n"
        "  const int w = in.size(-1);\n"
        '  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "f", [&] {\n'
        "    k<scalar_t><<<n, d>>>(out.data_ptr<scalar_t>(), in.data_ptr<scalar_t>(), d, w, n);\n"
        "  });\n}\n"
    )
    assert analysis.shapes == {"in": ["n", "w"], "out": ["n", "d"]}
    assert any(n.startswith("out: the launcher reads only its last axis") for n in analysis.notes)
    with pytest.raises(Unmapped, match=r"out: .* more than one read tensor \(a, b\)"):
        _single(
            "template <typename t> __global__ void k(t* out, const t* a, const t* b, int d,\n"
            "    int n, int w, int m, int v) {}\n"
            "void f(torch::Tensor& out, torch::Tensor const& a, torch::Tensor const& b) {\n"
            "  const int d = out.size(-1);\n  const int n = a.size(-2);\n"
            "  const int w = a.size(-1);\n  const int m = b.size(-2);\n"
            "  const int v = b.size(-1);\n"
            '  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "f", [&] {\n'
            "    k<scalar_t><<<n, d>>>(out.data_ptr<scalar_t>(), a.data_ptr<scalar_t>(),\n"
            "        b.data_ptr<scalar_t>(), d, n, w, m, v);\n"
            "  });\n}\n"
        )


MASKED_LAUNCHER = (
    "void f(torch::Tensor& out, torch::Tensor const& in) {\n"
    "  const bool batched = in.dim() == 3;\n"
    "  const int n = batched ? in.size(1) : in.size(0);\n"
    "  const int d = out.size(-1);\n"
    "  if (batched) {\n"
    '    AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "f", [&] {\n'
    "      k<scalar_t><<<n, d>>>(out.data_ptr<scalar_t>(), in.data_ptr<scalar_t>(),\n"
    "          n, d);\n"
    "    });\n  }\n}\n"
)
"""A launcher in vLLM masked_moe_activation's style: batched by the input's rank, out read only
by ``size(-1)``, no size of the kernel's carrying the input's row length."""


def test_an_output_known_by_its_last_axis_takes_the_leading_axes_its_inputs_state() -> None:
    """vLLM's masked_moe_activation reads ``in.size(0)`` and ``in.size(1)`` of an [E, T, w]
    input and only ``out.size(-1)``: out is drafted [E, T, d] with in's leading axes, an
    assumption the notes say. When no kernel parameter or launch size carries in's last axis,
    the kernel's own row indexing gives it (``in + row * 2 * d`` beside ``out + row * d``); when
    that does not say it either, its row length is not stated and it stays refused."""
    analysis = _single(
        "template <typename t> __global__ void k(t* out, const t* in, int e, int n, int d,\n"
        "    int w) {}\n"
        "void f(torch::Tensor& out, torch::Tensor const& in) {\n"
        "  const int e = in.size(0);\n  const int n = in.size(1);\n"
        "  const int w = in.size(2);\n  const int d = out.size(-1);\n"
        '  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "f", [&] {\n'
        "    k<scalar_t><<<dim3(e, n), d>>>(out.data_ptr<scalar_t>(), in.data_ptr<scalar_t>(),\n"
        "        e, n, d, w);\n"
        "  });\n}\n"
    )
    assert analysis.shapes == {"in": ["e", "n", "w"], "out": ["e", "n", "d"]}
    assumed = "an assumption: the launcher reads only in's leading axes"
    assert any(assumed in n for n in analysis.notes)
    launcher = MASKED_LAUNCHER
    signature = "template <typename t> __global__ void k(t* out, const t* in, int n, int d)"
    with pytest.raises(Unmapped, match=r"in: .* carries its last axis 'in_2', so a row's length"):
        _single(f"{signature} {{}}\n{launcher}")
    # the kernel's own indexing says it: in's rows are 2 * d long where out's are d
    gated = _single(
        f"{signature} {{\n"
        "  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {\n"
        "    const t* x = in + row * 2 * d;\n    t* y = out + row * d;\n"
        "    y[threadIdx.x] = x[threadIdx.x] * x[d + threadIdx.x];\n  }\n}\n" + launcher
    )
    assert gated.shapes == {"in": ["tokens", "in_1", "(2 * (d))"], "out": ["tokens", "in_1", "d"]}
    assert "in_2" not in gated.dims
    assert any(n.startswith("in: its last axis is 2 * (d), the row length") for n in gated.notes)
    # indexed through a local: `offset = row * d + i; out[offset] = in[offset]`
    same = _single(
        f"{signature} {{\n"
        "  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {\n"
        "    const int64_t offset = row * d + threadIdx.x;\n    out[offset] = in[offset];\n"
        "  }\n}\n" + launcher
    )
    assert same.shapes["in"] == ["tokens", "in_1", "(d)"]
    # a check on in's last axis restricts it and carries it into the kernel no more than before
    checked = _single(
        f"{signature} {{\n"
        "  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {\n"
        "    const t* x = in + row * 2 * d;\n    t* y = out + row * d;\n"
        "    y[threadIdx.x] = x[threadIdx.x] * x[d + threadIdx.x];\n  }\n}\n"
        + launcher.replace(
            "  const int d = out.size(-1);\n",
            "  const int d = out.size(-1);\n  TORCH_CHECK(in.size(-1) % 8 == 0);\n",
        )
    )
    assert checked.shapes["in"] == gated.shapes["in"]
    assert "in_2" not in checked.dims
    assert all("in_2" not in r for r in checked.requires)


def test_the_kernels_row_indexing_is_read_on_its_syntax_tree() -> None:
    """The row offsets are read on the kernel's syntax tree, not its text: a comment or a
    string that spells another offset (``in + row * d``) is no offset, and an offset in
    nested parentheses (``in + (row * (2 * d))``) is one. Read as text (regular expressions
    over the body), the string's ``in + row * d`` was in's only offset and in was drafted with
    rows d long, half the 2 * d the kernel reads."""
    source = parse_source(
        "template <typename t> __global__ void k(t* out, const t* in, int n, int d) {\n"
        "  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {\n"
        "    // not out + row * 2 * d: out's rows are d long\n"
        '    if (row < 0) printf("in + row * d, out + row * 2 * d");\n'
        "    const t* x = in + (row * (2 * d));\n    t* y = out + row * d;\n"
        "    y[threadIdx.x] = x[threadIdx.x] * x[d + threadIdx.x];\n  }\n}\n" + MASKED_LAUNCHER
    )
    assert source.kernels[0].row_offsets == (
        RowOffset("in", "row", ("2", "d")),
        RowOffset("out", "row", ("d",)),
    )
    launcher = source.launchers[0]
    gated = analyse(launcher, launcher.launches[0], source.kernels, source.macros, H100)
    assert gated.shapes["in"] == ["tokens", "in_1", "(2 * (d))"]


def test_one_tensors_count_over_anothers_size_is_an_unstated_relation() -> None:
    """vLLM's rotary ``query.numel() / num_tokens`` with ``num_tokens = positions.numel()``."""
    with pytest.raises(Unmapped, match=r"q's element count over a size of pos"):
        _single(
            "template <typename t> __global__ void k(t* q, const int64_t* pos, int w) {}\n"
            "void f(torch::Tensor& q, torch::Tensor const& pos) {\n"
            "  const int n = pos.numel();\n  const int w = q.numel() / n;\n"
            '  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "f", [&] {\n'
            "    k<scalar_t><<<n, 128>>>(q.data_ptr<scalar_t>(), pos.data_ptr<int64_t>(), w);\n"
            "  });\n}\n"
        )


def test_a_ratio_in_a_dropped_launch_condition_ties_no_shapes() -> None:
    """A count-over-size ratio read only in a launch condition that is not expressed (its
    pointer test cannot be read) states nothing the draft relies on: it was recorded as it
    was translated and refused the whole launch."""
    found = _single(
        "template <typename t> __global__ void k(t* q, const int64_t* pos, int w) {}\n"
        "void f(torch::Tensor& q, torch::Tensor const& pos) {\n"
        "  const int n = pos.numel();\n  const int w = q.size(0) * q.size(1);\n"
        "  if (q.numel() / n > 4 || reinterpret_cast<uintptr_t>(q.data_ptr()) % 16 == 0) {\n"
        '    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "f", [&] {\n'
        "      k<scalar_t><<<n, 128>>>(q.data_ptr<scalar_t>(), pos.data_ptr<int64_t>(), w);\n"
        "    });\n  }\n}\n"
    )
    assert any(note.startswith("launch condition 'q.numel() / n > 4") for note in found.notes)
    assert found.shapes["pos"] == ["pos_0"]


def test_an_optional_tensors_sizes_are_its_own_and_a_c_cast_is_its_value() -> None:
    found = _single(
        "template <typename t> __global__ void k(t* x, t* y, int n, int m) {}\n"
        "void f(torch::Tensor& x, std::optional<torch::Tensor> y, int64_t group) {\n"
        "  const int n = x.size(0);\n  const int m = y.has_value() ? y->size(0) : 0;\n"
        '  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "f", [&] {\n'
        "    k<scalar_t><<<n, (int)group>>>(x.data_ptr<scalar_t>(),\n"
        "        y.has_value() ? y->data_ptr<scalar_t>() : nullptr, n, m);\n"
        "  });\n}\n"
    )
    assert "y: optional tensor, imported as given" in found.notes
    assert {b.param: b.value for b in found.bindings}["m"] == "(y_0)"
    assert found.block == "group"


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_frameworks_build_defines_come_first_in_the_device_code(tmp_path: Path) -> None:
    source = tmp_path / "defined.cu"
    # `#if`, not `#ifdef`: the compiler's -DFW_ENABLE_FAST is 1, and an empty definition leaves
    # `#if` no expression (FlashInfer's trtllm headers test `#if ENABLE_BF16`)
    source.write_text(
        "#if FW_ENABLE_FAST\n"
        "template <typename scalar_t> __global__ void k(scalar_t* x, int n) {\n"
        "  if (blockIdx.x < n) x[blockIdx.x] = x[blockIdx.x] * FW_SCALE;\n}\n#endif\n"
        "void f(torch::Tensor& x) {\n  const int n = x.size(0);\n"
        '  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "f", [&] {\n'
        "    k<scalar_t><<<n, 1>>>(x.data_ptr<scalar_t>(), n);\n  });\n}\n"
    )
    device = device_source(source.read_text(), ("FW_ENABLE_FAST", "FW_SCALE=2"))
    assert device.text.splitlines()[1:3] == ["#define FW_ENABLE_FAST 1", "#define FW_SCALE 2"]
    out = tmp_path / "out"
    assert main(["import", str(source), "--out", str(out)]) == 1  # k is not compiled without
    assert (
        main(
            [
                "import",
                str(source),
                "--out",
                str(out),
                "--define",
                "FW_ENABLE_FAST",
                "--define",
                "FW_SCALE=2",
            ]
        )
        == 0
    )
    assert main(["validate", str(out / "f")]) == 0
