"""The bench's checks of what the timed calls left (NumPy arrays stand in for CuPy's: the
comparisons are plain array arithmetic).

Every copy has its own inputs and the copies alternate between input sets from one sample to the
next, so a kernel that replays what it computed for a buffer writes the other set's answer: the
fingerprints of every sample are compared per input set, and pure inputs must come back
bit-identical.
"""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np

from astra_graph.harness.timed_copies import TIMING_INPUT_SETS, TimedCopies
from astra_graph.kernel.catalog import kernels_root
from astra_graph.kernel.contract import load_contract

SPEC = load_contract(kernels_root() / "silu_and_mul")
TOKENS, D, PAD = 4, 8, 8  # rows padded as the allocator would: padding differs per copy


def side_with(out_rows: np.ndarray) -> TimedCopies:
    side = TimedCopies(None, SPEC)
    copies = out_rows.shape[0]
    rng = np.random.default_rng(5)
    out = np.concatenate([out_rows, rng.random((copies, PAD), dtype=np.float32)], axis=1)
    sets = [rng.standard_normal((copies, 2 * TOKENS * D)).astype(np.float16) for _ in range(2)]
    side.sets = [{"x": batch} for batch in sets]
    side.batches = {"out": out.astype(np.float16), "x": sets[0].copy()}
    side.cases = [
        SimpleNamespace(
            arrays={
                "out": side.batches["out"][i, : TOKENS * D].reshape(TOKENS, D),
                "x": side.batches["x"][i].reshape(TOKENS, 2 * D),
            }
        )
        for i in range(copies)
    ]
    return side


def test_restoring_moves_every_copy_to_the_next_input_set() -> None:
    side = side_with(np.zeros((3, TOKENS * D), np.float32))
    assert TIMING_INPUT_SETS == len(side.sets) == 2
    side.restore_all(nullcontext())
    assert side.current == 1 and (side.batches["x"] == side.sets[1]["x"]).all()
    side.restore(0, nullcontext())
    assert side.current == 0 and (side.batches["x"][0] == side.sets[0]["x"][0]).all()
    assert not (side.batches["x"][1] == side.sets[0]["x"][1]).all()  # other copies untouched


def test_every_timed_sample_must_leave_the_outputs_of_its_input_set() -> None:
    rng = np.random.default_rng(3)
    rows = {k: rng.standard_normal((3, TOKENS * D)).astype(np.float16) for k in (0, 1)}
    side = side_with(rows[0].astype(np.float32))
    for sample in range(4):  # the outputs alternate with the inputs: not a difference
        side.current = sample % 2
        side.batches["out"][:, : TOKENS * D] = rows[side.current]
        side.fingerprint(nullcontext())
    assert side.first_unlike_sample() is None
    # a sample on set 1 that replayed set 0's answer (a result cached per buffer)
    side.current = 1
    side.batches["out"][:, : TOKENS * D] = rows[0]
    side.fingerprint(nullcontext())
    side.current = 0
    side.fingerprint(nullcontext())
    side.current = 1
    side.batches["out"][:, : TOKENS * D] = rows[1]
    side.fingerprint(nullcontext())
    assert side.first_unlike_sample() == (4, 7)


def test_padding_never_enters_a_fingerprint() -> None:
    side = side_with(np.stack([np.ones(TOKENS * D, np.float32)] * 3))
    side.fingerprint(nullcontext())
    side.batches["out"][:, TOKENS * D :] = np.float16("nan")  # a fresh poison in the padding
    side.fingerprint(nullcontext())
    assert side.first_unlike_sample() is None


def test_a_pure_input_changed_under_timing_is_named() -> None:
    side = side_with(np.zeros((3, TOKENS * D), np.float32))
    assert side.mutated_input(1) is None
    side.cases[1].arrays["x"].view(np.uint16)[0, 3] ^= 1
    assert side.mutated_input(1) == "x" and side.mutated_input(0) is None


def test_one_more_copy_counts_every_batch_set_and_poison_and_the_draw() -> None:
    # silu_and_mul in float16 at tokens x d: x [tokens, 2d] held in its batch and both input
    # sets, out [tokens, d] in its batch and both poisons, each row rounded up to the allocator's
    # 256 bytes, and the largest argument's transient draw
    tokens, d = 3, 1000
    side = TimedCopies(None, SPEC)
    x_row = -(-tokens * 2 * d * 2 // 256) * 256
    out_row = -(-tokens * d * 2 // 256) * 256
    expected = 3 * x_row + 3 * out_row + 8 * tokens * 2 * d
    assert side.bytes_per_copy({"tokens": tokens, "d": d}, "float16") == expected
    assert side.bytes_per_copy({"tokens": 2 * tokens, "d": d}, "float32") > expected
