"""Write the exported package's ``dispatch.py``: the run's decisions as plain Python data.

The contract's and header's expressions (shapes, grid, block, shared memory, requirements,
bytes moved) become ``lambda e: ...`` over a dict of dims and tunables: each was parsed by
:mod:`astra_graph.kernel.expr`, whose grammar is a subset of Python's, so rewriting every free name
``x`` to ``e["x"]`` and unparsing gives the same arithmetic without shipping the evaluator.
The functions it calls (``ceil_div``, ``round_up``, ``log2``) come from the shipped core.

The verified domain per dim is the contract's range where it has one; an unbounded dim is
verified up to :data:`astra_graph.harness.plan.RANDOM_BEYOND_SUITES` times its suites' largest
value (the whole-domain check draws random shapes up to there), so that is where the export
stops and the original op takes over.
"""

from __future__ import annotations

import ast
import copy
import pprint
from collections.abc import Mapping

from astra_graph.harness.buckets import DECODE_MAX_ROWS, LARGEST_ROW_CLASS, ROW_CLASSES
from astra_graph.harness.geometry import (
    MAX_BLOCK_DIMS,
    MAX_GRID_DIMS,
    MAX_THREADS_PER_BLOCK,
    smem_limit,
)
from astra_graph.harness.plan import RANDOM_BEYOND_SUITES
from astra_graph.harness.results import TuningReport
from astra_graph.kernel import expr, occupancy
from astra_graph.kernel.contract import ELEM_BYTES, OperationSpec, TensorArg
from astra_graph.kernel.dtypes import DTYPES, TYPE_PARAMETER
from astra_graph.kernel.header import (
    SM_COUNT,
    Implementation,
    ImplementationHeader,
    load_implementation,
)


class ExportError(ValueError):
    """The run cannot be exported as asked; ``str()`` is one line naming what and why."""


class _Lookup(ast.NodeTransformer):
    """``name`` -> ``e["name"]`` for every free name (called function names stay)."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node.args = [self.visit(a) for a in node.args]
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.Subscript(
            value=ast.Name(id="e", ctx=ast.Load()), slice=ast.Constant(node.id), ctx=ast.Load()
        )


def python_lambda(text: str | int) -> str:
    """``lambda e: ...`` computing the expression ``text`` from a dict ``e`` of names."""
    if isinstance(text, int):
        return f"lambda e: {text}"
    tree = _Lookup().visit(copy.deepcopy(expr.parse(text)))  # parse() is cached: never edit it
    return f"lambda e: {ast.unparse(tree.body)}"


def tuple_lambda(items: list[str | int]) -> str:
    """``lambda e: (a, b)`` computing a tuple of expressions (a shape)."""
    bodies = [python_lambda(item).removeprefix("lambda e: ") for item in items]
    return f"lambda e: ({''.join(body + ', ' for body in bodies)})"


def dim_sources(spec: OperationSpec) -> dict[str, tuple[str, int, int]]:
    """Where each dim is read: the first argument (inputs before outputs) with an axis that is
    the dim or a whole multiple of it (``2 * d``); raises ExportError for a dim with none."""
    contract = spec.contract
    ordered: list[TensorArg] = sorted(contract.args, key=lambda a: a.role == "output")
    found: dict[str, tuple[str, int, int]] = {}
    for dim in contract.dims:
        for arg in ordered:
            for axis, entry in enumerate(arg.shape):
                factor = _factor_of(entry, dim)
                if factor is not None:
                    found.setdefault(dim, (arg.name, axis, factor))
        if dim not in found:
            raise ExportError(
                f"{spec.folder}: dim {dim!r} is no axis (or whole multiple of one) of any "
                "argument, so a launch cannot read it from the tensors"
            )
    return found


def _factor_of(entry: str | int, dim: str) -> int | None:
    if isinstance(entry, int):
        return None
    body = expr.parse(entry).body
    if isinstance(body, ast.Name) and body.id == dim:
        return 1
    if isinstance(body, ast.BinOp) and isinstance(body.op, ast.Mult):
        for a, b in ((body.left, body.right), (body.right, body.left)):
            if (
                isinstance(a, ast.Name)
                and a.id == dim
                and isinstance(b, ast.Constant)
                and isinstance(b.value, int)
                and b.value > 0
            ):
                return b.value
    return None


def verified_domain(spec: OperationSpec) -> dict[str, tuple[int, int, int]]:
    """Dim -> (lowest, highest, multiple of) that the verification covered (module docstring)."""
    contract = spec.contract
    out: dict[str, tuple[int, int, int]] = {}
    for name, dim in contract.dims.items():
        seen = [d[name] for suite in ("tuning", "heldout", "edge") for d in contract.suite(suite)]
        high = dim.max if dim.max is not None else RANDOM_BEYOND_SUITES * max([*seen, dim.min])
        out[name] = (max(dim.min, 1), high, dim.multiple_of)
    return out


def render(
    spec: OperationSpec,
    impl: Implementation,
    dispatch: TuningReport | None,
    *,
    arch: str,
    kernels: Mapping[str, tuple[str, str]],
    run_id: str,
) -> str:
    """The text of ``dispatch.py`` for this run's implementation and dispatch table."""
    contract = spec.contract
    lines = [
        f'"""Dispatch of {contract.name} as run {run_id} chose it (generated by astra export).',
        "",
        "Pure Python: plan(shapes, dtypes, arch) gives the launch or the reason to use the",
        "original op; it needs neither torch nor a GPU.",
        '"""',
        "",
        f"from ._core import Launch, Table, {', '.join(CORE_FUNCTIONS)}",
        "from ._core import output_shape as _output_shape",
        "from ._core import plan as _plan",
        "",
        "__all__ = ['TABLE', 'Launch', 'plan', 'output_shape']",
        f"_FUNCTIONS = ({', '.join(CORE_FUNCTIONS)})  # called by the expressions below",
        "",
        *_table(spec, impl, dispatch, arch=arch, kernels=kernels),
        "",
        "",
        "def plan(shapes, dtypes, arch, pointers=None):  # type: ignore[no-untyped-def]",
        '    """The launch for these tensors on a GPU of ``arch``, or why the original runs."""',
        "    return _plan(TABLE, shapes, dtypes, arch, pointers)",
        "",
        "",
        "def output_shape(name, shapes):  # type: ignore[no-untyped-def]",
        '    """An output shape from the input sizes, or None."""',
        "    return _output_shape(TABLE, name, shapes)",
        "",
    ]
    return "\n".join(lines)


