"""Raw-pointer launchers no caller passes tensors to, imported directly (CPU).

The fixture tests/fixtures/framework/csrc/raw_sums.cuh (written for these tests, framework
style) holds two header launchers of raw pointers that nothing with tensors calls: ``SumSets``,
whose kernel reaches ``in`` at ``((pos * sets + s) * heads + head) * head_dim + tx * kVec`` in a
loop and at ``(pos * heads + head) * head_dim + tx * kVec`` where ``sets == 1``, and ``out`` at
the latter, under a head-dim dispatch; ``GatherSums``, whose kernel reads ``in`` at a row it
reads from memory. The first is imported with the launcher's integer parameters as its dims and
each pointer shaped by the kernel's own indices; the second is refused, naming the pointer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.export.framework import load_framework
from astra_graph.framework.flatten import flatten
from astra_graph.framework.importer import DIRECT_REASON, LauncherResult, import_file
from astra_graph.framework.launchers import (
    RAW_ROOT_NOTE,
    Analysis,
    Unmapped,
    analyse,
    device_constants,
)
from astra_graph.framework.naming import FRAMEWORK_FILE
from astra_graph.framework.parse import IndexedExtent, parse_source
from astra_graph.kernel import expr
from astra_graph.kernel.catalog import set_search_dirs
from astra_graph.kernel.contract import ContractError, load_contract
from astra_graph.kernel.header import load_implementation

pytestmark = pytest.mark.usefixtures("plots_not_drawn")  # conftest.py says why

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "framework"
SUMS = FIXTURES / "csrc" / "raw_sums.cuh"
HEADER_ONLY = FIXTURES / "header_only"


@pytest.fixture(autouse=True)
def _default_search_path() -> None:
    set_search_dirs(None)


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, LauncherResult]]:
    out = tmp_path_factory.mktemp("raw_sums")
    report = import_file(SUMS, [], out)
    assert not report.compile_error, report.compile_error
    return out, {r.launcher: r for r in report.launchers}


def test_the_kernels_row_major_forms_nest_into_the_longest() -> None:
    """``in``'s two forms: the loop's four axes, and the ``sets == 1`` copy's three, which are
    the four with ``sets`` left out; ``out`` has one form. The reaches of both forms hold."""
    kernels = {k.name: k for k in parse_source(flatten(SUMS, []).text).kernels}
    summed = {e.pointer: e for e in kernels["sum_sets_kernel"].indexed}
    reaches = (("blockDim.x*kVec", "head_dim"), ("blockDim.y", "heads"))
    assert summed["in"] == IndexedExtent(
        "in", ("gridDim.x", "sets", "heads", "head_dim"), reaches, ("sets",)
    )
    assert summed["out"] == IndexedExtent("out", ("gridDim.x", "heads", "head_dim"), reaches)
    gathered = kernels["gather_sums_kernel"]
    assert "in" not in {e.pointer for e in gathered.indexed}
    assert dict(gathered.unindexed)["in"].startswith("reached at `in[rows[blockIdx.x] * d + c]`")


@pytest.mark.parametrize(
    ("uses", "why"),
    [
        (
            "out[blockIdx.x * n + threadIdx.x] = 1.f; out[threadIdx.x * m + blockIdx.x] = 0.f;",
            "its uses give row-major shapes [blockDim.x, m] and [gridDim.x, n], neither within "
            "the other",
        ),
        ("out[n * 2] = 1.f;", "reached at `out[n * 2]`, not one element or vector access"),
        ("float* p = out; p[0] = 1.f;", "reached at `out`, not one element or vector access"),
        ("out += n; out[threadIdx.x] = 1.f;", "the body may move it (assigns it"),
        ("keep(out);", "the body may move it (assigns it, takes its address or hands it"),
    ],
)
def test_a_pointer_without_one_shape_says_why(uses: str, why: str) -> None:
    source = (
        "__device__ void keep(float* p);\n"
        f"__global__ void k(float* out, unsigned n, unsigned m) {{ {uses} }}\n"
    )
    (kernel,) = parse_source(source).kernels
    assert kernel.indexed == ()
    assert dict(kernel.unindexed)["out"].startswith(why)


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_raw_launcher_no_caller_passes_tensors_is_shaped_by_its_kernel(
    imported: tuple[Path, dict[str, LauncherResult]],
) -> None:
    """``SumSets``: its integer parameters are the dims, ``in`` [tokens, sets, heads, head_dim]
    (the loop's form; the copy's needs ``sets >= 1`` to stay within it), ``out`` [tokens, heads,
    head_dim]; the head-dim dispatch is followed (one build per case, head_dim one of them), and
    the vectors' reach stays within head_dim."""
    out, results = imported
    result = results["SumSets"]
    assert result.imported, result.reason
    assert RAW_ROOT_NOTE in result.notes
    folder = out / "sum_sets"
    contract = load_contract(folder).contract
    assert {a.name: a.shape for a in contract.args} == {
        "in": ["tokens", "sets", "heads", "head_dim"],
        "out": ["tokens", "heads", "head_dim"],
    }
    assert set(contract.dims) == {"tokens", "sets", "heads", "head_dim"}
    header = load_implementation(folder / "production.cu", contract).header
    assert header.entry == "sums::sum_sets_kernel<8, T>"
    assert "((sets)) >= 1" in header.requires
    assert "(head_dim) == (64) or (head_dim) == (128)" in header.requires
    env = {"tokens": 3, "sets": 1, "heads": 4, "head_dim": 64, "elem_bytes": 2}
    assert all(expr.evaluate(r, env) for r in header.requires)
    assert not all(expr.evaluate(r, {**env, "sets": 0}) for r in header.requires)
    assert not all(expr.evaluate(r, {**env, "head_dim": 96}) for r in header.requires)
    assert expr.evaluate_dims3(header.block, env) == (8, 4, 1)
    suites = [*contract.suites.tuning, *contract.suites.heldout]
    assert suites and all(s["head_dim"] in (64, 128) for s in suites)
    assert main(["validate", str(folder)]) == 0


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_pointer_reached_at_a_row_read_from_memory_stays_refused(
    imported: tuple[Path, dict[str, LauncherResult]],
) -> None:
    result = imported[1]["GatherSums"]
    assert not result.imported
    assert result.reason == (
        f"{DIRECT_REASON}: raw pointer 'in' (kernel parameter in): reached at "
        "`in[rows[blockIdx.x] * d + c]`, not one element or vector access at a row-major index "
        "of bounded indices"
    )


