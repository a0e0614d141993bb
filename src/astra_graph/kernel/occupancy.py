"""``blocks_per_sm(threads, smem)`` in launch geometry: the launched kernel's resident blocks per
multiprocessor at ``threads`` a block and ``smem`` bytes of dynamic shared memory.

Persistent framework kernels size their grid by CUDA's occupancy query: SGLang's RMSNorm launches
``min(tokens, get_blocks_per_sm(kernel, threads) * sm_count)`` blocks, FlashInfer's QKRMSNorm
``min(cudaOccupancyMaxActiveBlocksPerMultiprocessor(...) * num_sms, needed)``. The answer depends
on the compiled kernel (its registers and static shared memory), so it is asked where the kernel
is: the harness binds CUDA's own answer for the loaded kernel while it evaluates a launch
(:func:`answered_by`). Anywhere else (drafting a contract, checking launch limits on a CPU) the
answer is :func:`estimate`: the per-multiprocessor limits on threads, blocks and shared memory
of sm_90, registers not counted, so never below the GPU's answer; a grid drafted with it is never
smaller than the one the GPU launches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

MAX_THREADS_PER_SM = 2048
"""Resident threads per multiprocessor on sm_80 and sm_90 (CUDA's compute capability table)."""
MAX_BLOCKS_PER_SM = 32
"""Resident blocks per multiprocessor on sm_80 and sm_90."""
SMEM_PER_SM = 228 * 1024
"""Shared memory per multiprocessor on sm_90."""
SMEM_RESERVED_PER_BLOCK = 1024
"""Shared memory the system reserves for each resident block (sm_80 and later)."""
WARP = 32

Query = Callable[[int, int], int]
"""``query(threads, smem)``: resident blocks per multiprocessor."""

_ANSWER: ContextVar[Query | None] = ContextVar("blocks_per_sm_answer", default=None)


def estimate(threads: int, smem: int) -> int:
    """Blocks per multiprocessor that the thread, block and shared-memory limits allow."""
    if threads < 1 or smem < 0:
        raise ValueError(f"blocks_per_sm({threads}, {smem}): threads >= 1 and smem >= 0 expected")
    warps = -(-threads // WARP)
    by_threads = MAX_THREADS_PER_SM // (warps * WARP)
    by_smem = SMEM_PER_SM // (smem + SMEM_RESERVED_PER_BLOCK)
    return min(MAX_BLOCKS_PER_SM, by_threads, by_smem)


def blocks_per_sm(threads: int, smem: int) -> int:
    """The bound kernel's answer (:func:`answered_by`), else :func:`estimate`."""
    answer = _ANSWER.get()
    return estimate(threads, smem) if answer is None else answer(threads, smem)


@contextmanager
def answered_by(query: Query) -> Iterator[None]:
    """Within the block, ``blocks_per_sm`` is ``query``'s answer (one loaded kernel's)."""
    token = _ANSWER.set(query)
    try:
        yield
    finally:
        _ANSWER.reset(token)
