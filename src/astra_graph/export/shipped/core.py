"""Host-side dispatch of an exported kernel: sizes, dtype and GPU in, one launch (or why not) out.

Shipped verbatim inside every package ``astra export --format torch`` writes (as
``_core.py``), so it imports the standard library only: the generated ``dispatch.py`` fills a
:class:`Table` from the run and calls :func:`plan`, which a serving process, a test without
torch, or a framework maintainer can call with plain tuples.

A launch is planned only inside the domain the kernel was verified on: the element types the
run compiled, the GPU architecture the cubins are for, every dim inside the verified range (the
contract's limits, else the range the whole-domain verification drew from), tensor shapes
consistent with one assignment of the dims, base pointers aligned as the contract promises, and
the implementation's ``requires`` clauses. Anything else returns the reason as a string, and
the caller runs the original op instead. The launch configuration is a pure function of these
inputs, so each captured CUDA graph replays the same kernel for its batch size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Env = Mapping[str, Any]
Expression = Callable[[Env], Any]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return ceil_div(a, b) * b


def log2(x: float) -> float:
    return int(math.log2(x)) if float(x).is_integer() else math.log2(x)


def select(condition: object, a: float, b: float) -> float:
    """C++'s ``condition ? a : b`` (``astra_graph.kernel.expr``'s ``select``)."""
    return a if condition else b


gcd = math.gcd


@dataclass(frozen=True)
class Table:
    """Everything the run decided, as data (written by ``astra export`` into ``dispatch.py``)."""

    op: str
    arch: str
    """``sm_XY`` the cubins were compiled for; another GPU gets the original op."""
    dtypes: tuple[str, ...]
    elem_bytes: Mapping[str, int]
    arg_dtypes: Mapping[str, str]
    """Contract argument -> element type name, ``T`` for the type under test."""
    arg_align: Mapping[str, int]
    shapes: Mapping[str, Expression]
    """Contract argument -> its shape as a function of the dims."""
    dim_sources: Mapping[str, tuple[str, int, int]]
    """Dim -> (argument, axis, factor): the dim is that axis's size divided by factor."""
    domain: Mapping[str, tuple[int, int, int]]
    """Dim -> (lowest, highest, multiple of) inside the verified domain."""
    decode_max_rows: int
    row_classes: tuple[tuple[int, str], ...]
    largest_row_class: str
    bytes_moved: Expression
    dispatch: Mapping[str, Mapping[str, int]]
    """Bucket (``decode/small``) -> tunables chosen for it by the run's sweep."""
    default_tunables: Mapping[str, int]
    requires: tuple[tuple[str, Expression], ...]
    grid: Expression
    block: Expression
    smem: Expression
    params: tuple[tuple[str, str, str | None, Expression | None], ...]
    """The kernel's parameters in order: (kind, name, C type, value) with kind ``tensor`` (a
    contract argument's pointer), ``param`` (an op scalar) or ``value`` (computed from dims)."""
    kernels: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """``<dtype>:<tunables label>`` -> (cubin file, lowered kernel name)."""


@dataclass(frozen=True)
class Launch:
    """One planned launch: which compiled kernel, its geometry and its parameters in order."""

    cubin: str
    function: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    dims: dict[str, int]
    dtype: str
    bucket: str
    tunables: dict[str, int]
    params: tuple[tuple[str, str, str | None, int | None], ...]
    """(kind, name, C type, value): value set for ``value`` parameters, None otherwise."""


def label(tunables: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(tunables.items())) or "(defaults)"


def kernel_key(dtype: str, tunables: Mapping[str, int]) -> str:
    return f"{dtype}:{label(tunables)}"


def _dims3(value: Any) -> tuple[int, int, int]:
    items = tuple(value) if isinstance(value, tuple) else (value,)
    x, y, z = (*(int(v) for v in items), 1, 1, 1)[:3]
    return (x, y, z)


def element_dtype(table: Table, dtypes: Mapping[str, str]) -> str | None:
    """The type under test, read from the first argument of type ``T``."""
    for name, kind in table.arg_dtypes.items():
        if kind == "T":
            return dtypes.get(name)
    return next(iter(table.dtypes))


