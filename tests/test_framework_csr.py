"""Raw-pointer launchers over CSR segments, with a count they may go without (CPU).

The fixture tests/fixtures/framework/csrc/csr_sums.cuh (written for these tests, framework
style) holds persistent kernels over variable-length segments: ``csr_sum_kernel`` reads
``parts`` at rows ``offsets[seg] + k`` with ``k < offsets[seg + 1] - offsets[seg]`` (and at
``offsets[seg]`` alone where that count is 1), strides over ``segments * heads`` items with
``segments = count_ptr ? *count_ptr : max_segments``, and is launched on a grid of the
occupancy query's blocks per SM times the SM count (``CsrSum``; ``CsrSumCapped`` caps it by the
work). Both are imported directly: ``count_ptr`` passed null, ``offsets`` drawn as CSR offsets
into a dim of their own, ``parts`` sized by it. The others are refused, each with its reason:
row ids used without differences, a count pointer written, a row read past its segment.
``CsrStaged`` reads its rows only through a device copy that reads them where the flag it is
handed holds (a cp.async predicated in PTX, a vector copy under ``if``): the row is bounded by
that flag (guarded.py); inline kernels check the copies it refuses. Their GPU twins are in
test_import_gpu.py (``-k csr``).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from tree_sitter import Node

from astra_graph.cli import main
from astra_graph.framework.flatten import flatten
from astra_graph.framework.importer import DIRECT_REASON, LauncherResult, import_file
from astra_graph.framework.launchers import (
    RAW_ROOT_NOTE,
    Analysis,
    Unmapped,
    analyse,
    device_constants,
)
from astra_graph.framework.parse import IndexedExtent, Kernel, _parser, _walk, parse_source
from astra_graph.framework.segments import OFFSET_ROWS, nullable_counts
from astra_graph.harness.cases import random_values
from astra_graph.kernel import expr, occupancy
from astra_graph.kernel.catalog import set_search_dirs
from astra_graph.kernel.contract import load_contract
from astra_graph.kernel.header import load_implementation

pytestmark = pytest.mark.usefixtures("plots_not_drawn")  # conftest.py says why

SUMS = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "csr_sums.cuh"
SEED = 7
"""The draws' seed: the offsets' properties hold at every seed; one keeps the test steady."""


@pytest.fixture(autouse=True)
def _default_search_path() -> None:
    set_search_dirs(None)


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, LauncherResult]]:
    out = tmp_path_factory.mktemp("csr_sums")
    report = import_file(SUMS, [], out)
    assert not report.compile_error, report.compile_error
    return out, {r.launcher: r for r in report.launchers}


def _kernels() -> dict[str, Kernel]:
    return {k.name: k for k in parse_source(flatten(SUMS, []).text).kernels}


def test_a_direct_reading_takes_the_count_null_and_places_rows_by_the_offsets() -> None:
    """``count_ptr`` is read only as ``count_ptr ? *count_ptr : max_segments``: with it null,
    segments are below ``max_segments``, ``offsets`` holds that many + 1, and ``parts``' rows
    are below the offsets' last element; the kernel's own reading (no caller's) claims none."""
    kernel = _kernels()["csr_sum_kernel"]
    direct = kernel.direct
    assert direct is not None
    assert direct.nulls == ("count_ptr",)
    assert direct.offsets == (("offsets", "max_segments"),)
    shapes = {e.pointer: e for e in direct.indexed}
    assert shapes["parts"] == IndexedExtent(
        "parts",
        (OFFSET_ROWS.format("offsets"), "heads", "kVec*kLanes"),
        (("blockDim.x*kVec", "kVec*kLanes"),),
    )
    assert shapes["out"].axes == ("max_segments", "heads", "kVec*kLanes")
    assert kernel.indexed == ()


@pytest.mark.parametrize(
    ("body", "nullable"),
    [
        ("unsigned n = c ? *c : m; out[0] = n;", ("c",)),
        ("unsigned n = c != nullptr ? *c : m; out[0] = n;", ("c",)),
        ("unsigned n = c ? *c : m; if (c) *c = 0; out[0] = n;", ()),
        ("unsigned n = c ? c[1] : m; out[0] = n;", ()),
        ("out[0] = *c;", ()),
    ],
)
def test_only_a_count_read_behind_its_null_test_may_be_passed_null(
    body: str, nullable: tuple[str, ...]
) -> None:
    source = f"__global__ void k(float* out, unsigned* c, unsigned m) {{ {body} }}\n"
    (kernel,) = parse_source(source).kernels
    assert nullable_counts(_body(source), kernel.params) == nullable


def _body(source: str) -> Node:
    root = _parser().parse(source.encode()).root_node
    (definition,) = _walk(root, ("function_definition",))
    body = definition.child_by_field_name("body")
    assert body is not None
    return body


@pytest.mark.parametrize(
    ("row", "guard", "placed"),
    [
        ("o[s] + k", "k < o[s + 1] - o[s]", True),
        ("o[s] + k", "k < n", True),
        ("o[s] + k", "k <= n", False),
        ("o[s] + k", "k < o[s + 1]", False),
        ("o[s]", "n == 1", True),
        ("o[s]", "n > 0", True),
        ("o[s]", "n >= 0", False),
        ("o[s]", "true", False),
        ("o[s + 1] + k", "k < n", False),
        ("o[s] + k", "k < n && ++k", False),  # k read after the test moved it
    ],
)
def test_a_row_placed_by_offsets_is_kept_below_its_segments_count(
    row: str, guard: str, placed: bool
) -> None:
    """``n = o[s + 1] - o[s]``: a row ``o[s] + k`` needs ``k < n``, ``o[s]`` alone ``n >= 1``,
    of the ``k`` read; anything else may reach the next segment's row, or the offsets' end."""
    source = (
        "__global__ void k(float* x, const int* o, float* out, unsigned m) {\n"
        "  for (unsigned s = blockIdx.x; s < m; s += gridDim.x) {\n"
        "    const unsigned n = o[s + 1] - o[s];\n"
        f"    for (unsigned k = 0; k < 4; ++k) if ({guard}) out[s] += x[{row}];\n"
        "  }\n"
        "}\n"
    )
    (kernel,) = parse_source(source).kernels
    assert kernel.direct is not None
    shapes = {e.pointer: e.axes for e in kernel.direct.indexed}
    assert (shapes.get("x") == (OFFSET_ROWS.format("o"),)) is placed
    assert kernel.direct.offsets == (("o", "m"),)


@pytest.mark.usefixtures("needs_nvrtc")
@pytest.mark.parametrize("launcher", ["CsrSum", "CsrSumCapped"])
def test_csr_segments_import_with_the_count_null_and_offsets_into_their_rows(
    imported: tuple[Path, dict[str, LauncherResult]], launcher: str
) -> None:
    out, results = imported
    result = results[launcher]
    assert result.imported, result.reason
    assert RAW_ROOT_NOTE in result.notes
    assert any(n.startswith("count_ptr: passed null") for n in result.notes)
    folder = out / ("csr_sum" if launcher == "CsrSum" else "csr_sum_capped")
    contract = load_contract(folder).contract
    args = {a.name: a for a in contract.args}
    assert {n: a.shape for n, a in args.items()} == {
        "parts": ["offsets_total", "heads", "head_dim"],
        "offsets": ["max_segments + 1"],
        "out": ["max_segments", "heads", "head_dim"],
    }
    assert args["offsets"].dtype == "int32"
    assert args["offsets"].init.offsets_into == "offsets_total"
    header = load_implementation(folder / "production.cu", contract).header
    assert header.entry == "segs::csr_sum_kernel<8, ASTRA_SIZE_KLANES, T, int32_t>"
    assert "count_ptr = nullptr" in (folder / "production.cu").read_text()
    assert main(["validate", str(folder)]) == 0


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_offsets_drawn_start_at_0_never_decrease_and_end_at_the_rows(
    imported: tuple[Path, dict[str, LauncherResult]],
) -> None:
    """At each suite's dims the drafted offsets are CSR offsets into ``parts``' rows; over the
    suites, segments of 0, 1 and more rows all come (each branch of the kernel runs), and the
    values are never all zero."""
    spec = load_contract(imported[0] / "csr_sum")
    (arg,) = (a for a in spec.contract.args if a.name == "offsets")
    rng = np.random.default_rng(SEED)
    lengths: set[int] = set()
    for dims in [*spec.contract.suites.tuning, *spec.contract.suites.heldout]:
        shape = (dims["max_segments"] + 1,)
        drawn = random_values(arg, shape, rng, dims)
        assert drawn[0] == 0 and drawn[-1] == dims["offsets_total"]
        steps = np.diff(drawn)
        assert (steps >= 0).all()
        assert drawn.any()
        lengths |= {min(int(s), 2) for s in steps}
    assert lengths == {0, 1, 2}


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_persistent_grid_is_the_occupancy_answer_times_the_sms_capped_by_the_work(
    imported: tuple[Path, dict[str, LauncherResult]],
) -> None:
    """The grids ask CUDA's occupancy query (answered here by a stand-in, as the loaded kernel
    answers it on the GPU): ``CsrSum`` takes every slot, ``CsrSumCapped`` no more blocks than
    items; the block is head_dim / 8 lanes."""
    out, _ = imported
    env = {"max_segments": 3, "heads": 2, "head_dim": 64, "offsets_total": 5, "sm_count": 132}
    grids = {}
    for op in ("csr_sum", "csr_sum_capped"):
        spec = load_contract(out / op)
        header = load_implementation(out / op / "production.cu", spec.contract).header
        assert expr.evaluate_dims3(header.block, env) == (8, 1, 1)
        with occupancy.answered_by(lambda threads, smem: 16):
            grids[op] = expr.evaluate_dims3(header.grid, env)
    assert grids["csr_sum"] == (16 * 132, 1, 1)
    assert grids["csr_sum_capped"] == (132, 1, 1)  # ceil(6 / 132) = 1 block an SM


@pytest.mark.usefixtures("needs_nvrtc")
@pytest.mark.parametrize(
    ("launcher", "reason"),
    [
        (
            "RowIdSum",
            "raw pointer 'parts' (kernel parameter parts): reached at `parts[ids[blockIdx.x] * d "
            "+ c]`, not one element or vector access",
        ),
        # written, the count is no default: the segments are not bounded, nor the count read
        (
            "CountedSum",
            "raw pointer 'count' (kernel parameter count_ptr): reached at `count_ptr`, not one "
            "element",
        ),
        (
            "LooseSum",
            "raw pointer 'parts' (kernel parameter parts): reached at `parts[(offsets[seg] + k) "
            "* d + c]`, not one element or vector access",
        ),
    ],
)
def test_unsound_segment_readings_stay_refused(
    imported: tuple[Path, dict[str, LauncherResult]], launcher: str, reason: str
) -> None:
    result = imported[1][launcher]
    assert not result.imported
    assert result.reason.startswith(f"{DIRECT_REASON}: {reason}"), result.reason


SEGMENTED = """
template <typename T, typename O>
__global__ void seg_kernel(T* out, const T* x, const O* o, unsigned m, unsigned* c) {
  const unsigned segs = c ? *c : m;
  for (unsigned s = blockIdx.x; s < segs; s += gridDim.x) {
    const unsigned n = o[s + 1] - o[s];
    float acc = 0.f;
    for (unsigned k = 0; k < n; ++k) acc += static_cast<float>(x[o[s] + k]);
    out[s] = static_cast<T>(acc);
  }
}
template <typename T, typename O>
void Seg(T* out, const T* x, O* o, unsigned m, unsigned* c) {
  seg_kernel<T, O><<<m, 1>>>(out, x, o, m, c);
}
template <typename T>
void SegFloat(T* out, const T* x, T* o, unsigned m, unsigned* c) {
  seg_kernel<T, T><<<m, 1>>>(out, x, o, m, c);
}
template <typename T, typename O>
void SegCounted(T* out, const T* x, O* o, unsigned m, at::Tensor counts) {
  seg_kernel<T, O><<<m, 1>>>(out, x, o, m, counts.data_ptr<unsigned>());
}
"""
"""One kernel over CSR segments, launched with offsets of a type parameter of their own (int32
offsets), of the element type (float offsets: refused), and with the count a tensor's
(refused: the shapes were read with it null)."""


def _segmented(name: str) -> Analysis:
    source = parse_source(SEGMENTED)
    launcher = next(x for x in source.launchers if x.name == name)
    device = device_constants("sm_90", (12, 4))
    return analyse(launcher, launcher.launches[0], source.kernels, {}, device, raw_root=True)


def test_offsets_of_their_own_type_parameter_are_int32_and_sized_by_their_segments() -> None:
    analysis = _segmented("Seg")
    assert analysis.shapes == {"out": ["m"], "x": ["o_total"], "o": ["m + 1"]}
    assert analysis.offsets == {"o": "o_total"}
    assert analysis.tensors["o"].element == "int32"
    assert analysis.entry.endswith("<T, int32_t>")
    assert "o_total" in analysis.dims
    assert any(b.param == "c" and b.kind == "null" for b in analysis.bindings)


def test_offsets_of_a_float_type_are_refused() -> None:
    with pytest.raises(Unmapped, match=r"raw pointer 'o': CSR offsets .* no integer"):
        _segmented("SegFloat")


def test_a_count_taken_null_that_the_launch_passes_otherwise_is_refused() -> None:
    with pytest.raises(Unmapped, match=re.escape("kernel parameter 'c' is read as `c ? *c : ...`")):
        _segmented("SegCounted")


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_count_handed_by_value_and_names_declared_in_scopes_of_their_own_import(
    imported: tuple[Path, dict[str, LauncherResult]],
) -> None:
    """``CsrWeighted`` hands its count to ``div_up`` (by value), reads weights in a
    conditional's branch under ``k < count``, and declares ``i`` in an inner loop and ``k`` in
    two sibling scopes: each is read as the variable of its own scope, and every pointer gets
    its shape."""
    out, results = imported
    result = results["CsrWeighted"]
    assert result.imported, result.reason
    folder = out / "csr_weighted"
    contract = load_contract(folder).contract
    assert {a.name: a.shape for a in contract.args} == {
        "parts": ["offsets_total", "heads", "head_dim"],
        "weights": ["offsets_total", "heads"],
        "offsets": ["max_segments + 1"],
        "out": ["max_segments", "heads", "head_dim"],
        "partial": ["max_segments", "heads", "head_dim // 8"],
    }
    assert main(["validate", str(folder)]) == 0


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_count_handed_to_a_call_by_reference_bounds_nothing(
    imported: tuple[Path, dict[str, LauncherResult]],
) -> None:
    result = imported[1]["ClampedShare"]
    assert not result.imported
    reason = "raw pointer 'weights' (kernel parameter weights): reached at `weights[offsets[seg]"
    assert result.reason.startswith(f"{DIRECT_REASON}: {reason}"), result.reason


CALLEES = """
template <typename A> __device__ A halve(const A x) { return x / 2; }
template <typename A> __device__ void bump(A& x) { x += 1; }
__device__ unsigned twice(unsigned x) { return 2 * x; }
__device__ unsigned twice(unsigned* x) { return 2 * *x; }
__device__ unsigned plain(unsigned x) { return x; }
#define plain_macro(x) ((x) = 0)
"""
"""Callees of a test kernel: by value (deduced, arithmetic), by reference, an overload set one
of whose members takes a pointer, and a macro."""


@pytest.mark.parametrize(
    ("call", "steady"),
    [
        ("halve(n)", True),
        ("plain(n)", True),
        ("bump(n)", False),
        ("halve<unsigned&>(n)", False),  # an explicit argument may make a reference of it
        ("twice(n)", False),  # one overload takes a pointer
        ("plain_macro(n)", False),
        ("unseen(n)", False),
    ],
)
def test_a_name_handed_to_a_call_stays_bounded_only_where_the_callee_copies_it(
    call: str, steady: bool
) -> None:
    """``n = o[s + 1] - o[s]`` bounds the row ``o[s] + k`` under ``k < n`` only where no call
    may change ``n``: one defined in the unit taking it by value cannot."""
    source = CALLEES + (
        "__global__ void k(float* x, const int* o, float* out, unsigned m) {\n"
        "  for (unsigned s = blockIdx.x; s < m; s += gridDim.x) {\n"
        "    unsigned n = o[s + 1] - o[s];\n"
        f"    out[s] = {call};\n"
        "    for (unsigned k = 0; k < n; ++k) out[s] += x[o[s] + k];\n"
        "  }\n"
        "}\n"
    )
    (kernel,) = (k for k in parse_source(source).kernels if k.name == "k")
    assert kernel.direct is not None
    shapes = {e.pointer: e.axes for e in kernel.direct.indexed}
    assert (shapes.get("x") == (OFFSET_ROWS.format("o"),)) is steady


@pytest.mark.parametrize(
    ("inner", "placed"),
    [
        ("for (unsigned s = 0; s < 2; ++s) out[0] += 1.f;", True),  # its own s, in its loop
        ("{ unsigned n = 9; out[0] += n; }", True),  # its own n, in its block
        ("unsigned t = s; { unsigned s = t + 1; out[0] += s; }", True),
        ("{ unsigned k = 3; out[s] += x[o[s] + k]; }", False),  # this k is no guarded one
    ],
)
def test_a_name_declared_again_is_another_variable_only_in_its_own_scope(
    inner: str, placed: bool
) -> None:
    """A declaration in an inner block or loop shadows only there: the outer ``s``, ``n`` and
    ``k`` keep their bounds outside it, and a row read with the inner ``k`` is not the guarded
    one."""
    source = (
        "__global__ void k(float* x, const int* o, float* out, unsigned m) {\n"
        "  for (unsigned s = blockIdx.x; s < m; s += gridDim.x) {\n"
        "    const unsigned n = o[s + 1] - o[s];\n"
        "    for (unsigned k = 0; k < n; ++k) {\n"
        f"      {inner}\n"
        "      out[s] += x[o[s] + k];\n"
        "    }\n"
        "  }\n"
        "}\n"
    )
    (kernel,) = parse_source(source).kernels
    assert kernel.direct is not None
    shapes = {e.pointer: e.axes for e in kernel.direct.indexed}
    assert (shapes.get("x") == (OFFSET_ROWS.format("o"),)) is placed
    assert kernel.direct.offsets == (("o", "m"),)


@pytest.mark.parametrize(
    ("statement", "read"),
    [
        ("out[s] = s < m ? x[s] : 0.f;", True),
        ("out[s] = (s < m ? x[s] : 2.f * x[s]) + 1.f;", True),
        ("(s < m ? x[s] : out[0]) = 1.f;", False),  # a conditional written through
    ],
)
def test_a_conditionals_branch_is_read_where_the_conditional_is(statement: str, read: bool) -> None:
    source = (
        "__global__ void k(float* x, float* out, unsigned m) {\n"
        f"  for (unsigned s = blockIdx.x; s < m; s += gridDim.x) {{ {statement} }}\n"
        "}\n"
    )
    (kernel,) = parse_source(source).kernels
    shapes = {e.pointer: e.axes for e in kernel.indexed}
    assert ("x" in shapes) is read


PREDICATED = (
    '  asm volatile("{\\n .reg .pred q;\\n setp.ne.b32 q, %0, 0;\\n"\n'
    '               " @q cp.async.cg.shared.global [%1], [%2], %3;\\n}\\n"\n'
    '               :: "r"((int)pred), "r"(at), "l"(src), "n"(16));'
)
SIZED = (
    "  int got = pred ? 16 : 0;\n"
    '  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\\n"\n'
    '               :: "r"(at), "l"(src), "n"(16), "r"(got));'
)
UNPREDICATED = (
    '  asm volatile("cp.async.cg.shared.global [%0], [%1], %2;\\n"\n'
    '               :: "r"(at), "l"(src), "n"(16));'
)
LOADED = (
    "  uint4 r;\n"
    '  asm volatile("{\\n .reg .pred q;\\n setp.ne.b32 q, %4, 0;\\n"\n'
    '               " @q ld.global.v4.u32 {%0, %1, %2, %3}, [%5];\\n}\\n"\n'
    '               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"((int)pred), "l"(src));'
)


def _staged(copy16: str, guard: str = "k < n") -> Kernel:
    """A kernel over CSR segments reading ``x`` only through ``copy<bits>`` (two ``copy16`` of
    the body given where ``bits`` is 256, one where 128), handed ``guard``."""
    source = (
        "template <typename T>\n"
        "__device__ void copy16(T* dst, const T* src, bool pred) {\n"
        "  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(dst));\n"
        f"{copy16}\n"
        "}\n"
        "template <unsigned kBits, typename T>\n"
        "__device__ void copy(T* dst, const T* src, bool pred) {\n"
        '  static_assert(kBits == 128 || kBits == 256, "");\n'
        "  if constexpr (kBits == 128) {\n"
        "    copy16(dst, src, pred);\n"
        "  } else {\n"
        "    copy16(dst, src, pred);\n"
        "    copy16(dst + 16 / sizeof(T), src + 16 / sizeof(T), pred);\n"
        "  }\n"
        "}\n"
        "template <unsigned kVec>\n"
        "__global__ void k(float* x, const int* o, float* out, unsigned m) {\n"
        "  extern __shared__ float buf[];\n"
        "  constexpr unsigned bits = sizeof(float) * kVec * 8;\n"
        "  for (unsigned s = blockIdx.x; s < m; s += gridDim.x) {\n"
        "    const unsigned n = o[s + 1] - o[s];\n"
        "    for (unsigned k = 0; k < 8; ++k) {\n"
        "      copy<bits>(buf + k * kVec, x + (o[s] + k) * 32 + threadIdx.x * kVec,\n"
        f"                 {guard});\n"
        "    }\n"
        "    out[s] = buf[0];\n"
        "  }\n"
        "}\n"
    )
    (kernel,) = (k for k in parse_source(source).kernels if k.name == "k")
    assert kernel.direct is not None
    return kernel


@pytest.mark.parametrize(
    "copy16",
    [
        PREDICATED,
        SIZED,
        "  if (pred) *((uint4*)dst) = *((uint4*)src);",
        f"#ifdef HAS_CP_ASYNC\n{PREDICATED}\n#else\n"
        "  if (pred) { *((uint4*)dst) = *((uint4*)src); }\n#endif",
    ],
)
def test_a_row_read_by_a_guarded_copy_is_kept_below_its_segment_by_the_guard(copy16: str) -> None:
    """A copy that reads ``src`` only where its flag holds (cp.async predicated by ``setp.ne``
    on the flag, or sized ``pred ? 16 : 0``, a vector copy under ``if (pred)``, or any of them
    by the preprocessor) reads ``bits / 8`` bytes (``kVec`` floats: ``sizeof(float) * kVec *
    8`` bits) at row ``o[s] + k`` only where ``k < n``: the row stays in its segment."""
    kernel = _staged(copy16)
    assert kernel.direct is not None
    shapes = {e.pointer: e for e in kernel.direct.indexed}
    assert shapes["x"] == IndexedExtent(
        "x", (OFFSET_ROWS.format("o"), "32"), (("blockDim.x*kVec", "32"),)
    )


@pytest.mark.parametrize(
    ("copy16", "guard", "reason"),
    [
        (UNPREDICATED, "k < n", "cp.async neither predicated nor sized by a flag parameter"),
        (LOADED, "k < n", "PTX `@q ld.global.v4.u32"),
        ("  *((uint4*)dst) = *((uint4*)src);", "k < n", "no vector read under a flag parameter"),
        ("  if (pred) *((uint4*)src) = *((uint4*)dst);", "k < n", "no vector read under a flag"),
        # written through a reference, or a member of it: no read
        ("  if (pred) { uint4& r = *((uint4*)src); r.x = 0u; }", "k < n", "no vector read"),
        ("  if (pred) (*((uint4*)src)).x = 0u;", "k < n", "no vector read under a flag"),
        (PREDICATED, "k <= n", "not one element or vector access"),  # one row past
        (PREDICATED, "true", "not one element or vector access"),
    ],
)
def test_a_copy_not_read_as_guarded_leaves_its_rows_unbounded(
    copy16: str, guard: str, reason: str
) -> None:
    """An unpredicated cp.async, a PTX load not recognised, a vector copy under no flag or
    written through the source, or a guard that does not keep the row in its segment: ``x``
    gets no shape, with a reason naming the copy."""
    kernel = _staged(copy16, guard)
    assert kernel.direct is not None
    assert "x" not in {e.pointer for e in kernel.direct.indexed}
    why = dict(kernel.direct.unindexed)["x"]
    assert why.startswith("reached at `copy<bits>(buf + k * kVec, x"), why
    assert reason in why, why


@pytest.mark.usefixtures("needs_nvrtc")
def test_rows_staged_through_a_guarded_copy_import_with_their_segments_shape(
    imported: tuple[Path, dict[str, LauncherResult]],
) -> None:
    """``CsrStaged`` reads ``parts`` only through ``guarded_copy<bits>`` (cp.async predicated
    in PTX, or a ``uint4`` copy under ``if``), handed ``chunk * kRows + row < count``: its rows
    stay in their segments, and it imports as ``CsrSum`` does."""
    out, results = imported
    result = results["CsrStaged"]
    assert result.imported, result.reason
    contract = load_contract(out / "csr_staged").contract
    assert {a.name: a.shape for a in contract.args} == {
        "parts": ["offsets_total", "heads", "head_dim"],
        "offsets": ["max_segments + 1"],
        "out": ["max_segments", "heads", "head_dim"],
    }
    assert main(["validate", str(out / "csr_staged")]) == 0


@pytest.mark.parametrize("copy16", [PREDICATED, SIZED, UNPREDICATED])
def test_an_async_copy_asks_its_source_aligned_to_its_size(copy16: str) -> None:
    """A cp.async of 16 bytes needs its global address a multiple of 16, guarded or not: each
    copy ``copy<bits>`` may make (at ``src`` and ``src + 16 / sizeof(T)``) is a 16-byte vector
    access of ``x`` at the kernel's offset."""
    kernel = _staged(copy16)
    offset = "((o[s__local] + k__local) * 32) + (threadIdx.x * kVec)"
    assert {(v.pointer, v.offsets, v.width) for v in kernel.vectors} == {
        ("x", (offset,), 16),
        ("x", (f"{offset} + ((16 / sizeof(T)))",), 16),
    }


def test_a_flag_declared_again_in_the_copy_guards_nothing() -> None:
    """``if (pred)`` under a ``bool pred`` of the copy's own tests that variable, not the flag
    the caller hands it: the copy's read is under no guard of the caller's."""
    kernel = _staged("  { bool pred = true; if (pred) *((uint4*)dst) = *((uint4*)src); }")
    assert kernel.direct is not None
    assert "x" not in {e.pointer for e in kernel.direct.indexed}
