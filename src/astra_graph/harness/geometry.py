"""Launch geometry against the device's limits: the one rule every checker uses.

:func:`launch_problem` evaluates an implementation's ``grid``, ``block`` and ``smem`` for one
shape and says, in one line naming the header field and the shape, why the launch cannot happen:
an expression that fails (``tokens // 0``), a dimension that is 0 or negative, more than
:data:`MAX_THREADS_PER_BLOCK` threads, a block or grid dimension over its limit, or more shared
memory (static + dynamic) than one block may have on the target architecture. It needs no GPU,
so ``astra validate``, ``astra compile``, the coding agent and the evaluator's check path all
reject such a launch as an interface problem before anything runs.

Limits are the CUDA Programming Guide's "technical specifications per compute capability"
table (maximum x/y/z block and grid dimensions, threads per block, shared memory per block
with the opt-in attribute).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from astra_graph.kernel import expr
from astra_graph.kernel.dtypes import DType
from astra_graph.kernel.header import ImplementationHeader

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)
SMEM_PER_BLOCK_BYTES = {
    "sm_70": 96 * 1024,
    "sm_72": 96 * 1024,
    "sm_75": 64 * 1024,
    "sm_80": 163 * 1024,
    "sm_86": 99 * 1024,
    "sm_87": 163 * 1024,
    "sm_89": 99 * 1024,
    "sm_90": 227 * 1024,
    "sm_100": 227 * 1024,
    "sm_103": 227 * 1024,
    "sm_120": 99 * 1024,
}
"""Shared memory one block may use (static + dynamic, after raising the attribute), by target."""
SMEM_WITHOUT_OPT_IN = 48 * 1024
"""What every architecture allows; used for a target missing from the table."""


def smem_limit(arch: str) -> int:
    """Bytes of shared memory one block may use on ``arch`` (``sm_90a`` counts as ``sm_90``)."""
    return SMEM_PER_BLOCK_BYTES.get(arch.removesuffix("a"), SMEM_WITHOUT_OPT_IN)


def geometry_problem(
    grid: tuple[int, ...], block: tuple[int, ...], smem: int, arch: str, static_smem: int = 0
) -> str | None:
    """Why (grid, block, dynamic smem) cannot launch on ``arch``, or None; no header context."""
    named = (("grid", grid, MAX_GRID_DIMS), ("block", block, MAX_BLOCK_DIMS))
    for field, dims, _ in named:
        for axis, value in enumerate(dims):
            if value < 1:
                return f"{field} {tuple(dims)}: dimension {'xyz'[axis]} is {value}, expected >= 1"
    threads = 1
    for value in block:
        threads *= value
    if threads > MAX_THREADS_PER_BLOCK:
        return f"block {tuple(block)}: {threads} threads per block, at most {MAX_THREADS_PER_BLOCK}"
    for field, dims, limits in named:
        for axis, (value, limit) in enumerate(zip(dims, limits, strict=False)):
            if value > limit:
                return f"{field} {tuple(dims)}: dimension {'xyz'[axis]} is {value}, over {limit}"
    if smem < 0:
        return f"smem: {smem} bytes, expected >= 0"
    limit = smem_limit(arch)
    if smem + static_smem > limit:
        return f"smem: {smem} dynamic + {static_smem} static bytes, {arch} allows {limit} per block"
    return None


def launch_problem(
    header: ImplementationHeader,
    dims: Mapping[str, int],
    dtype: DType,
    tunables: Mapping[str, int],
    arch: str,
    label: str,
    static_smem: int = 0,
) -> str | None:
    """Why the header's launch for this shape (``label``) cannot happen on ``arch``, or None.

    Shapes the header's ``requires`` excludes are not launched, so they are no problem here.
    """
    where = f"shape {label} {dtype.name}{' ' + str(dict(tunables)) if tunables else ''}"
    try:
        if header.unmet_requirement(dims, dtype, tunables):
            return None
    except (expr.ExprError, ArithmeticError) as exc:
        return f"header.requires: {exc} ({where})"
    env = header.env(dims, dtype, tunables)
    values: dict[str, Any] = {}  # grid and block: 3-tuples; smem: an int
    for field, evaluate in (
        ("grid", expr.evaluate_dims3),
        ("block", expr.evaluate_dims3),
        ("smem", expr.evaluate_int),
    ):
        text = getattr(header, field)
        try:
            values[field] = evaluate(text, env)
        except expr.ExprError as exc:
            raw = exc.args[0] if exc.args else str(exc)
            return f"header.{field}: {raw} ({where})"
    problem = geometry_problem(values["grid"], values["block"], values["smem"], arch, static_smem)
    return f"header.{problem} ({where})" if problem else None
