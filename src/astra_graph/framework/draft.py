"""Write an imported operation: ``contract.toml``, ``production.cu`` (self-contained) and the
``reference.py`` that runs the original kernel as the oracle.

``production.cu`` is the framework file flattened and made NVRTC's
(:mod:`astra_graph.framework.device`) under header lines that say how the launcher launched the
kernel: its entry with the dispatch's element type as ``T``, its parameters (tensors, dims
expressions, scalars, ``nullptr``), its grid, block and shared memory. It is what the agents
read and rewrite, and it compiles with nothing of the framework's tree.

The contract's suites use serving shapes (below); any shape whose tensors would take more than
:data:`MAX_SUITE_BYTES` is left out, so a drafted contract can always be allocated.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from pathlib import Path

from astra_graph.framework.launchers import (
    FREE_ROWS_NOTE,
    ROW_ID_DTYPES,
    Analysis,
    Binding,
    free_rows_dim,
)
from astra_graph.harness.domain import UNBOUNDED_FACTOR
from astra_graph.harness.geometry import geometry_problem
from astra_graph.harness.oracle import oracle_dim_scalar, unread_dims
from astra_graph.kernel import expr
from astra_graph.kernel.contract import ELEM_BYTES
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import DEFAULT_SM_COUNT, SM_COUNT

TOKENS_TUNING = (1, 64, 4096)
"""Token counts of a serving workload: one decode token, a decode batch, a prefill chunk."""
TOKENS_HELDOUT = (7, 333)
"""Token counts off the powers of two, so a kernel tuned to the tuning suite's is still tested."""
HIDDEN_TUNING = (4096, 14336)
"""Last axis of a 2-D tensor: Llama-3-8B's hidden size and its MLP width (the harness's random
shapes go up to 4x beyond, so the suites stay at these)."""
HIDDEN_HELDOUT = (5120,)
"""Qwen2.5-14B's hidden size."""
HEADS = (32, 8)
"""Middle axes (heads): Llama-3-8B's query and key/value heads (tuning, held out)."""
HEAD_SIZE = (128, 64)
"""Last axis of a tensor of three or more axes: the common head size (tuning, held out)."""
OTHER = (16, 5)
"""Any other dim (a host integer parameter that is not a size): small, tuning then held out."""
FREE_ROWS_TUNING = (4096, 8192)
FREE_ROWS_HELDOUT = (2048,)
"""Rows of a table read only at rows integer ids name (launchers.free_row_axes: a cos/sin cache
of a serving model's maximum positions): sizes of their own, more rows than tokens, so that ids
are drawn past the token count."""
MAX_SUITE_BYTES = 2 * 2**30
"""A suite shape whose tensors need more than this (at 4 bytes an element) is left out: far
above every serving shape above and far below an H100's 80 GB."""
TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-5, 2e-3),
    "bfloat16": (1e-5, 1.6e-2),
    "float32": (1e-5, 1e-6),
    "float64": (1e-12, 1e-12),
    "float8_e4m3fn": (2.0**-9, 2.0**-3),
    **dict.fromkeys(("int32", "int64", "uint8", "int8", "bool"), (0.0, 0.0)),
}
"""(atol, rtol) per dtype. For 16-bit types rtol is four unit roundoffs of the type (2^-11 for
fp16, 2^-8 for bf16): the oracle runs the original at float32, while the original at a 16-bit
type may round its intermediates to that type, as vLLM's fused_add_rms_norm rounds x, x times
the scale and the product (three roundings, up to ~1.5e-3 relative in fp16, over the shipped
contracts' 1e-3; the original was rejected against itself on the H100). The precision rules
still hold every candidate to the original's own error statistics. float32 at 1e-6, float64
outputs against a float64 oracle at 1e-12. An fp8 output (a fixed type, vLLM's ``fp8_t``) at
one E4M3 ulp relative at the bottom of a binade (3 mantissa bits: 2^-3) and one subnormal step
absolute (2^-9), as kernels/per_token_fp8_quant: the oracle quantises the float32 input, a
16-bit input can round to the neighbouring fp8 value. An integer or bool output (a fixed type,
FlashInfer's packed bits) exactly: the original computes it without rounding."""
DEFAULT_EPSILON = 1e-6
"""Default of a float parameter whose name says epsilon: the RMSNorm epsilon of Llama 3."""
DEFAULT_FLOAT = 1.0
"""Default of any other float parameter (a scale): the identity."""
DEFAULT_FLAG = 1
"""Default of a bool parameter (true); the other value is reported as left to check."""
PATH_OFFSETS = (2, 4, 1, 6, 3, 8)
"""Moves of one dim tried when no serving shape takes a launch: a framework's scalar fallback
runs for sizes off its vector width (``d % 8 != 0``), which an even offset of the last axis
reaches for 16-bit types, an odd one for 32-bit."""
ORACLE_PRECISION = ("float64", "float32")
"""The oracle runs at the first of these that the dispatch instantiates."""
ORACLE_FALLBACK = ("float16", "bfloat16")
"""Where neither compiles: the most precise 16-bit type first (10 mantissa bits against 7)."""


@dataclass(frozen=True)
class Written:
    folder: Path
    notes: list[str]


def _role(analysis: Analysis, tensor: str) -> str:
    # CSR offsets are read, never written: the kernel only differences and adds them
    offsets = tensor in analysis.offsets
    return "input" if analysis.tensors[tensor].const or offsets else "inout"


def _axis_dims(analysis: Analysis) -> set[str]:
    """The dims that size a tensor (alone or inside an axis expression)."""
    return {n for shape in analysis.shapes.values() for axis in shape for n in expr.names(axis)}


