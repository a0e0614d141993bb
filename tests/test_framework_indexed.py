"""Shapes of tensors no binding sizes, read from the kernel's row-major indices (CPU).

The fixture tests/fixtures/framework/header_only/include/fw/folds.cuh (written for these tests,
framework style) holds raw-pointer launchers whose binding, csrc/folds_binding.cu, checks the
input's shape and passes the outputs unchecked, as FlashInfer's ``merge_states`` passes
``v_merged`` and ``s_merged``: the kernels reach the outputs only at ``(pos * heads + head) *
head_dim + tx * kVec`` (a vector of ``kVec`` elements) and ``pos * heads + head``, each index a
built-in one the launch bounds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.framework.flatten import flatten
from astra_graph.framework.importer import import_file
from astra_graph.framework.parse import IndexedExtent, parse_source
from astra_graph.kernel.catalog import set_search_dirs
from astra_graph.kernel.contract import load_contract
from astra_graph.kernel.header import load_implementation

pytestmark = pytest.mark.usefixtures("plots_not_drawn")  # conftest.py says why

BASE = Path(__file__).resolve().parent / "fixtures" / "framework" / "header_only"
HEADER = BASE / "include" / "fw" / "folds.cuh"
FOLDERS = [BASE / "include", BASE / "csrc"]


@pytest.fixture(autouse=True)
def _default_search_path() -> None:
    set_search_dirs(None)


def _indexed(source: str) -> dict[str, dict[str, IndexedExtent]]:
    return {k.name: {e.pointer: e for e in k.indexed} for k in parse_source(source).kernels}


def test_row_major_indices_give_each_output_its_axes() -> None:
    """``out``: the grid's rows, ``heads`` (``threadIdx.y`` within ``blockDim.y``, which must
    not pass it) and ``head_dim`` (``tx * kVec`` over a vector of ``kVec``: ``blockDim.x *
    kVec`` must not pass it); a member vector's width is its struct's template argument
    (``folded<kVec>::sum``); a row width of template constants is their product; a row read
    from memory (``slots[blockIdx.x]``) has no bound, so ``out`` there has no shape."""
    kernels = _indexed(flatten(HEADER, FOLDERS).text)
    fold = kernels["fold_sets_kernel"]
    assert fold["out"] == IndexedExtent(
        "out",
        ("gridDim.x", "heads", "head_dim"),
        (("blockDim.x*kVec", "head_dim"), ("blockDim.y", "heads")),
    )
    assert fold["count"] == IndexedExtent(
        "count", ("gridDim.x", "heads"), (("blockDim.y", "heads"),)
    )
    # the loop's own index is below its condition's bound: a fourth axis
    assert fold["in"].axes == ("gridDim.x", "sets", "heads", "head_dim")
    assert ("sets", "sets") not in fold["in"].reaches
    wide = kernels["fold_sets_wide_kernel"]["out"]
    assert wide.axes == ("gridDim.x", "heads", "kVec*kThreads")
    assert ("gridDim.y", "heads") in wide.reaches
    assert "out" not in kernels["fold_slots_kernel"]


@pytest.mark.parametrize(
    ("access", "why"),
    [
        ("mystery v; v.store(out + blockIdx.x * n + threadIdx.x * 4);", "a type of no width"),
        ("vec<float, 4> v; v.store(out + blockIdx.x * n + threadIdx.x * 2);", "step not width"),
        ("vec<float, 4> v; v.store(out + blockIdx.x * n + threadIdx.x);", "an index, 4 wide"),
        ("out[blockIdx.x * n + threadIdx.x] = 1.f; keep(out);", "handed to a call"),
        ("out[blockIdx.x * n + threadIdx.x] = 1.f; out[threadIdx.x * n] = 0.f;", "two shapes"),
        ("uint32_t r = blockIdx.x; r += 1; out[r * n + threadIdx.x] = 1.f;", "a moved index"),
    ],
)
def test_an_access_whose_reach_is_not_read_gives_no_shape(access: str, why: str) -> None:
    source = (
        "template <typename T, unsigned N> struct vec { float v[N]; };\n"
        f"__global__ void k(float* out, unsigned n) {{ {access} }}\n"
    )
    assert _indexed(source)["k"] == {}, why


def test_a_vector_access_of_its_width_and_an_early_return_bound_the_output() -> None:
    """``i * 4`` over a vector of 4, ``row`` below ``rows`` by the early return: [rows, n] with
    ``blockDim.x * 4`` kept within ``n``; an element index alone is one element wide."""
    source = (
        "template <typename T, unsigned N> struct vec { float v[N]; };\n"
        "__global__ void k(float* out, float* lse, unsigned rows, unsigned n) {\n"
        "  const unsigned row = blockIdx.x * blockDim.y + threadIdx.y;\n"
        "  if (row >= rows) return;\n"
        "  vec<float, 4> v;\n"
        "  v.store(out + row * n + threadIdx.x * 4);\n"
        "  lse[row] = 0.f;\n"
        "}\n"
    )
    found = _indexed(source)["k"]
    assert found["out"] == IndexedExtent("out", ("rows", "n"), (("blockDim.x*4", "n"),))
    assert found["lse"] == IndexedExtent("lse", ("rows",), ())


@pytest.mark.usefixtures("needs_nvrtc")
def test_unchecked_outputs_take_the_shape_of_their_indices(tmp_path: Path) -> None:
    """FoldSets' binding sizes ``in`` alone: ``out`` is [rows, heads, head_dim] and ``count``
    [rows, heads], each index's bound the launch's (grid ``rows``, block ``(head_dim / vec,
    heads)``), the vector's reach required within its axis; the wide kernel's row width, a
    product of template arguments, is ``head_dim`` where the launch requires them equal. A
    row read from memory stays refused with the binding's reason."""
    report = import_file(HEADER, FOLDERS, tmp_path)
    assert not report.compile_error, report.compile_error
    results = {r.launcher: r for r in report.launchers}
    fold = results["FoldSets"]
    assert fold.imported, fold.reason
    contract = load_contract(tmp_path / "fold_sets").contract
    assert {a.name: a.shape for a in contract.args} == {
        "in": ["rows", "sets", "heads", "head_dim"],
        "out": ["rows", "heads", "head_dim"],
        "count": ["rows", "heads"],
    }
    assert any("out: extent read from the kernel: its row-major index" in n for n in fold.notes)
    header = load_implementation(tmp_path / "fold_sets" / "production.cu", contract).header
    reach = [r for r in header.requires if "<=" in r and "head_dim" in r]
    assert reach and "elem_bytes" in reach[0]
    assert main(["validate", str(tmp_path / "fold_sets")]) == 0

    wide = results["FoldSetsWide"]
    assert wide.imported, wide.reason
    contract = load_contract(tmp_path / "fold_sets_wide").contract
    shapes = {a.name: a.shape for a in contract.args}
    assert shapes["out"] == ["rows", "heads", "head_dim"]
    header = load_implementation(tmp_path / "fold_sets_wide" / "production.cu", contract).header
    assert any(r.endswith("== (head_dim)") for r in header.requires)
    assert main(["validate", str(tmp_path / "fold_sets_wide")]) == 0

    slots = results["FoldSlots"]
    assert not slots.imported
    assert "tensor 'out': neither the launcher asks its sizes" in (slots.reason or "")
