"""Vector accesses whose safe widths only the kernel's code tells, on the CPU.

The fixture tests/fixtures/framework/csrc/whole_vectors.cu was written for these tests: a
thread that tests its first element against an extent and then moves its whole vector (in the
style of FlashInfer's cos/sin-cache rotary kernel, whose original read past the cache at a width
that was no multiple of its vector and differed from itself on the H100), with a vector width
that follows the head size; and a 16-byte copy at an offset a helper returns from strides the
launcher reads (FlashInfer's ``get_elem_offset_impl``; its RopeQuantize faulted, misaligned, at a
width the domain drew, because the offset through the helper was not read).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from astra_graph.framework.flatten import flatten
from astra_graph.framework.importer import LauncherResult, import_file
from astra_graph.framework.launchers import Binding
from astra_graph.framework.parse import bound_names, expression_node, parse_source
from astra_graph.framework.vectors import _dim_multiple, _Value, required_multiples
from astra_graph.harness.plan import plan_cases
from astra_graph.harness.thresholds import code_thresholds, requires_thresholds
from astra_graph.kernel.contract import load_contract
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import load_implementation

SOURCE = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "whole_vectors.cu"
DRAW_SEEDS = 12
"""Checks whose shapes (suites, random and domain shapes) are drawn per operation."""

pytestmark = pytest.mark.usefixtures("default_search_path")


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, LauncherResult]]:
    out = tmp_path_factory.mktemp("whole_vectors")
    return out, {r.op: r for r in import_file(SOURCE, [], out).launchers if r.op}


def test_a_name_replaced_by_a_name_stays_bare_so_the_sum_still_parses() -> None:
    # ``(stride) + (x)`` reads as a cast of ``+x`` to a type ``stride``: an offset built so
    # was not read at all
    replaced = bound_names("t * s + h * w + c", {"s": "stride_t", "w": "stride_h", "c": "a + b"})
    assert replaced == "t * stride_t + h * stride_h + (a + b)"
    node = expression_node(replaced)
    assert node is not None
    assert required_multiples(node, 8, {"stride_t", "stride_h", "a", "b"}) == [
        ("stride_t", 8),
        ("stride_h", 8),
        ("a", 8),
        ("b", 8),
    ]


def test_a_stride_over_a_value_no_dim_names_asks_nothing_and_says_why() -> None:
    found: dict[str, int] = {}
    bindings: dict[str, Binding | _Value] = {"s": _Value("s", "expr", "heads * pad")}
    assert "s % 8 == 0 over heads * pad" in _dim_multiple("s", 8, bindings, ["heads"], found)
    assert found == {}


def test_an_offset_a_helper_returns_is_read_as_its_sum_and_an_early_return_guards() -> None:
    kernels = {k.name: k for k in parse_source(flatten(SOURCE, []).text).kernels}
    copy = kernels["copy_heads_kernel"]
    offsets = {o for access in copy.vectors for o in access.offsets}
    assert {a.pointer for a in copy.vectors} == {"in", "out"}
    # the helper's one return in its place, over the call's arguments
    assert offsets and all("elem_offset" not in o and "stride_t" in o for o in offsets)
    assert [(g.extent, g.width) for g in copy.vector_guards] == [("head_size", "8")]
    rotated = kernels["scale_rotated_kernel"]
    assert [(g.extent, g.width) for g in rotated.vector_guards] == [("rot_dim", "VEC")]


def test_a_helper_called_by_its_qualified_name_is_read_and_one_that_does_more_is_not() -> None:
    source = """