@pytest.mark.usefixtures("needs_nvrtc")
def test_export_says_in_one_line_that_a_raw_pointer_is_no_torch_argument(
    imported: tuple[Path, dict[str, LauncherResult]],
) -> None:
    """The torch-facing function is the launcher itself, whose pointers torch's op schema
    cannot take: no framework.toml is written, the note says why, and export's reader says in
    one line that it is missing."""
    out, results = imported
    (note,) = (n for n in results["SumSets"].notes if FRAMEWORK_FILE in n)
    assert "parameter 'in' (T* in) is a raw pointer" in note
    folder = out / "sum_sets"
    assert not (folder / FRAMEWORK_FILE).exists()
    with pytest.raises(ContractError, match="not found") as caught:
        load_framework(folder, load_contract(folder).contract)
    assert "\n" not in str(caught.value)


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_caller_that_passes_tensors_still_comes_first(tmp_path: Path) -> None:
    """With the bindings' folder, ``FoldSets`` is imported through its binding (its caller's
    checks shape ``in`` and its dtype checks keep the 2-byte types), not directly; without it,
    the direct import is tried, and says what stops it there (``vec`` folds each element
    type's width, and no caller narrows the drafted types)."""
    header = HEADER_ONLY / "include" / "fw" / "folds.cuh"
    folders = [HEADER_ONLY / "include", HEADER_ONLY / "csrc"]
    bound = import_file(header, folders, tmp_path / "bound", only={"FoldSets"})
    (through,) = bound.launchers
    assert through.imported, through.reason
    assert RAW_ROOT_NOTE not in through.notes
    assert any("caller" in n for n in through.notes)
    alone = import_file(header, folders[:1], tmp_path / "alone", only={"FoldSets"})
    (direct,) = alone.launchers
    assert not direct.imported
    assert direct.reason.startswith(f"{DIRECT_REASON}: template argument kVec = 'vec'")


