"""How far a kernel reaches a pointer it writes through, past each strided row it offsets it
to: a launch requirement that every row holds what is reached in it.

A kernel that hands ``p + token * row_stride + head * head_stride`` to a ``__device__`` function
of the source, which reads and writes ``arr[r]`` and ``arr[half + r]`` for ``r < half``, reaches
each head's row up to ``2 * half`` elements past its start. Two adjacent values of one index
(two heads of one token, or two tokens), the others alike, then reach overlapping elements
unless ``2 * half <= head_stride`` (and ``<= row_stride``): two threads write one element, and
the last row's reach passes the tensor's end. SGLang's rotary launcher never checks that its
cache's width (``rot_dim``, ``half = rot_dim / 2``) is at most the head size it passes as the
head stride; drafted at a hidden size, the original wrote out of bounds and differed from
itself on the H100.

:func:`kernel_row_reaches` reads it on the syntax tree (:class:`RowReach`): from each pointer
parameter of the kernel, through the calls of free functions of the source it is handed to
(bare or plus a sum of terms), up to :data:`MAX_CALL_DEPTH` deep, to every subscript
``q[index]`` of what it became. Values are read in the kernel's terms (:class:`_Exact`: its
by-value and template parameters, whole numbers, ``gridDim``/``blockDim``; :class:`_Index`: a
run-time index and the largest value it takes): a callee's parameters are the call's
arguments, a local each value it is given, an index bounded by a guard, a loop's condition, a
remainder or a built-in index (:func:`~astra_graph.framework.parse._below_factors`), as the
kernel's other extents are. A term ``i * s`` of an offset, ``s`` exact and ``i`` an index, is a
row of stride ``s``; the reach past its start is one past the largest index of each subscript
beyond (the largest value of each index taken as reached, as the other extents take it). Each
(reach, stride) is a requirement ``reach <= stride``, necessary whichever stride is the outer
one. Only a pointer written somewhere on that path has one (rows that are only read may
overlap, a sliding window); one used any other way (stored into a local pointer, cast, handed
to a function that is not the source's one definition of its name), or a value not read, has
none: nothing is claimed of it, never a requirement that is not the kernel's.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from astra_graph.framework.parse import (
    BLOCK_BOUNDS,
    COMPARISONS,
    _address_of,
    _bare_declarator,
    _below_factors,
    _compact,
    _element_written,
    _enclosing_conditions,
    _exits_before,
    _function_declarator,
    _guard_product,
    _identifiers,
    _null_test,
    _only_read,
    _operands,
    _params,
    _single_index,
    _template_params,
    _update_spans,
    _walk,
    _whole_sum,
    _within,
    text,
    unparenthesised,
)

if TYPE_CHECKING:
    from tree_sitter import Node

    from astra_graph.framework.vectors import FunctionIndex

MAX_CALL_DEPTH = 4
"""Calls followed from the kernel to a subscript of the pointer it hands on: SGLang's rotary
kernel reaches its query through two (``apply_rotary_embedding``,
``apply_token_rotary_embedding``)."""
MAX_FORMS = 16
"""Alternatives one value may take (a local assigned in each branch of an ``if``); past this
the value is not read."""
MAX_LOCAL_DEPTH = 4
"""Locals followed inside each other's values when splitting an offset into terms
(``token_head = token_idx * query_stride + head_idx * head_stride``: one). Not
:data:`~astra_graph.framework.parse.MAX_BOUND_DEPTH`, which counts the initialisers and
divisions the bound analysis follows from one index."""

INTEGER_TYPES = frozenset(
    ("int", "unsigned", "int32_t", "uint32_t", "int64_t", "uint64_t", "size_t", "long")
)
"""Types a cast of an index to keeps its value (``static_cast<int64_t>(token)``)."""

FACT_KINDS = (
    "declaration",
    "for_statement",
    "assignment_expression",
    "update_expression",
    "pointer_expression",
    "parameter_declaration",
    "call_expression",
    "identifier",
)
"""The syntax a function's facts (:func:`_facts`) are read from."""

