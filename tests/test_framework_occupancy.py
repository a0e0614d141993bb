"""Grids sized by CUDA's occupancy query (``blocks_per_sm``), on the CPU.

Persistent framework launchers ask CUDA how many blocks of the launched kernel fit a
multiprocessor (FlashInfer's QKRMSNorm through ``cudaOccupancyMaxActiveBlocksPerMultiprocessor``'s
address argument, SGLang's RMSNorm through ``runtime::get_blocks_per_sm``). The fixture
``resident.cu`` was written for these tests in both styles; its GPU twin is in
test_import_gpu.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.kernel import expr, occupancy
from astra_graph.kernel.contract import load_contract
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import load_implementation

# conftest.py says why
pytestmark = pytest.mark.usefixtures("plots_not_drawn", "default_search_path")

RESIDENT = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "resident.cu"


def test_the_estimate_is_the_per_multiprocessor_limits_without_registers() -> None:
    assert occupancy.estimated_blocks(256, 0) == 8  # 2048 threads
    assert occupancy.estimated_blocks(32, 0) == 32  # 32 blocks
    assert occupancy.estimated_blocks(33, 0) == 32  # two warps a block: 64 by threads, 32 cap
    assert occupancy.estimated_blocks(1024, 0) == 2
    assert occupancy.estimated_blocks(128, 100 * 1024) == 2  # 228 KB over 101 KB a block
    assert occupancy.estimated_blocks(2048, 0) == 0  # no such block


def test_a_bound_answer_replaces_the_estimate_only_inside_its_block() -> None:
    grid = "min(rows, blocks_per_sm(256, 0) * sm_count)"
    env = {"rows": 10_000, "sm_count": 132}
    assert expr.evaluate_int(grid, env) == 8 * 132
    with occupancy.answered_by(lambda threads, smem: 3):
        assert expr.evaluate_int(grid, env) == 3 * 132
    assert expr.evaluate_int(grid, env) == 8 * 132


def test_both_query_styles_import_and_a_query_of_another_kernel_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(RESIDENT), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 of 3 launch sites imported" in out
    assert "asks about 'fw::idle_kernel<scalar_t>', not the launched kernel" in out
    for op, threads in (("resident_scale", 256), ("resident_scale_helpers", 128)):
        spec = load_contract(tmp_path / op)
        header = load_implementation(tmp_path / op / "production.cu", spec.contract).header
        assert "blocks_per_sm(" in header.grid and "sm_count" in header.grid, header.grid
        # the block read through the constexpr function warps_to_threads<4>()
        assert expr.evaluate_dims3(header.block, {}) == (threads, 1, 1)
        asked: list[tuple[int, int]] = []

        def answer(threads: int, smem: int, asked: list[tuple[int, int]] = asked) -> int:
            asked.append((threads, smem))
            return 2

        with occupancy.answered_by(answer):
            grid, block, _ = header.launch({"rows": 100_000, "cols": 64}, DTYPES["float16"], {})
        assert asked == [(threads, 0)]  # asked at the launch's own block
        assert grid == (2 * 132, 1, 1) and block == (threads, 1, 1)
        grid, _, _ = header.launch({"rows": 5, "cols": 64}, DTYPES["float16"], {})
        assert grid == (5, 1, 1)  # fewer rows than resident blocks
        assert main(["validate", str(tmp_path / op)]) == 0


def test_an_export_of_a_grid_that_reads_the_gpu_is_refused_in_one_line(tmp_path: Path) -> None:
    # the exported package binds only dims, tunables and elem_bytes: a grid of blocks_per_sm
    # and sm_count would fail in the serving process, so the export says so instead
    from astra_graph.export.dispatch_source import ExportError, render

    assert main(["import", str(RESIDENT), "--out", str(tmp_path)]) == 0
    spec = load_contract(tmp_path / "resident_scale")
    impl = load_implementation(tmp_path / "resident_scale" / "production.cu", spec.contract)
    with pytest.raises(ExportError, match=r"header\.grid .* reads .blocks_per_sm."):
        render(spec, impl, None, arch="sm_90", kernels={}, run_id="r")


def test_sizes_the_import_must_not_misread_are_refused_or_read_in_their_own_scope(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the review's cases (resident_traps.cu): each refused with its reason, or read right
    traps = RESIDENT.parent / "resident_traps.cu"
    assert main(["import", str(traps), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 of 5 launch sites imported" in out
    # an occupancy query about another namespace's kernel, or another instantiation
    assert "asks about 'other::rows_kernel<scalar_t>', not the launched kernel" in out
    assert "asks about 'fw::rows_kernel<double>', not the launched kernel" in out
    # `int threads = 256; if (cols < 256) threads = 64;`: the initialiser is the value only on
    # the path that skips the `if`, read as the launch at cols >= 256 (the one serving takes)
    reassigned = load_implementation(
        tmp_path / "reassigned" / "production.cu", load_contract(tmp_path / "reassigned").contract
    )
    assert expr.evaluate_dims3(reassigned.header.block, {}) == (256, 1, 1)
    assert "((cols) < 256) == 0" in reassigned.header.requires
    # threads_for<T>() has a specialisation for float: two definitions, neither read
    assert "call 'fw::threads_for<float>()' in a size expression" in out
    # fw::inner::block_threads() returns inner::kBlock (128), not fw::kBlock nor the local 64
    spec = load_contract(tmp_path / "scoped_constant")
    impl = load_implementation(tmp_path / "scoped_constant" / "production.cu", spec.contract)
    assert expr.evaluate_dims3(impl.header.block, {}) == (128, 1, 1), impl.header.block
