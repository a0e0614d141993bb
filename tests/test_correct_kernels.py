"""The correct-but-different kernels, without a GPU: enough of them, valid headers, and each
builds for sm_90 in every dtype of its contract without spilling (NVRTC only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.harness import nvrtc
from astra_graph.harness.compile import compile_implementation
from astra_graph.kernel.catalog import operations
from astra_graph.kernel.contract import OperationSpec
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import load_implementation
from correct_kernels import (
    CORRECT_KERNELS,
    MIN_KERNELS_PER_OPERATION,
    correct_kernels,
    kernel_id,
)

KERNELS = correct_kernels()


@pytest.mark.parametrize("spec", operations(), ids=lambda spec: spec.name)
def test_every_operation_has_enough_correct_kernels(spec: OperationSpec) -> None:
    found = sorted((CORRECT_KERNELS / spec.name).glob("*.cu"))
    assert len(found) >= MIN_KERNELS_PER_OPERATION, [p.name for p in found]


def test_no_correct_kernel_lies_outside_an_operation_folder() -> None:
    names = {spec.name for spec in operations()}
    strays = [p for p in CORRECT_KERNELS.rglob("*.cu") if p.parent.name not in names]
    assert strays == []


@pytest.mark.parametrize(("spec", "path"), KERNELS, ids=[kernel_id(k) for k in KERNELS])
def test_correct_kernel_compiles_for_sm90_in_every_dtype(spec: OperationSpec, path: Path) -> None:
    try:
        nvrtc.version()
    except nvrtc.NvrtcUnavailable as exc:
        pytest.skip(f"NVRTC unavailable: {exc}")
    impl = load_implementation(path, spec.contract)
    assert impl.header.description, f"{path}: no description line"
    for dtype in spec.contract.dtypes:
        kernel = compile_implementation(impl, DTYPES[dtype], arch="sm_90")
        assert kernel.resources.spill_store_bytes == 0, f"{kernel.entry} spills"
        assert DTYPES[dtype].ctype in kernel.entry