Linear = tuple[tuple[tuple[str, ...], int], ...]
"""A sum of products with whole coefficients: each (the product's factors, sorted; its
coefficient), sorted; the empty product is the constant."""


@dataclass(frozen=True)
class RowReach:
    """A pointer parameter written through rows of index strides (:func:`kernel_row_reaches`):
    each (how far past a row's start the kernel reaches, the stride of that row's index), both
    Python expressions over the kernel's by-value and template parameters, whole numbers and
    ``gridDim``/``blockDim`` fields. SGLang's rotary kernel gives its query ((``2 * (rot_dim
    // 2)``, ``head_stride``), (``2 * (rot_dim // 2)``, ``query_stride``))."""

    pointer: str
    rows: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class _Exact:
    """A value the launch fixes, as a Python expression in the kernel's terms."""

    text: str


@dataclass(frozen=True)
class _Index:
    """A run-time index (never negative), with the largest value it takes in the kernel's
    terms, or None where that is not read."""

    top: Linear | None


_Value = _Exact | _Index


Key = tuple[int, int] | str
"""What a name at a use stands for: the place of the local's declaration it reads, or the
parameter's name."""


@dataclass
class _Scope:
    """What one function's values are read from: its parameters' values at the call (``env``);
    for each declaration of a local (by place: two loops may each declare an ``i``), the values
    it is given (initialiser and plain assignments); the declarations and parameters the body
    changes otherwise (never read), those a loop's update clause steps (only a guard bounds
    them), the names a lambda declares again (another variable, never read), and every name
    the body declares. Keyed by declaration, not by name as
    :func:`~astra_graph.framework.parse._mutated_names` and ``_unsteady_names`` are: SGLang's
    rotary kernel declares ``i`` in two sibling loops, which those take as one name changed."""

    env: dict[str, list[_Value]]
    body: Node
    given: dict[Key, list[Node]]
    changed: set[Key]
    stepped: set[Key]
    shadowed: set[str]
    names: set[str]
    uses: dict[str, list[Node]] = field(default_factory=dict)
    """Each name's uses (identifiers), in order."""
    reading: set[Key] = field(default_factory=set)
    """The locals whose values are being read (one read again inside its own is not read:
    ``a = b`` and ``b = a``)."""


@dataclass
class _Reached:
    """What one pointer parameter of a function reaches: one past each offset reached from the
    pointer (None where one is not read), each (reach, stride) of a row found on the way, and
    whether any use writes."""

    extents: list[Linear] | None
    rows: list[tuple[Linear, str]] = field(default_factory=list)
    written: bool = False


def _linear(value: _Value) -> Linear | None:
    """The largest value ``value`` takes, as a sum of products."""
    if isinstance(value, _Index):
        return value.top
    if value.text.isdigit():
        return (((), int(value.text)),)
    return (((value.text,), 1),)


def _sum(*terms: Linear) -> Linear:
    total: dict[tuple[str, ...], int] = {}
    for term in terms:
        for product, coefficient in term:
            total[product] = total.get(product, 0) + coefficient
    return tuple(sorted((p, c) for p, c in total.items() if c))


def _scaled(term: Linear, by: _Exact) -> Linear:
    """``term`` times an exact value (a size: never negative)."""
    if by.text.isdigit():
        return _sum(tuple((p, c * int(by.text)) for p, c in term))
    return _sum(tuple((tuple(sorted((*p, by.text))), c) for p, c in term))


def _one_more(term: Linear) -> Linear:
    return _sum(term, (((), 1),))


def _dominates(larger: Linear, smaller: Linear) -> bool:
    """Whether ``larger`` is at least ``smaller`` at every size (no coefficient of the
    difference negative: every factor is a size, never negative)."""
    return all(c >= 0 for _, c in _sum(larger, tuple((p, -c) for p, c in smaller)))