def solve_dims(table: Table, shapes: Mapping[str, Sequence[int]]) -> dict[str, int] | str:
    """The dims from the tensors' sizes, or why they cannot be read."""
    dims: dict[str, int] = {}
    for dim, (arg, axis, factor) in table.dim_sources.items():
        shape = shapes.get(arg)
        if shape is None or len(shape) <= axis:
            return f"{arg}: no axis {axis} to read {dim} from"
        if shape[axis] % factor:
            return f"{arg}: size {shape[axis]} of axis {axis} is not a multiple of {factor}"
        dims[dim] = shape[axis] // factor
    return dims


def bucket_of(table: Table, dims: Mapping[str, int], dtype: str) -> str:
    """``<phase>/<row class>``, as the run's tuner bucketed its shapes."""
    rows_dim = next(iter(table.domain))
    rows = max(dims[rows_dim], 1)
    phase = "decode" if rows <= table.decode_max_rows else "prefill"
    row_bytes = table.bytes_moved({**dims, "elem_bytes": table.elem_bytes[dtype]}) / rows
    row_class = next(
        (name for limit, name in table.row_classes if row_bytes < limit), table.largest_row_class
    )
    return f"{phase}/{row_class}"


def outside_domain(table: Table, dims: Mapping[str, int]) -> str | None:
    for dim, (low, high, multiple) in table.domain.items():
        value = dims[dim]
        if not low <= value <= high or value % multiple:
            return f"{dim}={value} is outside the verified domain [{low}, {high}] step {multiple}"
    return None


def plan(
    table: Table,
    shapes: Mapping[str, Sequence[int]],
    dtypes: Mapping[str, str],
    arch: str,
    pointers: Mapping[str, int] | None = None,
) -> Launch | str:
    """The launch for these tensors (contract names -> sizes, dtype names, base addresses) on a
    GPU of ``arch``, or the reason to run the original op instead."""
    if arch != table.arch:
        return f"GPU {arch}: the kernels are compiled for {table.arch}"
    dtype = element_dtype(table, dtypes)
    if dtype not in table.dtypes:
        return f"element type {dtype}: exported for {list(table.dtypes)}"
    for name, kind in table.arg_dtypes.items():
        want = dtype if kind == "T" else kind
        if dtypes.get(name) != want:
            return f"{name}: dtype {dtypes.get(name)}, expected {want}"
    dims = solve_dims(table, shapes)
    if isinstance(dims, str):
        return dims
    problem = outside_domain(table, dims)
    if problem:
        return problem
    for name, shape_of in table.shapes.items():
        expected = tuple(shape_of(dims))
        if tuple(shapes.get(name, ())) != expected:
            return f"{name}: shape {tuple(shapes.get(name, ()))}, expected {expected}"
    for name, address in (pointers or {}).items():
        align = table.arg_align.get(name, 1)
        if address % align:
            return f"{name}: address not {align}-byte aligned"
    bucket = bucket_of(table, dims, dtype)
    tunables = {**table.default_tunables, **table.dispatch.get(bucket, {})}
    env = {**dims, **tunables, "elem_bytes": table.elem_bytes[dtype]}
    for text, check in table.requires:
        if not check(env):
            return f"requires {text} fails for {dims}"
    key = kernel_key(dtype, tunables)
    if key not in table.kernels:
        return f"no compiled kernel for {key}"
    cubin, function = table.kernels[key]
    params = tuple(
        (kind, name, ctype, None if value is None else int(value(env)))
        for kind, name, ctype, value in table.params
    )
    return Launch(
        cubin=cubin,
        function=function,
        grid=_dims3(table.grid(env)),
        block=_dims3(table.block(env)),
        smem=int(table.smem(env)),
        dims=dims,
        dtype=dtype,
        bucket=bucket,
        tunables=tunables,
        params=params,
    )


def output_shape(
    table: Table, name: str, shapes: Mapping[str, Sequence[int]]
) -> tuple[int, ...] | None:
    """An output's shape from the inputs' sizes alone (for wrappers that allocate it), or None
    when a dim is read from an output."""
    dims = solve_dims(table, shapes)
    if isinstance(dims, str):
        return None
    return tuple(table.shapes[name](dims))
