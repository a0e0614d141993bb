"""``astra import`` on the GPU: imported operations checked against themselves, the original as
the oracle, and a wrong candidate rejected by it.

The framework-style fixtures (tests/fixtures/framework/csrc) are imported into a temporary
folder; every operation that came in must be accepted when its original kernel is both the
candidate and the baseline, its reference being that same original run at its most precise
dispatched type. A copy whose output is scaled by 1.01 must be rejected: the oracle can fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.harness.evaluator import Evaluator
from astra_graph.kernel.contract import load_contract

pytestmark = pytest.mark.gpu

CSRC = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc"
CHECK_DEADLINE_S = 240
"""An imported kernel compiles up to four instantiations per check; generous on a cold cache."""


IMPORTED = {
    "activation.cu": ("silu_and_mul", "mul_and_silu"),
    "layernorm.cu": ("fused_add_rms_norm", "scale_rows", "copy_rows"),
    "launch_calls.cu": (
        "scale_rows",
        "shift_rows",
        "shift_rows_helper",
        "scale_either_1",
        "scale_either_2",
        "scale_raw",
    ),
    "vec_path.cu": ("scale_by_two_1", "scale_by_two_2"),
    "switch_dispatch.cu": ("halve",),
    "quant.cu": ("masked_copy_1", "masked_copy_2"),
    "partial_rotary.cu": ("partial_rotary",),
    "head_reach.cu": ("head_rotate",),
    "params_struct.cu": (
        "run",
        "run_positional",
        "run_selected_1",
        "run_selected_2",
        "gather_1",
        "gather_2",
    ),
    "resident.cu": ("resident_scale", "resident_scale_helpers"),
    "strided_twins.cu": ("twin_add_norm", "twin_rope", "bounded_merge"),
    "host_branches.cu": (
        "rotate_heads",
        "small_or_large_copy_1",
        "recorded_copy",
        "maybe_scaled_copy_1",
        "maybe_scaled_copy_2",
        "split_double",
        "split_increment",
    ),
    "caller_types.cu": ("scale_bits_launcher", "scale_bits_direct_launcher"),
    "head_dim_dispatch.cu": ("scale_heads",),
    "moved_heads.cu": ("run", "run_1", "run_2"),
    "asserted_rows.cu": ("run",),
    "looped_sizes.cu": ("run", "run_104", "scale_rows_256"),
    "branch_values.cu": ("ranked_copy", "headed_copy"),
    "bound_store.cu": ("run_1", "run_2"),
    "aligned_cache.cu": ("vector_cache", "scalar_cache"),
    "asserted_lanes.cu": ("run",),
    "raw_sums.cuh": ("sum_sets",),
    "csr_sums.cuh": ("csr_sum", "csr_sum_capped", "csr_weighted", "csr_staged"),
    "whole_vectors.cu": ("scale_rotated", "copy_heads"),
}
"""Every operation each fixture file imports (tests/test_framework_import.py,
test_framework_structs.py, test_framework_occupancy.py, test_framework_strided_twin.py,
test_framework_host_branches.py and test_framework_instantiations.py assert the same lists on the
CPU): launch forms, host-chosen kernels, by-value ``Params`` structs, grids sized by the occupancy
query, tensors asked only strides of (drafted as their twins, or sized by the kernel's bounded
strided indices), a width a failing branch bounds by the head size, and element types a caller's
dispatch spells its own way, a kernel built per head size as its launcher's size dispatch builds
it, tensors passed at a moved address (test_framework_moved.py), a domain its launcher class's
static_assert bounds (test_framework_symbolic.py), a head count an if/else chain on the
input's rank sets, sizes a looping constexpr helper computes and a params struct nesting another
(test_framework_looped.py), and a float table beside half tensors in a nested struct unpacked by
structured bindings, its slots stored through a helper (test_framework_bound.py), and a float4
cache read whose row width the import keeps a multiple of 8 (test_framework_vectors.py), and a
kernel whose own static_assert bounds the widths it builds for (test_framework_kernel_asserts.py),
and a raw-pointer launcher no caller passes tensors to, its tensors shaped by its kernel's own
row-major indices (test_framework_raw_launchers.py), and persistent raw-pointer launchers over
CSR segments, their count pointer passed null and their offsets drawn into a dim of their own
(test_framework_csr.py), and vectors a thread tests by their first element, kept whole, and
copies at offsets a helper returns, kept aligned (test_framework_whole_vectors.py), each
launched for real here."""


def _header_only(name: str, out: Path) -> None:
    """Import fixtures/framework/header_only's include/fw/<name> with its include folders."""
    base = CSRC.parent / "header_only"
    folders = ["--include", str(base / "include"), "--include", str(base / "csrc")]
    assert main(["import", str(base / "include" / "fw" / name), *folders, "--out", str(out)]) == 0


