"""Safe arithmetic expressions over named integers, for contracts and implementation headers.

Shapes, launch geometry and bytes moved are written as small expressions such as
``min(ceil_div(d, 8), 1024)`` or ``tokens * heads * head_dim * elem_bytes``. They are parsed with
:mod:`ast` and evaluated by walking a whitelist of node types: no ``eval``, no attribute access,
no subscripts, no names beyond the ones the caller binds and the functions listed here.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from functools import lru_cache

from astra_graph.kernel import occupancy

Number = int | float
Value = Number | bool | tuple[Number, ...]


class ExprError(ValueError):
    """An expression that cannot be parsed, names something unknown, or cannot be evaluated."""


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


MAX_EXPONENT = 64
"""``**`` refuses larger exponents: ``9**9**9`` would otherwise hang whoever evaluates it."""


def _power(a: Number, b: Number) -> Number:
    if abs(b) > MAX_EXPONENT:
        raise OverflowError(f"exponent {b} is larger than {MAX_EXPONENT}")
    return a**b


FUNCTIONS: dict[str, Callable[..., Number]] = {
    "min": min,
    "max": max,
    "ceil_div": _ceil_div,
    "round_up": _round_up,
    "log2": lambda x: int(math.log2(x)) if float(x).is_integer() else math.log2(x),
    "select": lambda condition, a, b: a if condition else b,
    "gcd": math.gcd,
    occupancy.EXPRESSION_NAME: occupancy.blocks_per_sm,
}
"""``select(c, a, b)`` is C++'s ``c ? a : b`` (a framework launcher's block size chosen by the
token count); both branches are evaluated. ``gcd`` is ``std::gcd`` of two whole numbers (a
launcher's vector width that divides the hidden size). ``blocks_per_sm(threads, smem)`` is the
launched kernel's occupancy (:mod:`astra_graph.kernel.occupancy`)."""

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: _power,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Number, Number], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


@lru_cache(maxsize=4096)
def parse(text: str) -> ast.Expression:
    """Parse and check an expression once; raises ExprError for anything outside the grammar."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"cannot parse expression {text!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        allowed = (
            ast.Expression,
            ast.BinOp,
            ast.UnaryOp,
            ast.USub,
            ast.UAdd,
            ast.Constant,
            ast.Name,
            ast.Load,
            ast.Call,
            ast.Tuple,
            ast.Compare,
            ast.BoolOp,
            ast.And,
            ast.Or,
            *_BINARY,
            *_COMPARE,
        )
        if not isinstance(node, allowed):
            raise ExprError(f"{type(node).__name__} is not allowed in expression {text!r}")
        if isinstance(node, ast.Constant) and (
            not isinstance(node.value, int | float) or isinstance(node.value, bool)
        ):
            raise ExprError(f"only numbers are allowed as constants in {text!r}")
        if isinstance(node, ast.Call) and (
            not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords
        ):
            raise ExprError(f"only {sorted(FUNCTIONS)} may be called in {text!r}")
    return tree


def equation(text: str) -> tuple[ast.expr, ast.expr] | None:
    """The two sides of an equality ``a == b`` (one comparison, nothing else), or None for any
    other expression or one that does not parse."""
    try:
        body = parse(text).body
    except ExprError:
        return None
    if not isinstance(body, ast.Compare) or len(body.ops) != 1:
        return None
    if not isinstance(body.ops[0], ast.Eq):
        return None
    return body.left, body.comparators[0]


def conjuncts(node: ast.expr) -> list[ast.expr]:
    """The terms of an ``and``, nested ones too (each holds where the whole does: SGLang's
    ``RuntimeCheck(rotary_dim > 0 && rotary_dim <= head_dim)`` bounds ``rotary_dim``), else
    ``node`` itself."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return [t for value in node.values for t in conjuncts(value)]
    return [node]


