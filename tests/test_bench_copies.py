"""The bench's re-check of the copies timed between the first and the last (NumPy arrays stand in
for CuPy's: the comparison is plain array arithmetic).

Those copies are clones of the first (the same inputs), so a correct, deterministic kernel leaves
each with exactly the first copy's outputs; a kernel that recognises the clones and skips or
shortens the work there must be found, although only the first and last copies have their own
float64 reference.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from astra_graph.harness.bench import _Side
from astra_graph.kernel.catalog import kernels_root
from astra_graph.kernel.contract import load_contract

SPEC = load_contract(kernels_root() / "silu_and_mul")
TOKENS, D, PAD = 4, 8, 8  # rows padded as the allocator would: padding differs per copy


def side_with(out_rows: np.ndarray) -> _Side:
    side = _Side(None, SPEC)
    copies = out_rows.shape[0]
    rng = np.random.default_rng(5)
    out = np.concatenate([out_rows, rng.random((copies, PAD), dtype=np.float32)], axis=1)
    side.batches = {
        "out": out.astype(np.float16),
        "x": np.ones((copies, 2 * TOKENS * D), np.float16),
    }
    arrays = {"out": np.zeros((TOKENS, D), np.float16), "x": np.zeros((TOKENS, 2 * D), np.float16)}
    side.cases = [SimpleNamespace(arrays=arrays) for _ in range(copies)]
    return side


def test_clones_equal_to_the_first_copy_pass_and_padding_is_ignored() -> None:
    rng = np.random.default_rng(1)
    first = rng.standard_normal(TOKENS * D).astype(np.float32)
    rows = np.stack([first] * 5 + [rng.standard_normal(TOKENS * D).astype(np.float32)])
    assert side_with(rows).first_unlike_clone() is None  # the last copy has its own inputs


def test_the_first_clone_left_unlike_the_first_copy_is_named() -> None:
    rng = np.random.default_rng(2)
    first = rng.standard_normal(TOKENS * D).astype(np.float32)
    rows = np.stack([first] * 6)
    rows[3, 17] += 1.0  # copy 3 skipped part of its work
    rows[4, 0] = np.nan
    assert side_with(rows).first_unlike_clone() == 3


def test_two_copies_have_no_clones() -> None:
    rows = np.stack([np.ones(TOKENS * D, np.float32), np.zeros(TOKENS * D, np.float32)])
    assert side_with(rows).first_unlike_clone() is None


def test_every_timed_sample_must_leave_the_same_outputs() -> None:
    from contextlib import nullcontext

    rng = np.random.default_rng(3)
    first = rng.standard_normal(TOKENS * D).astype(np.float32)
    rows = np.stack([first] * 3)
    side = side_with(rows)
    for _ in range(4):
        side.fingerprint(nullcontext())
    assert side.first_unlike_sample() is None
    # a sample that skipped a row: its poison (a NaN) stayed in one element
    side.batches["out"][1, 5] = np.float16("nan")
    side.fingerprint(nullcontext())
    side.batches["out"][1, 5] = side.batches["out"][0, 5]
    side.fingerprint(nullcontext())
    assert side.first_unlike_sample() == (4, 6)


def test_padding_never_enters_a_fingerprint() -> None:
    from contextlib import nullcontext

    side = side_with(np.stack([np.ones(TOKENS * D, np.float32)] * 3))
    side.fingerprint(nullcontext())
    side.batches["out"][:, TOKENS * D :] = np.float16("nan")  # a fresh poison in the padding
    side.fingerprint(nullcontext())
    assert side.first_unlike_sample() is None