def _variant(production: Path, old: str, new: str, out: Path) -> Path:
    """A copy of ``production`` with ``old`` (which it holds) written as ``new``, at ``out``."""
    source = production.read_text()
    changed = source.replace(old, new)
    assert changed != source
    out.write_text(changed)
    return out


class _Imports:
    """Each fixture file of :data:`IMPORTED` imported under one folder on first use
    (``imported / source``): a run of a few tests imports only their files."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def __truediv__(self, source: str) -> Path:
        folder = self.out / source
        marker = folder / ".imported"
        if not marker.is_file():  # an import that failed is tried again, and fails here
            assert main(["import", str(CSRC / source), "--out", str(folder)]) == 0
            marker.touch()
        return folder


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> _Imports:
    return _Imports(tmp_path_factory.mktemp("imported"))


@pytest.mark.parametrize(
    ("source", "op"), [(source, op) for source, ops in IMPORTED.items() for op in ops]
)
def test_an_imported_operation_is_accepted_against_itself(
    imported: _Imports, source: str, op: str
) -> None:
    folder = imported / source / op
    spec = load_contract(folder)
    production = folder / "production.cu"
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        verdict = evaluator.check(spec, production, production)
    assert verdict.accepted, f"{verdict.message} {verdict.evidence}"


@pytest.mark.parametrize(
    ("op", "split", "accepted"), [("split_double", 4, True), ("split_increment", 2, False)]
)
def test_a_grid_tunable_value_is_kept_only_where_the_original_agrees(
    imported: _Imports, op: str, split: int, accepted: bool
) -> None:
    """A grid dimension the launcher sets at run time is a tunable of the import (SPLIT): a
    kernel that spreads a row over gridDim.y is right at a split of 4; one whose every block
    walks the whole row in place adds twice at a split of 2, and the oracle (the original at
    the default split, 1) rejects it, so the tuner can never keep that value."""
    folder = imported / "host_branches.cu" / op
    spec = load_contract(folder)
    production = folder / "production.cu"
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        verdict = evaluator.check(spec, production, production, tunables={"SPLIT": split})
    assert verdict.accepted is accepted, f"{verdict.message} {verdict.evidence}"


def test_a_cpp20_jit_operation_is_accepted_against_itself(tmp_path: Path) -> None:
    """fixtures/framework/jit/act.cuh imported at its build's C++20 (SGLang's JIT kernels'
    standard, kept in the header): compiled again from production.cu by the harness at that
    standard, with CUDA_VERSION as nvcc defines it (the other path leaves elements unwritten)."""
    jit = CSRC.parent / "jit" / "act.cuh"
    assert main(["import", str(jit), "--std", "c++20", "--out", str(tmp_path)]) == 0
    spec = load_contract(tmp_path / "run")
    production = tmp_path / "run" / "production.cu"
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        verdict = evaluator.check(spec, production, production)
    assert verdict.accepted, f"{verdict.message} {verdict.evidence}"


@pytest.mark.parametrize("op", ["run_gather_1", "run_gather_2"])
def test_an_index_type_a_template_lambda_binds_is_accepted_against_itself(
    tmp_path: Path, op: str
) -> None:
    """fixtures/framework/csrc/symbolic_sizes.cu's gather, one operation per index type its
    lambda is instantiated with (int64, int32), its table's `-1` rows a dim of their own: the
    row ids drawn below every tensor's rows are read within the table."""
    assert main(["import", str(CSRC / "symbolic_sizes.cu"), "--out", str(tmp_path)]) == 0
    spec = load_contract(tmp_path / op)
    production = tmp_path / op / "production.cu"
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        verdict = evaluator.check(spec, production, production)
    assert verdict.accepted, f"{verdict.message} {verdict.evidence}"


