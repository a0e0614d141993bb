"""Occupancy of a kernel on one SM, from its registers, shared memory and block size.

Pure arithmetic over the per-SM limits of an architecture (the rules of NVIDIA's occupancy
calculator): registers are allocated per warp in units of 256 and the register file is split
among four sub-partitions (a warp's registers live in one), shared memory is allocated per block
in units of 128 bytes with 1 KB reserved for the system, and threads, warps and blocks per SM are
capped. The result is the fraction of the SM's warp slots that resident blocks fill, and which
limit binds.

Where a GPU is there, the reported number is the CUDA driver's own calculator's
(``cuOccupancyMaxActiveBlocksPerMultiprocessor`` on the loaded kernel, ``harness/bench.py``):
the arithmetic, over the limits that device reports (:func:`device_limits`), then only says
which limit applies, and :func:`from_driver` says so when the two disagree. Without a GPU (and
for the checks that need none) the arithmetic with sm_90's limits is the estimate.

In launch geometry, ``blocks_per_sm(threads, smem)`` is the launched kernel's resident blocks
per SM (persistent framework kernels size their grid by CUDA's occupancy query: SGLang's RMSNorm
launches ``min(tokens, get_blocks_per_sm(kernel, threads) * sm_count)`` blocks, FlashInfer's
QKRMSNorm the same through ``cudaOccupancyMaxActiveBlocksPerMultiprocessor``). The harness binds
the driver's answer for the loaded kernel while it evaluates a launch (:func:`answered_by`);
elsewhere (drafting a contract, checks on a CPU) it is :func:`estimated_blocks`, this
arithmetic with no register use, never below the GPU's answer: a grid drafted with it is never
smaller than the one the GPU launches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Literal

Limiter = Literal["registers", "shared memory", "threads", "blocks", "invalid"]


@dataclass(frozen=True)
class SmLimits:
    registers_per_sm: int
    register_unit: int
    """Registers are allocated per warp in multiples of this."""
    sub_partitions: int
    max_registers_per_thread: int
    max_threads_per_sm: int
    max_threads_per_block: int
    max_blocks_per_sm: int
    smem_per_sm: int
    smem_per_block_max: int
    """Largest static + dynamic shared memory one block may use (opt-in above 48 KB)."""
    smem_reserved_per_block: int
    smem_unit: int
    warp_size: int = 32

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


SM90 = SmLimits(
    registers_per_sm=65536,
    register_unit=256,
    sub_partitions=4,
    max_registers_per_thread=255,
    max_threads_per_sm=2048,
    max_threads_per_block=1024,
    max_blocks_per_sm=32,
    smem_per_sm=228 * 1024,
    smem_per_block_max=227 * 1024,
    smem_reserved_per_block=1024,
    smem_unit=128,
)

DEVICE_ATTRIBUTES: dict[str, str] = {
    "registers_per_sm": "MaxRegistersPerMultiprocessor",
    "max_threads_per_sm": "MaxThreadsPerMultiProcessor",
    "max_threads_per_block": "MaxThreadsPerBlock",
    "max_blocks_per_sm": "MaxBlocksPerMultiprocessor",
    "smem_per_sm": "MaxSharedMemoryPerMultiprocessor",
    "smem_per_block_max": "MaxSharedMemoryPerBlockOptin",
    "smem_reserved_per_block": "ReservedSharedMemoryPerBlock",
    "warp_size": "WarpSize",
}
"""Each limit a device reports, by the name of its CUDA device attribute (``cudaDevAttr...``)."""


def device_limits(attribute: Callable[[str], int], base: SmLimits = SM90) -> SmLimits:
    """The limits a device reports (``attribute(name)`` reads one of :data:`DEVICE_ATTRIBUTES`);
    the allocation units, sub-partitions and per-thread register cap, which no attribute
    reports, are ``base``'s."""
    return replace(base, **{field: attribute(name) for field, name in DEVICE_ATTRIBUTES.items()})


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    fraction: float
    """Resident warps over the SM's warp slots, 0-1."""
    limiter: Limiter
    detail: str = ""


def _round_up(value: int, unit: int) -> int:
    return math.ceil(value / unit) * unit


