"""Calls of host functions that compute a size with statements, read by running their body.

A launch size may call a ``constexpr`` helper that loops (SGLang's ``next_pow2(target,
factor)``: ``uint32_t power = 1; while (power * factor < target) power *= 2; return power;``).
Such a function is pure over whole numbers, its value a function of its arguments alone, so a
call is read by interpreting the body over the call's arguments (:func:`call`):

* where every value the body branches on is known (literals, arguments that fold to numbers),
  the body runs as C++ runs it, to a number, within :data:`MAX_STEPS` statements. Each number
  keeps its C++ type (a declared one, a literal's, the usual arithmetic conversions of an
  operation's); one that leaves its type (unsigned wrap-around, signed overflow) is refused,
  not modelled;
* where a condition reads an argument only the shapes know (a size), each way it can go is
  followed on its own and the value is a C++ conditional over the conditions met
  (``(1 * f < t) ? ((2 * f < t) ? ... : 2) : 1``), which a contract reads as ``select``. A loop
  on such a condition is unrolled :data:`MAX_UNROLLED` times on each path at most; past that,
  the shapes that would still loop are excluded by a requirement (:attr:`Outcome.requires`: the
  conditions that lead there are not all true), so the expression is exact on the operation's
  domain. Arithmetic over unknown values is read as exact whole numbers: the ranges of the
  values it produces are not checked (only the shapes could say).

Statements read: declarations with initialisers, assignments (``=`` and compound), ``++`` and
``--``, ``if``/``else``, ``while``, ``do``/``while``, ``for``, blocks and ``return``. Anything
else (``break``, ``switch``, ``goto``, a pointer, a float, an array) is refused with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from astra_graph.framework.parse import function_body_node, text, unparenthesised

if TYPE_CHECKING:
    from tree_sitter import Node

    from astra_graph.framework.parse import Procedure

MAX_STEPS = 100_000
"""Most statements one call runs (all its paths together) before it is refused as endless."""
MAX_UNROLLED = 16
"""Most iterations a loop on an unknown condition is unrolled on one path; shapes needing more
are excluded by a requirement."""
MAX_PATHS = 256
"""Most ways through the body (each an unknown condition's outcome) before it is refused."""

_INT = (32, True)
"""``int``: a literal's type without suffix, and what narrower types promote to."""
_WIDEST = (64, False)
INTEGER_TYPES: dict[str, tuple[int, bool]] = {
    "int": _INT,
    "signed": _INT,
    "int32_t": _INT,
    "unsigned": (32, False),
    "unsigned int": (32, False),
    "uint32_t": (32, False),
    "long": (64, True),
    "long long": (64, True),
    "int64_t": (64, True),
    "ssize_t": (64, True),
    "ptrdiff_t": (64, True),
    "unsigned long": _WIDEST,
    "unsigned long long": _WIDEST,
    "uint64_t": _WIDEST,
    "size_t": _WIDEST,
    "short": (16, True),
    "int16_t": (16, True),
    "uint16_t": (16, False),
    "int8_t": (8, True),
    "uint8_t": (8, False),
    "bool": (1, False),
}
"""(bits, signed) of the integer types a body declares (``std::`` dropped); ``auto`` takes its
initialiser's type."""
_ASSIGN_OPS = ("+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^")
_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")


class NotInterpreted(ValueError):
    """The call cannot be read by running the body; ``str()`` says why."""


@dataclass(frozen=True)
class Num:
    """A known whole number with its C++ type."""

    value: int
    bits: int
    signed: bool


Value = Num | str
"""A known number, or the C++ text of a value only the shapes know (parenthesised)."""


@dataclass(frozen=True)
class Outcome:
    """What a call returns, as C++ text, and the requirements under which that is exact."""

    value: str
    requires: tuple[str, ...] = ()
    """C++ conditions excluding the shapes on which a loop runs past :data:`MAX_UNROLLED`."""


@dataclass
class _Var:
    value: Value | None
    """None: declared without a value (reading it is refused)."""
    kind: tuple[int, bool] | None
    """(bits, signed) of its declared type; None where not read (``auto`` of an unknown)."""


@dataclass
class _Scope:
    """The end of a block: the names it declared go out of scope."""

    outer: frozenset[str]


@dataclass
class _Loop:
    """A loop's next test: its condition (None: ``for (;;)``), body and ``for`` update."""

    condition: Node | None
    body: Node
    update: Node | None


_Work = tuple["Node | _Scope | _Loop", ...]


@dataclass
class _Run:
    """The state shared by every path of one call."""

    free: Callable[[str], str | None]
    steps: int = 0
    paths: int = 1
    requires: list[str] = field(default_factory=list)


_CUT = object()
"""A path's value past the unrolling bound: a requirement excludes it."""


def call(procedure: Procedure, args: list[Value], free: Callable[[str], str | None]) -> Outcome:
    """The value of ``procedure`` called with ``args`` (its defaults filling the rest); ``free``
    gives a name the body reads that is no local or parameter as a C++ expression of the
    caller's scope (a qualified constant), or None where it is unknown. Raises NotInterpreted."""
    if len(args) > len(procedure.params):
        raise NotInterpreted(f"{len(args)} arguments for {len(procedure.params)} parameters")
    body = function_body_node(procedure.body)
    if body is None:
        raise NotInterpreted("its body does not parse")
    run = _Run(free)
    env: dict[str, _Var] = {}
    for index, (name, kind) in enumerate(zip(procedure.params, procedure.kinds, strict=True)):
        if index < len(args):
            given = args[index]
        elif procedure.defaults[index] is not None:
            given = _value(_parsed(procedure.defaults[index] or ""), env, run)
        else:
            raise NotInterpreted(f"no argument for {name!r}, which has no default")
        kind_of = INTEGER_TYPES.get(kind.removeprefix("std::"))
        if kind_of is None:
            raise NotInterpreted(
                f"parameter {name!r} is a {kind or 'typeless'} value, not a whole number"
            )
        env[name] = _Var(_converted(given, kind_of, name), kind_of)
    value = _paths((body,), env, (), 0, run)
    if value is _CUT:
        raise NotInterpreted(f"it loops past {MAX_UNROLLED} iterations on every path")
    assert isinstance(value, (Num, str))
    return Outcome(_spelled(value), tuple(dict.fromkeys(run.requires)))


def _parsed(source: str) -> Node:
    body = function_body_node(f"return {source};")
    returned = body.named_children[0] if body is not None and body.named_children else None
    if returned is None or not returned.named_children:
        raise NotInterpreted(f"cannot read {source!r}")
    return returned.named_children[0]


def _spelled(value: Value) -> str:
    return str(value.value) if isinstance(value, Num) else value


def _paths(
    work: _Work, env: dict[str, _Var], path: tuple[str, ...], unrolled: int, run: _Run
) -> Value | object:
    """Run ``work`` (statements and markers, first first) from ``env`` on the path whose
    unknown conditions ``path`` holds; the returned value (or :data:`_CUT`)."""
    while work:
        run.steps += 1
        if run.steps > MAX_STEPS:
            raise NotInterpreted(f"it runs past {MAX_STEPS} statements")
        head, work = work[0], work[1:]
        if isinstance(head, _Scope):
            for name in set(env) - head.outer:
                del env[name]
            continue
        if isinstance(head, _Loop):
            condition = (
                Num(1, *_INT) if head.condition is None else _value(head.condition, env, run)
            )
            again: _Work = (head.body, *((head.update,) if head.update else ()), head, *work)
            if isinstance(condition, Num):
                work = again if condition.value else work
                continue
            if unrolled >= MAX_UNROLLED:
                run.requires.append(f"!({' && '.join((*path, condition))})")
                exited = _paths(work, env, (*path, f"!{condition}"), unrolled, run)
                return _fork(condition, _CUT, exited, run)
            return _fork(
                condition,
                _paths(again, _copied(env), (*path, condition), unrolled + 1, run),
                _paths(work, env, (*path, f"!{condition}"), unrolled, run),
                run,
            )
        kind = head.type
        if kind == "compound_statement":
            work = (*head.named_children, _Scope(frozenset(env)), *work)
        elif kind in ("comment", "static_assert_declaration") or text(head).startswith(
            "static_assert"
        ):
            continue
        elif kind == "declaration":
            _declare(head, env, run)
        elif kind == "expression_statement":
            for child in head.named_children:
                _value(child, env, run)
        elif kind == "return_statement":
            if len(head.named_children) != 1:
                raise NotInterpreted(f"{text(head)!r} returns no value")
            return _value(head.named_children[0], env, run)
        elif kind == "if_statement":
            condition = _value(_condition(head), env, run)
            then = _child(head, "consequence")
            other = head.child_by_field_name("alternative")
            otherwise = () if other is None else tuple(other.named_children)
            if isinstance(condition, Num):
                work = ((then,) if condition.value else otherwise) + work
                continue
            return _fork(
                condition,
                _paths((then, *work), _copied(env), (*path, condition), unrolled, run),
                _paths((*otherwise, *work), env, (*path, f"!{condition}"), unrolled, run),
                run,
            )
        elif kind == "while_statement":
            work = (_Loop(_condition(head), _child(head, "body"), None), *work)
        elif kind == "do_statement":
            body = _child(head, "body")
            work = (body, _Loop(_condition(head), body, None), *work)
        elif kind == "for_statement":
            work = (*_for_loop(head), _Scope(frozenset(env)), *work)
        elif kind.endswith("_expression"):  # a `for` loop's initialiser or update
            _value(head, env, run)
        else:
            raise NotInterpreted(f"{kind.replace('_', ' ')} {_short(head)!r}")
    raise NotInterpreted("a path ends without a return")


def _fork(
    condition: str, then: Value | object, otherwise: Value | object, run: _Run
) -> Value | object:
    """``condition ? then : otherwise``; a cut branch leaves the other (the requirement
    excludes it)."""
    if then is _CUT:
        return otherwise
    if otherwise is _CUT:
        return then
    run.paths += 1
    if run.paths > MAX_PATHS:
        raise NotInterpreted(f"more than {MAX_PATHS} ways through its conditions")
    assert isinstance(then, (Num, str)) and isinstance(otherwise, (Num, str))
    return f"(({condition}) ? {_spelled(then)} : {_spelled(otherwise)})"


def _copied(env: dict[str, _Var]) -> dict[str, _Var]:
    return {name: _Var(v.value, v.kind) for name, v in env.items()}


def _child(node: Node, name: str) -> Node:
    """The child ``name`` of a statement, which its kind always has where it parses."""
    child = node.child_by_field_name(name)
    if child is None:
        raise NotInterpreted(f"{_short(node)!r}: no {name}")
    return child


def _condition(statement: Node) -> Node:
    clause = statement.child_by_field_name("condition")
    if clause is not None and clause.type == "condition_clause":
        clause = clause.child_by_field_name("value")
    if clause is None:
        raise NotInterpreted(f"{_short(statement)!r}: no condition read")
    return clause


def _for_loop(statement: Node) -> _Work:
    """A ``for`` statement as its initialiser and its loop (the caller closes its scope)."""
    initializer = statement.child_by_field_name("initializer")
    condition = statement.child_by_field_name("condition")
    update = statement.child_by_field_name("update")
    body = _child(statement, "body")
    first: _Work = () if initializer is None else (initializer,)
    return (*first, _Loop(condition, body, update))


def _short(node: Node) -> str:
    return " ".join(text(node).split())[:60]


def _declare(statement: Node, env: dict[str, _Var], run: _Run) -> None:
    """The locals one declaration declares, each with its value and type."""
    words = [
        w
        for w in re.findall(r"[\w:]+", text(statement.child_by_field_name("type")))
        if w not in ("const", "constexpr", "static", "volatile")
    ]
    spelled = " ".join(w.removeprefix("std::") for w in words)
    declared = None if spelled == "auto" else INTEGER_TYPES.get(spelled)
    if declared is None and spelled != "auto":
        raise NotInterpreted(f"local of type {spelled!r}, not a whole number")
    for child in statement.named_children:
        if child.type == "identifier":
            env[text(child)] = _Var(None, declared)
            continue
        if child.type != "init_declarator":
            continue
        declarator = child.child_by_field_name("declarator")
        value_node = child.child_by_field_name("value")
        if declarator is None or declarator.type != "identifier" or value_node is None:
            raise NotInterpreted(f"declaration {_short(child)!r}: one name and a value expected")
        if value_node.type == "initializer_list":
            items = value_node.named_children
            if len(items) != 1:
                raise NotInterpreted(f"declaration {_short(child)!r}: one value expected")
            value_node = items[0]
        value = _value(value_node, env, run)
        kind = declared or (_kind_of(value))
        env[text(declarator)] = _Var(_converted(value, kind, text(declarator)), kind)


def _kind_of(value: Value) -> tuple[int, bool] | None:
    return (value.bits, value.signed) if isinstance(value, Num) else None


def _converted(value: Value, kind: tuple[int, bool] | None, name: str) -> Value:
    """``value`` stored in a local or parameter of type ``kind``; a known number outside the
    type's range is refused (C++ would wrap it or leave it undefined)."""
    if not isinstance(value, Num) or kind is None:
        return value
    bits, signed = kind
    if bits == 1:
        return Num(int(bool(value.value)), 1, False)
    _check(value.value, kind, f"{name} = {value.value}")
    return Num(value.value, bits, signed)


def _check(number: int, kind: tuple[int, bool], what: str) -> None:
    bits, signed = kind
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not low <= number <= high:
        raise NotInterpreted(
            f"{what} leaves its type ({'' if signed else 'u'}int{bits}): C++ wraps or is undefined"
        )


def _common(left: Num, right: Num) -> tuple[int, bool]:
    """The usual arithmetic conversions of two whole numbers' types (C++'s [expr.arith.conv])."""
    sides = [(max(n.bits, 32), n.signed or n.bits < 32) for n in (left, right)]
    (lb, ls), (rb, rs) = sides
    if ls == rs:
        return max(lb, rb), ls
    signed_bits, unsigned_bits = (lb, rb) if ls else (rb, lb)
    if unsigned_bits >= signed_bits:
        return unsigned_bits, False
    return signed_bits, True


def _literal(node: Node) -> Num:
    spelled = text(node).replace("'", "")
    digits = spelled.rstrip("uUlL")
    suffix = spelled[len(digits) :].lower()
    if "." in digits or ("e" in digits.lower() and not digits.lower().startswith("0x")):
        raise NotInterpreted(f"a float literal {spelled!r}")
    number = int(digits, 0) if not re.fullmatch(r"0\d+", digits) else int(digits, 8)
    bits = 64 if "l" in suffix else 32
    unsigned = "u" in suffix
    # C++ ([lex.icon]): a decimal literal without `u` takes the first signed type it fits
    # (int, then long); a hexadecimal or octal one may also take the unsigned type of a width
    decimal = not re.match(r"0[xXbB0-7]", digits) or digits == "0"
    if not unsigned and number >= (1 << (bits - 1)):
        if decimal or bits == 64 or number >= (1 << bits):
            bits = 64
        else:
            unsigned = True
    elif unsigned and number >= (1 << bits):
        bits = 64
    if number >= (1 << bits) or (not unsigned and number >= (1 << (bits - 1))):
        raise NotInterpreted(f"a literal {spelled!r} past 64 bits")
    return Num(number, bits, not unsigned)


def _value(node: Node, env: dict[str, _Var], run: _Run) -> Value:
    """The value of an expression: a number where every operand is known, else C++ text."""
    node = unparenthesised(node)
    kind = node.type
    if kind == "number_literal":
        return _literal(node)
    if kind in ("true", "false"):
        return Num(int(kind == "true"), 1, False)
    if kind == "identifier":
        name = text(node)
        if name in env:
            value = env[name].value
            if value is None:
                raise NotInterpreted(f"{name!r} is read before it is set")
            return value
        resolved = run.free(name)
        if resolved is None:
            raise NotInterpreted(f"{name!r} is neither a local, a parameter nor a known constant")
        return f"({resolved})"
    if kind == "qualified_identifier":
        return text(node)
    if kind == "assignment_expression":
        return _assign(node, env, run)
    if kind == "update_expression":
        return _update(node, env)
    if kind == "comma_expression":
        _value(node.child_by_field_name("left"), env, run)  # type: ignore[arg-type]
        return _value(node.child_by_field_name("right"), env, run)  # type: ignore[arg-type]
    if kind == "binary_expression":
        op = text(node.child_by_field_name("operator"))
        left = _value(node.child_by_field_name("left"), env, run)  # type: ignore[arg-type]
        if op in ("&&", "||") and isinstance(left, Num) and bool(left.value) == (op == "||"):
            return Num(int(op == "||"), 1, False)  # short-circuit: the right is not evaluated
        right = _value(node.child_by_field_name("right"), env, run)  # type: ignore[arg-type]
        return _binary(op, left, right)
    if kind == "unary_expression":
        op = text(node.child_by_field_name("operator"))
        operand = _value(node.child_by_field_name("argument"), env, run)  # type: ignore[arg-type]
        if not isinstance(operand, Num):
            return f"({op}{operand})"
        if op == "!":
            return Num(int(not operand.value), 1, False)
        promoted = (
            _common(operand, Num(0, *_INT)) if operand.bits < 32 else (operand.bits, operand.signed)
        )
        if op == "+":
            return Num(operand.value, *promoted)
        if op == "-":
            _check(-operand.value, promoted, f"-{operand.value}")
            return Num(-operand.value, *promoted)
        raise NotInterpreted(f"operator {op!r}")
    if kind == "conditional_expression":
        parts = [node.child_by_field_name(f) for f in ("condition", "consequence", "alternative")]
        if any(p is None for p in parts):
            raise NotInterpreted(f"cannot read {_short(node)!r}")
        condition = _value(parts[0], env, run)  # type: ignore[arg-type]
        if isinstance(condition, Num):
            return _value(parts[1 if condition.value else 2], env, run)  # type: ignore[arg-type]
        chosen = [_value(p, env, run) for p in parts[1:]]  # type: ignore[arg-type]
        return f"(({condition}) ? {_spelled(chosen[0])} : {_spelled(chosen[1])})"
    if kind == "call_expression":
        return _call(node, env, run)
    if kind == "sizeof_expression":
        return text(node)
    raise NotInterpreted(f"{kind.replace('_', ' ')} {_short(node)!r}")


def _call(node: Node, env: dict[str, _Var], run: _Run) -> Value:
    """A cast keeps its operand (converted where the type is a whole number); another call is
    spelled over its arguments' values, and folded where it is ``min`` or ``max`` of numbers."""
    function = node.child_by_field_name("function")
    arguments = node.child_by_field_name("arguments")
    args = [_value(a, env, run) for a in (arguments.named_children if arguments else [])]
    name = re.sub(r"\s+", "", text(function))
    cast = re.fullmatch(r"static_cast<(?:std::)?([\w\s]+)>", name)
    if cast is not None and len(args) == 1:
        kind = INTEGER_TYPES.get(cast[1])
        if kind is None:
            raise NotInterpreted(f"a cast to {cast[1]!r}, not a whole number")
        return _converted(args[0], kind, name)
    short = name.split("<", 1)[0].removeprefix("std::")
    if short in ("min", "max") and len(args) == 2 and all(isinstance(a, Num) for a in args):
        chosen = (min if short == "min" else max)(args, key=lambda a: a.value)  # type: ignore[union-attr]
        assert isinstance(chosen, Num)
        return chosen
    return f"{text(function)}({', '.join(_spelled(a) for a in args)})"


def _binary(op: str, left: Value, right: Value) -> Value:
    """A binary operation in C++'s semantics on known numbers (division truncates, comparisons
    are 0 or 1), refused where the result leaves its type; spelled over unknown ones."""
    if not isinstance(left, Num) or not isinstance(right, Num):
        return f"({_spelled(left)} {op} {_spelled(right)})"
    if op in ("&&", "||"):
        truth = bool(left.value) and bool(right.value) if op == "&&" else bool(right.value)
        return Num(int(truth), 1, False)
    if op in ("<<", ">>"):
        kind = (max(left.bits, 32), left.signed or left.bits < 32)
        if not 0 <= right.value < kind[0]:
            raise NotInterpreted(f"shift by {right.value}")
        result = left.value << right.value if op == "<<" else left.value >> right.value
        _check(result, kind, f"{left.value} {op} {right.value}")
        return Num(result, *kind)
    kind = _common(left, right)
    a, b = left.value, right.value
    _check(a, kind, str(a))  # a negative number that an unsigned type would wrap
    _check(b, kind, str(b))
    if op in _COMPARISONS:
        compared = {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}
        return Num(int(compared[op]), 1, False)
    if op in ("/", "%"):
        if b == 0:
            raise NotInterpreted(f"{a} {op} 0")
        quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        result = quotient if op == "/" else a - b * quotient
    elif op in ("+", "-", "*"):
        result = a + b if op == "+" else a - b if op == "-" else a * b
    elif op in ("&", "|", "^"):
        result = a & b if op == "&" else a | b if op == "|" else a ^ b
    else:
        raise NotInterpreted(f"operator {op!r}")
    _check(result, kind, f"{a} {op} {b}")
    return Num(result, *kind)


def _assign(node: Node, env: dict[str, _Var], run: _Run) -> Value:
    target = node.child_by_field_name("left")
    name = text(target)
    if target is None or target.type != "identifier" or name not in env:
        raise NotInterpreted(f"assignment to {name!r}, not a local of the body")
    op = text(node.child_by_field_name("operator"))
    value = _value(node.child_by_field_name("right"), env, run)  # type: ignore[arg-type]
    if op != "=":
        if op[:-1] not in _ASSIGN_OPS:
            raise NotInterpreted(f"operator {op!r}")
        current = env[name].value
        if current is None:
            raise NotInterpreted(f"{name!r} is read before it is set")
        value = _binary(op[:-1], current, value)
    stored = _converted(value, env[name].kind, name)
    env[name].value = stored
    return stored


def _update(node: Node, env: dict[str, _Var]) -> Value:
    target = node.child_by_field_name("argument")
    name = text(target)
    current = env[name].value if name in env else None
    if current is None:
        raise NotInterpreted(f"{_short(node)!r}: not a local of the body that is set")
    step = Num(1, *_INT)
    op = "+" if "++" in text(node) else "-"
    stored = _converted(_binary(op, current, step), env[name].kind, name)
    env[name].value = stored
    prefix = text(node).lstrip().startswith(("++", "--"))
    return stored if prefix else current