def test_slots_drawn_distinct_give_one_writer_a_row_and_a_wrong_store_is_caught(
    tmp_path: Path,
) -> None:
    """fixtures/framework/csrc/slot_store.cu: a store whose slot mapping places each token's row
    (drawn with no two alike, so no two blocks write one row) is accepted against itself per
    index type, the read-only gather beside it too; a store that puts the last token's row one
    slot off is rejected."""
    assert main(["import", str(CSRC / "slot_store.cu"), "--out", str(tmp_path)]) == 0
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        for op in ("run_store_1", "run_store_2", "run_gather"):
            production = tmp_path / op / "production.cu"
            verdict = evaluator.check(load_contract(tmp_path / op), production, production)
            assert verdict.accepted, f"{op}: {verdict.message} {verdict.evidence}"
        production = tmp_path / "run_store_1" / "production.cu"
        source = production.read_text()
        shifted = source.replace(
            "float* row = key_cache + slot * width;",
            "float* row = key_cache + (token + 1 == gridDim.x && slot > 0 ? slot - 1 : slot) "
            "* width;",
        )
        assert shifted != source
        wrong = tmp_path / "wrong.cu"
        wrong.write_text(shifted)
        spec = load_contract(tmp_path / "run_store_1")
        assert not evaluator.check(spec, production, wrong).accepted


def test_csr_segments_are_walked_within_their_rows_and_a_wrong_walk_is_caught(
    tmp_path: Path,
) -> None:
    """fixtures/framework/header_only's SegmentScale: offsets drawn from 0 to the rows, empty
    segments among them, walked by the original within x and out (accepted against itself); a
    walk that stops one row short of each segment is rejected."""
    _header_only("segments.cuh", tmp_path)
    folder = tmp_path / "segment_scale"
    spec = load_contract(folder)
    production = folder / "production.cu"
    wrong = _variant(
        production,
        "const uint32_t rows = indptr[b + 1] - indptr[b];",
        "const uint32_t rows = indptr[b + 1] - indptr[b] - (indptr[b + 1] > indptr[b] ? 1 : 0);",
        tmp_path / "short.cu",
    )
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        verdict = evaluator.check(spec, production, production)
        assert verdict.accepted, f"{verdict.message} {verdict.evidence}"
        assert not evaluator.check(spec, production, wrong).accepted


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # the loop stops one row short of each segment of two rows or more
        ("for (uint32_t k = 0; k < count; ++k) {", "for (uint32_t k = 0; k + 1 < count; ++k) {"),
        # a segment of one row is left at zero
        (
            "if (count == 1) {\n      sum.cast_load(",
            "if (count == 1) {\n      if (count == 0) sum.cast_load(",
        ),
    ],
)
def test_csr_raw_segments_run_null_counted_on_the_occupancy_grid_and_a_wrong_sum_is_caught(
    imported: _Imports, tmp_path: Path, old: str, new: str
) -> None:
    """fixtures/framework/csrc/csr_sums.cuh's CsrSum, imported directly: ``count_ptr`` passed
    null, the grid CUDA's occupancy answer times the SMs, offsets drawn with segments of 0, 1
    and more rows. A sum that skips each segment's last row, or leaves single-row segments at
    zero, is rejected: the draws reach every branch of the kernel."""
    _assert_variant_rejected(imported / "csr_sums.cuh" / "csr_sum", old, new, tmp_path)


