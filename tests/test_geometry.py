"""The one launch-geometry rule: zero, negative, over-limit and failing expressions are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.harness.geometry import geometry_problem, launch_problem, smem_limit
from astra_graph.kernel.catalog import resolve
from astra_graph.kernel.contract import load_contract
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import load_implementation


def test_limits_by_arch() -> None:
    assert smem_limit("sm_90") == 227 * 1024 and smem_limit("sm_90a") == 227 * 1024
    assert smem_limit("sm_86") == 99 * 1024
    assert smem_limit("sm_999") == 48 * 1024


@pytest.mark.parametrize(
    ("grid", "block", "smem", "expected"),
    [
        ((1, 1, 1), (256, 1, 1), 0, None),
        ((0, 1, 1), (256, 1, 1), 0, "grid (0, 1, 1): dimension x is 0"),
        ((4, 1, 1), (2048, 1, 1), 0, "2048 threads per block, at most 1024"),
        ((4, 1, 1), (32, 32, 2), 0, "2048 threads per block"),
        ((4, 1, 1), (1, 1, 128), 0, "dimension z is 128, over 64"),
        ((4, 70000, 1), (32, 1, 1), 0, "dimension y is 70000, over 65535"),
        ((4, 1, 1), (32, 1, 1), 228 * 1024, "sm_90 allows 232448 per block"),
        ((4, 1, 1), (32, 1, 1), -1, "smem: -1 bytes"),
    ],
)
def test_geometry_problem(
    grid: tuple[int, int, int], block: tuple[int, int, int], smem: int, expected: str | None
) -> None:
    problem = geometry_problem(grid, block, smem, "sm_90")
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem


def test_static_smem_counts() -> None:
    assert geometry_problem((1,), (32,), 98 * 1024, "sm_86") is None
    assert geometry_problem((1,), (32,), 98 * 1024, "sm_86", static_smem=2048) is not None


@pytest.mark.parametrize(
    ("field", "text", "expected"),
    [
        ("block", "0", "header.block: expression '0' gives 0"),
        ("block", "2048", "header.block (2048, 1, 1): 2048 threads per block"),
        ("grid", "tokens // 0", "header.grid: cannot evaluate 'tokens // 0'"),
        ("smem", "d * 1024 * 1024", "header.smem: "),
    ],
)
def test_launch_problem_names_field_and_shape(
    tmp_path: Path, field: str, text: str, expected: str
) -> None:
    spec, impl = resolve("silu_and_mul/naive")
    lines = [
        f"// astra: {field} = {text}" if line.startswith(f"// astra: {field} =") else line
        for line in impl.source.splitlines()
    ]
    if not any(line.startswith(f"// astra: {field} =") for line in lines):
        lines.insert(0, f"// astra: {field} = {text}")
    path = tmp_path / "edited.cu"
    path.write_text("\n".join(lines) + "\n")
    edited = load_implementation(path, load_contract(spec.folder).contract)
    dims = spec.contract.suite("tuning")[0]
    problem = launch_problem(
        edited.header, dims, DTYPES["float16"], {}, "sm_90", spec.contract.label(dims)
    )
    assert problem is not None and problem.startswith(expected), problem
    assert f"shape {spec.contract.label(dims)} float16" in problem


def test_shipped_geometry_is_fine_on_every_suite_shape() -> None:
    for op in ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse"):
        for impl_name in ("naive", "production"):
            spec, impl = resolve(f"{op}/{impl_name}")
            for suite in ("tuning", "heldout", "edge"):
                for dims in spec.contract.suite(suite):
                    for dtype in spec.contract.dtypes:
                        for tunables in impl.header.configurations():
                            label = spec.contract.label(dims)
                            args = (impl.header, dims, DTYPES[dtype], tunables, "sm_90", label)
                            assert launch_problem(*args) is None