namespace ns {
__device__ int row_start(int row, int stride) { return row * stride; }
__device__ int clamped(int row, int stride) { int r = row < 4 ? row : 4; return r * stride; }
}
__global__ void qualified_kernel(float* x, const int stride) {
  reinterpret_cast<float4*>(x + ns::row_start(blockIdx.x, stride))[threadIdx.x] = {};
}
__global__ void busy_kernel(float* x, const int stride) {
  reinterpret_cast<float4*>(x + ns::clamped(blockIdx.x, stride))[threadIdx.x] = {};
}
"""
    kernels = {k.name: k for k in parse_source(source).kernels}
    (qualified,) = kernels["qualified_kernel"].vectors
    assert qualified.offsets == ("(((blockIdx.x) * stride))",)
    (busy,) = kernels["busy_kernel"].vectors
    assert busy.offsets == ("(ns::clamped(blockIdx.x, stride))",)


def test_a_template_or_recursive_helper_is_left_as_a_call() -> None:
    """A template helper's parameters are no names of the caller's (its ``T`` would be read as
    the kernel's own), and a recursive one would unroll without end."""
    source = """
template <typename T> __device__ T row_start(T row) { return row * sizeof(T); }
__device__ int twice(int row) { return row > 0 ? twice(row - 1) + 2 : 0; }
template <typename T>
__global__ void template_kernel(float* x) {
  reinterpret_cast<float4*>(x + row_start(blockIdx.x))[threadIdx.x] = {};
  reinterpret_cast<float4*>(x + twice(blockIdx.x))[threadIdx.x] = {};
}
"""
    (kernel,) = parse_source(source).kernels
    offsets = {o for access in kernel.vectors for o in access.offsets}
    assert offsets == {"(row_start(blockIdx.x))", "(twice(blockIdx.x))"}
    # a name after ``>`` is a name: both sides of a comparison are replaced
    assert bound_names("a>b ? a : b", {"a": "x", "b": "y"}) == "x>y ? x : y"


def test_a_guard_without_a_vector_access_or_a_run_time_index_asks_nothing() -> None:
    source = """
__global__ void scalar_kernel(float* x, const int n) {
  if (threadIdx.x * 4 < n) { for (int j = 0; j < 4; ++j) x[threadIdx.x * 4 + j] = 1.f; }
}
__global__ void launch_values_kernel(float* x, const int n, const int m) {
  if (m * 4 < n) { reinterpret_cast<float4*>(x)[threadIdx.x] = {}; }
}
__global__ void block_kernel(float* x, const int n) {  // a block's start, not a thread's
  if (blockIdx.x * 64 < n) { reinterpret_cast<float4*>(x)[threadIdx.x] = {}; }
}
__global__ void block_size_kernel(float* x, const int n) {
  if (blockDim.x * 4 < n) { reinterpret_cast<float4*>(x)[threadIdx.x] = {}; }
}
__global__ void sized_kernel(float* x, const int n) {
  if (sizeof(float) * 4 < n) { reinterpret_cast<float4*>(x)[threadIdx.x] = {}; }
}
__global__ void own_tail_kernel(float* x, const int n) {  // whole vectors only where they fit
  const int t = threadIdx.x;
  if (t * 4 < n) {
    if (t * 4 + 4 <= n) { reinterpret_cast<float4*>(x)[t] = {}; }
    else { for (int j = t * 4; j < n; ++j) x[j] = 0.f; }
  }
}
__global__ void shared_kernel(float* x, const int n) {  // the kernel's own memory
  __shared__ float tile[128];
  if (threadIdx.x * 4 < n) { reinterpret_cast<float4*>(tile)[threadIdx.x] = {}; x[0] = 1.f; }
}
__global__ void narrow_copy_kernel(float* x, const float* y, const int n) {  // one float
  if (threadIdx.x * 4 < n) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(0), "l"(y + threadIdx.x));
  }
}
__global__ void vector_kernel(float* x, const int n) {
  if (threadIdx.x * 4 < n) { reinterpret_cast<float4*>(x)[threadIdx.x] = {}; }
}
__global__ void exit_kernel(float* x, const int n) {
  if (blockIdx.x > 9 || 4 * threadIdx.x >= n) return;
  reinterpret_cast<float4*>(x)[threadIdx.x] = {};
}
"""
    kernels = {k.name: k for k in parse_source(source).kernels}
    for name in (
        "scalar_kernel",
        "launch_values_kernel",
        "block_kernel",
        "block_size_kernel",
        "sized_kernel",
        "own_tail_kernel",
        "shared_kernel",
        "narrow_copy_kernel",
    ):
        assert kernels[name].vector_guards == (), name
    assert [(g.extent, g.width) for g in kernels["vector_kernel"].vector_guards] == [("n", "4")]
    assert [(g.extent, g.width) for g in kernels["exit_kernel"].vector_guards] == [("n", "4")]


@pytest.mark.parametrize(
    ("value", "m", "multiples"),
    [
        ("(heads * head_size)", 8, {"head_size": 8}),  # a stride: its innermost dim
        ("2 * heads * head_size", 8, {"head_size": 4}),  # what the constant leaves
        ("heads * 16", 8, {}),  # the constant is the multiple
        ("head_size", 8, {"head_size": 8}),
    ],
)
def test_a_stride_that_is_a_product_of_dims_asks_its_innermost_dim(
    value: str, m: int, multiples: dict[str, int]
) -> None:
    found: dict[str, int] = {}
    bindings: dict[str, Binding | _Value] = {"s": _Value("s", "expr", value)}
    assert _dim_multiple("s", m, bindings, ["heads", "head_size"], found) == ""
    assert found == multiples


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_import_keeps_whole_vectors_and_aligned_copies_at_every_draw(
    imported: tuple[Path, dict[str, LauncherResult]],
) -> None:
    out, ops = imported
    assert ops["copy_heads"].imported, ops["copy_heads"].reason
    assert ops["scale_rotated"].imported, ops["scale_rotated"].reason
    copy = load_contract(out / "copy_heads").contract
    assert copy.dims["head_size"].multiple_of == 8
    spec = load_contract(out / "scale_rotated")
    impl = load_implementation(out / "scale_rotated" / "production.cu", spec.contract)
    (clause,) = [r for r in impl.header.requires if "rot_dim % (" in r]
    assert "head_size // 32" in clause
    thresholds = requires_thresholds(impl.header.requires, spec)
    thresholds += code_thresholds(impl.source, spec)
    drawn: list[tuple[str, dict[str, int]]] = []
    for seed in range(DRAW_SEEDS):
        rng = np.random.default_rng(seed)
        cases = plan_cases(spec, ["tuning", "heldout"], [], rng, domain=True, thresholds=thresholds)
        drawn += [(c.suite, dict(c.dims)) for c in cases]
    float16 = DTYPES["float16"]

    def whole(dims: dict[str, int]) -> bool:  # 8 halves a vector up to head 256, then head / 32
        return dims["rot_dim"] % max(8, dims["head_size"] // 32) == 0

    # the original runs at every drawn shape with whole vectors; the draws that break them
    # (the domain's non-multiples and samples) are the ones its requires excludes
    excluded = 0
    for suite, dims in drawn:
        unmet = impl.header.unmet_requirement(dims, float16, {})
        assert (unmet != clause) if whole(dims) else (unmet is not None), (suite, dims)
        launched = dims["head_size"] in (64, 128, 256, 512) and dims["rot_dim"] <= dims["head_size"]
        if launched and not whole(dims):  # the launcher's own checks hold: this one excludes it
            assert unmet == clause, (suite, dims)
            excluded += 1
    assert excluded > 0
    assert any(not whole(d) for _, d in drawn)
    assert all(whole(d) for suite, d in drawn if suite in ("tuning", "heldout"))