def _fmt(value: object) -> str:
    """A dict or tuple as an indented Python literal, keys in their order (the table's layout)."""
    return pprint.pformat(value, indent=4, width=96, sort_dicts=False)


def _table(
    spec: OperationSpec,
    impl: Implementation,
    dispatch: TuningReport | None,
    *,
    arch: str,
    kernels: Mapping[str, tuple[str, str]],
) -> list[str]:
    """The lines of ``TABLE = Table(...)``: the contract, the verified domain, the bucket rules,
    the dispatch table's verified entries, the header's launch geometry and the bound params."""
    contract = spec.contract
    header = impl.header
    shapes = {a.name: tuple_lambda(a.shape) for a in contract.args}
    table_dispatch = {
        entry.bucket: dict(entry.tunables)
        for entry in (dispatch.dispatch if dispatch else [])
        if entry.verified
    }
    original = _original_launches(spec, arch)
    _check_evaluable(spec, header, original)
    requires = [f"({r!r}, {python_lambda(r)})" for r in [*header.requires, *original]]
    arg_dtypes = {a.name: ("T" if a.dtype == TYPE_PARAMETER else a.dtype) for a in contract.args}
    return [
        "TABLE = Table(",
        f"    op={contract.name!r},",
        f"    arch={arch!r},",
        f"    dtypes={tuple(contract.dtypes)!r},",
        f"    elem_bytes={ {d: DTYPES[d].itemsize for d in contract.dtypes}!r},",
        f"    arg_dtypes={_fmt(arg_dtypes)},",
        f"    arg_align={_fmt({a.name: a.align for a in contract.args})},",
        "    shapes={",
        *(f"        {name!r}: {fn}," for name, fn in shapes.items()),
        "    },",
        f"    dim_sources={_fmt(dim_sources(spec))},",
        f"    domain={_fmt(verified_domain(spec))},",
        f"    decode_max_rows={DECODE_MAX_ROWS},",
        f"    row_classes={ROW_CLASSES!r},",
        f"    largest_row_class={LARGEST_ROW_CLASS!r},",
        f"    bytes_moved={python_lambda(contract.bytes_moved)},",
        f"    dispatch={_fmt(table_dispatch)},",
        f"    default_tunables={_fmt(dict(header.default_tunables()))},",
        "    requires=(",
        *(f"        {r}," for r in requires),
        "    ),",
        f"    grid={python_lambda(header.grid)},",
        f"    block={python_lambda(header.block)},",
        f"    smem={python_lambda(header.smem)},",
        "    params=(",
        *(f"        {p}," for p in _params(spec, impl)),
        "    ),",
        f"    kernels={_fmt(dict(kernels))},",
        ")",
    ]


