"""A loaded kernel's resources as the driver reports them: registers, shared and local memory,
and its occupancy by the driver's calculator (the arithmetic of ``kernel.occupancy`` when the
driver cannot answer). Moved out of bench.py (issue 21); the timing job reports them per side.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from typing import Any

from astra_graph.harness.results import ResourceReport
from astra_graph.kernel import occupancy


def function_attribute(function: Any, name: str, fallback: int) -> int:
    """A loaded kernel's attribute as the driver reports it, else ``fallback``."""
    try:
        return int(getattr(function, name))
    except Exception:  # no such attribute in this CuPy, or the driver refused
        return fallback


@cache
def gpu_limits() -> occupancy.SmLimits:
    """The per-SM limits this process's GPU reports (raises without one)."""
    import cupy

    runtime = cupy.cuda.runtime
    device = cupy.cuda.Device().id
    return occupancy.device_limits(
        lambda name: int(runtime.deviceGetAttribute(getattr(runtime, f"cudaDevAttr{name}"), device))
    )


def driver_blocks_per_sm(kernel: Any, threads: int, dynamic_smem: int) -> int:
    """Resident blocks per SM by the CUDA driver's occupancy calculator, for a loaded kernel
    (``launch.LoadedKernel``) launched with ``threads`` per block and ``dynamic_smem`` bytes."""
    import cupy

    kernel.allow_dynamic_smem(dynamic_smem)
    handle = kernel.function.kernel.ptr  # the CUfunction of the cupy.RawKernel
    return int(
        cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(handle, threads, dynamic_smem)
    )


def occupancy_of(
    kernel: Any, registers: int, threads: int, static_smem: int, dynamic_smem: int
) -> occupancy.Occupancy:
    """The driver calculator's occupancy, with the limit the arithmetic names for this device;
    the arithmetic alone (sm_90's limits), saying why, when the driver cannot answer."""
    try:
        limits = gpu_limits()
        blocks = driver_blocks_per_sm(kernel, threads, dynamic_smem)
    except Exception as exc:  # no GPU, or an object the driver does not know as a kernel
        alone = occupancy.estimate(registers, threads, static_smem, dynamic_smem)
        why = f"arithmetic for sm_90, no driver calculator: {type(exc).__name__}"
        return alone if alone.detail else replace(alone, detail=why)
    estimated = occupancy.estimate(registers, threads, static_smem, dynamic_smem, limits)
    return occupancy.from_driver(estimated, blocks, threads, limits)


def resources_of(kernel: Any, dims: Mapping[str, int]) -> ResourceReport:
    """Registers, shared and local memory as the driver reports them for the loaded kernel
    (ptxas's log is the fallback, and the only source of spill sizes), plus the occupancy; of
    the instantiation that runs at ``dims`` where the kernel is specialized on the shape."""
    kernel = kernel.at(dims)
    res = kernel.compiled.resources
    registers = function_attribute(kernel.function, "num_regs", res.registers)
    static_smem = function_attribute(kernel.function, "shared_size_bytes", res.static_smem_bytes)
    local = function_attribute(kernel.function, "local_size_bytes", res.stack_frame_bytes)
    _, block, smem = kernel.geometry(dims)
    threads = math.prod(block)
    occ = occupancy_of(kernel, registers, threads, static_smem, smem)
    return ResourceReport(
        registers=registers,
        static_smem_bytes=static_smem,
        dynamic_smem_bytes=smem,
        local_bytes=local,
        spill_bytes=res.spill_store_bytes + res.spill_load_bytes,
        threads_per_block=threads,
        occupancy=occ.fraction,
        occupancy_limit=occ.limiter,
        occupancy_detail=occ.detail,
    )