def linear_text(term: Linear) -> str:
    """A sum of products as a Python expression (``2 * (rot_dim // 2) - 1``)."""
    parts: list[str] = []
    for product, coefficient in sorted(term, key=lambda t: (not t[0], t[0])):
        factors = [f"({f})" if re.search(r"[^\w.]", f) else f for f in product]
        magnitude = abs(coefficient)
        spelled = " * ".join(([str(magnitude)] if magnitude != 1 or not factors else []) + factors)
        if not parts:
            parts.append(spelled if coefficient > 0 else f"-{spelled}")
        else:
            parts.append(f"{'+' if coefficient > 0 else '-'} {spelled}")
    return " ".join(parts) or "0"


Facts = dict[tuple[int, int], "_Scope"]
"""Each function body's :class:`_Scope` but its parameters' values, by the body's place: read
once for every call and kernel of one source."""


def _scope(body: Node, env: dict[str, list[_Value]], index: FunctionIndex, facts: Facts) -> _Scope:
    """The body's :class:`_Scope` with ``env`` (what a call gives its parameters)."""
    if _span(body) not in facts:
        facts[_span(body)] = _facts(body, index)
    return replace(facts[_span(body)], env=env, reading=set())


def _facts(body: Node, index: FunctionIndex) -> _Scope:
    """The body's :class:`_Scope` but its parameters' values: a local or parameter is changed
    where it is updated other than by a plain ``x = v`` (``+=``, ``++`` outside a loop's update
    clause), a parameter assigned at all, a local given a value of its own past values, an
    address taken, or handed bare to a call (which may take it by reference) other than at a
    by-value parameter of the source's one function of that name (where
    :func:`~astra_graph.framework.parse._unsteady_names` takes every call as one that may)."""
    scope = _Scope({}, body, {}, set(), set(), set(), set())
    found: dict[str, list[Node]] = {kind: [] for kind in FACT_KINDS}
    for node in _walk(body, FACT_KINDS):  # one walk: a kernel's body may be thousands of lines
        found[node.type].append(node)
    for use in found["identifier"]:
        scope.uses.setdefault(text(use), []).append(use)
    for declaration in found["declaration"]:
        for declarator in declaration.children_by_field_name("declarator"):
            name = _local_name(declarator)
            if name is None:
                continue
            scope.names.add(name)
            value = declarator.child_by_field_name("value")
            plain = value is not None and value.type not in ("initializer_list", "argument_list")
            scope.given[_span(declarator)] = [value] if value is not None and plain else []
            if value is not None and not plain:
                scope.changed.add(_span(declarator))
    spans = _update_spans(found["for_statement"])
    for node in found["assignment_expression"] + found["update_expression"]:
        where = "argument" if node.type == "update_expression" else "left"
        target = node.child_by_field_name(where)
        if target is None or target.type != "identifier":
            continue
        key = _key(target, scope)
        right = node.child_by_field_name("right")
        if _within(node, spans):
            scope.stepped.add(key)
        elif (
            text(node.child_by_field_name("operator")) == "=" and right and not isinstance(key, str)
        ):
            scope.given.setdefault(key, []).append(right)
            if text(target) in _identifiers(right):
                scope.changed.add(key)
        else:
            scope.changed.add(key)
    for node in found["pointer_expression"]:
        operand = _address_of(node)
        if operand is not None:
            scope.changed.add(_key(operand, scope))
    for lambda_param in found["parameter_declaration"]:
        declared = lambda_param.child_by_field_name("declarator")
        if declared is not None:
            scope.shadowed.add(text(declared))
    for call in found["call_expression"]:
        arguments = call.child_by_field_name("arguments")
        args = [a for a in (arguments.named_children if arguments else []) if a.type != "comment"]
        if not any(arg.type == "identifier" for arg in args):
            continue
        callee = _callee_definition(call, index)
        function = _function_declarator(callee) if callee is not None else None
        taken = _params(function) if function is not None else ()
        for at, arg in enumerate(args):
            by_value = at < len(taken) and not taken[at].reference
            if arg.type == "identifier" and not by_value:
                scope.changed.add(_key(arg, scope))
    return scope