def _original_launches(spec: OperationSpec, arch: str) -> list[str]:
    """For an imported operation (``oracle`` set): its original's launch limits on ``arch`` as
    requirements, so the package sends a shape the original cannot launch to the framework's op
    (which raises there, as it always did): the checks verified the candidate only where the
    original launches (``harness.verify``). Each axis of a ``dim3`` the header writes as a tuple,
    the threads of a block and the shared memory; an expression that reads the GPU
    (``sm_count``, ``blocks_per_sm``: a grid of resident blocks, inside the limits by its
    making) or a tuple chosen at run time is left out, as the package cannot evaluate it."""
    contract = spec.contract
    if contract.oracle is None:
        return []
    path = spec.folder / contract.oracle
    if not path.is_file():
        raise ExportError(f"{path}: the operation's oracle (contract.oracle) is not there")
    original = load_implementation(path, contract).header
    clauses: list[str] = []
    for value, limits in ((original.grid, MAX_GRID_DIMS), (original.block, MAX_BLOCK_DIMS)):
        axes = expr.dims3_axes(value)
        if axes is None:
            continue
        clauses += [f"1 <= ({a}) <= {limit}" for a, limit in zip(axes, limits, strict=False)]
        if limits is MAX_BLOCK_DIMS and len(axes) > 1:
            clauses.append(f"{' * '.join(f'({a})' for a in axes)} <= {MAX_THREADS_PER_BLOCK}")
    clauses.append(f"({original.smem}) <= {smem_limit(arch)}")
    gpu = [c for c in clauses if SM_COUNT in expr.names(c)]
    gpu += [c for c in clauses if occupancy.EXPRESSION_NAME in _called(c)]
    return [c for c in clauses if c not in gpu]


CORE_FUNCTIONS = ("ceil_div", "gcd", "log2", "round_up", "select")
"""The shipped core's functions (``export/shipped/core.py``) that ``dispatch.py`` imports."""
PACKAGE_FUNCTIONS = frozenset({"min", "max", *CORE_FUNCTIONS})
"""The functions an expression of the exported package may call: Python's and the core's."""


def _called(value: str) -> set[str]:
    """The functions an expression calls by name."""
    return {
        n.func.id
        for n in ast.walk(expr.parse(value))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }


def _unevaluable(value: str | int, known: set[str]) -> str | None:
    """The first function or name in ``value`` that the exported package cannot evaluate (a
    function outside :data:`PACKAGE_FUNCTIONS`, a name outside ``known``: the GPU's
    ``sm_count``), or None."""
    if isinstance(value, int):
        return None
    missing = sorted(_called(value) - PACKAGE_FUNCTIONS) or sorted(expr.names(value) - known)
    return missing[0] if missing else None


def _check_evaluable(
    spec: OperationSpec, header: ImplementationHeader, original: list[str]
) -> None:
    """Raise ExportError when an expression the package evaluates (the header's launch geometry
    and requirements, the contract's shapes, bytes moved and computed scalars) calls a function
    the package lacks, or reads a name it does not bind: the GPU's ``sm_count`` or the occupancy
    query ``blocks_per_sm``. Such a launch would fail in the serving process, not here."""
    if header.specializations:  # one build per shape's value: the package builds per dtype
        name, expression = next(iter(header.specializations.items()))
        raise ExportError(
            f"{spec.folder}: header.specialize {name} = {expression}: a kernel built per shape's "
            "value is not exported yet (the package builds one kernel per element type)"
        )
    contract = spec.contract
    known = {*contract.dims, *header.tunables, ELEM_BYTES}
    expressions: list[tuple[str, str | int]] = [
        ("header.grid", header.grid),
        ("header.block", header.block),
        ("header.smem", header.smem),
        *(("header.requires", r) for r in header.requires),
        *((f"{spec.contract.oracle} (the original's launch limits)", r) for r in original),
        ("bytes_moved", contract.bytes_moved),
        *((f"args.{a.name}.shape", axis) for a in contract.args for axis in a.shape),
        *((f"scalars.{c.name}.value", c.value) for c in contract.scalars if c.value is not None),
    ]
    for field, value in expressions:
        missing = _unevaluable(value, known)
        if missing is not None:
            raise ExportError(
                f"{field} {value!r} reads {missing!r}, which the exported package does not "
                "compute (it binds only the dims, tunables and elem_bytes): not exportable yet"
            )


def _params(spec: OperationSpec, impl: Implementation) -> list[str]:
    """The kernel's parameters in binding order: ``('tensor', ...)``, a ``('param', ...)`` the
    caller passes (a scalar without a computed value), or a ``('value', ...)`` lambda of the
    dims."""
    scalars = {s.name: s for s in spec.contract.scalars}
    params: list[str] = []
    for b in impl.bindings:
        if b.kind == "tensor":
            moved = python_lambda(b.value) if b.value is not None else None
            params.append(f"('tensor', {b.name!r}, None, {moved})")
        elif b.kind == "scalar" and scalars[b.name].value is None:
            params.append(f"('param', {b.name!r}, {b.dtype!r}, None)")
        else:
            value = b.value if b.kind == "expr" else scalars[b.name].value
            assert value is not None  # a scalar without a default is computed from the dims
            params.append(f"('value', {b.name!r}, {b.dtype!r}, {python_lambda(value)})")
    return params
