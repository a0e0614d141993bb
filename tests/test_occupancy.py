"""The occupancy arithmetic against hand-worked cases of the occupancy calculator's rules, the
limits a device reports, and how the driver calculator's count is reported (its agreement with
the arithmetic on the GPU: ``test_occupancy_gpu.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from astra_graph.harness.kernel_resources import resources_of
from astra_graph.harness.nvrtc import Resources
from astra_graph.kernel import occupancy


@pytest.mark.parametrize(
    ("registers", "threads", "smem", "blocks", "fraction", "limiter"),
    [
        (32, 256, 0, 8, 1.0, "threads"),  # 64 warps fit: full
        (64, 256, 0, 4, 0.5, "registers"),  # 2048 regs/warp: 8 warps per sub-partition
        (40, 128, 0, 12, 0.75, "registers"),  # 1280 regs/warp: 12 per sub-partition, 48 warps
        (33, 256, 0, 6, 0.75, "registers"),  # 33*32 rounds up to 1280 registers per warp
        (32, 128, 100 * 1024, 2, 0.125, "shared memory"),  # 101 KB per block with the reserve
        (16, 32, 0, 32, 0.5, "blocks"),  # 32 blocks of one warp
        (32, 1024, 0, 2, 1.0, "threads"),
        (32, 96, 0, 21, 63 / 64, "threads"),  # 3 warps per block: 21 blocks
    ],
)
def test_estimate(
    registers: int, threads: int, smem: int, blocks: int, fraction: float, limiter: str
) -> None:
    result = occupancy.estimate(registers, threads, static_smem_bytes=smem)
    assert (result.blocks_per_sm, result.limiter) == (blocks, limiter)
    assert result.fraction == pytest.approx(fraction)
    assert result.warps_per_sm == blocks * -(-threads // 32)


def test_static_and_dynamic_shared_memory_add_up() -> None:
    split = occupancy.estimate(32, 128, static_smem_bytes=50_000, dynamic_smem_bytes=50_000)
    whole = occupancy.estimate(32, 128, static_smem_bytes=100_000)
    assert split == whole
    assert whole.limiter == "shared memory"


def test_largest_block_allocation_fits_once() -> None:
    assert occupancy.estimate(32, 128, dynamic_smem_bytes=227 * 1024).blocks_per_sm == 1


@pytest.mark.parametrize(
    ("registers", "threads", "smem"),
    [
        (32, 0, 0),
        (32, 1025, 0),
        (256, 128, 0),
        (32, 128, 227 * 1024 + 1),
        (255, 1024, 0),  # 8192 registers per warp x 32 warps exceeds the register file
    ],
)
def test_unlaunchable_configurations_are_invalid(registers: int, threads: int, smem: int) -> None:
    result = occupancy.estimate(registers, threads, dynamic_smem_bytes=smem)
    assert result.limiter == "invalid"
    assert result.fraction == 0.0
    assert result.detail


class _Function:
    """A loaded kernel as CuPy exposes it: attributes read from the driver."""

    num_regs = 40
    shared_size_bytes = 256
    local_size_bytes = 16


class _Kernel:
    def __init__(self, function: object) -> None:
        self.function = function
        self.compiled = SimpleNamespace(
            resources=Resources(registers=0, static_smem_bytes=0, spill_store_bytes=8)
        )

    def at(self, dims: dict[str, int]) -> _Kernel:
        return self

    def geometry(self, dims: dict[str, int]) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        return (dims["tokens"], 1, 1), (128, 1, 1), 4096


def test_resources_come_from_the_driver_with_ptxas_as_fallback() -> None:
    report = resources_of(_Kernel(_Function()), {"tokens": 4})
    assert (report.registers, report.static_smem_bytes, report.local_bytes) == (40, 256, 16)
    assert (report.dynamic_smem_bytes, report.threads_per_block, report.spill_bytes) == (
        4096,
        128,
        8,
    )
    assert report.occupancy == pytest.approx(0.75) and report.occupancy_limit == "registers"
    # a stand-in the driver does not know as a kernel: the arithmetic, saying so
    assert report.occupancy_detail.startswith("arithmetic for sm_90, no driver calculator")
    fallback = resources_of(_Kernel(object()), {"tokens": 4})
    assert fallback.registers == 0 and fallback.static_smem_bytes == 0


H100_ATTRIBUTES = {
    "MaxRegistersPerMultiprocessor": 65536,
    "MaxThreadsPerMultiProcessor": 2048,
    "MaxThreadsPerBlock": 1024,
    "MaxBlocksPerMultiprocessor": 32,
    "MaxSharedMemoryPerMultiprocessor": 233472,
    "MaxSharedMemoryPerBlockOptin": 232448,
    "ReservedSharedMemoryPerBlock": 1024,
    "WarpSize": 32,
}
"""What an H100 reports (cudaDeviceGetAttribute); an A100 differs in shared memory only."""
A100_ATTRIBUTES = {
    **H100_ATTRIBUTES,
    "MaxSharedMemoryPerMultiprocessor": 167936,
    "MaxSharedMemoryPerBlockOptin": 166912,
}


def test_an_h100_reports_the_sm90_limits() -> None:
    assert occupancy.device_limits(H100_ATTRIBUTES.__getitem__) == occupancy.SM90


def test_the_arithmetic_follows_the_limits_the_device_reports() -> None:
    a100 = occupancy.device_limits(A100_ATTRIBUTES.__getitem__)
    sm90 = occupancy.estimate(32, 128, static_smem_bytes=60 * 1024)
    sm80 = occupancy.estimate(32, 128, static_smem_bytes=60 * 1024, limits=a100)
    assert (sm90.blocks_per_sm, sm90.limiter) == (3, "shared memory")  # 228 KB / 61 KB
    assert (sm80.blocks_per_sm, sm80.limiter) == (2, "shared memory")  # 164 KB / 61 KB


def test_the_driver_count_is_reported_and_a_disagreement_said() -> None:
    estimated = occupancy.estimate(40, 128)  # 12 blocks, registers
    assert occupancy.from_driver(estimated, 12, 128, occupancy.SM90) == estimated
    differs = occupancy.from_driver(estimated, 10, 128, occupancy.SM90)
    assert (differs.blocks_per_sm, differs.warps_per_sm) == (10, 40)
    assert differs.fraction == pytest.approx(40 / 64)
    assert differs.limiter == "registers"
    assert "driver's calculator allows 10 blocks per SM, the arithmetic 12" in differs.detail
