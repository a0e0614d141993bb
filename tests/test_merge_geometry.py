"""The merge kernels' launch geometry, read from their headers without a GPU (issue 25).

The production kernel's default setting must launch FlashInfer's MergeState grid above 256
tokens wherever FlashInfer can run (one block per token, head_dim / 8 x heads threads), where
that launch tied or beat FlashInfer's kernel, and 128-thread blocks at decode (up to 256 tokens),
where the H100 sweep of row counts found 128-256-thread blocks faster than a block per token;
beyond FlashInfer's 1024 threads a token it must still cover every row and column with no idle
vector lanes; and the naive kernel's default must stay one scalar element per thread (its
tunables only open other settings to the tuner).
"""

from __future__ import annotations

import math
from pathlib import Path

from astra_graph.kernel.contract import load_contract
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import ImplementationHeader, load_implementation

ROOT = Path(__file__).resolve().parents[1]
SPEC = load_contract(ROOT / "kernels" / "merge_attn_states_lse")
SHAPES = [d for suite in ("tuning", "heldout", "edge") for d in SPEC.contract.suite(suite)]
WIDE = {"tokens": 300, "heads": 64, "head_dim": 256}  # 2048 threads a token in FlashInfer's launch
DECODE_TOKENS = 256  # production.cu's header: at most this many tokens get decode blocks
DECODE_BLOCK_THREADS = 128  # production.cu's header: the decode block size


def _header(path: Path) -> ImplementationHeader:
    return load_implementation(path, SPEC.contract).header


def test_production_default_is_flashinfers_grid_above_decode_where_flashinfer_runs() -> None:
    production = _header(SPEC.folder / "production.cu")
    anchor = _header(ROOT / "benchmarks" / "anchors" / "flashinfer" / "merge_attn_states_lse.cu")
    compared = 0
    for dtype in SPEC.contract.dtypes:
        for dims in SHAPES:
            if dims["tokens"] <= DECODE_TOKENS:
                continue
            if anchor.unmet_requirement(dims, DTYPES[dtype], {}) is not None:
                continue
            ours = production.launch(dims, DTYPES[dtype], {})[:2]
            assert ours == anchor.launch(dims, DTYPES[dtype], {})[:2], dims
            compared += 1
    assert compared >= 2 * 5  # the five prefill shapes of the tuning suite at least


def test_production_default_uses_small_blocks_at_decode() -> None:
    production = _header(SPEC.folder / "production.cu")
    decode = [d for d in SHAPES if d["tokens"] <= DECODE_TOKENS]
    assert len(decode) >= 8
    for dims in decode:
        (grid, _, _), (width, height, _), _ = production.launch(dims, DTYPES["float16"], {})
        assert width == dims["head_dim"] // 8, dims
        # as many rows as make 128 threads, one row where a row alone is wider
        assert height == max(1, DECODE_BLOCK_THREADS // width), dims
        assert grid == math.ceil(dims["tokens"] * dims["heads"] / height), dims
    # at 1x32x128 that is 4 blocks of 8 heads where FlashInfer launches one block of 32
    (grid, _, _), block, _ = production.launch(
        {"tokens": 1, "heads": 32, "head_dim": 128}, DTYPES["bfloat16"], {}
    )
    assert (grid, block) == (4, (16, 8, 1))


def test_every_production_setting_covers_each_row_and_column_once() -> None:
    production = _header(SPEC.folder / "production.cu")
    for dims in [*SHAPES, WIDE]:
        rows, head_dim = dims["tokens"] * dims["heads"], dims["head_dim"]
        for setting in production.configurations():
            (grid, _, _), (width, height, _), _ = production.launch(
                dims, DTYPES["bfloat16"], setting
            )
            assert width * height <= 1024, (dims, setting)
            # rows: enough blocks, and less than one block of spare rows
            assert rows <= grid * height < rows + height, (dims, setting)
            # columns: each thread VECS vectors of 8, the last thread at least one
            span = 8 * setting["VECS"]
            assert (width - 1) * span < head_dim <= width * span, (dims, setting)


def test_production_splits_a_token_wider_than_a_block() -> None:
    production = _header(SPEC.folder / "production.cu")
    (grid, _, _), block, _ = production.launch(WIDE, DTYPES["float16"], {})
    assert block == (32, 32, 1) and grid == 300 * 64 // 32


def test_naive_default_is_one_scalar_element_per_thread() -> None:
    naive = _header(SPEC.folder / "naive.cu")
    assert naive.default_tunables() == {"BLOCK": 256, "VEC": 1}
    assert 8 in naive.tunables["VEC"]  # a 16-byte access is within the tuner's reach
    dims = {"tokens": 2048, "heads": 32, "head_dim": 128}
    (grid, _, _), block, _ = naive.launch(dims, DTYPES["float16"], {})
    assert block == (256, 1, 1) and grid == min(math.prod(dims.values()) // 256, 65536)