def _span(node: Node) -> tuple[int, int]:
    return node.start_byte, node.end_byte


def _local_name(declarator: Node) -> str | None:
    """The name a declarator of a declaration declares (``i`` of ``int i = 0``, ``x`` of ``int
    x``); None for another form (an array, a pointer, a reference), which
    :func:`~astra_graph.framework.parse._local_pointers` reads instead. Not
    :func:`~astra_graph.framework.parse._declared_name`, a template parameter's name."""
    name = _bare_declarator(declarator)
    return text(name) if name is not None and name.type == "identifier" else None


def _declaration_at(name: str, at: Node, body: Node) -> Node | None:
    """The declarator of the local ``name`` that a use at ``at`` reads: the last one before
    ``at`` in the innermost block or loop header around ``at`` that declares it; None for a
    name no such declaration gives (a parameter)."""
    node = at
    while node.parent is not None and node != body:
        parent = node.parent
        if parent.type in ("compound_statement", "for_statement"):
            found = None
            for child in parent.named_children:
                if child.start_byte >= at.start_byte:
                    break
                if child.type != "declaration":
                    continue
                for declarator in child.children_by_field_name("declarator"):
                    if _local_name(declarator) == name:
                        found = declarator
            if found is not None:
                return found
        node = parent
    return None


def _key(node: Node, scope: _Scope) -> Key:
    """What the name at ``node`` stands for (:data:`Key`)."""
    return _name_key(text(node), node, scope)


def _name_key(name: str, at: Node, scope: _Scope) -> Key:
    declaration = _declaration_at(name, at, scope.body) if name in scope.names else None
    return _span(declaration) if declaration is not None else name


class _ReadValues(dict[str, list["Node"]]):
    """The initialisers the bound analysis (:func:`~astra_graph.framework.parse._below_factors`)
    reads at one place (``at``): each local as the declaration ``at`` reads, with its one value
    where it has one and is not changed; a parameter, or a name a loop steps, with none (its
    loop's condition bounds it). Each name is resolved when asked: a kernel declares hundreds
    and the analysis asks for a few. Not :func:`~astra_graph.framework.parse._local_values`,
    every initialiser of a name in the body: two sibling loops' ``i`` are two locals here."""

    def __init__(self, at: Node, scope: _Scope) -> None:
        super().__init__()
        self.at, self.scope = at, scope
        self.changed = _ReadChanged(self)

    def resolved(self, name: str) -> tuple[list[Node], bool]:
        """(the name's one value or none, whether it is changed)."""
        scope = self.scope
        key = _name_key(name, self.at, scope)
        if isinstance(key, str):
            return [], key in scope.changed or key in scope.shadowed
        given = scope.given.get(key, [])
        if key in scope.changed:
            return [], True
        if key in scope.stepped:
            return [], False
        return (given, False) if len(given) == 1 else ([], True)

    def get(self, name: str, default: Any = None, /) -> Any:
        # the analysis asks ``values.get(name, [])``: no value is the empty list, as its default
        return self.resolved(name)[0]


class _ReadChanged(set[str]):
    """The changed names of a :class:`_ReadValues`, each resolved when asked."""

    def __init__(self, values: _ReadValues) -> None:
        super().__init__()
        self.values = values

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.values.resolved(name)[1]


def _view(at: Node, scope: _Scope) -> tuple[dict[str, list[Node]], set[str]]:
    """What the bound analysis reads at ``at`` (:class:`_ReadValues`)."""
    values = _ReadValues(at, scope)
    return values, values.changed