def factors(node: ast.expr) -> list[ast.expr]:
    """The factors of a product (``a * (b * c)`` -> a, b, c), else ``node`` itself."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return factors(node.left) + factors(node.right)
    return [node]


def names(text: str) -> set[str]:
    """The free names an expression uses (function names excluded)."""
    tree = parse(text)
    calls = (n for n in ast.walk(tree) if isinstance(n, ast.Call))
    called = {call.func.id for call in calls if isinstance(call.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


def constant_false(text: str) -> bool:
    """Whether ``text`` names nothing and evaluates to false (an expression that cannot be
    evaluated is not known to be false)."""
    try:
        return not names(text) and not evaluate(text, {})
    except ExprError:
        return False


def evaluate(text: str | int | float, env: Mapping[str, Number]) -> Value:
    """Evaluate an expression with the names in ``env`` bound; numbers pass through."""
    if isinstance(text, bool):
        raise ExprError("a boolean is not an expression")
    if isinstance(text, int | float):
        return text
    return _eval(parse(text).body, env, text)


def evaluate_int(text: str | int, env: Mapping[str, Number]) -> int:
    """Evaluate an expression that must give a whole number (shapes, grid, block, bytes)."""
    value = evaluate(text, env)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ExprError(f"expression {text!r} gives {value!r}, expected a whole number")
    return value


def evaluate_dims3(text: str | int, env: Mapping[str, Number]) -> tuple[int, int, int]:
    """Evaluate a grid or block expression: one whole number or a tuple of up to three."""
    value = evaluate(text, env)
    items = value if isinstance(value, tuple) else (value,)
    if not 1 <= len(items) <= 3:
        raise ExprError(f"expression {text!r} must give 1 to 3 numbers, got {len(items)}")
    out = []
    for item in items:
        if isinstance(item, float) and item.is_integer():
            item = int(item)
        if not isinstance(item, int) or isinstance(item, bool) or item < 1:
            raise ExprError(f"expression {text!r} gives {value!r}, expected positive whole numbers")
        out.append(item)
    x, y, z = [*out, 1, 1, 1][:3]
    return (x, y, z)


def dims3_axes(text: str | int) -> list[str] | None:
    """The axes of a grid or block expression as expressions of their own (``(d // 8, heads)``
    gives ``['d // 8', 'heads']``, one number one axis), or None where a tuple is chosen inside
    another expression (``select(batched, (x, e, t), (x, t))``): its axes are not one list."""
    body = parse(text).body if isinstance(text, str) else ast.Constant(text)
    axes = body.elts if isinstance(body, ast.Tuple) else [body]
    if any(isinstance(node, ast.Tuple) for axis in axes for node in ast.walk(axis)):
        return None
    return [ast.unparse(axis) for axis in axes] if isinstance(body, ast.Tuple) else [str(text)]


def _eval(node: ast.AST, env: Mapping[str, Number], text: str) -> Value:
    match node:
        case ast.Constant(value=int() | float() as value):  # parse() admits numbers only
            return value
        case ast.Name(id=name):
            if name not in env:
                raise ExprError(f"unknown name {name!r} in expression {text!r}")
            return env[name]
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            return -_eval(operand, env, text)  # type: ignore[operator]  # a tuple operand: TypeError
        case ast.UnaryOp(op=ast.UAdd(), operand=operand):
            return _eval(operand, env, text)
        case ast.BinOp(left=left, op=op, right=right):
            a, b = _eval(left, env, text), _eval(right, env, text)
            try:
                return _BINARY[type(op)](a, b)  # type: ignore[arg-type]  # tuple operands: TypeError below
            except (ZeroDivisionError, OverflowError, TypeError) as exc:
                raise ExprError(f"cannot evaluate {text!r}: {exc}") from None
        case ast.Compare(left=left, ops=ops, comparators=comparators):
            current = _eval(left, env, text)
            for cmp, right in zip(ops, comparators, strict=True):
                nxt = _eval(right, env, text)
                if not _COMPARE[type(cmp)](current, nxt):  # type: ignore[arg-type]  # tuples: TypeError
                    return False
                current = nxt
            return True
        case ast.BoolOp(op=op, values=values):
            results = [bool(_eval(v, env, text)) for v in values]
            return all(results) if isinstance(op, ast.And) else any(results)
        case ast.Call(func=ast.Name(id=fname), args=args):
            try:
                return FUNCTIONS[fname](*(_eval(a, env, text) for a in args))
            except (TypeError, ValueError, ZeroDivisionError) as exc:
                raise ExprError(f"cannot evaluate {text!r}: {exc}") from None
        case ast.Tuple(elts=elts):
            return tuple(_eval(e, env, text) for e in elts)  # type: ignore[misc]  # a nested tuple fails its caller's item check
    raise ExprError(f"cannot evaluate {text!r}")  # unreachable after parse()


def split_top_level(text: str, angles: bool = True) -> list[str]:
    """Split at commas outside ``()``, ``[]``, ``{}`` and, with ``angles``, ``<>`` (template,
    parameter and argument lists, initialiser lists; the ``>`` of ``->`` closes nothing).
    Without ``angles`` a ``<`` is a comparison (a field's expression, ``a < b ? a : b``); ``<=``
    and ``>=`` are comparisons and ``<<`` a shift either way, and a ``>`` with no ``<`` open
    (``a >> 2``) closes nothing."""
    parts: list[str] = []
    current: list[str] = []
    depth = angle = 0
    for index, char in enumerate(text):
        following, previous = text[index + 1 : index + 2], text[index - 1 : index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif angles and char == "<" and following not in ("=", "<") and previous != "<":
            angle += 1
        elif angles and char == ">" and angle and following != "=" and previous != "-":
            angle -= 1
        if char == "," and depth == 0 and angle == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    tail = "".join(current)
    if tail.strip():
        parts.append(tail)
    return [p.strip() for p in parts]
