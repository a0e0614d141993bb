"""``astra import``: framework files as written (issue 23), on the CPU.

The fixtures under tests/fixtures/framework/csrc were written for these tests in the style of a
serving framework: torch launchers (``AT_DISPATCH_FLOATING_TYPES_AND2`` and a framework's own
dispatch macro defined in an included header), ``c10::BFloat16``/``c10::Half`` paths,
``cub::BlockReduce`` through ``<cub/cub.cuh>``, a kernel in an included header, a grid from the
SM count, a float epsilon, a bool flag, a ``nullptr`` argument and a ``Params`` struct. The
launchers are parsed, never compiled (torch is not installed here); the device code compiles
with NVRTC for sm_90.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from astra_graph.cli import main
from astra_graph.framework import draft, importer
from astra_graph.framework.device import (
    DeviceCompile,
    compile_device,
    device_source,
    torch_types,
)
from astra_graph.framework.draft import contract_text, least_sizes
from astra_graph.framework.flatten import flatten
from astra_graph.framework.importer import for_another_gpu
from astra_graph.framework.launchers import (
    Analysis,
    Binding,
    Unmapped,
    analyse,
    device_constants,
    dispatch_dtypes,
    read_extents,
)
from astra_graph.framework.parse import Launch, Source, parse_source
from astra_graph.harness import oracle
from astra_graph.kernel import expr
from astra_graph.kernel.contract import ContractError, load_contract
from astra_graph.kernel.expr import split_top_level
from astra_graph.kernel.header import load_implementation

# conftest.py says why
pytestmark = pytest.mark.usefixtures("plots_not_drawn", "default_search_path")

CSRC = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc"
JIT = CSRC.parent / "jit"
NORM = CSRC / "layernorm.cu"
ACT = CSRC / "activation.cu"
H100 = device_constants("sm_90", (13, 0))


def _source(path: Path) -> Source:
    return parse_source(flatten(path, []).text)


def _analysis(path: Path, launcher_name: str) -> Analysis:
    source = _source(path)
    launcher = next(x for x in source.launchers if x.name == launcher_name)
    return analyse(
        launcher, launcher.launches[0], source.kernels, source.macros, H100, None, source.structs
    )


def test_the_kernel_in_an_included_header_is_found_after_flattening() -> None:
    flat = flatten(ACT, [])
    assert [f.name for f in flat.files] == ["activation.cu", "act_kernels.cuh", "dispatch_utils.h"]
    assert "torch/all.h" in flat.kept and "cuda_runtime.h" in flat.kept
    kernels = {k.qualified for k in parse_source(flat.text).kernels}
    assert kernels == {"fw::act_and_mul_kernel"}
    assert not parse_source(ACT.read_text()).kernels  # the file alone has no kernel


def test_launches_inside_dispatch_lambdas_with_template_arguments() -> None:
    source = _source(NORM)
    launches = {x.name: x.launches for x in source.launchers}
    assert sorted(launches) == ["copy_rows", "fused_add_rms_norm", "scale_rows"]
    norm = launches["fused_add_rms_norm"][0]
    assert norm.kernel == "fw::fused_add_rms_norm_kernel"
    assert norm.template_args == ("scalar_t", "1024")
    assert norm.dispatch[0][0] == "FW_DISPATCH_FLOATING_TYPES"
    scale = launches["scale_rows"][0]
    assert scale.grid == "sm_count * 2" and scale.args[2] == "nullptr"


def test_dispatch_dtypes_from_torch_and_from_the_frameworks_own_macro() -> None:
    source = _source(NORM)
    torch_macro = ("at::ScalarType::Half", "at::ScalarType::BFloat16", "x.scalar_type()")
    assert dispatch_dtypes("AT_DISPATCH_FLOATING_TYPES_AND2", torch_macro, {}) == {
        "float32",
        "float64",
        "float16",
        "bfloat16",
    }
    own = dispatch_dtypes("FW_DISPATCH_FLOATING_TYPES", (), source.macros)
    assert own == {"float32", "float16", "bfloat16"}


def test_launcher_arguments_map_to_dims_strides_scalars() -> None:
    found = _analysis(NORM, "fused_add_rms_norm")
    assert found.entry == "fw::fused_add_rms_norm_kernel<astra_framework_t<T>, 1024>"
    assert found.shapes["input"] == ["tokens", "hidden_size"]
    kinds = {b.param: (b.kind, b.value, b.dtype) for b in found.bindings}
    assert kinds["input"] == ("tensor", "input", "T")
    assert kinds["epsilon"] == ("scalar", "epsilon", "float32")
    env = {"tokens": 7, "hidden_size": 4096}
    assert expr.evaluate_int(kinds["input_stride"][1], env) == 4096  # stride(-2), contiguous
    assert kinds["input_stride"][2] == "int64"
    assert expr.evaluate_int(kinds["num_tokens"][1], env) == 7  # numel() / size(-1)
    assert expr.evaluate_dims3(found.grid, env) == (7, 1, 1)
    assert expr.evaluate_dims3(found.block, env) == (1024, 1, 1)
    assert found.dtypes == ("float32", "float16", "bfloat16")
    assert any("residual" in note for note in found.notes)  # its shape was assumed: said


def test_sm_count_nullptr_and_bool_flag() -> None:
    found = _analysis(NORM, "scale_rows")
    assert "sm_count" in found.grid
    assert expr.evaluate_dims3(found.grid, {"sm_count": 132}) == (264, 1, 1)
    kinds = {b.param: b.kind for b in found.bindings}
    assert kinds["bias"] == "null"
    assert found.scalars == {"scale": "float32", "relu": "bool"}


def test_a_params_struct_filled_member_by_member_is_bound_field_by_field() -> None:
    assert [f.name for f in _source(NORM).structs["RowParams"]] == ["in", "out", "rows", "cols"]
    found = _analysis(NORM, "copy_rows")
    (struct,) = found.bindings
    assert (struct.kind, struct.value) == ("struct", "RowParams")
    assert [(f.param, f.kind) for f in struct.fields] == [
        ("in", "tensor"),
        ("out", "tensor"),
        ("rows", "expr"),
        ("cols", "expr"),
    ]


def test_device_source_drops_host_code_and_maps_the_includes() -> None:
    device = device_source(flatten(NORM, []).text)
    assert {"fused_add_rms_norm", "scale_rows", "copy_rows"} <= set(device.removed_functions)
    assert "torch::Tensor" not in device.text and "<<<" not in device.text
    assert "#include <cub/cub.cuh>" not in device.text
    assert "#include <cub/block/block_reduce.cuh>" in device.text
    assert {"torch/all.h", "cub/cub.cuh", "numeric"} <= set(device.replaced_includes)


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_fixtures_device_code_compiles_with_nvrtc() -> None:
    device = device_source(flatten(NORM, []).text)
    entries = [
        "fw::fused_add_rms_norm_kernel<astra_framework_t<__half>, 1024>",
        "fw::fused_add_rms_norm_kernel<astra_framework_t<__nv_bfloat16>, 1024>",
        "fw::scale_rows_kernel<astra_framework_t<float>>",
    ]
    out = compile_device(device.text, entries, "sm_90")
    assert out.ok, out.log
    assert "N3c104HalfE" in out.lowered[entries[0]]  # c10::Half, as the framework mangles it


@pytest.mark.usefixtures("needs_nvrtc")
def test_c10_half_takes_the_frameworks_path_not_the_generic_one() -> None:
    """Issue 23's trap: with c10::Half merely declared (and the kernel instantiated with
    __half) the ``is_same_v<scalar_t, c10::Half>`` path is silently not compiled."""
    kernel = (
        "#include <type_traits>\n"
        "template <typename scalar_t> __global__ void k(scalar_t* x) {\n"
        "  if constexpr (std::is_same_v<scalar_t, c10::Half>) { x[0] = x[0] * x[0]; }\n"
        '  else { static_assert(!std::is_same_v<scalar_t, __half>, "generic path"); }\n'
        "}\n"
    )
    source = torch_types() + kernel
    assert compile_device(source, ["k<astra_framework_t<__half>>"], "sm_90").ok
    generic = compile_device(source, ["k<__half>"], "sm_90")
    assert not generic.ok and "generic path" in generic.log


@pytest.mark.usefixtures("needs_nvrtc")
def test_astra_import_writes_operations_that_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(NORM), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("compiler: NVRTC")
    assert "3 of 3 launch sites imported" in out
    spec = load_contract(tmp_path / "fused_add_rms_norm")
    assert spec.contract.oracle == "production.cu"
    impl = load_implementation(tmp_path / "fused_add_rms_norm" / "production.cu", spec.contract)
    assert [b.kind for b in impl.bindings][:3] == ["tensor", "expr", "tensor"]
    assert "#include" not in "".join(
        line for line in impl.source.splitlines() if '"' in line and "#include" in line
    )  # no framework include left: the file stands alone
    scale = load_contract(tmp_path / "scale_rows")
    assert {s.name: s.dtype for s in scale.contract.scalars} == {"scale": "float32", "relu": "bool"}
    assert main(["validate", str(tmp_path / "scale_rows")]) == 0
    assert main(["validate", str(tmp_path / "copy_rows")]) == 0  # the RowParams struct


def test_an_imported_domain_starts_where_the_original_launches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """act_and_mul launches min(d / 2, 1024) threads: a width of 1 launches none, so the drafted
    domain starts at 2, and every requirement of the header holds at the least sizes."""
    assert main(["import", str(ACT), "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    spec = load_contract(tmp_path / "silu_and_mul")
    least = {name: dim.min for name, dim in spec.contract.dims.items()}
    assert least["input_1"] == 2 and least["tokens"] == 1
    impl = load_implementation(tmp_path / "silu_and_mul" / "production.cu", spec.contract)
    assert any("input_1" in r for r in impl.header.requires)
    for dtype in spec.contract.dtypes:
        element = spec.contract.dtype_of(spec.contract.args[0], dtype)
        assert impl.header.unmet_requirement(least, element, {}) is None
        below = {**least, "input_1": least["input_1"] - 1}
        assert impl.header.unmet_requirement(below, element, {}) is not None


def test_least_sizes_reach_a_fixpoint_and_the_suites_respect_them() -> None:
    analysis = _analysis(ACT, "silu_and_mul")
    analysis.requires = ["input_1 % 4 == 0", "input_1 >= 5"]  # 5 breaks the first: 8
    least = least_sizes(analysis)
    assert least["input_1"] == 8 and least["tokens"] == 1
    analysis.requires = ["tokens >= 9"]  # above the drafted held-out token count 7
    text, _ = contract_text(analysis, "silu_and_mul", "activation.cu")
    assert "[dims.tokens]\nmin = 9" in text
    assert "tokens = 7" not in text and "tokens = 1," not in text


def test_astra_import_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(tmp_path / "missing.cu")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.cu: not found" in err
    assert main(["import", str(NORM), "--include", str(tmp_path / "nowhere")]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_a_reader_failure_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A construct the reader fails on (a comment among template parameters raised IndexError
    on a whole vLLM file) ends the command with one line naming the file, not a traceback."""

    def fails(*args: object, **kwargs: object) -> None:
        raise IndexError("list index out of range")

    monkeypatch.setattr(importer, "parse_source", fails)
    assert main(["import", str(ACT), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "activation.cu: the import failed" in err
    assert "IndexError" in err and not list(tmp_path.iterdir())


def test_contract_nullptr_binding_and_bool_scalar(tmp_path: Path) -> None:
    folder = tmp_path / "op"
    folder.mkdir()
    text = (
        'name = "op"\nsummary = "s"\ndtypes = ["float32"]\nreference = "r.py:op"\n'
        'bytes_moved = "n * 4"\nparams = ["x", "bias = nullptr", "flag"]\n'
        '[dims.n]\n[[args]]\nname = "x"\ndtype = "T"\nshape = ["n"]\nrole = "inout"\n'
        '[[scalars]]\nname = "flag"\ndtype = "bool"\ndefault = {flag}\n'
        "[tolerance.float32]\natol = 0\nrtol = 0\n"
        "[suites]\ntuning = [{{ n = 4 }}]\nheldout = [{{ n = 5 }}]\n"
    )
    (folder / "contract.toml").write_text(text.format(flag=1))
    spec = load_contract(folder)
    assert spec.contract.params == ["x", "bias = nullptr", "flag"]
    (folder / "contract.toml").write_text(text.format(flag=0.5))
    with pytest.raises(ContractError, match="a bool needs 'default' = 0 or 1"):
        load_contract(folder)


INLINE = """
namespace fw {
constexpr int kVec = 8;
template <typename scalar_t, bool VEC>
__global__ void rope(scalar_t* q, scalar_t* k, const int d) {}
}  // namespace fw
void rope(torch::Tensor& q, std::optional<torch::Tensor> k) {
  int d = q.size(-1);
  int tokens = q.numel() / d;
  AT_DISPATCH_REDUCED_FLOATING_TYPES(q.scalar_type(), "rope", [&] {
    using query_t = scalar_t;
    if (d % fw::kVec == 0) {
      fw::rope<query_t, true><<<tokens, std::min<int64_t>(d / fw::kVec, 1024)>>>(
          q.data_ptr<query_t>(), k.has_value() ? k->data_ptr<query_t>() : nullptr, d);
    }
  });
}
"""


def test_constants_aliases_optional_tensors_and_conditions() -> None:
    source = parse_source(INLINE)
    launcher = source.launchers[0]
    found = analyse(
        launcher, launcher.launches[0], source.kernels, source.macros, H100, source.constants
    )
    assert found.entry == "fw::rope<astra_framework_t<T>, true>"
    assert found.dtypes == ("float16", "bfloat16")
    assert [b.kind for b in found.bindings] == ["tensor", "tensor", "expr"]
    assert any("optional tensor" in note for note in found.notes)
    (requirement,) = found.requires
    assert expr.evaluate(requirement, {"tokens": 3, "d": 128})
    assert not expr.evaluate(requirement, {"tokens": 3, "d": 100})
    assert expr.evaluate_dims3(found.block, {"tokens": 3, "d": 128}) == (16, 1, 1)


def test_select_is_cpp_conditional() -> None:
    assert expr.evaluate_int("select(tokens < 256, 1024, 256)", {"tokens": 7}) == 1024
    assert expr.evaluate_int("select(tokens < 256, 1024, 256)", {"tokens": 4096}) == 256


GATED = """
namespace fw {
inline bool vllm_is_batch_invariant() { return false; }
template <typename scalar_t, bool WIDE>
__global__ void act(scalar_t* out, const scalar_t* x, const int d) {}
}  // namespace fw
void act(torch::Tensor& out, torch::Tensor& x) {
  int d = x.size(-1);
  int num_tokens = x.numel() / d;
  int cc_major = get_device_prop()->major;
  const bool invariant = fw::vllm_is_batch_invariant();
  const int max_block = invariant ? 1024 : ((num_tokens < 256) ? 1024 : 256);
  AT_DISPATCH_REDUCED_FLOATING_TYPES(x.scalar_type(), "act", [&] {
    if (CUDA_VERSION >= 12090 && cc_major >= 10 && num_tokens > 128) {
      fw::act<scalar_t, true><<<num_tokens, std::min(d, max_block)>>>(
          out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), d);
    } else {
      fw::act<scalar_t, false><<<num_tokens, std::min(d, max_block)>>>(
          out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), d);
    }
  });
}
"""


def _gated(index: int, device: dict[str, int]) -> Analysis:
    source = parse_source(GATED)
    launcher = source.launchers[0]
    return analyse(
        launcher, launcher.launches[index], source.kernels, source.macros, device, source.constants
    )


def test_a_launch_for_newer_gpus_is_not_applicable_not_a_failure() -> None:
    wide = _gated(0, H100)
    assert for_another_gpu(wide, "sm_90") == (
        "not applicable on sm_90: requires cc_major >= 10: 9 >= 10 (the GPU or the build)"
    )
    narrow = _gated(1, H100)  # the else branch: a shape condition only, taken on sm_90
    assert for_another_gpu(narrow, "sm_90") == ""
    blackwell = device_constants("sm_100", (13, 0))
    assert for_another_gpu(_gated(0, blackwell), "sm_100") == ""


def test_a_dead_branch_or_a_shape_condition_is_not_another_gpus() -> None:
    """A macro's literal flag (``if (false)``) and a size condition are false without reading the
    GPU: such a launch is never taken, which is not the same as being for another GPU."""
    source = parse_source(
        "template <typename scalar_t> __global__ void k(scalar_t* x, int n) {}\n"
        "void f(torch::Tensor& x) {\n"
        "  int n = x.size(0);\n"
        "  int cc_major = get_device_prop()->major;\n"
        '  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "f", [&] {\n'
        "    if (false && cc_major >= 9) { k<scalar_t><<<n, 1>>>(x.data_ptr<scalar_t>(), n); }\n"
        "    if (n < 0 && cc_major >= 9) { k<scalar_t><<<n, 1>>>(x.data_ptr<scalar_t>(), n); }\n"
        "  });\n"
        "}\n"
    )
    launcher = source.launchers[0]
    for launch in launcher.launches:
        found = analyse(launcher, launch, source.kernels, source.macros, H100, source.constants)
        assert found.requires and for_another_gpu(found, "sm_90") == ""


def test_a_host_switch_takes_its_default_and_says_so() -> None:
    found = _gated(1, H100)
    assert expr.evaluate_dims3(found.block, {"tokens": 7, "d": 4096}) == (1024, 1, 1)
    assert expr.evaluate_dims3(found.block, {"tokens": 4096, "d": 4096}) == (256, 1, 1)
    assert any("vllm_is_batch_invariant() taken as false" in note for note in found.notes)


def test_an_argument_comment_is_not_an_argument_and_a_pointer_local_is_followed() -> None:
    source = parse_source(
        "template <typename scalar_t>\n"
        "__global__ void k(scalar_t* out, const scalar_t* w, const int64_t w_stride, int n) {}\n"
        "void f(torch::Tensor& out, std::optional<torch::Tensor> w) {\n"
        "  int n = out.size(0);\n"
        '  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "f", [&] {\n'
        "    const scalar_t* weight_ptr =\n"
        "        w.has_value() ? w->const_data_ptr<scalar_t>() : nullptr;\n"
        "    k<scalar_t><<<n, 256>>>(out.data_ptr<scalar_t>(), weight_ptr, /*w_stride=*/0, n);\n"
        "  });\n"
        "}\n"
    )
    launcher = source.launchers[0]
    launch = launcher.launches[0]
    assert launch.args[2] == "0" and len(launch.args) == 4
    found = analyse(launcher, launch, source.kernels, source.macros, H100, source.constants)
    assert [(b.kind, b.value) for b in found.bindings][:2] == [("tensor", "out"), ("tensor", "w")]
    assert any("w: optional tensor" in note for note in found.notes)


@pytest.mark.usefixtures("needs_nvrtc")
def test_astra_import_counts_a_launch_for_newer_gpus_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "gated.cu"
    source.write_text(GATED)
    assert main(["import", str(source), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "not applicable on sm_90: requires cc_major >= 10" in out
    assert "1 of 2 launch sites imported (1 not applicable on sm_90)" in out
    assert "assumed: vllm_is_batch_invariant() taken as false" in out


ALIGNED = """
namespace fw {
template <typename scalar_t, size_t vec_size>
struct __align__(vec_size * sizeof(scalar_t)) vec_n_t {
  scalar_t val[vec_size];
};
template <typename scalar_t>
__global__ void copy4(vec_n_t<scalar_t, 4>* out, const vec_n_t<scalar_t, 4>* in) {
  out[threadIdx.x] = in[threadIdx.x];
}
}  // namespace fw
void copy4(torch::Tensor& out, torch::Tensor& in) {}
"""


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_struct_under_an_align_macro_is_device_code_and_kept() -> None:
    """The grammar reads ``struct __align__(n) name {...}`` as a function definition; it is the
    kernels' vector type (vLLM's vec_n_t), so it stays, and the host launcher still goes."""
    device = device_source(ALIGNED)
    assert device.removed_functions == ["copy4"]
    assert "vec_n_t {" in device.text
    assert compile_device(device.text, ["fw::copy4<float>"], "sm_90").ok


def test_the_readable_terms_of_a_then_condition_are_kept() -> None:
    source = parse_source(
        "template <typename scalar_t, int W> __global__ void k(scalar_t* x, int d) {}\n"
        "void f(torch::Tensor& x) {\n"
        "  int d = x.size(-1);\n"
        "  int n = x.numel() / d;\n"
        "  auto ptr = reinterpret_cast<std::uintptr_t>(x.data_ptr());\n"
        '  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "f", [&] {\n'
        "    if (ptr % 16 == 0 && d % 8 == 0) {\n"
        "      k<scalar_t, 8><<<n, 256>>>(x.data_ptr<scalar_t>(), d);\n"
        "    } else {\n"
        "      k<scalar_t, 0><<<n, 256>>>(x.data_ptr<scalar_t>(), d);\n"
        "    }\n"
        "  });\n"
        "}\n"
    )
    launcher = source.launchers[0]
    wide, narrow = (
        analyse(launcher, launch, source.kernels, source.macros, H100, source.constants)
        for launch in launcher.launches
    )
    (kept,) = wide.requires  # the alignment term cannot be read; the width term is kept
    assert expr.evaluate(kept, {"tokens": 3, "d": 4096})
    assert not expr.evaluate(kept, {"tokens": 3, "d": 4100})
    assert any("1 of its && terms kept" in note for note in wide.notes)
    assert narrow.requires == []  # the else-branch: no part of `!a || !b` is implied


@pytest.mark.usefixtures("needs_nvrtc")
def test_rocms_fp8_type_is_named_and_distinct_but_not_computed_with() -> None:
    """vLLM's kernels test ``is_same_v<T, c10::Float8_e4m3fnuz>`` on CUDA builds too; the type
    must exist and differ from CUDA's fp8, and arithmetic on it must not compile."""
    test = (
        "#include <type_traits>\n"
        "static_assert(!std::is_same_v<c10::Float8_e4m3fn, c10::Float8_e4m3fnuz>);\n"
        "template <typename T> __global__ void k(float* y, const T* x) { y[0] = %s; }\n"
    )
    named = torch_types() + test % "1.0f"
    assert compile_device(named, ["k<c10::Float8_e4m3fnuz>"], "sm_90").ok
    computed = compile_device(torch_types() + test % "float(x[0])", ["k<c10::Float8_e4m3fnuz>"])
    assert not computed.ok


def test_a_pointer_local_that_starts_as_nullptr_is_passed_so_and_said() -> None:
    source = parse_source(
        "template <typename scalar_t> __global__ void k(scalar_t* out, float* lse, int n) {}\n"
        "void f(torch::Tensor& out, std::optional<torch::Tensor> lse) {\n"
        "  int n = out.size(0);\n"
        "  float* lse_ptr = nullptr;\n"
        "  if (lse.has_value()) { lse_ptr = lse.value().data_ptr<float>(); }\n"
        '  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "f", [&] {\n'
        "    k<scalar_t><<<n, 256>>>(out.data_ptr<scalar_t>(), lse_ptr, n);\n"
        "  });\n"
        "}\n"
    )
    launcher = source.launchers[0]
    found = analyse(
        launcher, launcher.launches[0], source.kernels, source.macros, H100, source.constants
    )
    assert [b.kind for b in found.bindings] == ["tensor", "null", "expr"]
    assert any("lse: the launcher's lse_ptr starts as nullptr" in note for note in found.notes)


CALLS = CSRC / "launch_calls.cu"


def _site(launcher_name: str) -> tuple[Source, Launch]:
    source = _source(CALLS)
    launcher = next(x for x in source.launchers if x.name == launcher_name)
    return source, launcher.launches[0]


def test_cuda_launch_kernel_reads_the_args_array_of_addresses() -> None:
    _, launch = _site("scale_rows")
    assert (launch.api, launch.kernel, launch.template_args) == (
        "cudaLaunchKernel",
        "fw::scale_kernel",
        ("scalar_t", "4"),
    )  # `auto kernel = ...` followed through `(void*)kernel`
    assert launch.args == ("out_ptr", "in_ptr", "f", "cols")  # `(void*)&x` and `&x`
    found = _analysis(CALLS, "scale_rows")
    kinds = {b.param: (b.kind, b.value) for b in found.bindings}
    assert kinds["out"] == ("tensor", "out") and kinds["in"] == ("tensor", "in")
    assert kinds["factor"] == ("scalar", "factor")  # the local `float f = factor;`
    env = {"tokens": 5, "cols": 3000}
    assert expr.evaluate_dims3(found.grid, env) == (5, 1, 1)
    assert expr.evaluate_dims3(found.block, env) == (1024, 1, 1)


def test_cuda_launch_kernel_ex_reads_the_config_and_sizeof_a_named_type() -> None:
    _, launch = _site("shift_rows")
    assert launch.api == "cudaLaunchKernelEx" and launch.args[-1] == "cols"
    found = _analysis(CALLS, "shift_rows")
    env = {"tokens": 3, "cols": 100, "elem_bytes": 8}
    assert expr.evaluate_dims3(found.grid, env) == (3, 1, 1)
    assert expr.evaluate_dims3(found.block, env) == (100, 1, 1)
    # `threads * sizeof(float)`: four bytes a thread whatever the element type
    assert expr.evaluate_int(found.smem, env) == 400
    assert any("config.attrs" in note for note in found.notes)


def test_a_launch_helper_applied_to_the_kernel_and_not_the_helper_itself() -> None:
    source, launch = _site("shift_rows_helper")
    assert launch.api == "LaunchKernel" and launch.kernel == "fw::shift_kernel"
    found = _analysis(CALLS, "shift_rows_helper")
    env = {"tokens": 3, "cols": 100, "elem_bytes": 8}
    assert expr.evaluate_dims3(found.block, env) == (128, 1, 1)
    assert expr.evaluate_int(found.smem, env) == 512
    assert any("enable_pdl(false)" in note for note in found.notes)
    # the helper's own cudaLaunchKernelEx forwards its `kernel` parameter: not a launch site
    assert all(not x.name.startswith("operator") for x in source.launchers)


@pytest.mark.parametrize(
    ("launcher_name", "reason"),
    [
        ("ScaleRaw", r"raw pointer parameter \(T\* out\)"),
        ("shift_unconfigured", r"config\.blockDim is not assigned before the launch$"),
    ],
)
def test_what_a_launch_call_does_not_say_is_its_reason(launcher_name: str, reason: str) -> None:
    with pytest.raises(Unmapped, match=reason) as caught:
        _analysis(CALLS, launcher_name)
    assert "\n" not in str(caught.value)


HELPER_MEMBER = """
template <typename T>
__global__ void k(T* out, const T* in, int n) {}
template <typename T>
struct Plain {
  static constexpr auto kernel = k<T>;
#if NEW_ARCH
  static constexpr int kWidth = 8;  // another member under #if: not the kernel's concern
#endif
  static void run(tvm::ffi::TensorView out, tvm::ffi::TensorView in) {
    LaunchKernel(in.size(0), 64, in.device())(kernel, out.data_ptr(), in.data_ptr(), 7);
  }
};
template <typename T>
struct Gated {
#if NEW_ARCH
  static constexpr auto kernel = k<T>;
#else
  static constexpr auto kernel = k<float>;
#endif
  static void run(tvm::ffi::TensorView out, tvm::ffi::TensorView in) {
    LaunchKernel(in.size(0), 64, in.device())(kernel, out.data_ptr(), in.data_ptr(), 7);
  }
};
template <typename T>
struct Undecided {
#if NEW_ARCH % 2
  static constexpr auto kernel = k<T>;
#else
  static constexpr auto kernel = k<float>;
#endif
  static void run(tvm::ffi::TensorView out, tvm::ffi::TensorView in) {
    LaunchKernel(in.size(0), 64, in.device())(kernel, out.data_ptr(), in.data_ptr(), 7);
  }
};
"""


def test_a_kernel_member_of_the_launchers_class_is_followed_where_the_build_decides_it() -> None:
    """A member under ``#if``/``#else`` is the branch the build takes (an undefined name is 0,
    as the preprocessor reads it); one under a condition that is not preprocessor arithmetic is
    the launch's reason, not a guess."""
    plain, gated, undecided = (x.launches[0] for x in parse_source(HELPER_MEMBER).launchers)
    assert (plain.kernel, plain.template_args, plain.unread) == ("k", ("T",), "")
    assert (gated.kernel, gated.template_args, gated.unread) == ("k", ("float",), "")
    new_arch = parse_source(HELPER_MEMBER, {"NEW_ARCH": 1}).launchers[1].launches[0]
    assert (new_arch.kernel, new_arch.template_args) == ("k", ("T",))
    assert undecided.unread.startswith("LaunchKernel(): its class declares 'kernel' under")
    assert "#if NEW_ARCH % 2" in undecided.unread


def test_argument_lists_split_at_top_level_commas_only() -> None:
    assert split_top_level("&p->x, f(a, b), K<c, d>, {e, g}") == [
        "&p->x",
        "f(a, b)",
        "K<c, d>",
        "{e, g}",
    ]


@pytest.mark.usefixtures("needs_nvrtc")
def test_astra_import_of_launch_calls_validates_and_says_why_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(CALLS), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # scale_either: one operation per kernel; ScaleRaw, whose raw pointers nothing with tensors
    # passes, directly (test_framework_raw_launchers.py)
    assert "6 of 8 launch sites imported" in out
    assert "launches through cudaLaunchCooperativeKernel(), which is not read yet" in out
    assert [line for line in out.splitlines() if line.startswith("not imported")] and all(
        ": " in line for line in out.splitlines() if line.startswith("not imported")
    )
    for op in (
        "scale_rows",
        "shift_rows",
        "shift_rows_helper",
        "scale_either_1",
        "scale_either_2",
        "scale_raw",
    ):
        assert main(["validate", str(tmp_path / op)]) == 0, op


def _fp16(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # an overflow to inf is what fp16 does
        return values.astype(np.float16).astype(np.float64)


def test_the_originals_own_error_is_the_tolerance_of_an_imported_operation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The original rounds silu(x) to fp16 before the multiply: an fp16-subnormal silu(x) times a
    large y is off by far more than the fp16 tolerance, yet it is the framework's own result and
    must pass against its float64 oracle; a candidate worse than the original there must not."""
    from astra_graph.harness import oracle
    from astra_graph.harness.compare import bound_key, output_error

    def original(
        folder: Path, dtype: str, xp: object, inputs: dict, params: dict
    ) -> dict[str, np.ndarray]:
        data = inputs["input"]
        half = data.shape[1] // 2
        x, y = data[:, :half], data[:, half:]
        with np.errstate(over="ignore"):
            silu = x / (1.0 + np.exp(-x))
        out = silu * y if dtype == "float64" else _fp16(_fp16(silu) * y)
        written = np.zeros_like(data)
        written[:, :half] = out
        return {"out": written}

    assert main(["import", str(ACT), "--out", str(tmp_path)]) == 0
    monkeypatch.setattr(oracle, "original_outputs", original)
    spec = load_contract(tmp_path / "silu_and_mul")
    rng = np.random.default_rng(7)
    data = _fp16(rng.normal(size=(4, 64)))
    data[0, 3], data[0, 32 + 3] = -17.0, 60000.0  # silu(-17) ~ -7e-7: subnormal in fp16
    data[1, 5], data[1, 32 + 5] = np.inf, -np.inf  # the original's own -inf * ... stays exact
    data[3, 9], data[3, 32 + 9] = 300.0, 60000.0  # fp16 overflows to inf, float64 does not
    reference = oracle.reference_with_own_error(spec, "float16", np, {"input": data}, {})
    bound = reference[bound_key("out")]
    arg = next(a for a in spec.contract.args if a.name == "out")
    own = original(tmp_path, "float16", np, {"input": data}, {})["out"]
    assert bound[0, 3] > 0

    def verdict(got: np.ndarray, with_bound: bool = True) -> object:
        storage = got.astype(np.float16)
        return output_error(
            spec.contract,
            arg,
            "float16",
            storage,
            reference["out"],
            bound=bound if with_bound else None,
        ).finding

    assert verdict(own, with_bound=False) is not None  # the plain fp16 tolerance rejects it
    assert verdict(own) is None  # the original's own error accepts itself
    worse = own.copy()
    worse[0, 3] = own[0, 3] - 2 * bound[0, 3] - 1e-3  # twice as far off as the original
    assert verdict(worse) is not None
    other = own.copy()
    other[2, 7] *= 1.01  # an element the original got right is held to the plain tolerance
    assert verdict(other) is not None
    # where the two disagree about finiteness the original's own value is expected, no bound
    assert np.isinf(reference["out"][3, 9]) and bound[3, 9] == 0
    zeroed = own.copy()
    zeroed[3, 9] = 0.0  # an infinite bound there accepted any value
    assert verdict(zeroed) is not None


def test_an_integer_input_is_drawn_as_valid_row_ids(tmp_path: Path) -> None:
    """A gather's row ids drawn from the default normal go negative and send the original
    outside its table (it faulted on the H100): an integer input the kernel offsets a table by
    (``table + index[i] * width``) is drawn in [0, the table's rows at the case's dims),
    spanning them all at every shape (a bound fixed at the least sizes drew row 0 only), and
    past the rows of every other tensor (drawn below the fewest rows any tensor has, a table
    larger than the others had its upper rows never read: review of 98edc3a); a float input
    keeps the default draw."""
    from astra_graph.harness.cases import make_case

    assert main(["import", str(CSRC / "params_struct.cu"), "--out", str(tmp_path)]) == 0
    spec = load_contract(tmp_path / "gather_1")
    args = {a.name: a for a in spec.contract.args}
    # `out` has the rows the launch's grid gives (index.size(0)), read from the kernel's
    # row-major index; the ids stay below the rows of the table they index, not out's
    assert args["out"].shape == ["index_0", "width"]
    assert args["table"].shape[0] == "tokens"
    assert args["index"].init.dist == "uniform"
    assert args["index"].init.below == "tokens"
    assert args["table"].init.dist == "normal"
    dims = {"tokens": 4000, "width": 8, "index_0": 500}
    case = make_case(spec, dims, "bfloat16", np.random.default_rng(5))
    ids = case.arrays["index"]
    assert ids.min() >= 0 and ids.max() < dims["tokens"]
    assert ids.max() >= dims["index_0"]  # rows past out's are read too


def test_a_host_library_header_is_dropped_even_where_nvrtc_finds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The GPU machines' CUDA folder holds cuBLAS's headers, CI's does not: kept there, a
    framework's ``<cublas_v2.h>`` made NVRTC refuse every kernel of the file (host functions in
    JIT mode). Host-library headers go whatever the folders hold; curand's device API stays."""
    from astra_graph.framework import device

    monkeypatch.setattr(device, "_available", lambda name: True)  # every header "found"
    text = (
        "#include <cublas_v2.h>\n#include <curand_kernel.h>\n#include <cuda_fp16.h>\n"
        "__global__ void k(float* x) { x[0] = 1.0f; }\n"
    )
    lines = device_source(text).text.splitlines()
    assert "#include <cublas_v2.h>" not in lines
    assert any("dropped #include <cublas_v2.h>" in line for line in lines)
    assert "#include <curand_kernel.h>" in lines and "#include <cuda_fp16.h>" in lines


def test_a_launch_under_a_shape_condition_is_a_partial_kernel(tmp_path: Path) -> None:
    """Each branch of a vector-or-scalar dispatch covers part of the dims' domain: the domain
    check refused vLLM's vector path against itself on the H100 until the draft said so."""
    assert main(["import", str(CSRC / "vec_path.cu"), "--out", str(tmp_path)]) == 0
    for op in ("scale_by_two_1", "scale_by_two_2"):
        assert load_contract(tmp_path / op).contract.partial_kernels
        assert main(["validate", str(tmp_path / op)]) == 0
    assert not load_contract(
        _imported(tmp_path / "act", ACT) / "silu_and_mul"
    ).contract.partial_kernels


def _imported(out: Path, source: Path) -> Path:
    assert main(["import", str(source), "--out", str(out)]) == 0
    return out


def _programs_compiled(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The name expressions of every NVRTC program the importer compiles from now on, one list
    per program (each compiled as before)."""
    programs: list[list[str]] = []

    def counted(
        source: str, entries: list[str], arch: str = "sm_90", std: str | None = None
    ) -> DeviceCompile:
        programs.append(list(entries))
        return compile_device(source, entries, arch, std)

    monkeypatch.setattr(importer, "compile_device", counted)
    return programs


@pytest.mark.usefixtures("needs_nvrtc")
def test_each_instantiation_is_compiled_once_per_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drafted element types are compiled one by one to keep those that compile; the program of
    every site then leaves them out, and a second site of the same kernel (run and
    run_positional both launch scale_kernel<T, false>) reuses their results: each was compiled
    three times before."""
    programs = _programs_compiled(monkeypatch)
    report = importer.import_file(CSRC / "params_struct.cu", [], tmp_path)
    compiled = Counter(entry for program in programs for entry in program)
    assert compiled["jit::scale_kernel<__half, false>"] == 1
    assert compiled["jit::act_kernel<float, 1>"] == 1
    assert compiled["jit::gather_kernel<int32_t>"] == 1  # read, not drafted: the one program
    assert set(compiled.values()) == {1}, compiled
    assert report.compiled and not report.compile_error
    assert sum(r.imported for r in report.launchers) == 6


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_failing_program_of_one_site_is_that_sites_reason_without_a_second_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one launch site, the program of every site is that site's program: its error names
    the site at once (it was compiled again alone to say so)."""
    source = tmp_path / "broken.cu"
    source.write_text(
        "template <typename scalar_t> __global__ void k(scalar_t* x) { x[0] = missing; }\n"
        "void f(torch::Tensor& x) {\n"
        '  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "f", [&] {\n'
        "    k<scalar_t><<<x.size(0), 1>>>(x.data_ptr<scalar_t>());\n  });\n}\n"
    )
    programs = _programs_compiled(monkeypatch)
    report = importer.import_file(source, [], tmp_path / "out")
    (result,) = report.launchers
    assert not report.compiled and "missing" in report.compile_error
    assert result.reason == f"device code does not compile with NVRTC: {report.compile_error}"
    assert len(programs) == 1 and len(programs[0]) == 2  # float and double, compiled once


def test_a_switch_over_a_run_time_value_binds_the_constant_its_cases_declare(
    tmp_path: Path,
) -> None:
    """A dispatch macro that switches on a run-time value and names the constant itself (each
    case ``constexpr int width = 4;``, as vLLM's vector-size dispatch): NVRTC found ``width``
    undefined until the import bound it. The case the serving shapes take is imported under its
    condition as a ``requires`` (which reads the element size: the types of another size never
    take it and are left out), the other cases said."""
    assert main(["import", str(CSRC / "switch_dispatch.cu"), "--out", str(tmp_path)]) == 0
    spec = load_contract(tmp_path / "halve")
    assert spec.contract.dtypes == ["float16", "bfloat16"]
    header = load_implementation(tmp_path / "halve" / "production.cu", spec.contract).header
    assert header.entry == "fw::halve_kernel<astra_framework_t<T>, 4>"
    assert any("gcd(8 // elem_bytes" in r and r.endswith("== (4)") for r in header.requires)
    report = (tmp_path / "import.json").read_text()
    assert "width = 4 where chosen_width is 4 (other values 2, 1" in report
    assert main(["validate", str(tmp_path / "halve")]) == 0


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_switch_over_a_size_itself_is_followed_one_build_per_case(tmp_path: Path) -> None:
    """FlashInfer's ``DISPATCH_HEAD_DIM``: a switch over the head size whose cases fix
    ``HEAD``, from which the launcher derives the vector width (reading the element size) and
    the threads a head. The framework builds one kernel per case; the import follows the size
    (each template value a specialization on the shape, the width folded at the one width both
    dispatched types have) and requires one of the cases, where it used to fix the first case
    and check the kernel at head size 64 alone."""
    assert main(["import", str(CSRC / "head_dim_dispatch.cu"), "--out", str(tmp_path)]) == 0
    spec = load_contract(tmp_path / "scale_heads")
    header = load_implementation(tmp_path / "scale_heads" / "production.cu", spec.contract).header
    assert header.entry == (
        "fw::scale_heads_kernel<astra_framework_t<T>, ASTRA_SIZE_HEAD, ASTRA_SIZE_VEC, "
        "ASTRA_SIZE_LANES>"
    )
    values = {
        h: header.specialized({**spec.contract.suite("tuning")[0], "head_size": h})
        for h in (64, 128, 256, 512)
    }
    assert values == {
        64: {"ASTRA_SIZE_HEAD": 64, "ASTRA_SIZE_VEC": 8, "ASTRA_SIZE_LANES": 8},
        128: {"ASTRA_SIZE_HEAD": 128, "ASTRA_SIZE_VEC": 8, "ASTRA_SIZE_LANES": 16},
        256: {"ASTRA_SIZE_HEAD": 256, "ASTRA_SIZE_VEC": 8, "ASTRA_SIZE_LANES": 32},
        512: {"ASTRA_SIZE_HEAD": 512, "ASTRA_SIZE_VEC": 16, "ASTRA_SIZE_LANES": 32},
    }
    cases = next(r for r in header.requires if "== (128)" in r)
    assert all(f"== ({h})" in cases for h in (64, 128, 256, 512))
    head_sizes = {d["head_size"] for s in ("tuning", "heldout") for d in spec.contract.suite(s)}
    assert head_sizes <= {64, 128, 256, 512} and len(head_sizes) > 1
    report = (tmp_path / "import.json").read_text()
    assert "HEAD follows head_size: one build per case (64, 128, 256, 512)" in report
    assert main(["validate", str(tmp_path / "scale_heads")]) == 0


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_size_dispatch_on_a_computed_value_keeps_one_case(tmp_path: Path) -> None:
    """A dispatch whose run-time value is computed (vLLM's vector width: a gcd of the element
    size and the row) is not one dim: following it would make every vectorised launch a kernel
    per width, so the import keeps the case the serving shapes take, and says why it did not
    follow it."""
    report = importer.import_file(CSRC / "switch_dispatch.cu", [], tmp_path)
    (result,) = report.launchers
    assert result.imported
    assert any("size dispatch not followed" in n and "not one dim" in n for n in result.notes), (
        result.notes
    )


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_whole_number_switch_on_a_callers_flag_keeps_one_case(tmp_path: Path) -> None:
    """``FW_DISPATCH_MODE(mode, MODE, ...)`` has whole-number cases (0, 1) as a head size's
    switch does, but ``mode`` is a flag the caller passes, no tensor's axis: following it would
    make a flag a dim, so one case is imported and the notes say why it was not followed."""
    report = importer.import_file(CSRC / "mode_dispatch.cu", [], tmp_path)
    (result,) = report.launchers
    assert result.imported, result.reason
    assert any("MODE = 0 where mode is 0" in n for n in result.notes)
    assert any("switches on mode, which is no tensor's axis" in n for n in result.notes)
    header = (tmp_path / "offset_rows" / "production.cu").read_text()
    assert "fw::offset_rows_kernel<astra_framework_t<T>, 0>" in header
    assert "// astra: specialize" not in header


def test_size_dispatches_are_followed_and_flags_expanded() -> None:
    """With ``follow_sizes`` a size dispatch binds its name to the run-time value and adds the
    requirement of one of its cases; a flag's dispatch (true/false) is still one variant per
    value; a launch with no size dispatch has no followed variant."""
    from astra_graph.framework.parse import Launch, Macro
    from astra_graph.framework.values import value_variants

    sizes = Macro(
        "HEADS",
        ("n", "H", "__VA_ARGS__"),
        "switch (n) { case 64: { constexpr int H = 64; __VA_ARGS__(); break; } "
        "case 128: { constexpr int H = 128; __VA_ARGS__(); break; } }",
    )
    flag = Macro(
        "FLAG",
        ("f", "F", "__VA_ARGS__"),
        "if (f) { constexpr bool F = true; __VA_ARGS__(); } "
        "else { constexpr bool F = false; __VA_ARGS__(); }",
    )
    launch = Launch(
        "k",
        ("H", "F"),
        "1",
        "1",
        "0",
        "0",
        (),
        (("HEADS", ("d", "H", "")), ("FLAG", ("g", "F", ""))),
        1,
    )
    macros = {"HEADS": sizes, "FLAG": flag}
    followed = value_variants(launch, macros, follow_sizes=True)
    assert [v.locals for v, _ in followed] == [
        {"H": "(d)", "F": "true"},
        {"H": "(d)", "F": "false"},
    ]
    assert all(v.followed == (("d", (64, 128)),) for v, _ in followed)
    assert all(("(d) == (64) || (d) == (128)", True) in v.conditions for v, _ in followed)
    assert len(value_variants(launch, macros)) == 4  # both expanded when not followed
    flag_only = Launch("k", ("F",), "1", "1", "0", "0", (), (("FLAG", ("g", "F", "")),), 1)
    assert value_variants(flag_only, macros, follow_sizes=True) == []


def test_a_switch_whose_error_case_declares_nothing_has_a_variant_per_declared_case() -> None:
    """vLLM's rank dispatch: cases 2, 3 and 4 declare ``tensor_rank``, the default raises. A
    macro with a second constexpr that is not one literal name is not read as such a switch."""
    from astra_graph.framework.parse import Macro
    from astra_graph.framework.values import _cases

    body = (
        "switch (N) { case 2: { constexpr int rank = 2; __VA_ARGS__(); break; } "
        "case 3: { constexpr int rank = 3; __VA_ARGS__(); break; } "
        'default: CHECK(false, "rank"); }'
    )
    found = _cases(Macro("RANK23", ("N", "__VA_ARGS__"), body), ("input.dim()", "[&] {}"))
    assert found is not None
    assert (found.name, found.runtime, found.literals) == ("rank", "input.dim()", ("2", "3"))
    other = body.replace("__VA_ARGS__(); break; } default", "constexpr int w = N * 2; } default")
    assert _cases(Macro("RANK23", ("N", "__VA_ARGS__"), other), ("d", "[&] {}")) is None


def test_a_comparison_in_a_drafted_expression_is_no_template_bracket() -> None:
    """vLLM's rms_norm passes ``num_dims >= 3 ? input.stride(-3) : 0``: its drafted
    ``select(4 >= 3, ...)`` was split inside by the header's parameter list."""
    params = "a, b: int64 = select((4) >= 3, (x * y), 0), c: int64 = select(n <= 2, 1, 0), d"
    assert split_top_level(params) == [
        "a",
        "b: int64 = select((4) >= 3, (x * y), 0)",
        "c: int64 = select(n <= 2, 1, 0)",
        "d",
    ]
    assert split_top_level("K<int, 4>, std::pair<a, b>, x->y") == [
        "K<int, 4>",
        "std::pair<a, b>",
        "x->y",
    ]


DERIVED = """
template <typename t> __global__ void k(t* x, float rcp, float a, float b, int n) {}
void f(torch::Tensor& x, double scale, double lo, double hi) {
  const int n = x.numel();
  float rcp = 0.5f / scale;
  float a = (float)(hi / (2 * M_PI * hi - 2 * M_PI * lo));
  float b = -1.0f / (hi / lo - 1.0f);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "f", [&] {
    k<scalar_t><<<n, 1>>>(x.data_ptr<scalar_t>(), rcp, a, b, n);
  });
}
"""


def test_a_float_the_launcher_computes_from_its_parameters_is_a_parameter_of_its_own() -> None:
    """FlashInfer's rotary launchers pass ``rope_rcp_scale = 1.0f / rope_scale``: the kernel's
    argument is the contract's scalar, its default the computation at the drafted defaults of
    the parameters it reads, or its own name's where that is not finite (``b`` divides by
    zero with ``hi`` and ``lo`` at 1); a size in the computation keeps the launch refused."""
    source = parse_source(DERIVED)
    launcher = source.launchers[0]
    found = analyse(launcher, launcher.launches[0], source.kernels, source.macros, H100)
    assert found.scalars == {"rcp": "float32", "a": "float32", "b": "float32"}
    assert found.derived["rcp"] == "0.5 / scale"
    assert set(expr.names(found.derived["a"])) == {"hi", "lo"}
    text, notes = contract_text(found, "derived", "derived.cu")
    assert 'name = "rcp"\ndtype = "float32"\ndefault = 0.5' in text
    assert 'name = "a"\ndtype = "float32"\ndefault = 1.0' in text  # 1 / (2 pi - 2 pi)
    assert (
        "scalars.rcp: the launcher computes it as 0.5 / scale; a parameter of its own here, "
        "drafted as 0.5 (with scale = 1.0)"
    ) in notes
    assert any(n.startswith("scalars.a: ") and "not finite" in n for n in notes)
    sized = DERIVED.replace("0.5f / scale", "0.5f / n")
    source = parse_source(sized)
    launcher = source.launchers[0]
    with pytest.raises(Unmapped, match=r"'rcp' .* nor arithmetic of the launcher's float"):
        analyse(launcher, launcher.launches[0], source.kernels, source.macros, H100)


PREPROCESSED = """
#ifdef __CUDACC__
#if !defined(FW_ROCM)
#if !defined(FW_ARCH)
#error "FW_ARCH is injected by the build"
#endif
#define FW_WIDE ((FW_ARCH >= 1000) && (CUDA_VERSION >= 12090))
#else
#define FW_WIDE 0
#endif
#endif
constexpr int kBytes = FW_WIDE ? 32 : 16;
template <typename t> __global__ void k(t* x, int n) {}
void f(torch::Tensor& x) {
  const int n = x.numel();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "f", [&] {
    k<scalar_t><<<n, kBytes / sizeof(scalar_t)>>>(x.data_ptr<scalar_t>(), n);
  });
}
"""


@pytest.mark.parametrize(
    ("defines", "bytes_"),
    [(("FW_ARCH=900",), 16), (("FW_ARCH=1000",), 32), (("FW_ARCH=1000", "FW_ROCM"), 16)],
)
def test_an_object_like_macro_is_the_definition_the_builds_if_takes(
    defines: tuple[str, ...], bytes_: int
) -> None:
    """SGLang's ``SGL_ARCH_BLACKWELL_OR_GREATER`` is defined under ``#ifdef __CUDACC__`` and
    ``#if !defined(USE_ROCM)``, over the ``SGL_CUDA_ARCH`` its build injects: with the build's
    defines as facts, the macro a launch size reads is the definition the preprocessor takes."""
    facts = {**H100, **importer.define_values(defines)}
    source = parse_source(PREPROCESSED, facts)
    launcher = source.launchers[0]
    found = analyse(
        launcher, launcher.launches[0], source.kernels, source.macros, facts, source.constants
    )
    assert expr.evaluate_int(found.block, {"elem_bytes": 4, "x_0": 8}) == bytes_ // 4
    assert importer.define_values(("A", "B=0x10", "C=name")) == {"A": 1, "B": 16}


POSITIONS = CSRC / "positions.cu"


def test_size_equalities_in_checks_under_an_if_tie_a_ratio_of_element_counts() -> None:
    """positions.cu divides ``query.numel()`` by ``num_tokens = positions.numel()`` (vLLM's
    rotary_embedding). The check under ``if (positions_ndim == 1)`` (no ``else``) states
    ``query.size(0) == positions.size(0)``, and ``key->size(0)`` past ``!key.has_value()``:
    with the drafted positions of rank 1 the condition holds, so query's and key's rows are
    positions' and the ratio is query's row (query drafted with rows and a row, not one axis,
    which made it 1). The check under ``positions_ndim == 2`` does not hold there and ties
    nothing. Without the ``if``, the relation is stated nowhere and the launch is refused."""
    analysis = _analysis(POSITIONS, "position_scale")
    assert analysis.shapes == {
        "positions": ["positions_0"],
        "query": ["(positions_0)", "query_1"],
        "key": ["(positions_0)", "key_1"],
    }
    hidden = next(b.value for b in analysis.bindings if b.param == "hidden")
    assert expr.evaluate_int(hidden, {"positions_0": 7, "query_1": 96}) == 96
    assert any(n.startswith("query_0 = positions_0: the launcher checks") for n in analysis.notes)
    assert any(n.startswith("key_0 = positions_0: the launcher checks") for n in analysis.notes)
    flat = flatten(POSITIONS, []).text
    checks = [c for c, _ in parse_source(flat).launchers[0].launches[0].conditions]
    assert any(c.startswith("!(positions_ndim == 1) || (query.size(0) == ") for c in checks)
    start, end = flat.index("  if (positions_ndim == 1)"), flat.index("  if (positions_ndim == 2)")
    source = parse_source(flat[:start] + flat[end:])
    launcher = source.launchers[0]
    with pytest.raises(Unmapped, match=r"'query.numel\(\) / num_tokens': query's element count"):
        analyse(launcher, launcher.launches[0], source.kernels, source.macros, H100)


def test_the_positions_fixture_imports_and_validates(tmp_path: Path) -> None:
    report = importer.import_file(POSITIONS, [], tmp_path)
    assert [(r.op, r.imported) for r in report.launchers] == [("position_scale", True)]
    assert main(["validate", str(tmp_path / "position_scale")]) == 0


PARTIAL_ROTARY = CSRC / "partial_rotary.cu"


def test_a_drafts_dims_do_not_depend_on_the_hash_seed() -> None:
    # the launcher's integers a launch reads were kept in a set: their order in the draft (and
    # so in its contract and suites) changed with PYTHONHASHSEED, as vLLM's rotary drafts did
    script = (
        "from test_framework_import import PARTIAL_ROTARY, _analysis\n"
        "print(_analysis(PARTIAL_ROTARY, 'partial_rotary').dims)\n"
    )
    tests = Path(__file__).resolve().parent
    paths = os.pathsep.join([str(tests.parent / "src"), str(tests)])
    orders = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONPATH": paths, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(1, 9)
    }
    assert len(orders) == 1, orders
    assert "head_size" in orders.pop()


def test_launcher_integers_are_drafted_as_a_head_and_an_offset(tmp_path: Path) -> None:
    """partial_rotary.cu (vLLM's rotary launcher's checks): ``head_size`` divides the query's
    row, so it is drafted as a head size; the cache's width ``rot_dim``, bounded by it, too;
    ``rope_dim_offset``, only added to sizes, may be 0 and is drafted there. Each suite shape
    takes the launch (drafted as integers of no role, none did) and the operation validates."""
    analysis = _analysis(PARTIAL_ROTARY, "partial_rotary")
    assert draft.offsets(analysis) == {"rope_dim_offset"}
    assert least_sizes(analysis)["rope_dim_offset"] == 0
    assert least_sizes(analysis)["head_size"] == 1  # it divides a size: no offset
    tuning, heldout, _ = draft.suites(analysis)
    assert [(d["head_size"], d["rot_dim"], d["rope_dim_offset"]) for d in tuning] == [
        (128, 128, 0)
    ] * 3
    assert {(d["head_size"], d["rot_dim"]) for d in heldout} == {(64, 64)}
    assert [d["positions_0"] for d in tuning] == [1, 64, 4096]  # positions' axis is the tokens'
    assert all(draft.takes(analysis, d) for d in [*tuning, *heldout])
    report = importer.import_file(PARTIAL_ROTARY, [], tmp_path)
    assert [(r.op, r.imported) for r in report.launchers] == [("partial_rotary", True)]
    assert main(["validate", str(tmp_path / "partial_rotary")]) == 0
    # the oracle reads the integers no tensor has as an axis from scalars drafted for them
    contract = load_contract(tmp_path / "partial_rotary").contract
    dims = {**tuning[0], "positions_0": 3, "cos_sin_cache_0": 3}
    inputs = {
        a.name: np.zeros(contract.shape_of(a, dims)) for a in contract.args if a.role != "output"
    }
    scalars = contract.scalar_values(dims)
    assert scalars["oracle_head_size"] == 128 and scalars["oracle_rope_dim_offset"] == 0
    assert oracle._dims(contract, inputs, scalars) == dims
    with pytest.raises(ContractError, match="dim 'head_size' is no input's axis"):
        oracle._dims(contract, inputs, {})


def test_an_integer_that_multiplies_a_size_is_no_offset() -> None:
    """Only an integer the requirements add to sizes may be 0: one that also scales a size, or
    that sizes a tensor, keeps the least size 1."""
    analysis = _analysis(PARTIAL_ROTARY, "partial_rotary")
    analysis.requires = [*analysis.requires, "rope_dim_offset * 2 <= head_size"]
    assert draft.offsets(analysis) == set()
    analysis.requires = ["rot_dim + 1 <= head_size"]
    assert draft.offsets(analysis) == set()  # rot_dim sizes the cache
    # one the launch's geometry reads is no offset either: at 0 it could empty the grid
    analysis.requires = ["rot_dim + rope_dim_offset <= head_size"]
    assert draft.offsets(analysis) == {"rope_dim_offset"}
    analysis.grid = "positions_0 + rope_dim_offset"
    assert draft.offsets(analysis) == set()


IN_PLACE = (
    "template <typename t> __global__ void k(const t* in, t* out, int n) {}\n"
    "void f(torch::Tensor& in, torch::Tensor& out) {\n"
    "  const int n = in.size(0);\n"
    '  STD_TORCH_CHECK(in.data_ptr() == out.data_ptr(), "in place");\n'
    "  k<float><<<n, 32>>>(in.data_ptr<float>(), true ? nullptr : out.data_ptr<float>(), n);\n"
    "}\n"
)


def test_nullptr_for_a_written_pointer_is_in_place_where_a_check_says_where() -> None:
    """SGLang's in-place activation passes ``kReuseInput ? nullptr : out.data_ptr()`` and
    checks ``input.data_ptr() == out.data_ptr()``: the kernel writes its input, which is then
    imported as written. Without the check, where it writes is unknown and the launch is
    refused."""
    source = parse_source(IN_PLACE)
    launcher = source.launchers[0]
    found = analyse(launcher, launcher.launches[0], source.kernels, source.macros, H100)
    assert not found.tensors["in"].const
    assert [b.kind for b in found.bindings][:2] == ["tensor", "null"]
    assert any("imported as written" in n for n in found.notes)
    unchecked = parse_source(IN_PLACE.replace("STD_TORCH_CHECK", "// STD_TORCH_CHECK"))
    launcher = unchecked.launchers[0]
    with pytest.raises(Unmapped, match="in place"):
        analyse(launcher, launcher.launches[0], unchecked.kernels, unchecked.macros, H100)


def test_macros_inside_an_include_guard_are_read() -> None:
    """``#ifndef FOO_H`` is decided with the macros defined before it: decided after its own
    ``#define FOO_H``, it dropped every macro of the header (FlashInfer's headers are guarded
    so)."""
    source = parse_source("#ifndef FOO_H\n#define FOO_H\n#define BAR 7\n#endif\n")
    assert source.constants == {"FOO_H": "", "BAR": "7"}


def test_a_condition_ending_in_a_parenthesis_is_read_whole() -> None:
    """SGLang's fused_add_rmsnorm launches under ``if (hidden <= (kVec == 32 ? 12288 : 8192))``;
    stripping every outer parenthesis of the clause ate the condition's own closing one, so the
    bound was dropped and the drafted domain went past where SGLang launches."""
    source = parse_source(
        "template <typename t> __global__ void k(t* out, int n) {}\n"
        "constexpr int kVec = 16;\n"
        "void f(torch::Tensor& out) {\n"
        "  const int n = out.size(0);\n"
        "  if (n <= (kVec == 32 ? 12288 : 8192)) {\n"
        "    k<float><<<n, 32>>>(out.data_ptr<float>(), n);\n"
        "  }\n}\n"
    )
    launcher = source.launchers[0]
    found = analyse(
        launcher, launcher.launches[0], source.kernels, source.macros, H100, source.constants
    )
    (bound,) = [r for r in found.requires if "8192" in r]
    assert expr.evaluate(bound, {found.dims[0]: 8192})
    assert not expr.evaluate(bound, {found.dims[0]: 8193})


def test_an_optional_read_in_a_check_is_given_and_in_a_choice_of_launch_unread() -> None:
    """``has_value()`` of an optional tensor reads as the import takes it (given) in a host
    check, a fact of every path (``!w.has_value() || w->size(0) == n``), but not in an ``if``
    that chooses between launches (vLLM's rms_norm ``has_weight``): read there, the launch
    without the weight was dead code, and the callers that pass none lost it."""
    source = parse_source(
        "template <typename t> __global__ void k(t* out, const t* w, int n) {}\n"
        "void f(torch::Tensor& out, std::optional<torch::Tensor> weight) {\n"
        "  const int n = out.size(0);\n"
        "  STD_TORCH_CHECK(!weight.has_value() || weight->size(0) == out.size(0));\n"
        "  const bool has_weight = weight.has_value();\n"
        '  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "f", [&] {\n'
        "    if (has_weight) {\n"
        "      k<scalar_t><<<n, 32>>>(out.data_ptr<scalar_t>(), weight->data_ptr<scalar_t>(), n);\n"
        "    } else {\n"
        "      k<scalar_t><<<n, 32>>>(out.data_ptr<scalar_t>(), nullptr, n);\n"
        "    }\n  });\n}\n"
    )
    launcher = source.launchers[0]
    given, absent = (
        analyse(launcher, launch, source.kernels, source.macros, H100)
        for launch in launcher.launches
    )
    assert importer.dead_code(given) == importer.dead_code(absent) == ""
    assert given.shapes["weight"] == given.shapes["out"] == ["n"]  # tied by the check


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_jit_headers_host_utilities_are_removed_and_device_helpers_kept(
    tmp_path: Path,
) -> None:
    """SGLang-style JIT utilities (fixtures/framework/jit): classes whose member functions have
    no execution space (a source location, a runtime check with its deduction guide, a launch
    class), a host prototype and an inline host function, all host code NVRTC refused ("host
    functions are not allowed in JIT mode"), go whole; the kernel's helper struct keeps its
    field and device member (its host member goes) and the constexpr trait stays."""
    flat = flatten(JIT / "scale.cuh", [])
    device = device_source(flat.text)
    for host in ("DebugInfo", "RuntimeCheck", "LaunchKernel", "is_multiple", "describe"):
        assert host in device.removed_functions
    assert "current_stream(int" not in device.text and "RuntimeCheck(" not in device.text
    assert "FW_DEVICE float apply" in device.text and "static constexpr int bytes()" in device.text
    report = importer.import_file(JIT / "scale.cuh", [], tmp_path)
    (result,) = report.launchers
    assert report.compiled and result.imported, result.reason


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_cpp20_jit_file_compiles_at_its_builds_standard(tmp_path: Path) -> None:
    """fixtures/framework/jit/act.cuh, as SGLang's JIT kernels: a namespace alias over
    ``std::ranges::views`` and the host helper using it, constants and a trait over DLPack's
    types that only host code names go (to a fixpoint: ``kFloatType`` names the trait);
    ``CUDA_VERSION`` is defined as nvcc's cuda_runtime.h defines it, at each compile (the
    kernel reads it outside the preprocessor, so it compiles only with it); the entry's
    unqualified ``Act::kSquare`` resolves through the kernel's namespace. At NVRTC's default
    C++17 the concept refuses to compile; at the build's C++20 it imports, and the header
    carries the standard for every later compile (``astra validate`` compiles it again)."""
    flat = flatten(JIT / "act.cuh", [])
    device = device_source(flat.text)
    for host in ("stdv", "irange", "kDeviceType", "kFloatType", "DTypeTrait"):
        assert host in device.removed_functions, host
    assert "enum class Act" in device.text  # CUDA_VERSION: NVRTC's option, read by the kernel
    at_17 = importer.import_file(JIT / "act.cuh", [], tmp_path / "c++17")
    assert "integral" in at_17.launchers[0].reason and not at_17.launchers[0].imported
    report = importer.import_file(JIT / "act.cuh", [], tmp_path / "c++20", std="c++20")
    (result,) = report.launchers
    assert result.imported, result.reason
    # the kernel's 16-byte path has no float vector: float32 does not compile, and the
    # oracle runs at the most precise type that does
    assert "float32" not in result.dtypes
    assert any(n.startswith("oracle at float16") for n in result.notes)
    production = (tmp_path / "c++20" / "run" / "production.cu").read_text()
    assert "// astra: std = c++20" in production and "using fw::Act;" in production
    assert main(["validate", str(tmp_path / "c++20" / "run")]) == 0


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_class_member_under_an_arch_condition_is_the_one_the_build_takes(
    tmp_path: Path,
) -> None:
    """fixtures/framework/jit/arch_member.cuh, as SGLang's RMSNormHalfKernel: the class declares
    its kernel under ``#if FW_ARCH_NEW_OR_GREATER``, defined from the JIT's ``-DFW_CUDA_ARCH``
    and ``CUDA_VERSION``. The import takes the member the build takes (it was refused: "under a
    preprocessor condition, which is not evaluated"), and the lines of the file stay where they
    were (the launch site keeps its line)."""
    source = JIT / "arch_member.cuh"
    launch_line = next(  # in the flattened file the import reads
        n
        for n, line in enumerate(flatten(source, []).text.splitlines(), 1)
        if "host::LaunchKernel(rows" in line
    )
    for arch, define, kernel in (
        ("sm_90", "FW_CUDA_ARCH=900", "scale_double_kernel"),
        ("sm_100", "FW_CUDA_ARCH=1000", "scale_wide_kernel"),
    ):
        report = importer.import_file(source, [], tmp_path / arch, arch=arch, defines=(define,))
        (result,) = report.launchers
        assert result.imported, result.reason
        assert result.line == launch_line
        production = (tmp_path / arch / "run" / "production.cu").read_text()
        assert f"// astra: entry = fw::{kernel}<T>" in production
    assert main(["validate", str(tmp_path / "sm_90" / "run")]) == 0


def test_an_entrys_names_come_from_a_namespace_one_at_a_time() -> None:
    """A name of an entry's template arguments that only the kernel's namespace declares is
    brought to global scope by a using-declaration of it alone; one the global scope declares
    too is left alone (a whole ``using namespace fw;`` made ``Square`` ambiguous)."""
    source = (
        "struct Square {};\nnamespace fw {\nstruct Square {};\nenum class Act { kA };\n"
        "template <typename Op, Act kAct> __global__ void op_kernel(float* x) {}\n}\n"
    )
    kernel = SimpleNamespace(qualified="fw::op_kernel")
    site = SimpleNamespace(kernel=kernel, entry="fw::op_kernel<Square, Act::kA>")
    lines = importer._entry_names([site], device_source(source).declared)  # type: ignore[list-item]
    assert "using fw::Act;" in lines and "Square" not in lines
    without = device_source(source.replace("enum class Act", "//")).declared
    assert importer._entry_names([site], without) == ""  # type: ignore[list-item]


def test_a_constant_a_macro_reads_is_kept() -> None:
    """``#define LANE(i) ((i) % kLanes)`` reaches ``kLanes`` from device code: a macro's body
    is raw text to the grammar, and the constant was removed as unused."""
    device = device_source(
        "constexpr int kLanes = 32;\n#define LANE(i) ((i) % kLanes)\n"
        "namespace stdv_user { namespace stdv = fw; }\n#define VIEWS stdv::iota\n"
        "__global__ void k(int* x) { x[LANE(threadIdx.x)] = 1; }\n"
    )
    assert "kLanes" not in device.removed_functions and "stdv" not in device.removed_functions


def test_a_member_under_torchs_device_macro_is_device_code() -> None:
    """vLLM's ``C10_DEVICE C10_ALWAYS_INLINE static float val()``: torch's macro comes from the
    stand-in header, and the grammar reads the macros as a field of their own; the member and
    its class stay (removed, vLLM's fp8 quant kernels lost min_scaling_factor)."""
    device = device_source(
        "#include <c10/macros/Macros.h>\ntemplate <typename T>\nstruct min_scale {\n"
        "  C10_DEVICE C10_ALWAYS_INLINE static float val() { return 1.0f; }\n};\n"
    )
    assert device.removed_functions == []


def _kept_classes(source: str) -> str:
    return device_source(source).text.split("// astra-import: end")[-1]


def test_classes_device_code_names_through_scopes_fields_and_member_templates_stay() -> None:
    """A class device code uses stays with its host members removed: one named only as a scope
    (``Traits::kN``, a namespace_identifier to the grammar), one held by a kernel's parameter
    struct (followed through field types), one held by a class whose device member is a
    template (the member sits in a template_declaration). Each was removed as host code, so
    its import failed NVRTC."""
    traits = _kept_classes(
        "struct Traits {\n  static constexpr int kN = 4;\n  int host_fn() { return 1; }\n};\n"
        "__global__ void k(float* x) { x[0] = Traits::kN; }\n"
    )
    assert "struct Traits {" in traits and "kN = 4" in traits
    held = _kept_classes(
        "struct Holder {\n  int v;\n  Holder(int x) : v(x) {}\n  int get() const { return v; }\n"
        "};\nstruct Params { Holder h; };\n"
        "__global__ void k(Params p, float* x) { x[0] = p.h.v; }\n"
    )
    assert "struct Holder {" in held and "int v;" in held
    member = _kept_classes(
        "struct Helper {\n  int v;\n  int host_fn() { return 1; }\n};\n"
        "struct Box {\n  Helper h;\n"
        "  template <typename T> __device__ T get() const { return T(0); }\n};\n"
        "__global__ void k(float* x) { x[0] = 1; }\n"
    )
    assert "struct Helper {" in member


def test_a_define_with_no_number_is_defined_for_ifdef() -> None:
    """``-DFOO=`` and ``-DBAR=bar`` define FOO and BAR for the compiler: ``#ifdef FOO`` and
    ``defined(BAR)`` hold (they were left out with the defines that have no number, so the
    macros read as the build not taking those branches)."""
    flags = ("FOO=", "BAR=bar", "N=3")
    source = parse_source(
        "#ifdef FOO\n#define WIDTH 8\n#else\n#define WIDTH 4\n#endif\n"
        "#if defined(BAR)\n#define DEPTH 2\n#endif\n",
        importer.define_values(flags),
        importer.defined_names(flags),
    )
    assert source.constants["WIDTH"] == "8" and source.constants["DEPTH"] == "2"


def _extents(body: str) -> dict[str, str]:
    source = (
        "__global__ void k(float* out, int* ids, float* scale, const float* rows, int n, int m) {"
        + body
        + "}"
    )
    (kernel,) = parse_source(source).kernels
    return {e.pointer: e.bound for e in kernel.extents}


def test_a_pointer_only_read_by_subscript_has_the_extent_its_guards_give() -> None:
    # an `if` guard, through the index's one initialiser; a loop's condition; constant indices
    assert _extents("int i = blockIdx.x; if (blockIdx.x < n) { out[0] = ids[i]; }") == {"ids": "n"}
    assert _extents("for (int j = 0; j < m; ++j) { out[0] += rows[j]; }") == {"rows": "m"}
    assert _extents("out[0] = scale[0] + scale[2];") == {"scale": "3"}
    assert _extents("if (n > threadIdx.x) { out[0] = ids[threadIdx.x]; }") == {"ids": "n"}


def test_a_pointer_read_otherwise_or_written_has_no_extent() -> None:
    # unguarded, offset, written, its address taken, two bounds, a guard in the else branch
    assert _extents("out[0] = ids[threadIdx.x];") == {}
    assert _extents("if (threadIdx.x < n) { out[0] = *(ids + threadIdx.x); }") == {}
    assert _extents("if (threadIdx.x < n) { ids[threadIdx.x] = 1; }") == {}
    assert _extents("if (threadIdx.x < n) { int* p = &ids[threadIdx.x]; out[0] = *p; }") == {}
    assert (
        _extents(
            "if (threadIdx.x < n) { out[0] = ids[threadIdx.x]; } "
            "if (threadIdx.x < m) { out[1] = ids[threadIdx.x]; }"
        )
        == {}
    )
    assert _extents("if (threadIdx.x < n) { } else { out[0] = ids[threadIdx.x]; }") == {}


def test_a_subscript_that_may_write_or_an_index_that_moves_gives_no_extent() -> None:
    # written through a member, a reference, a cast to a reference or a macro's argument
    assert _extents("if (threadIdx.x < n) { scale[threadIdx.x].x = 1.f; }") == {}
    assert _extents("if (threadIdx.x < n) { float& r = scale[threadIdx.x]; r = 2.f; }") == {}
    assert _extents("if (threadIdx.x < n) { STORE(scale[threadIdx.x], 1.f); }") == {}
    # the index, what it was set from, or the bound assigned after the guard's reading of them
    assert _extents("for (int j = 0; j < n; ++j) { j += 5; out[0] = scale[j]; }") == {}
    assert _extents("int j = threadIdx.x; if (j < n) { j = n + 5; out[0] = scale[j]; }") == {}
    assert _extents("int j = 0; if (j < n) { int j = n + 9; out[0] = scale[j]; }") == {}
    assert _extents("int j = 0; int t = j; for (j = 0; j < n; ++j) out[0] = scale[t];") == {}
    assert _extents("n = n * 2; int j = threadIdx.x; if (j < n) out[0] = scale[j];") == {}
    # a loop's own step is no move: its condition bounds the variable it steps
    assert _extents("for (int j = 0; j < m; ++j) { out[0] += scale[j]; }") == {"scale": "m"}


def test_a_read_through_a_value_cast_or_a_dereference_has_an_extent() -> None:
    """SGLang's sorted activation reads ``static_cast<uint32_t>(params.sorted_token_ids[t])``
    and ``*params.num_tokens_post_padded``: a cast to a type of no reference copies the
    element, and ``*p`` is ``p[0]``."""
    guarded = "if (threadIdx.x < n) { out[0] = static_cast<float>(ids[threadIdx.x]); }"
    assert _extents(guarded) == {"ids": "n"}
    assert _extents("if (threadIdx.x < n) { out[0] = (float)(ids[threadIdx.x]); }") == {"ids": "n"}
    read = "out[threadIdx.x] = static_cast<float>(*scale) + *rows;"
    assert _extents(read) == {"scale": "1", "rows": "1"}
    # a cast to a reference may write; a dereference written or handed on is no read
    assert _extents("if (threadIdx.x < n) { static_cast<int&>(ids[threadIdx.x]) = 1; }") == {}
    assert _extents("*ids = 1;") == {}
    assert _extents("out[threadIdx.x] = *scale; store(*scale);") == {}


def test_uses_on_either_side_of_an_early_return_are_not_alike() -> None:
    """``out[r]`` written before ``if (r >= n) return;`` reaches every ``r`` the grid gives;
    ``in[r]`` after it only those below ``n``: ``out`` is not like ``in``."""
    before = "int r = blockIdx.x; *(out + r) = 0.f; if (r >= n) return; out[0] += *(rows + r);"
    assert _extents(before) == {}
    after = "int r = blockIdx.x; if (r >= n) return; *(out + r) = *(rows + r);"
    (kernel,) = parse_source(
        "__global__ void k(float* out, const float* rows, int n) {" + after + "}"
    ).kernels
    assert [(e.pointer, e.bound, e.like) for e in kernel.extents] == [("out", "rows", True)]


def _field_extents(body: str, helper: str = "") -> dict[str, str]:
    source = (
        "struct P { const int* ids; float* out; unsigned rows; unsigned step; };"
        + helper
        + "__global__ void k(const P params, int n) {"
        + body
        + "}"
    )
    (kernel,) = parse_source(source).kernels
    return {e.pointer: e.bound for e in kernel.extents}


def test_a_struct_field_read_below_an_early_return_has_that_extent() -> None:
    """SGLang's filtered activation: ``params.expert_ids[token_id / params.expert_step]`` after
    ``if (token_id >= params.num_tokens) return;``. A quotient by a parameter or a positive whole
    number is below what its dividend is below."""
    exit_then_read = "unsigned r = blockIdx.x; if (r >= params.rows) return; "
    read = "if (params.ids[r / params.step] == -1) return;"
    assert _field_extents(exit_then_read + read) == {"params.ids": "params.rows"}
    assert _field_extents(exit_then_read + "params.out[0] = params.ids[r / 4];") == {
        "params.ids": "params.rows"
    }
    # the by-value parameter of a plain kernel too
    assert _extents("int i = blockIdx.x; if (i >= n) return; out[0] = ids[i / m];") == {"ids": "n"}


def test_a_struct_field_read_out_of_sight_or_unbounded_has_no_extent() -> None:
    exit_then = "unsigned r = blockIdx.x; if (r >= params.rows) return; "
    # the struct handed whole to a function: what it reads is not seen
    helper = "__device__ int first(const P& p) { return p.ids[p.rows]; }"
    whole = exit_then + "params.out[0] = params.ids[r] + first(params);"
    assert _field_extents(whole, helper) == {}
    # an index past the bound, a divisor that may be zero or negative, a return after the read
    assert _field_extents(exit_then + "params.out[0] = params.ids[r + 1];") == {}
    assert _field_extents(exit_then + "params.out[0] = params.ids[r / (n - 1)];") == {}
    assert _field_extents(exit_then + "params.out[0] = params.ids[r / 0];") == {}
    late = "unsigned r = blockIdx.x; params.out[0] = params.ids[r]; if (r >= params.rows) return;"
    assert _field_extents(late) == {}
    # an early return that does work first bounds nothing
    busy = "unsigned r = blockIdx.x; if (r >= params.rows) { params.out[0] = 1.f; return; } "
    assert _field_extents(busy + "params.out[1] = params.ids[r];") == {}


SEGMENTS = """
__global__ void segment_sum(float* out, const float* x, const int* indptr, int batch) {
  const int b = blockIdx.x;
  if (b >= batch) return;
  const int count = indptr[b + 1] - indptr[b];
  float sum = 0.f;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += x[indptr[b] + i];
  out[b] = sum;
}
void segments(torch::Tensor& out, torch::Tensor& x, torch::Tensor& indptr) {
  const int batch = out.size(0);
  segment_sum<<<batch, 32>>>(out.data_ptr<float>(), x.data_ptr<float>(),
                             indptr.data_ptr<int>(), batch);
}
"""


def test_an_offset_array_whose_elements_are_subtracted_is_refused() -> None:
    """FlashInfer's BatchQKApplyRotary walks ``indptr[b + 1] - indptr[b]`` tokens from
    ``indptr[b]``: random integer draws, unordered, make that count negative (huge, unsigned)
    and the original reads far outside ``x``. Whatever the tensor's shape, its values are not
    stated, so the launch is refused with that reason; a tensor read at one index is not."""
    source = parse_source(SEGMENTS)
    (kernel,) = source.kernels
    assert kernel.differenced == ("indptr",)
    launcher = source.launchers[0]
    with pytest.raises(Unmapped, match=r"tensor 'indptr': the kernel subtracts its elements"):
        analyse(launcher, launcher.launches[0], source.kernels, source.macros, H100)
    # a difference of two tensors' elements, or of an element and a number, is no offset walk
    other = parse_source(SEGMENTS.replace("indptr[b + 1] - indptr[b]", "x[b + 1] - indptr[b]"))
    assert other.kernels[0].differenced == ()
    (kernel,) = parse_source(
        "struct P { const int* starts; int n; };"
        "__global__ void k(const P params, float* out) {"
        "  out[0] = (params.starts[1]) - params.starts[0] - 1; }"
    ).kernels
    assert kernel.differenced == ("params.starts",)


def test_pointers_reached_under_other_guards_are_not_alike() -> None:
    source = (
        "__global__ void k(float* out, const float* rows, int n, int m) {"
        "  float x = 0.f; if (threadIdx.x < n) x = *(rows + threadIdx.x);"
        "  if (threadIdx.x < m) *(out + threadIdx.x) = x;"
        "}"
    )
    (kernel,) = parse_source(source).kernels
    assert kernel.extents == ()
    # a test of a pointer against null is no guard of where it is reached
    alike = source.replace("if (threadIdx.x < m)", "if (out != nullptr)").replace(
        "if (threadIdx.x < n)", ""
    )
    (kernel,) = parse_source(alike).kernels
    assert {(e.pointer, e.bound, e.like) for e in kernel.extents} == {("out", "rows", True)}


def test_a_pointer_offset_only_as_another_is_takes_its_extent() -> None:
    source = (
        "__global__ void k(float* out, const float* rows, const float* other, int n, int m) {"
        "  *(out + blockIdx.x * m + threadIdx.x) = *(rows + threadIdx.x + blockIdx.x * m);"
        "  out[0] += *(other + blockIdx.x * n);"
        "}"
    )
    (kernel,) = parse_source(source).kernels
    # the sums' summands in any order; `out` is also subscripted, so it is like nothing
    assert {(e.pointer, e.bound, e.like) for e in kernel.extents} == set()
    source = source.replace("out[0] += ", "")
    (kernel,) = parse_source(source).kernels
    # the alike pointer the body does not write through stands for both
    assert {(e.pointer, e.bound, e.like) for e in kernel.extents} == {("out", "rows", True)}


def test_a_tensor_passed_twice_takes_no_read_extent() -> None:
    """``in`` is only read under ``i < n``, but the launch passes one tensor as both ``out`` and
    ``in``: it is written through ``out``, so it is no input and ``in``'s extent is not its."""
    (kernel,) = parse_source(
        "__global__ void k(float* out, const float* in, int n) {"
        "  int i = threadIdx.x; if (i < n) { out[0] = in[i]; }"
        "}"
    ).kernels
    assert [(e.pointer, e.bound) for e in kernel.extents] == [("in", "n")]
    size = Binding("n", "expr", "a__size__0", "int32")
    apart = [Binding("out", "tensor", "y", "T"), Binding("in", "tensor", "x", "T"), size]
    assert read_extents(kernel, apart) == {"x": ("a", "0")}
    aliased = [Binding("out", "tensor", "x", "T"), Binding("in", "tensor", "x", "T"), size]
    assert read_extents(kernel, aliased) == {}


def test_a_comment_among_template_parameters_is_no_parameter() -> None:
    """vLLM's cutlass conversions comment between template parameters; the parser took the
    comment for a parameter and raised IndexError on the whole file (found parsing every file
    of the three releases)."""
    source = """
template <typename T,  // the element
          int N,       // how many
          bool kFlag>
__global__ void k(T* out) { if (kFlag) out[threadIdx.x % N] = T(0); }
"""
    (kernel,) = parse_source(source).kernels
    assert [(t.name, t.kind) for t in kernel.template] == [
        ("T", "type"),
        ("N", "value"),
        ("kFlag", "flag"),
    ]