def _values(node: Node, scope: _Scope) -> list[_Value] | None:
    """Each value ``node`` may take (:class:`_Exact` or :class:`_Index`), or None where one is
    not read."""
    node = unparenthesised(node)
    spelled = re.sub(r"\s+", "", text(node))
    if node.type == "number_literal":
        return [_Exact(spelled)] if spelled.isdigit() else None
    if node.type == "field_expression":
        if spelled in BLOCK_BOUNDS:
            return [_Index(_less_one(_Exact(BLOCK_BOUNDS[spelled])))]
        return [_Exact(spelled)] if spelled in BLOCK_BOUNDS.values() else None
    if node.type == "identifier":
        return _identifier(node, scope)
    cast = _integer_cast_operand(node)
    if cast is not None:
        return _values(cast, scope)
    if node.type != "binary_expression":
        return None
    operator = text(node.child_by_field_name("operator"))
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    lefts = _values(left, scope) if left is not None else None
    rights = _values(right, scope) if right is not None else None
    if lefts is None or rights is None or len(lefts) * len(rights) > MAX_FORMS:
        return None
    out: list[_Value] = []
    for a, b in itertools.product(lefts, rights):
        value = _combined(operator, a, b, node, scope)
        if value is None:
            return None
        out.append(value)
    return list(dict.fromkeys(out))


def _identifier(node: Node, scope: _Scope) -> list[_Value] | None:
    """A name's values: a launch value as the call or initialiser gives it; else an index below
    its guard (a loop's condition, an enclosing ``if``, an early return), which alone bounds a
    name a loop steps; else an index as its values give it."""
    key = _key(node, scope)
    if key in scope.changed or text(node) in scope.shadowed:
        return None
    named = _named(key, scope) if key not in scope.stepped else None
    if named is not None and all(isinstance(v, _Exact) for v in named):
        return named
    values, mutated = _view(node, scope)
    guard = _guard_product(node, values, mutated, 0) if _compared_once(node) else None
    bound = _exact_of_factors(guard, scope, node) if guard is not None else None
    return [_Index(_less_one(bound))] if bound is not None else named


def _compared_once(node: Node) -> bool:
    """Whether one condition alone compares the name ``node`` where it is (an enclosing ``if``'s
    or loop's term, an earlier early return's): its guard's bound is then the largest value it
    takes, less one. Under two (``for (r = tx; r < d; ...) if (r < m)``) it stays below the
    smaller, which is not read: the reach would be claimed too far, and a requirement on it
    would exclude shapes the kernel takes (review of 6f828fe)."""
    name = text(node)
    terms = [term for _, term in _enclosing_conditions(node)] + _exits_before(node)
    compared = 0
    for term in terms:
        term = unparenthesised(term)
        sides = (term.child_by_field_name("left"), term.child_by_field_name("right"))
        operator = term.child_by_field_name("operator")
        if (
            term.type == "binary_expression"
            and operator is not None
            and text(operator) in COMPARISONS
            and any(side is not None and _compact(side) == name for side in sides)
        ):
            compared += 1
    return compared == 1


def _less_one(value: _Exact) -> Linear:
    """One less than an exact value: the largest index below it."""
    return _sum(_linear(value) or (), (((), -1),))


def _integer_cast_operand(node: Node) -> Node | None:
    """The operand of a cast to an integer type (:data:`INTEGER_TYPES`), which keeps an index's
    value: ``(int64_t)i``, ``static_cast<int64_t>(i)``. Not
    :func:`~astra_graph.framework.parse._uncast`, which takes off a cast to any type (a pointer
    it reads the elements of): a cast to ``float`` or ``char`` need not keep an index's value."""
    if node.type == "cast_expression":
        kind = re.sub(r"\s+", " ", text(node.child_by_field_name("type"))).strip()
        return node.child_by_field_name("value") if kind in INTEGER_TYPES else None
    function = node.child_by_field_name("function") if node.type == "call_expression" else None
    form = re.fullmatch(r"static_cast\s*<\s*([\w ]+?)\s*>", text(function)) if function else None
    arguments = node.child_by_field_name("arguments")
    args = [a for a in (arguments.named_children if arguments else []) if a.type != "comment"]
    if form is None or form[1] not in INTEGER_TYPES or len(args) != 1:
        return None
    return args[0]


