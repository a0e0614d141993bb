"""The CUDA driver's occupancy calculator and the arithmetic of ``kernel/occupancy.py`` agree.

On the GPU at hand, for every production kernel in every element type and tunable setting, at
the launch (block size, dynamic shared memory) of every suite shape it supports: the blocks per
SM that ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` gives for the loaded kernel equal the
arithmetic's over the limits the device reports, so the limit the arithmetic names is the one
that applies. Set ``ASTRA_GPU_SUMMARY`` to a file path to keep one line per kernel.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from astra_graph.harness.kernel_resources import driver_blocks_per_sm, gpu_limits
from astra_graph.harness.launch import LoadedKernel, load_kernel
from astra_graph.kernel import occupancy
from astra_graph.kernel.catalog import operations
from astra_graph.kernel.contract import OperationSpec
from astra_graph.kernel.header import load_implementation

pytestmark = pytest.mark.gpu

PRODUCTION = [(spec, spec.folder / "production.cu") for spec in operations()]
SUITES = ("tuning", "heldout", "edge")


@pytest.mark.parametrize(("spec", "path"), PRODUCTION, ids=[s.name for s, _ in PRODUCTION])
def test_driver_and_arithmetic_agree_on_production_launches(
    spec: OperationSpec, path: Path
) -> None:
    impl = load_implementation(path, spec.contract)
    limits = gpu_limits()
    shapes = [dims for suite in SUITES for dims in spec.contract.suite(suite)]
    compared: set[tuple[int, int, int, int]] = set()
    disagreements = []
    for dtype in spec.contract.dtypes:
        for tunables in impl.header.configurations():
            kernel = load_kernel(spec, impl, dtype, tunables)
            assert isinstance(kernel, LoadedKernel)  # no specialization: one instantiation
            registers = int(kernel.function.num_regs)
            static_smem = int(kernel.function.shared_size_bytes)
            for dims in shapes:
                if kernel.unsupported(dims):
                    continue
                _, block, smem = kernel.geometry(dims)
                threads = math.prod(block)
                launch = (registers, static_smem, threads, smem)
                if launch in compared:
                    continue
                compared.add(launch)
                driver = driver_blocks_per_sm(kernel, threads, smem)
                estimated = occupancy.estimate(registers, threads, static_smem, smem, limits)
                if driver != estimated.blocks_per_sm:
                    disagreements.append(
                        f"{dtype} {tunables} {spec.contract.label(dims)}: {registers} registers, "
                        f"{threads} threads, {static_smem}+{smem} B shared: driver {driver}, "
                        f"arithmetic {estimated.blocks_per_sm} ({estimated.limiter})"
                    )
    line = f"occupancy {spec.name}: {len(compared)} launches, {len(disagreements)} disagree"
    print(line)
    if os.environ.get("ASTRA_GPU_SUMMARY"):
        with open(os.environ["ASTRA_GPU_SUMMARY"], "a") as out:
            out.write(line + "\n")
    assert compared, f"{spec.name}: no suite shape is supported by production.cu"
    assert not disagreements, "\n".join(disagreements)