def _assert_variant_rejected(folder: Path, old: str, new: str, tmp_path: Path) -> None:
    """The imported operation in ``folder`` rejects its original with ``old`` made ``new``."""
    production = folder / "production.cu"
    wrong = _variant(production, old, new, tmp_path / "wrong.cu")
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        assert not evaluator.check(load_contract(folder), production, wrong).accepted


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # each lane's share leaves out the segment's last weight
        ("share += k < count ?", "share += k + 1 < count ?"),
        # the inner loop cut to one element: a lane sums only its first
        (
            "for (uint32_t i = 0; i < kVec; ++i) sum.v[i]",
            "for (uint32_t j = 0; j < 1; ++j) sum.v[j]",
        ),
    ],
)
def test_csr_weighted_segments_read_their_weights_in_chunks_and_a_wrong_share_is_caught(
    imported: _Imports, tmp_path: Path, old: str, new: str
) -> None:
    """fixtures/framework/csrc/csr_sums.cuh's CsrWeighted, imported directly (its count
    handed to a by-value helper, ``i`` and ``k`` declared again in inner scopes): it runs
    within its shapes, and a share that drops a weight, or a sum of one element, is
    rejected."""
    _assert_variant_rejected(imported / "csr_sums.cuh" / "csr_weighted", old, new, tmp_path)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # the copy's guard stops one row short: each segment's last row is never staged
        ("chunk * kRows + row < count);", "chunk * kRows + row + 1 < count);"),
        # the sum leaves out the rows staged by all but the first row of threads
        ("for (uint32_t r = 1; r < kRows; ++r) {", "for (uint32_t r = 1; r < 1; ++r) {"),
    ],
)
def test_csr_rows_staged_by_a_guarded_async_copy_run_and_a_wrong_sum_is_caught(
    imported: _Imports, tmp_path: Path, old: str, new: str
) -> None:
    """fixtures/framework/csrc/csr_sums.cuh's CsrStaged, imported directly: ``parts`` read
    only through ``guarded_copy`` (a cp.async predicated in PTX on the guard it is handed, one
    or two 16-byte copies as the dtype makes ``bits``), the row bounded by that guard. It runs
    within its shapes; a guard that skips each segment's last row, or a sum of one row of
    threads, is rejected."""
    _assert_variant_rejected(imported / "csr_sums.cuh" / "csr_staged", old, new, tmp_path)


def test_outputs_shaped_by_their_indices_are_written_whole_and_a_short_fold_is_caught(
    tmp_path: Path,
) -> None:
    """fixtures/framework/header_only's FoldSets and FoldSetsWide: outputs no binding sizes,
    shaped from the kernels' row-major indices, are accepted against themselves (the original
    writes within them at every drawn shape); a fold that skips the last set is rejected."""
    _header_only("folds.cuh", tmp_path)
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        for op in ("fold_sets", "fold_sets_wide"):
            production = tmp_path / op / "production.cu"
            verdict = evaluator.check(load_contract(tmp_path / op), production, production)
            assert verdict.accepted, f"{op}: {verdict.message} {verdict.evidence}"
        production = tmp_path / "fold_sets" / "production.cu"
        wrong = _variant(
            production,
            "for (uint32_t s = 0; s < sets; ++s) {\n    lanes<T, kVec> part;\n    part.load(in "
            "+ ((pos * sets + s) * heads + head) * head_dim",
            "for (uint32_t s = 0; s + 1 < sets; ++s) {\n    lanes<T, kVec> part;\n    "
            "part.load(in + ((pos * sets + s) * heads + head) * head_dim",
            tmp_path / "short.cu",
        )
        spec = load_contract(tmp_path / "fold_sets")
        assert not evaluator.check(spec, production, wrong).accepted


def test_the_oracle_rejects_a_wrong_candidate(imported: _Imports, tmp_path: Path) -> None:
    spec = load_contract(imported / "layernorm.cu" / "fused_add_rms_norm")
    production = imported / "layernorm.cu" / "fused_add_rms_norm" / "production.cu"
    source = production.read_text()
    scaled = source.replace(
        "static_cast<scalar_t>(x * s_variance) * weight[idx]",
        "static_cast<scalar_t>(x * s_variance * 1.01f) * weight[idx]",
    )
    assert scaled != source
    wrong = tmp_path / "wrong.cu"
    wrong.write_text(scaled)
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        verdict = evaluator.check(spec, production, wrong)
    assert not verdict.accepted


