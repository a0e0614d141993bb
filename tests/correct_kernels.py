"""The correct-but-different kernels of ``tests/fixtures/correct_kernels/<op>/``, listed once.

Each kernel there computes its operation exactly as the contract says, in another way than the
shipped implementations (block shapes, warp per row, grid-stride loops, 2-D grids, several blocks
per row, vector widths, fast intrinsics inside the tolerance, fp64 math, other reduction orders,
shared memory or registers for the row, other handling of empty LSEs, equivalent forms of an
activation, exact maxima on bit patterns or packed 16-bit values). The verification must
accept every one: they are the false-rejection side of its rules, and
``benchmarks/correct_kernel_errors.py`` measures their error statistics for the thresholds.
"""

from __future__ import annotations

from pathlib import Path

from astra_graph.kernel.catalog import operations
from astra_graph.kernel.contract import OperationSpec

CORRECT_KERNELS = Path(__file__).parent / "fixtures" / "correct_kernels"
MIN_KERNELS_PER_OPERATION = 10
"""Issue 10 asks for at least this many correct-but-different kernels per operation."""


def correct_kernels() -> list[tuple[OperationSpec, Path]]:
    """(operation, kernel file) for every correct kernel, in a stable order."""
    found = []
    for spec in operations():
        found += [(spec, path) for path in sorted((CORRECT_KERNELS / spec.name).glob("*.cu"))]
    return found


def kernel_id(item: tuple[OperationSpec, Path]) -> str:
    spec, path = item
    return f"{spec.name}/{path.stem}"