def _combined(operator: str, a: _Value, b: _Value, node: Node, scope: _Scope) -> _Value | None:
    """``a operator b`` for one alternative of each side; every index is taken as never
    negative, so a product with a size and a sum keep the largest values."""
    if isinstance(a, _Exact) and isinstance(b, _Exact):
        python = {"+": "+", "-": "-", "*": "*", "/": "//", "%": "%"}.get(operator)
        return _Exact(f"({a.text}) {python} ({b.text})") if python else None
    top_a, top_b = _linear(a), _linear(b)
    if operator == "+":
        return _Index(_sum(top_a, top_b) if top_a is not None and top_b is not None else None)
    if operator == "*" and isinstance(b, _Exact):
        return _Index(_scaled(top_a, b) if top_a is not None else None)
    if operator == "*" and isinstance(a, _Exact):
        return _Index(_scaled(top_b, a) if top_b is not None else None)
    if operator == "%" and isinstance(b, _Exact):
        return _Index(_less_one(b))
    if operator == "/" and isinstance(b, _Exact):
        # a quotient's largest value is no sum of products of the dividend's: the bound
        # analysis reads it where the dividend is a guarded product (``i / d``, ``i < n * d``)
        values, mutated = _view(node, scope)
        factors = _below_factors(node, values, mutated, 0)
        bound = _exact_of_factors(factors, scope, node) if factors is not None else None
        return _Index(_less_one(bound) if bound is not None else None)
    return None


def _named(key: Key, scope: _Scope) -> list[_Value] | None:
    """The values of a parameter (the call's) or a local's declaration (each it is given)."""
    if key in scope.changed:
        return None
    if isinstance(key, str):
        return scope.env.get(key)
    if key in scope.reading:
        return None
    scope.reading.add(key)
    out: list[_Value] | None = []
    for value in scope.given.get(key, []):
        found = _values(value, scope)
        if found is None or out is None:
            out = None
            break
        out.extend(found)
    scope.reading.discard(key)
    return list(dict.fromkeys(out)) if out and len(out) <= MAX_FORMS else None


def _exact_of_factors(factors: tuple[str, ...], scope: _Scope, at: Node) -> _Exact | None:
    """The product of a bound's factors (names and whole numbers of the function at ``at``,
    launch extents) as one exact value, or None where a factor is not one. The factors are
    :func:`~astra_graph.framework.parse._product`'s (through the bound analysis); this gives
    each the value the call or its declaration gives it, in the kernel's terms."""
    out: list[str] = []
    for factor in factors:
        if factor.isdigit() or factor in BLOCK_BOUNDS.values():
            out.append(factor)
            continue
        found = _named(_name_key(factor, at, scope), scope)
        if found is None or len(found) != 1 or not isinstance(found[0], _Exact):
            return None
        out.append(f"({found[0].text})" if len(factors) > 1 else found[0].text)
    return _Exact(" * ".join(out))


def _terms(node: Node, scope: _Scope, depth: int = 0) -> list[Node]:
    """The summands of an offset, a local with one value that is a sum or product standing for
    its summands (``token_head``)."""
    out: list[Node] = []
    for term in _operands(node, "+"):
        key = _key(term, scope) if term.type == "identifier" else ""
        given = scope.given.get(key, []) if not isinstance(key, str) else []
        steady = key not in scope.changed and key not in scope.stepped
        if len(given) == 1 and steady and depth < MAX_LOCAL_DEPTH:
            inner = unparenthesised(given[0])
            operator = text(inner.child_by_field_name("operator"))
            if inner.type == "binary_expression" and operator in ("+", "*"):
                out.extend(_terms(inner, scope, depth + 1))
                continue
        out.append(term)
    return out