def test_a_params_struct_reaches_the_kernel_field_by_field(imported: _Imports) -> None:
    """The by-value ``Params`` (two pointers, an int64 stride, a uint32 and a float) packed with
    the C++ layout: the kernel scales each row by the float field with the stride field's
    width; a wrong offset would scale by garbage, stride by garbage or write elsewhere."""
    import cupy
    import numpy as np

    from astra_graph.harness.cases import Case
    from astra_graph.harness.launch import load_kernel, synchronize
    from astra_graph.kernel.header import load_implementation

    folder = imported / "params_struct.cu" / "run"
    spec = load_contract(folder)
    kernel = load_kernel(
        spec, load_implementation(folder / "production.cu", spec.contract), "float32"
    )
    rng = np.random.default_rng(3)
    rows, cols = 37, 1000
    source = rng.normal(size=(rows, cols)).astype(np.float32)
    arrays = {"in": cupy.asarray(source), "out": cupy.full((rows, cols), np.nan, dtype=np.float32)}
    kernel.launch(Case({"rows": rows, "cols": cols}, "float32", arrays, {"scale": 1.5}))
    synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(arrays["out"]), source * np.float32(1.5))


def test_a_launch_followed_through_a_relay_runs_within_its_callers_shapes(tmp_path: Path) -> None:
    """fixtures/framework/csrc/relayed_rows.cuh's ``launch_kernel``, reached through a dtype
    macro and a relay of raw pointers from ``run``: the shapes ``run``'s checks give (``out`` and
    the optional ``bias`` as ``[rows, width]``, ``idx`` drawn below the table's rows) hold the
    original's reads and writes, at each type the macro's calls instantiate (float and half)."""
    assert main(["import", str(CSRC / "relayed_rows.cuh"), "--out", str(tmp_path)]) == 0
    spec = load_contract(tmp_path / "launch_kernel")
    production = tmp_path / "launch_kernel" / "production.cu"
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        verdict = evaluator.check(spec, production, production)
    assert verdict.accepted, f"{verdict.message} {verdict.evidence}"


@pytest.mark.parametrize("op", ["gather_rows", "merge_rows"])
def test_a_tensor_sized_by_the_kernels_reach_runs_within_it(tmp_path: Path, op: str) -> None:
    """fixtures/framework/header_only's GatherRows and MergeRows: tensors no binding check
    sizes take the extent the kernel shows (``pos_ids[idx]`` under ``idx < n``, ``scale[0]``,
    ``out`` reached where ``a`` is), and MergeRows' oracle runs at float16 (its float32 block
    is over CUDA's limit). The original, run against itself, stays inside them: an extent too
    small would fault or read the allocator's bytes, and the self-check would fail."""
    base = CSRC.parent / "header_only"
    header = base / "include" / "fw" / "rows.cuh"
    folders = ["--include", str(base / "include"), "--include", str(base / "csrc")]
    assert main(["import", str(header), *folders, "--out", str(tmp_path)]) == 0
    spec = load_contract(tmp_path / op)
    production = tmp_path / op / "production.cu"
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        verdict = evaluator.check(spec, production, production)
    assert verdict.accepted, f"{verdict.message} {verdict.evidence}"


def test_an_unchecked_struct_field_runs_within_its_read_extent(tmp_path: Path) -> None:
    """fixtures/framework/csrc/routed_rows.cuh: ``ids``, a struct field no binding checks, takes
    the extent of the kernel's ``params.ids[row / params.step]`` below ``rows``, one id a row at
    any step; the original, run against itself at the suites' steps, stays inside it."""
    main(["import", str(CSRC / "routed_rows.cuh"), "--out", str(tmp_path)])
    spec = load_contract(tmp_path / "launch")
    production = tmp_path / "launch" / "production.cu"
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        verdict = evaluator.check(spec, production, production)
    assert verdict.accepted, f"{verdict.message} {verdict.evidence}"