def blocks_by_registers(registers: int, warps_per_block: int, limits: SmLimits = SM90) -> int:
    """Blocks the register file holds: whole warps per sub-partition, whole blocks per SM."""
    if registers <= 0:
        return limits.max_blocks_per_sm
    per_warp = _round_up(registers * limits.warp_size, limits.register_unit)
    per_partition = limits.registers_per_sm // limits.sub_partitions
    warps = (per_partition // per_warp) * limits.sub_partitions
    return warps // warps_per_block


def blocks_by_smem(smem_bytes: int, limits: SmLimits = SM90) -> int:
    per_block = _round_up(smem_bytes + limits.smem_reserved_per_block, limits.smem_unit)
    return limits.smem_per_sm // per_block


def estimate(
    registers: int,
    threads_per_block: int,
    static_smem_bytes: int = 0,
    dynamic_smem_bytes: int = 0,
    limits: SmLimits = SM90,
) -> Occupancy:
    """Occupancy of one kernel configuration; ``invalid`` when the block cannot launch at all."""
    smem = static_smem_bytes + dynamic_smem_bytes
    invalid = None
    if not 0 < threads_per_block <= limits.max_threads_per_block:
        invalid = f"{threads_per_block} threads per block (1-{limits.max_threads_per_block})"
    elif registers > limits.max_registers_per_thread:
        invalid = f"{registers} registers per thread (max {limits.max_registers_per_thread})"
    elif smem > limits.smem_per_block_max:
        invalid = f"{smem} bytes of shared memory per block (max {limits.smem_per_block_max})"
    warps_per_block = math.ceil(max(threads_per_block, 1) / limits.warp_size)
    if invalid is None and blocks_by_registers(registers, warps_per_block, limits) == 0:
        invalid = f"{registers} registers x {threads_per_block} threads exceed the register file"
    if invalid is not None:
        return Occupancy(0, 0, 0.0, "invalid", invalid)
    candidates: list[tuple[int, Limiter]] = [
        (limits.max_warps_per_sm // warps_per_block, "threads"),
        (limits.max_blocks_per_sm, "blocks"),
        (blocks_by_registers(registers, warps_per_block, limits), "registers"),
        (blocks_by_smem(smem, limits), "shared memory"),
    ]
    blocks, limiter = min(candidates, key=lambda c: c[0])
    warps = blocks * warps_per_block
    return Occupancy(blocks, warps, warps / limits.max_warps_per_sm, limiter)


def from_driver(
    estimated: Occupancy, driver_blocks: int, threads_per_block: int, limits: SmLimits
) -> Occupancy:
    """The occupancy of the driver calculator's ``driver_blocks`` per SM, with the limit that
    ``estimated`` (the arithmetic over the same device's ``limits``) names.

    The two agree on every production kernel's launch (``tests/test_occupancy_gpu.py``); where
    they do not, the driver's count is reported and ``detail`` says that the named limit comes
    from an arithmetic that counted otherwise.
    """
    if driver_blocks == estimated.blocks_per_sm:
        return estimated
    warps = driver_blocks * math.ceil(max(threads_per_block, 1) / limits.warp_size)
    return Occupancy(
        blocks_per_sm=driver_blocks,
        warps_per_sm=warps,
        fraction=warps / limits.max_warps_per_sm,
        limiter=estimated.limiter,
        detail=(
            f"the driver's calculator allows {driver_blocks} blocks per SM, the arithmetic "
            f"{estimated.blocks_per_sm} ({estimated.limiter})"
        ),
    )


EXPRESSION_NAME = "blocks_per_sm"
"""The name launch geometry calls :func:`blocks_per_sm` by (``kernel.expr``'s functions)."""

Query = Callable[[int, int], int]
"""``query(threads, smem)``: resident blocks per SM of one loaded kernel."""

_ANSWER: ContextVar[Query | None] = ContextVar("blocks_per_sm_answer", default=None)


def estimated_blocks(threads: int, smem: int) -> int:
    """Resident blocks per SM that sm_90's thread, block and shared-memory limits allow, no
    register counted (0 for a block that cannot launch)."""
    return estimate(0, threads, 0, smem).blocks_per_sm


def blocks_per_sm(threads: int, smem: int) -> int:
    """``blocks_per_sm`` in launch geometry: the bound kernel's answer (:func:`answered_by`),
    else :func:`estimated_blocks`."""
    answer = _ANSWER.get()
    return estimated_blocks(threads, smem) if answer is None else answer(threads, smem)


@contextmanager
def answered_by(query: Query) -> Iterator[None]:
    """Within the block, ``blocks_per_sm`` is ``query``'s answer (one loaded kernel's)."""
    token = _ANSWER.set(query)
    try:
        yield
    finally:
        _ANSWER.reset(token)