def _head_sized(analysis: Analysis) -> set[str]:
    """Dims drafted as head sizes though no tensor's last axis is theirs:

    - a launcher integer that divides a tensor's size in a requirement (vLLM's rotary checks
      ``query.numel() / num_tokens % head_size == 0``): a part of that axis, a head;
    - a tensor axis bounded above by such a dim (``rot_dim + rope_dim_offset <= head_size``:
      the cache's width is at most a head) or by a head-size axis (the last of three or more:
      FlashInfer's cache width ``rotary_dim``, at most ``head_dim``, was drafted a hidden size
      and faulted), however many axes its tensor has.

    Drafted as an integer of no role (:data:`OTHER`), vLLM's ``head_size`` was 16, and its
    cache's 2-D width a hidden size (4096), so no suite shape took the launch."""
    axis_dims = _axis_dims(analysis)
    heads: set[str] = set()
    trees = [expr.parse(r) for r in analysis.requires]
    for tree in trees:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, (ast.Mod, ast.FloorDiv, ast.Div))
                and isinstance(node.right, ast.Name)
                and node.right.id in analysis.dims
                and node.right.id not in axis_dims
                and expr.names(ast.unparse(node.left)) & axis_dims
            ):
                heads.add(node.right.id)
    for bound in _upper_bounds(analysis):
        if bound.larger in heads or _drafted_as_head(analysis, bound.larger):
            heads |= expr.names(bound.smaller) & axis_dims
    return heads


_FLIPPED: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.GtE,
    ast.LtE: ast.Gt,
    ast.Gt: ast.LtE,
    ast.GtE: ast.Lt,
}
"""A comparison's negation (``(a < b) == 0`` is ``a >= b``)."""


@dataclass(frozen=True)
class UpperBound:
    """A requirement ``smaller <= larger`` (``<`` where ``strict``) whose larger side is one
    dim; the smaller side as its expression text."""

    smaller: str
    larger: str
    strict: bool


def _upper_bounds(analysis: Analysis) -> list[UpperBound]:
    """The requirements that bound an expression above by one dim, as written in either
    direction (``head_size >= rot_dim``) or negated (FlashInfer's ``if (head_dim < rotary_dim)
    FLASHINFER_ERROR(...)``, read as ``(head_dim < rotary_dim) == 0``). A chained comparison, an
    equation or a comparison with a constant on the larger side bounds nothing here; each term
    of an ``and`` is read as a requirement of its own."""
    found: list[UpperBound] = []
    for body in (t for r in analysis.requires for t in expr.conjuncts(expr.parse(r).body)):
        negated = False
        if (
            isinstance(body, ast.Compare)
            and len(body.ops) == 1
            and isinstance(body.ops[0], ast.Eq)
            and isinstance(body.comparators[0], ast.Constant)
            and body.comparators[0].value == 0
            and isinstance(body.left, ast.Compare)
        ):
            body, negated = body.left, True
        if not isinstance(body, ast.Compare) or len(body.ops) != 1:
            continue
        operator = type(body.ops[0])
        if negated and operator in _FLIPPED:
            operator = _FLIPPED[operator]
        smaller, larger = body.left, body.comparators[0]
        if operator in (ast.GtE, ast.Gt):
            smaller, larger = larger, smaller
        elif operator not in (ast.LtE, ast.Lt):
            continue
        if isinstance(larger, ast.Name) and larger.id in analysis.dims:
            strict = operator in (ast.Lt, ast.Gt)
            found.append(UpperBound(ast.unparse(smaller), larger.id, strict))
    return found


def _drafted_as_head(analysis: Analysis, dim: str) -> bool:
    """Whether the suites draft ``dim`` as a head size by the axes it sizes alone
    (:func:`_axis_values`: the last axis of a tensor of three or more axes, which a
    ``[batch, seq, hidden]`` tensor's last axis is taken for too)."""
    values = _axis_values(analysis, dim, set(), set(), _free_row_dims(analysis))
    return values == (HEAD_SIZE[:1], HEAD_SIZE[1:])


MAX_CLAMP_PASSES = 8
"""Passes of :func:`_clamped` over the bounds, enough for a chain of that many dims."""


def _lowerable_bounds(analysis: Analysis) -> list[UpperBound]:
    """The upper bounds :func:`_clamped` lowers a dim by: every one whose smaller side is not a
    dim the launch pins (:func:`_pinned`), read once for all of a launch's shapes."""
    pinned = _pinned(analysis)
    return [b for b in _upper_bounds(analysis) if b.smaller not in pinned]


def _clamped(dims: dict[str, int], bounds: list[UpperBound]) -> dict[str, int]:
    """``dims`` with each dim a requirement bounds above by another dim (``bounds``: a rotary
    width by the head size) lowered to that dim's value where the drafted one is larger (one
    less for a strict bound), until no bound is broken: a head size pinned to 64 by the launch
    takes a full-width rotary cache of 64, not the 128 drafted for it. A dim the launch pins
    has no bound here (:func:`_lowerable_bounds`) and is never lowered; a shape this leaves
    breaking a requirement is dropped by :func:`_taken`."""
    out = dict(dims)
    bounds = [b for b in bounds if b.smaller in out]
    for _ in range(MAX_CLAMP_PASSES):
        changed = False
        for bound in bounds:
            highest = out.get(bound.larger, 0) - (1 if bound.strict else 0)
            if bound.larger in out and out[bound.smaller] > highest >= 1:
                out[bound.smaller] = highest
                changed = True
        if not changed:
            break
    return out


def offsets(analysis: Analysis) -> set[str]:
    """Launcher integers (dims that size no tensor) that the requirements only add to or
    subtract from sizes: an offset into a row (vLLM's ``rope_dim_offset``). Such an offset may
    be 0, the framework's default, and is drafted there; an integer that multiplies or divides
    a size, that the launch's grid, block or shared memory reads, or that no requirement names,
    is not one (0 may divide by zero in the kernel, or empty the launch)."""
    axis_dims = _axis_dims(analysis)
    found: set[str] = set()
    geometry = (analysis.grid, analysis.block, analysis.smem)
    spoiled: set[str] = axis_dims.union(*(expr.names(str(g)) for g in geometry))
    for requirement in analysis.requires:
        tree = expr.parse(requirement)
        parents = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Name) or node.id not in analysis.dims:
                continue
            parent = parents.get(id(node))
            added = isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Add, ast.Sub))
            (found if added else spoiled).add(node.id)
    return found - spoiled