def test_free_rows_of_a_table_read_at_ids_hold_the_reads_and_a_wrong_row_is_caught(
    tmp_path: Path,
) -> None:
    """fixtures/framework/free_rows' Rotate: its cos/sin table, checked by no binding and read
    only at rows the positions name, has rows of its own (tests/test_framework_free_rows.py),
    the positions drawn below them; the original, run against itself, stays inside it. A
    candidate that reads a row the ids do not name once they pass 7 (wrong only in the upper
    rows, past the token counts) is rejected."""
    base = CSRC.parent / "free_rows"
    header = base / "include" / "fr" / "tables.cuh"
    folders = ["--include", str(base / "include"), "--include", str(base / "csrc")]
    assert main(["import", str(header), *folders, "--out", str(tmp_path)]) == 0
    spec = load_contract(tmp_path / "rotate")
    production = tmp_path / "rotate" / "production.cu"
    wrong = _variant(
        production,
        "const float c = table[pos * rot + j];",
        "const float c = table[(pos > 7 ? pos - 1 : pos) * rot + j];",
        tmp_path / "wrong_row.cu",
    )
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        verdict = evaluator.check(spec, production, production)
        assert verdict.accepted, f"{verdict.message} {verdict.evidence}"
        assert not evaluator.check(spec, production, wrong).accepted


def test_rank_branch_forms_each_hold_the_original_and_catch_a_wrong_head(
    tmp_path: Path,
) -> None:
    """fixtures/framework/rank_branch's scale_qk: one operation per rank of its key (a 2-D key
    of one shared head, a 3-D one of heads of its own: tests/test_framework_rank_branch.py),
    and scale_heads, whose q's last axis is read counted from the end. Each original, run
    against itself, holds; a candidate that reads the 3-D key's first head for every head is
    rejected by the 3-D form."""
    base = CSRC.parent / "rank_branch"
    header = base / "include" / "rb" / "heads.cuh"
    folders = ["--include", str(base / "include"), "--include", str(base / "csrc")]
    assert main(["import", str(header), *folders, "--out", str(tmp_path)]) == 0
    ops = ("scale_heads", "scale_qk_k_2d", "scale_qk_k_3d")
    production = {op: tmp_path / op / "production.cu" for op in ops}
    wrong = _variant(
        production["scale_qk_k_3d"],
        "k[token * k_stride_n + head * k_stride_h + j]",
        "k[token * k_stride_n + j]",
        tmp_path / "first_head.cu",
    )
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        for op in ops:
            verdict = evaluator.check(load_contract(tmp_path / op), production[op], production[op])
            assert verdict.accepted, f"{op}: {verdict.message} {verdict.evidence}"
        spec = load_contract(tmp_path / "scale_qk_k_3d")
        assert not evaluator.check(spec, production["scale_qk_k_3d"], wrong).accepted


def test_the_occupancy_query_is_cudas_answer_for_the_loaded_kernel(imported: _Imports) -> None:
    """``blocks_per_sm`` in a grid is asked of CUDA for the compiled kernel: at least one block
    and never above the thread, block and shared-memory limits (registers only lower it)."""
    from astra_graph.harness.launch import LoadedKernel, load_kernel
    from astra_graph.kernel import occupancy
    from astra_graph.kernel.header import load_implementation

    folder = imported / "resident.cu" / "resident_scale"
    spec = load_contract(folder)
    kernel = load_kernel(
        spec, load_implementation(folder / "production.cu", spec.contract), "float16"
    )
    assert isinstance(kernel, LoadedKernel)  # no specialization: one instantiation
    for threads, smem in ((256, 0), (1024, 0), (128, 64 * 1024)):
        answer = kernel.blocks_per_sm(threads, smem)
        assert 1 <= answer <= occupancy.estimated_blocks(threads, smem), (threads, smem, answer)
    grid, block, _ = kernel.geometry({"rows": 1 << 20, "cols": 64})
    assert grid[0] == kernel.blocks_per_sm(256, 0) * _sm_count() and block == (256, 1, 1)


def _sm_count() -> int:
    import cupy

    return int(cupy.cuda.Device().attributes["MultiProcessorCount"])