def _handed(name: Node) -> tuple[Node, int, list[Node]] | None:
    """(call, argument position, the other summands) where the pointer ``name`` is a summand
    of a call's argument (``f(p + off, ...)``, ``f(p, ...)``); None for any other use."""
    top = _whole_sum(name)
    arguments = top.parent
    if arguments is None or arguments.type != "argument_list" or arguments.parent is None:
        return None
    args = [a for a in arguments.named_children if a.type != "comment"]
    summands = _operands(top, "+")
    at = [i for i, s in enumerate(summands) if s.start_byte == name.start_byte]
    if len(at) != 1 or summands[at[0]].end_byte != name.end_byte:
        return None  # inside a summand (``p + p[0]``), not one
    where = next((i for i, a in enumerate(args) if a == top), None)
    if where is None:
        return None
    return arguments.parent, where, [s for i, s in enumerate(summands) if i != at[0]]


def _callee_definition(call: Node, index: FunctionIndex) -> Node | None:
    """The one free function of the source a call names (template arguments aside): its
    definition, where :func:`~astra_graph.framework.parse._callee` gives a name. Not looked up
    by that name, which differs on a qualified call: ``ns::f<T>(p)`` is ``f`` there and no
    function here (not followed), ``a<b>::g(p)`` is ``a`` there and ``g`` here."""
    target = call.child_by_field_name("function")
    if target is not None and target.type == "template_function":
        target = target.child_by_field_name("name")
    if target is None or target.type not in ("identifier", "qualified_identifier"):
        return None
    name = text(target).rsplit("::", 1)[-1].strip()
    found = [f for f in index.by_name.get(name, []) if not f.owner]
    return found[0].node if len(found) == 1 else None


def _reached(
    definition: Node,
    pointer: str,
    env: dict[str, list[_Value]],
    unit: tuple[FunctionIndex, Facts],
    depth: int,
) -> _Reached | None:
    """What ``definition`` reaches through its pointer parameter ``pointer`` (:class:`_Reached`),
    its other parameters taking ``env``'s values; None where a use is not read."""
    declarator = _function_declarator(definition)
    body = definition.child_by_field_name("body")
    if declarator is None or body is None or depth > MAX_CALL_DEPTH:
        return None
    index = unit[0]
    scope = _scope(body, env, index, unit[1])
    if pointer in scope.changed or pointer in scope.names:
        return None
    out = _Reached([])
    for name in scope.uses.get(pointer, []):
        if _null_test(name):
            continue
        parent = name.parent
        if (
            parent is not None
            and parent.type == "subscript_expression"
            and parent.child_by_field_name("argument") == name
        ):
            index_node = _single_index(parent)
            written = _element_written(parent)
            values = _values(index_node, scope) if index_node is not None else None
            tops = [_linear(v) for v in values] if values is not None else [None]
            if not (written or _only_read(parent)) or any(t is None for t in tops):
                return None
            out.written |= written
            if out.extents is not None:
                out.extents += [_one_more(t) for t in tops if t is not None]
            continue
        handed = _handed(name)
        callee = _callee_definition(handed[0], index) if handed is not None else None
        if handed is None or callee is None:
            return None
        inner = _handed_on(handed, callee, scope, unit, depth)
        if inner is None:
            return None
        out.written |= inner.written
        out.rows += inner.rows
        if out.extents is not None:
            out.extents = out.extents + inner.extents if inner.extents is not None else None
    return out