def _axis_values(
    analysis: Analysis,
    dim: str,
    offset_dims: set[str],
    head_dims: set[str],
    free_row_dims: set[str],
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(tuning, held-out) sizes of ``dim`` by the role its axes give it; ``offset_dims``,
    ``head_dims`` and ``free_row_dims`` are :func:`offsets`, :func:`_head_sized` and
    :func:`_free_row_dims` of the analysis."""
    if dim in offset_dims:
        return (0,), (0,)
    if dim in head_dims:
        return HEAD_SIZE[:1], HEAD_SIZE[1:]
    if dim in free_row_dims:
        return FREE_ROWS_TUNING, FREE_ROWS_HELDOUT
    # (axis, rank) of every axis the dim alone sizes (``(positions_0)`` included); those that
    # are the dim itself first: an axis computed from it says less of its role (FlashInfer's
    # block_scale, [hidden_size // 128, ...], leads a tensor but is no count of rows)
    alone = [
        (axis, len(shape), isinstance(body := expr.parse(text).body, ast.Name) and body.id == dim)
        for shape in analysis.shapes.values()
        for axis, text in enumerate(shape)
        if expr.names(text) == {dim}
    ]
    places = [(a, r) for a, r, itself in alone if itself] or [(a, r) for a, r, _ in alone]
    if any(axis == 0 and rank > 1 for axis, rank in places):
        # the leading axis of a tensor of rows: tokens, also where a 1-D tensor (vLLM's
        # positions) names it first
        return TOKENS_TUNING, TOKENS_HELDOUT
    for axis, rank in places:
        if axis == rank - 1:
            return (HIDDEN_TUNING, HIDDEN_HELDOUT) if rank <= 2 else (HEAD_SIZE[:1], HEAD_SIZE[1:])
        return HEADS[:1], HEADS[1:]
    return OTHER[:1], OTHER[1:]


def _free_row_dims(analysis: Analysis) -> set[str]:
    """The row dims of the tables the analysis gave rows of their own
    (:data:`~astra_graph.framework.launchers.FREE_ROWS_NOTE`), where still their first axis."""
    return {
        analysis.shapes[t][0]
        for t in analysis.shapes
        if analysis.shapes[t]
        and analysis.shapes[t][0] == free_rows_dim(t)
        and any(n.startswith(f"{t}: {FREE_ROWS_NOTE}") for n in analysis.notes)
    }


def _pinned(analysis: Analysis) -> dict[str, int]:
    """Dims a launch requirement fixes (``head_dim == 128``: FlashInfer instantiates a kernel
    per head size), which every suite shape then takes, held-out ones included."""
    out: dict[str, int] = {}
    for requirement in analysis.requires:
        found = _dim_equals(_parsed(requirement), analysis.dims)
        if found is not None:
            out[found[0]] = found[1]
    return out


def _parsed(requirement: str) -> ast.expr:
    """A requirement's expression; a constant for one that does not parse (it states nothing
    about a dim's sizes here: where it is evaluated, its error is reported)."""
    try:
        return expr.parse(requirement).body
    except expr.ExprError:
        return ast.Constant(True)


def _dim_equals(term: ast.expr, dims: list[str]) -> tuple[str, int] | None:
    """(dim, size) of a term that is ``dim == size`` (either way round), else None; or of
    ``dim // k == size`` and ``dim * k == size`` with a whole ``k``, as the size ``size * k``
    and ``size / k`` (where whole) meet it: vLLM's ``d = input.size(-1) / 2`` and ``d ==
    3072`` take an input of 6144, the one size of ``2 * d`` (the requirement stays, checked at
    every shape)."""
    equation = expr.equation(ast.unparse(term))
    sides = list(equation) if equation is not None else []
    for index, side in enumerate(sides):
        scaled = _scaled_dim(side, dims)
        other = sides[1 - index]
        if scaled is not None and isinstance(other, ast.Constant) and type(other.value) is int:
            name, multiply, k = scaled
            if multiply and other.value % k == 0:
                return name, other.value // k
            if not multiply:
                return name, other.value * k
    names = [x.id for x in sides if isinstance(x, ast.Name) and x.id in dims]
    numbers = [x.value for x in sides if isinstance(x, ast.Constant)]
    if len(names) == 1 and len(numbers) == 1 and isinstance(numbers[0], int):
        return names[0], numbers[0]
    return None


def _scaled_dim(node: ast.expr, dims: list[str]) -> tuple[str, bool, int] | None:
    """(dim, whether multiplied, k) of ``dim * k`` or ``dim // k`` with a positive whole
    ``k``, else None."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.FloorDiv))):
        return None
    name, k = node.left, node.right
    if isinstance(node.op, ast.Mult) and isinstance(name, ast.Constant):
        name, k = k, name
    if not (isinstance(name, ast.Name) and name.id in dims and isinstance(k, ast.Constant)):
        return None
    if type(k.value) is not int or k.value <= 0:
        return None
    return name.id, isinstance(node.op, ast.Mult), k.value


def _allowed(analysis: Analysis) -> dict[str, tuple[int, ...]]:
    """Dims a launch requirement confines to listed sizes (``hidden_size == 512 or hidden_size
    == 1024 or ...``: the sizes a kernel specialized on the dim builds at), by dim."""
    out: dict[str, tuple[int, ...]] = {}
    for requirement in analysis.requires:
        tree = _parsed(requirement)
        terms = tree.values if isinstance(tree, ast.BoolOp) and isinstance(tree.op, ast.Or) else []
        found = [_dim_equals(term, analysis.dims) for term in terms]
        listed = [f for f in found if f is not None]
        if listed and len(listed) == len(terms) and len({n for n, _ in listed}) == 1:
            out[listed[0][0]] = tuple(v for _, v in listed)
    return out


def _nearest(values: tuple[int, ...], allowed: tuple[int, ...]) -> tuple[int, ...]:
    """Each of ``values`` as the allowed size nearest it (by ratio), repeats dropped."""

    def distance(size: int, value: int) -> float:
        return abs(math.log(size / value)) if value > 0 and size > 0 else float(size)

    picked = [min(allowed, key=lambda size: distance(size, value)) for value in values]
    return tuple(dict.fromkeys(picked))


def _distinct(shapes: list[dict[str, int]]) -> list[dict[str, int]]:
    """``shapes`` without repeats (clamping can make two shapes one), in their order."""
    out: list[dict[str, int]] = []
    for shape in shapes:
        if shape not in out:
            out.append(shape)
    return out


def suites(analysis: Analysis) -> tuple[list[dict[str, int]], list[dict[str, int]], int]:
    """(tuning shapes, held-out shapes, how many were left out for size)."""
    pinned = _pinned(analysis)
    roles = (offsets(analysis), _head_sized(analysis), _free_row_dims(analysis))
    values = {
        d: ((pinned[d],), (pinned[d],)) if d in pinned else _axis_values(analysis, d, *roles)
        for d in analysis.dims
    }
    for dim, allowed in _allowed(analysis).items():  # the sizes a specialized kernel builds at
        if dim not in pinned:
            tuning_sizes, heldout_sizes = values[dim]
            values[dim] = (_nearest(tuning_sizes, allowed), _nearest(heldout_sizes, allowed))
    tuning, heldout = [], []
    for tokens_index in range(max(len(v[0]) for v in values.values())):
        tuning.append({d: v[0][min(tokens_index, len(v[0]) - 1)] for d, v in values.items()})
    heldout.append({d: v[1][0] for d, v in values.items()})
    if any(len(v[1]) > 1 for v in values.values()):
        heldout.append({d: v[1][-1] for d, v in values.items()})
    lowerable = _lowerable_bounds(analysis)
    tuning = _distinct([_multiples(_clamped(d, lowerable), analysis) for d in tuning])
    heldout = _distinct([_multiples(_clamped(d, lowerable), analysis) for d in heldout])

    def fits(dims: dict[str, int]) -> bool:
        total = sum(
            math.prod(expr.evaluate_int(a, dims) for a in shape)
            for shape in analysis.shapes.values()
        )
        return total * 4 <= MAX_SUITE_BYTES

    kept_tuning = [d for d in tuning if fits(d)]
    kept_heldout = [d for d in heldout if fits(d)]
    dropped = len(tuning) + len(heldout) - len(kept_tuning) - len(kept_heldout)
    return _taken(analysis, kept_tuning), _taken(analysis, kept_heldout), dropped


def _multiples(dims: dict[str, int], analysis: Analysis) -> dict[str, int]:
    """``dims`` with each dim that must be a multiple (:attr:`Analysis.multiples`: the kernel's
    vector accesses) lowered to one, not below the multiple itself: lowered, a dim clamped to
    another's size (a rotary width to the head size) stays within it."""
    return {
        d: max(m, v // m * m) if (m := analysis.multiples.get(d, 1)) > 1 and v > 0 else v
        for d, v in dims.items()
    }


def _requirement_env(dims: dict[str, int], dtype: str) -> dict[str, int]:
    """What a launch requirement reads: the dims, the element's bytes, the import GPU's SMs."""
    return {SM_COUNT: DEFAULT_SM_COUNT, **dims, ELEM_BYTES: DTYPES[dtype].itemsize}


def takes(analysis: Analysis, dims: dict[str, int]) -> bool | None:
    """Whether the launcher takes this launch for ``dims`` on the import's GPU (every dtype it
    dispatches is tried), or None when a condition cannot be evaluated here."""
    for dtype in analysis.dtypes:
        env = _requirement_env(dims, dtype)
        try:
            if all(expr.evaluate(r, env) for r in analysis.requires):
                return True
        except expr.ExprError:
            return None
    return False


def _taken(analysis: Analysis, shapes: list[dict[str, int]]) -> list[dict[str, int]]:
    """The shapes that take this launch; where none does, each shape with one dim moved by the
    first of :data:`PATH_OFFSETS` that makes it take the launch (a fallback path for sizes off
    the vector width); empty when no such shape is found."""
    if not analysis.requires:
        return shapes
    kept = [d for d in shapes if takes(analysis, d) is not False]
    if kept:
        return kept
    moved = []
    for dims in shapes:
        for offset in PATH_OFFSETS:
            found = next(
                (
                    {**dims, name: dims[name] + offset}
                    for name in reversed(list(dims))
                    if takes(analysis, {**dims, name: dims[name] + offset})
                ),
                None,
            )
            if found is not None:
                moved.append(found)
                break
    return moved


def _toml(value: object) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


INDEX_HIGH = float(2**31 - 1)
"""An integer input's draw's upper end before ``init.below`` lowers it: the int32 range."""
_PARTIAL = [
    "# the original's requires is its domain: a launch condition (the framework sends the",
    "# shapes it excludes to another kernel) or a slot tensor's room (no more tokens than slots)",
    "partial_kernels = true",
]
"""A launch under a condition (vLLM's vector path, ``d % 8 == 0``) covers only part of the
dims' domain, and the domain check refused the original against itself on the H100 (427de8e:
"requires ... is narrower than the contract's domain"); the condition is the kernel's domain,
recorded as such, and a replacement's narrower one is recorded too, the original serving the
rest (the contract's ``partial_kernels``). A slot tensor's room (:func:`_slot_room`) narrows
the domain alike: the slot store fixture was refused against itself on the H100 at 65536
tokens and one slot (ec20d5d)."""


def contract_text(analysis: Analysis, op: str, source: str) -> tuple[str, list[str]]:
    """The drafted ``contract.toml`` and what was assumed."""
    text, notes, _ = _drafted(analysis, op, source)
    return text, notes


def _drafted(analysis: Analysis, op: str, source: str) -> tuple[str, list[str], str]:
    """The drafted ``contract.toml``, what was assumed, and the type the oracle runs at (chosen
    once, over the suites drafted here)."""
    notes = list(analysis.notes)
    tuning, heldout, dropped = suites(analysis)
    least = least_sizes(analysis)
    # a suite shape below a raised least size takes that size (the contract rejects a suite
    # shape under its dim's min)
    tuning = _at_least(tuning, least)
    heldout = _at_least(heldout, least)
    if dropped:
        notes.append(f"suites: {dropped} shape(s) above {MAX_SUITE_BYTES} bytes left out")
    if not tuning or not heldout:
        raise ValueError("no suite shape fits in memory")
    tested = [d for d in analysis.dtypes if d != "float64"] or ["float64"]
    greatest = greatest_sizes(analysis, least, [*tuning, *heldout])
    for dim, size in greatest.items():
        notes.append(
            f"dims.{dim}: max {size}, the largest at which the original's launch fits CUDA's "
            "grid and block limits with the other dims at their least"
        )
    lines = _operation_lines(analysis, op, source, tested)
    for dim in analysis.dims:
        bound = [f"max = {greatest[dim]}"] if dim in greatest else []
        multiple = [f"multiple_of = {analysis.multiples[dim]}"] if dim in analysis.multiples else []
        lines += [f"[dims.{dim}]", f"min = {least[dim]}", *bound, *multiple, ""]
    lines += _arg_lines(analysis, notes)
    lines += _scalar_lines(analysis, notes)
    oracle = _oracle_dtype(analysis, [*tuning, *heldout])
    if oracle in ORACLE_FALLBACK:
        notes.append(
            f"oracle at {oracle}: no float32 instantiation compiles, launches at every suite "
            "shape, or is the framework's launch (a template argument folded at the dispatched "
            f"width), so the original at {oracle} is the reference (a candidate is held to its "
            "rounding, not to float32's)"
        )
    lines += _tolerance_lines(analysis, tested, oracle)
    lines += [
        "[suites]",
        f"tuning = {_toml(tuning)}",
        f"heldout = {_toml(heldout)}",
        "",
    ]
    return "\n".join(lines), notes, oracle


def _oracle_dtype(analysis: Analysis, shapes: list[dict[str, int]]) -> str:
    """The element type the oracle runs at: the first of :data:`ORACLE_PRECISION` the dispatch
    instantiates, float32 otherwise, where its launch fits CUDA's limits at every suite shape
    (``shapes``);
    for drafted element types (a launcher's template type), float32 only where it compiled. Else
    the most precise type that does: SGLang's fused_add_rmsnorm has no 16-byte vector of float,
    so its float32 instantiation does not compile; FlashInfer's MergeState at float32 takes
    twice the threads per head (4-element vectors), 2048 a block at 64 heads, and its oracle
    could not launch on the H100 (b65590e). Nor where the entry's template arguments were
    folded at the dispatched width (:attr:`~astra_graph.framework.launchers.Analysis.
    width_folded`): the float32 instantiation would be another launch than the framework's."""
    found = next((d for d in ORACLE_PRECISION if d in analysis.dtypes), None)
    if found is not None:
        return found
    if (
        not analysis.drafted_dtypes
        and not analysis.width_folded
        and _launches_at(analysis, "float32", shapes)
    ):
        return "float32"
    return next((d for d in ORACLE_FALLBACK if d in analysis.dtypes), analysis.dtypes[0])


def _bytes_moved(analysis: Analysis) -> str:
    """Every tensor's bytes, an in-place one's twice (read and written)."""
    terms = []
    for name, shape in analysis.shapes.items():
        element = analysis.tensors[name].element
        size = "elem_bytes" if element == "T" else str(DTYPES[element or "float32"].itemsize)
        count = 2 if _role(analysis, name) == "inout" else 1
        axes = [a if re.fullmatch(r"\w+", a) else f"({a})" for a in shape]  # `(batch + 1)`
        terms.append(" * ".join([*axes, size, *(["2"] if count == 2 else [])]))
    return " + ".join(terms)


def _operation_lines(analysis: Analysis, op: str, source: str, tested: list[str]) -> list[str]:
    """The contract's top-level keys, under a comment saying where it was imported from."""
    summary = f"{analysis.launcher} ({analysis.kernel.qualified}) as {source} launches it"
    return [
        f"# Imported by `astra import {source}` from launcher {analysis.launcher}: the original",
        "# kernel (production.cu) is the oracle; reference.py runs it on the GPU.",
        f"name = {_toml(op)}",
        f"summary = {_toml(summary)}",
        f"dtypes = {_toml(tested)}",
        f'reference = "reference.py:{op}"',
        'oracle = "production.cu"',
        f"bytes_moved = {_toml(_bytes_moved(analysis))}",
        *(_PARTIAL if analysis.requires or _slot_room(analysis) else []),
        "",
    ]


def _arg_lines(analysis: Analysis, notes: list[str]) -> list[str]:
    """One ``[[args]]`` table per tensor; an integer input is drawn as row ids (noted)."""
    lines: list[str] = []
    for name, shape in analysis.shapes.items():
        element = analysis.tensors[name].element or "T"
        lines += [
            "[[args]]",
            f"name = {_toml(name)}",
            f"dtype = {_toml(element)}",
            f"shape = {_toml(shape)}",
            f"role = {_toml(_role(analysis, name))}",
        ]
        rows = _index_rows(analysis, name)
        if name in analysis.offsets:
            lines.append(f"init = {{ offsets_into = {_toml(analysis.offsets[name])} }}")
            notes.append(
                f"args.{name}: CSR offsets (the kernel differences its elements) drawn from 0 "
                f"to {analysis.offsets[name]}, the rows they index, some segments empty"
            )
        elif rows is not None:
            slots = name in analysis.slots
            lines.append(
                f'init = {{ dist = "uniform", low = 0.0, high = {INDEX_HIGH!r}, '
                f"below = {_toml(rows)}{', distinct = true' if slots else ''} }}"
            )
            notes.append(
                f"args.{name}: integer input drawn in [0, {rows}) at each shape "
                f"({_indexed_tables(analysis, name)[1]}): widen it where the kernel allows"
            )
            if slots:
                notes.append(
                    f"args.{name}: its elements place the kernel's writes (slots), so no two are "
                    "drawn alike, and the domain keeps its element count within that range"
                )
        lines.append("")
    return lines


def _scalar_lines(analysis: Analysis, notes: list[str]) -> list[str]:
    """One ``[[scalars]]`` table per by-value parameter, with its default: a constant the
    launcher passes, else a drafted one (a bool's is noted, its other value left to check)."""
    lines: list[str] = []
    for name, kind in analysis.scalars.items():
        if kind == "bool":
            default: float = DEFAULT_FLAG
            notes.append(f"scalars.{name}: bool drafted as {DEFAULT_FLAG}; check the other value")
        elif name in analysis.constants:
            default = analysis.constants[name]
        elif name in analysis.derived:
            default = _derived_default(name, analysis.derived[name], notes)
        else:
            default = _float_default(name)
        lines += [
            "[[scalars]]",
            f"name = {_toml(name)}",
            f"dtype = {_toml(kind)}",
            f"default = {default!r}",
            "",
        ]
    # a dim that is no tensor's whole axis (a launcher integer: vLLM's head_size; one only
    # inside an axis expression: vLLM's group_size in scale's `input_1 // 2 // group_size`)
    # cannot be read back from the inputs' shapes, so the oracle gets it as a scalar (the
    # kernel is not given it); the oracle refused situ_and_mul_quant on the H100 (d32cd96)
    for dim in unread_dims(analysis.dims, analysis.shapes.values()):
        lines += [
            "[[scalars]]",
            f"name = {_toml(oracle_dim_scalar(dim))}",
            'dtype = "int64"',
            f"value = {_toml(dim)}",
            "",
        ]
    return lines


def _float_default(name: str) -> float:
    """The drafted default of a float parameter, by what its name says."""
    return DEFAULT_EPSILON if "eps" in name.lower() else DEFAULT_FLOAT


def _derived_default(name: str, computed: str, notes: list[str]) -> float:
    """The default of a scalar the launcher computes from its float parameters: the
    computation at their drafted defaults, or where that is no finite number (FlashInfer's
    ``-1 / (high_freq_factor / low_freq_factor - 1)`` with both factors at 1) the default
    its own name drafts; noted either way, so the user sees what the op's parameter stands
    for."""
    at = {n: _float_default(n) for n in sorted(expr.names(computed))}
    where = ", ".join(f"{n} = {v!r}" for n, v in at.items())
    try:
        default = float(expr.evaluate(computed, at))  # type: ignore[arg-type]  # no tuple here
    except expr.ExprError:  # a division by zero
        default = math.inf
    how = f"with {where}"
    if not math.isfinite(default):
        default = _float_default(name)
        how = f"its own name's default: not finite with {where}"
    notes.append(
        f"scalars.{name}: the launcher computes it as {computed}; a parameter of its own "
        f"here, drafted as {default!r} ({how})"
    )
    return default


def _tolerance_lines(analysis: Analysis, tested: list[str], oracle: str) -> list[str]:
    """A ``[tolerance.<dtype>]`` table for each tested type, the oracle's and each fixed type an
    output has."""
    fixed = [  # an output of a fixed type (fp8, a float32 side output) is compared at its own
        t.element
        for n, t in analysis.tensors.items()
        if t.element in TOLERANCES and _role(analysis, n) != "input"
    ]
    lines: list[str] = []
    for dtype in dict.fromkeys([*tested, oracle, *fixed]):
        atol, rtol = TOLERANCES[dtype]
        lines += [f"[tolerance.{dtype}]", f"atol = {atol!r}", f"rtol = {rtol!r}", ""]
    return lines


def _index_rows(analysis: Analysis, name: str) -> str | None:
    """For an integer input: an expression of the rows its elements may index at a case's dims
    (:func:`_indexed_tables`), or None for a floating-point one. An integer tensor the kernel
    reads may index rows of another (positions into a cache, a gather's row ids); the default
    draw (normal, rounded) gives negative values that sent such an original outside its
    tensors on the H100 (params_struct.cu's gather, b64be50). Drawn below this at every case
    (``init.below``), the values are valid row ids and span the rows (a bound fixed at the
    least sizes drew only row 0, at every shape)."""
    element = analysis.tensors[name].element
    role = _role(analysis, name)
    # a one-byte integer is a code or a bit pattern, no row id: drawn as row ids its values
    # past 127 wrapped negative (review of 2299c7d), and as codes they take both signs
    if element not in ROW_ID_DTYPES or role == "output":
        return None
    tables, _, indexed = _indexed_tables(analysis, name)
    firsts = sorted(
        {
            str(analysis.shapes[other][0])
            for other in tables
            if analysis.shapes.get(other)
            # among every other tensor, one of a fixed few elements (`scale[0]`'s one) holds no
            # rows; a table the ids index has its rows, a fixed count (8 experts) too
            and (indexed or not str(analysis.shapes[other][0]).isdigit())
        }
    )
    if not firsts:
        return None
    return firsts[0] if len(firsts) == 1 else f"min({', '.join(firsts)})"


def _indexed_tables(analysis: Analysis, name: str) -> tuple[list[str], str, bool]:
    """(the tensors whose rows (first axis) integer input ``name``'s elements are drawn below,
    why those, whether those are the tensors it indexes): the tensors it places rows of (slots:
    every slot of the cache, not the fewest rows any tensor has, or a cache row at or past the
    token count is never drawn, review of 2299c7d); else the tensors its elements offset, where
    each such use reads a row (a row index ``ids[i] * d`` into a tensor of 2 axes or more, or
    an element index added alone into a 1-D one) at the tensor's own address (a row id drawn
    below the fewest rows of any tensor never reached the upper rows of a table larger than
    the others, and a candidate wrong only there passed: review of 98edc3a); else, where a use
    is not of that kind (an element index into a row, ``logprobs[b * vocab + ids[b]]``, is a
    column; a local pointer's or array's tensor, or a use not read, is unknown) or none is
    seen, every other tensor (the fewest rows any has)."""
    if name in analysis.slots:
        return list(analysis.slots[name]), "the rows of the tensors it places rows of", True
    uses = analysis.gathers.get(name, ())

    def reads_rows(tensor: str, scaled: bool, moved: bool) -> bool:
        rank = len(analysis.shapes.get(tensor, []))
        return not moved and ((rank == 1 and not scaled) or (rank > 1 and scaled))

    if uses and all(reads_rows(*use) for use in uses):
        tables = list(dict.fromkeys(use.tensor for use in uses))
        return tables, f"the rows of the tensors its elements index: {', '.join(tables)}", True
    others = [o for o in analysis.shapes if o != name]
    return others, "the fewest rows another tensor has, in case it indexes rows", False


def _param_item(binding: Binding, taken: set[str]) -> str:
    """One item of the header's ``params`` for a binding that is not a struct."""
    if binding.kind == "tensor" and binding.moved:
        return f"{binding.value} + bytes({binding.moved})"
    if binding.kind in ("tensor", "scalar"):
        return binding.value
    name = binding.param if binding.param not in taken else f"{binding.param}_arg"
    if binding.kind == "null":
        return f"{name} = nullptr"
    return f"{name}: {binding.dtype} = {binding.value}"


def header_text(analysis: Analysis, std: str | None = None) -> str:
    """The ``// astra:`` lines of production.cu (``std``: the build's C++ standard, if not
    NVRTC's default)."""
    taken = set(analysis.tensors) | set(analysis.scalars)
    params = []
    for binding in analysis.bindings:
        if binding.kind == "struct":
            fields = ", ".join(_param_item(f, taken) for f in binding.fields)
            params.append(f"{binding.value}{{{fields}}}")
        else:
            params.append(_param_item(binding, taken))
    return "\n".join(
        [
            f"// astra: entry = {analysis.entry}",
            f"// astra: params = {', '.join(params)}",
            f"// astra: grid = {analysis.grid}",
            f"// astra: block = {analysis.block}",
            f"// astra: smem = {analysis.smem}",
            *(
                f"// astra: tunable {t.name} = {', '.join(map(str, t.values))}"
                for t in analysis.tunables
            ),
            *(f"// astra: specialize {n} = {e}" for n, e in analysis.specializations.items()),
            *(f"// astra: requires = {r}" for r in [*analysis.requires, *_own_domain(analysis)]),
            *([f"// astra: std = {std}"] if std else []),
        ]
    )


LEAST_SIZE_SEARCH = 1 << 16
"""Largest least size tried for a dim: past it a requirement is left for the checks to name."""


def least_sizes(analysis: Analysis) -> dict[str, int]:
    """Each dim's least size: 1 (0 for an offset, :func:`offsets`), raised until every
    requirement of ``production.cu``'s header (the launch's conditions and a non-empty grid and
    block) holds with the other dims at theirs, for every dispatched element type. vLLM's
    act_and_mul launches ``min(d / 2, 1024)`` threads: a width of 1 is no call the framework
    makes, and a contract whose domain started there was rejected as wider than its own
    original (H100). A dim the kernel's vector accesses need a multiple of
    (:attr:`Analysis.multiples`) starts at that multiple and is raised over its multiples."""
    offset_dims = offsets(analysis)
    least = {dim: 0 if dim in offset_dims else 1 for dim in analysis.dims}
    # a dim the vector accesses need a multiple of starts at it and stays on its multiples
    least.update({d: m for d, m in analysis.multiples.items() if d not in offset_dims})
    requirements = [
        *analysis.requires,
        *_own_domain(analysis),
        *(f"{d} % {m} == 0" for d, m in analysis.multiples.items()),
    ]

    def holds(requirement: str, sizes: dict[str, int]) -> bool:
        for dtype in analysis.dtypes:
            env = _requirement_env(sizes, dtype)
            try:
                if not expr.evaluate(requirement, env):
                    return False
            except (expr.ExprError, ArithmeticError):
                continue  # not decidable for this type here: the checks' preflight names it
        return True

    # to a fixpoint: raising a dim for one requirement can break an earlier one (d % 2 == 0
    # then d >= 3 gives 3, then 4); each pass only raises sizes, and the passes are few
    for _ in range(len(requirements) + 1):
        changed = False
        for requirement in requirements:
            if holds(requirement, least):
                continue
            for dim in (d for d in analysis.dims if d in expr.names(requirement)):
                size = next(
                    (
                        n
                        for n in range(least[dim] + 1, LEAST_SIZE_SEARCH + 1)
                        if holds(requirement, {**least, dim: n})
                    ),
                    None,
                )
                if size is not None:
                    least[dim], changed = size, True
                    break
        if not changed:
            break
    return least


IMPORT_ARCH = "sm_90"
"""The architecture whose launch limits a drafted ``max`` respects: grid and block limits are the
same on every architecture the project targets (``harness.geometry``), and shared memory, which
differs, is left to the checks."""


def _launches(analysis: Analysis, sizes: dict[str, int]) -> bool:
    """Whether the original's grid and block for ``sizes`` are within CUDA's limits for every
    dispatched element type, the launch's requirements not consulted: a requirement such as
    ``d % 8 == 0`` would make sizes between those it admits pass and the search below stop at
    one of them, above a size that cannot launch."""
    return all(_launches_at(analysis, dtype, [sizes]) for dtype in analysis.dtypes)


def _launches_at(analysis: Analysis, dtype: str, shapes: list[dict[str, int]]) -> bool:
    """Whether the original's grid and block at element type ``dtype`` are within CUDA's limits
    at every one of ``shapes`` (one not decidable here is left to the checks' preflight)."""
    for sizes in shapes:
        env = _requirement_env(sizes, dtype)
        try:
            grid = expr.evaluate_dims3(analysis.grid, env)
            block = expr.evaluate_dims3(analysis.block, env)
        except (expr.ExprError, ArithmeticError):
            continue  # not decidable here: the checks' preflight names it
        if geometry_problem(grid, block, 0, IMPORT_ARCH) is not None:
            return False
    return True


def greatest_sizes(
    analysis: Analysis, least: dict[str, int], shapes: list[dict[str, int]]
) -> dict[str, int]:
    """A ``max`` for each dim whose growth alone takes the original's launch past CUDA's limits
    inside the domain the checks would otherwise probe (:data:`UNBOUNDED_FACTOR` times the
    suites' largest size): the largest size that still launches, the other dims at their least.
    A launcher that puts a dim on ``gridDim.y`` (one block row per expert) cannot launch past
    65535 of it, and the domain check refused the original against itself there (H100, the
    ``masked_copy`` fixture at cc80102: grid y 65536). The search is a bisection: launch sizes
    grow with the dims in every launcher seen. A bound below a suite's size is not drafted (the
    contract would refuse its own suite; the checks then name the launch that fails)."""
    greatest: dict[str, int] = {}
    for dim in analysis.dims:
        low = max([least[dim], *(s[dim] for s in shapes)])
        high = max(low, UNBOUNDED_FACTOR * low)
        if _launches(analysis, {**least, dim: high}) or not _launches(
            analysis, {**least, dim: low}
        ):
            continue
        while high - low > 1:  # low launches, high does not
            middle = (low + high) // 2
            if _launches(analysis, {**least, dim: middle}):
                low = middle
            else:
                high = middle
        greatest[dim] = low
    return greatest


def _at_least(shapes: list[dict[str, int]], least: dict[str, int]) -> list[dict[str, int]]:
    """The shapes with each dim raised to its least size, without repeats."""
    out: list[dict[str, int]] = []
    for shape in shapes:
        raised = {dim: max(size, least.get(dim, 1)) for dim, size in shape.items()}
        if raised not in out:
            out.append(raised)
    return out


def _own_domain(analysis: Analysis) -> list[str]:
    """The requirements of the operation's own domain beside the launch's conditions: a
    non-empty launch (:func:`_non_empty`) and room for each slot tensor's distinct draw
    (:func:`_slot_room`)."""
    return [*_non_empty(analysis), *_slot_room(analysis)]


def _slot_room(analysis: Analysis) -> list[str]:
    """``elements <= rows`` for each slot tensor (:attr:`Analysis.slots`): its elements are
    drawn distinct below ``rows`` (:func:`_index_rows`), and a framework never has more tokens
    to place than slots to place them in."""
    out = []
    for name in analysis.slots:
        rows = _index_rows(analysis, name)
        if rows is not None:
            count = " * ".join(f"({axis})" for axis in analysis.shapes[name]) or "1"
            out.append(f"{count} <= {rows}")
    return out


def _non_empty(analysis: Analysis) -> list[str]:
    """``grid >= 1`` and ``block >= 1``, each axis of a ``dim3`` tuple too (``min(x, y) >= 1``):
    the framework never launches an empty grid or block (its callers never pass such sizes), so
    shapes that would give one are outside the operation rather than launch errors. A tuple
    inside another expression (``select(batched, (x, e, t), (x, t))``, a ``dim3`` chosen at run
    time) is left out: its axes are not one list. A ``(head_dim // vec, heads)`` block had no
    requirement, and the domain's least shape (head_dim 1) gave a block of 0 threads (H100,
    the MergeRows fixture at 63c90b4)."""
    out = []
    for value in (analysis.grid, analysis.block):
        axes = expr.dims3_axes(value)
        if axes is not None:
            out.append(f"min({', '.join(axes)}) >= 1" if len(axes) > 1 else f"{axes[0]} >= 1")
    return out


def reference_text(op: str, oracle_dtype: str) -> str:
    return (
        f'"""Reference of {op}: the original kernel (production.cu) is the oracle.\n\n'
        f"It runs at {oracle_dtype}, the most precise element type the framework's dispatch\n"
        'instantiates, on the GPU (astra_graph.harness.oracle)."""\n\n'
        "from pathlib import Path\n\n"
        "from astra_graph.harness.oracle import original_outputs\n\n"
        f'ORACLE_DTYPE = "{oracle_dtype}"\n\n\n'
        f"def {op}(xp, inputs, params):\n"
        "    return original_outputs(Path(__file__).parent, ORACLE_DTYPE, xp, inputs, params)\n"
    )


def write_operation(
    folder: Path,
    op: str,
    analysis: Analysis,
    device_text: str,
    source: str,
    std: str | None = None,
) -> Written:
    """Write the three files of one imported operation (compiled at the C++ standard ``std``
    where given); raises ValueError when no suite fits."""
    contract, notes, oracle = _drafted(analysis, op, source)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "contract.toml").write_text(contract)
    (folder / "production.cu").write_text(
        f"// {op}: {source} as the framework writes it, imported by `astra import`.\n"
        + header_text(analysis, std)
        + "\n"
        + device_text
    )
    (folder / "reference.py").write_text(reference_text(op, oracle))
    return Written(folder, notes)