WIDE = """
template <int kWidth, typename T>
__global__ void wide_kernel(T* out, const T* in, int rows) {
  if (blockIdx.x < rows)
    out[blockIdx.x * kWidth + threadIdx.x] = in[blockIdx.x * kWidth + threadIdx.x];
}
template <typename T>
__global__ void halves_kernel(T* out, const T* in, int d) {
  out[threadIdx.x * d + blockIdx.x] = in[(blockIdx.x * 2 + 1) * d + threadIdx.x];
}
template <typename T>
void CopyWide(T* out, const T* in, int rows) { wide_kernel<64, T><<<rows, 64>>>(out, in, rows); }
template <typename T>
void CopyHalves(T* out, const T* in, int d) { halves_kernel<T><<<d, d>>>(out, in, d); }
template <typename T>
void CopyDoubled(T* out, const T* in, int rows) {
  rows = rows * 2;
  wide_kernel<64, T><<<rows, 64>>>(out, in, rows);
}
"""
"""Raw-pointer launchers no caller passes tensors to: one whose row width the launch fixes (a
template value), one whose kernel reaches ``in`` at a row that is no bounded index alone."""


def _direct(name: str) -> Analysis:
    source = parse_source(WIDE)
    launcher = next(x for x in source.launchers if x.name == name)
    device = device_constants("sm_90", (12, 4))
    return analyse(launcher, launcher.launches[0], source.kernels, {}, device, raw_root=True)


def test_an_axis_the_launch_fixes_is_a_whole_number_of_the_shape() -> None:
    analysis = _direct("CopyWide")
    assert analysis.shapes == {"out": ["rows", "64"], "in": ["rows", "64"]}
    assert analysis.dims == ["rows"]
    assert RAW_ROOT_NOTE in analysis.notes


def test_a_pointer_refused_names_its_kernel_parameter_and_why() -> None:
    """``in`` is reached at ``(blockIdx.x * 2 + 1) * d + ...``: a row that is no bounded index
    alone, so neither pointer's shape is read where any of its uses is not."""
    with pytest.raises(Unmapped) as caught:
        _direct("CopyHalves")
    assert str(caught.value) == (
        "raw pointer 'in' (kernel parameter in): reached at "
        "`in[(blockIdx.x * 2 + 1) * d + threadIdx.x]`, not one element or vector access at a "
        "row-major index of bounded indices"
    )


def test_a_parameter_assigned_before_the_launch_is_no_dim() -> None:
    """``rows = rows * 2`` before the launch: the kernel gets twice the rows the parameter's
    dim would shape its pointers by, so the launch is refused rather than drafted too small
    (review of rawroot)."""
    with pytest.raises(Unmapped, match="'rows' is assigned after its declaration"):
        _direct("CopyDoubled")


DOUBLED = """
template <typename T>
__global__ void pairs_kernel(T* out, const T* in, int d) {
  if (threadIdx.x < 2 * d)
    out[blockIdx.x * (2 * d) + threadIdx.x] = in[blockIdx.x * (2 * d) + threadIdx.x];
}
template <typename T>
void CopyPairs(T* out, const T* in, int rows, int d) {
  pairs_kernel<T><<<rows, 2 * d>>>(out, in, d);
}
"""


def test_a_row_twice_a_parameter_is_an_axis_of_that_expression() -> None:
    """``blockIdx.x * (2 * d)``: the row holds ``2 * d`` elements; required equal to ``d`` it
    would be met by no shape, and the import refused as never launched (review of rawroot)."""
    source = parse_source(DOUBLED)
    (launcher,) = source.launchers
    device = device_constants("sm_90", (12, 4))
    analysis = analyse(launcher, launcher.launches[0], source.kernels, {}, device, raw_root=True)
    assert analysis.shapes["out"] == ["rows", "2 * d"]
    assert not any("== d" in r for r in analysis.requires)