def _handed_on(
    handed: tuple[Node, int, list[Node]],
    callee: Node,
    scope: _Scope,
    unit: tuple[FunctionIndex, Facts],
    depth: int,
) -> _Reached | None:
    """What a call reaches through the pointer handed to it at ``handed``'s position, offset by
    its other summands: the callee's reach, past the start of each row of a strided term."""
    call, at, summands = handed
    declarator = _function_declarator(callee)
    params = _params(declarator) if declarator is not None else ()
    arguments = call.child_by_field_name("arguments")
    args = [a for a in (arguments.named_children if arguments else []) if a.type != "comment"]
    if at >= len(params) or not params[at].pointer or len(args) != len(params):
        return None
    env: dict[str, list[_Value]] = {}
    for param, arg in zip(params, args, strict=True):
        found = _values(arg, scope) if not param.pointer and not param.reference else None
        if found is not None:
            env[param.name] = found
    inner = _reached(callee, params[at].name, env, unit, depth + 1)
    if inner is None:
        return None
    strides: list[tuple[str, Linear | None]] = []
    base: Linear = ()
    for term in (t for s in summands for t in _terms(s, scope)):
        factors = [_values(f, scope) for f in _operands(term, "*")]
        if any(f is None or len(f) != 1 for f in factors):
            return None
        values = [f[0] for f in factors if f is not None]
        exact = [v for v in values if isinstance(v, _Exact)]
        runtime = [v for v in values if isinstance(v, _Index)]
        # an index whose largest value is 0 (``i / n`` for ``i < n``) takes no two values: its
        # term is no row of its own
        if len(values) == 2 and len(exact) == 1 and len(runtime) == 1 and runtime[0].top != ():
            strides.append((exact[0].text, runtime[0].top))
            continue
        whole = _values(term, scope)
        top = _linear(whole[0]) if whole is not None and len(whole) == 1 else None
        if top is None:
            return None
        base = _sum(base, top)  # an offset within every row (a constant, a lane)
    if inner.extents is None:  # how far past a row's start is not read: no row of its own
        return _Reached(None, inner.rows, inner.written)
    reaches = [_sum(e, base) for e in inner.extents]
    rows = [(reach, stride) for stride, _ in strides for reach in reaches]
    outer: list[Linear] | None = reaches
    for stride, top in strides:
        scaled = _scaled(top, _Exact(stride)) if top is not None else None
        outer = [_sum(r, scaled) for r in outer] if outer is not None and scaled else None
    return _Reached(outer, inner.rows + rows, inner.written)


def kernel_row_reaches(
    definition: Node, index: FunctionIndex, facts: Facts
) -> tuple[RowReach, ...]:
    """Each pointer parameter of the kernel ``definition`` that it writes through rows of index
    strides, with the reach each row must hold (see the module docstring); a reach that another
    of the same stride is at least is left out (it asks nothing more). ``index`` holds the
    source's functions, ``facts`` what was read of their bodies (shared by its kernels). A
    pointer the body never hands to a call has no row (a subscript of the kernel's own is the
    other extents')."""
    declarator = _function_declarator(definition)
    if declarator is None:
        return ()
    params = _params(declarator)
    template = definition.parent
    tparams = (
        _template_params(template)
        if template is not None and template.type == "template_declaration"
        else ()
    )
    env: dict[str, list[_Value]] = {
        p.name: [_Exact(p.name)] for p in params if not p.pointer and not p.reference
    }
    env.update({t.name: [_Exact(t.name)] for t in tparams})
    body = definition.child_by_field_name("body")
    uses = _scope(body, env, index, facts).uses if body is not None else {}
    out: list[RowReach] = []
    for param in params:
        handed = any(_handed(n) is not None for n in uses.get(param.name, []))
        follow = param.pointer and handed
        reached = _reached(definition, param.name, env, (index, facts), 0) if follow else None
        if reached is None or not reached.written:
            continue
        rows = list(dict.fromkeys(reached.rows))
        kept = [
            (reach, stride)
            for reach, stride in rows
            if not any(s == stride and r != reach and _dominates(r, reach) for r, s in rows)
        ]
        if kept:
            out.append(RowReach(param.name, tuple((linear_text(r), s) for r, s in kept)))
    return tuple(out)
