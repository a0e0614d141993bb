"""Variable-length segments a kernel reads through CSR offsets, and counts it may go without.

A kernel over variable-length segments (FlashInfer's ``VariableLengthMergeStates``) reads a
CSR indptr ``O`` (its elements differenced: ``O[s + 1] - O[s]`` rows in segment ``s``) and
reaches another pointer at rows ``O[s] + k``, ``k`` kept below that difference, or at ``O[s]``
alone where the difference is at least 1. Over offsets that start at 0, never decrease and end
at ``T`` (what ``init.offsets_into`` draws), every such row is below ``T``: the pointer's first
axis is the offsets' last element, a size of its own (:data:`OFFSET_ROWS`, read by
:func:`offset_row`). ``O`` is reached at ``O[s]`` and ``O[s + 1]`` alone, ``s`` below a bound
``B``, so it holds ``B + 1`` elements (:func:`offsets_extents`). Any other use of ``O`` (a row
read past the difference, ``k <= O[s + 1] - O[s]``; an element used as a row id with no
difference) claims nothing, and the pointers it offsets get no shape.

A pointer parameter the body reads only as ``p ? *p : e`` (or ``p != nullptr ? *p : e``) is a
count the caller may leave null (:func:`nullable_counts`): with ``p`` null, the body reads ``e``
instead, the value a bound analysis can follow (:func:`values_at_null`). A pointer written,
or used any other way, is no such count.

These are read on tree-sitter's syntax tree, with :mod:`~astra_graph.framework.parse`'s
helpers; only imports of raw-pointer launchers use them (the launch passes null for each such
count: :attr:`~astra_graph.framework.parse.Kernel.direct`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from astra_graph.framework.parse import (
    _below_factors,
    _compact,
    _condition_value,
    _element_written,
    _operands,
    _single_index,
    _walk,
    _written_through,
    text,
    unparenthesised,
)

if TYPE_CHECKING:
    from tree_sitter import Node

    from astra_graph.framework.parse import Param

OFFSET_ROWS = "{}[last]"
"""The axis (:attr:`~astra_graph.framework.parse.IndexedExtent.axes`) a pointer reached at rows
placed by CSR offsets ``O`` has: ``O``'s last element, the rows of all its segments."""
_OFFSET_ROWS = re.compile(r"^(?P<offsets>[A-Za-z_][\w.]*)\[last\]$")


def offsets_of(axis: str) -> str | None:
    """``O`` where ``axis`` is :data:`OFFSET_ROWS` of ``O``, else None."""
    match = _OFFSET_ROWS.match(axis)
    return match["offsets"] if match else None


def nullable_counts(body: Node, params: tuple[Param, ...]) -> tuple[str, ...]:
    """The pointer parameters whose every use is in a conditional ``p ? *p : e`` (the condition
    ``p`` or ``p != nullptr``, ``*p`` the branch it holds in): a count read where given, ``e``
    where the caller passes null. A pointer used any other way (written, indexed, handed on,
    tested elsewhere) is none."""
    pointers = {p.name for p in params if p.pointer}
    uses: dict[str, list[Node]] = {}
    for node in _walk(body, ("identifier",)):
        if text(node) in pointers:
            uses.setdefault(text(node), []).append(node)
    return tuple(
        name for name, found in uses.items() if all(_defaulted(node, name) for node in found)
    )


def _defaulted(node: Node, name: str) -> bool:
    """Whether the use ``node`` of ``name`` is the condition or the ``*name`` of a conditional
    ``name ? *name : e`` (:func:`_defaulted_at`)."""
    parent = node.parent
    if parent is not None and parent.type in ("binary_expression", "pointer_expression"):
        node, parent = parent, parent.parent  # `p != nullptr`, `*p`
    while parent is not None and parent.type == "parenthesized_expression":
        node, parent = parent, parent.parent
    return (
        parent is not None
        and parent.type == "conditional_expression"
        and _defaulted_at(parent, name)
        and node
        in (parent.child_by_field_name("condition"), parent.child_by_field_name("consequence"))
    )


NULL_SPELLINGS = ("nullptr", "NULL", "0")
"""How a null pointer is written in a test ``p != nullptr``."""


def _tests_given(condition: Node, name: str) -> bool:
    """Whether ``condition`` is ``name`` or ``name != <null>`` (either side)."""
    written = _compact(condition)
    return written == name or any(
        written in (f"{name}!={null}", f"{null}!={name}") for null in NULL_SPELLINGS
    )


def values_at_null(values: dict[str, list[Node]], nulls: tuple[str, ...]) -> dict[str, list[Node]]:
    """The locals' initialisers (:func:`~astra_graph.framework.parse._local_values`) as the body
    runs with each of ``nulls`` (:func:`nullable_counts`) null: ``n = p ? *p : e`` is ``n =
    e``."""
    out = dict(values)
    for name, inits in values.items():
        if len(inits) != 1:
            continue
        init = unparenthesised(inits[0])
        alternative = init.child_by_field_name("alternative")
        if alternative is not None and any(_defaulted_at(init, p) for p in nulls):
            out[name] = [alternative]
    return out


def _defaulted_at(conditional: Node, name: str) -> bool:
    """Whether ``conditional`` is ``name ? *name : e`` (the condition as :func:`_tests_given`
    reads it)."""
    if conditional.type != "conditional_expression":
        return False
    condition = conditional.child_by_field_name("condition")
    consequence = conditional.child_by_field_name("consequence")
    return (
        condition is not None
        and consequence is not None
        and _tests_given(condition, name)
        and _compact(consequence) == f"*{name}"
    )


def _summands(node: Node) -> list[str]:
    """The ``+`` summands of ``node``, each as written without blanks, sorted: one spelling of a
    sum however it is parenthesised."""
    return sorted(_compact(s) for s in _operands(node, "+"))


def _offset_element(node: Node | None, offsets: tuple[str, ...]) -> tuple[str, Node] | None:
    """(``O``, ``s``) where ``node`` is ``O[s]``, ``O`` one of ``offsets``."""
    node = unparenthesised(node) if node is not None else None
    if node is None or node.type != "subscript_expression":
        return None
    argument = node.child_by_field_name("argument")
    index = _single_index(node)
    if argument is None or index is None or _compact(argument) not in offsets:
        return None
    return _compact(argument), index


def _segment_count(
    node: Node | None,
    offsets: str,
    segment: str,
    values: dict[str, list[Node]],
    mutated: set[str],
) -> bool:
    """Whether ``node`` is ``O[s + 1] - O[s]`` (``O`` = ``offsets``, ``s`` spelled ``segment``),
    or a local name whose one initialiser is, never assigned after it (``mutated``)."""
    if node is None:
        return False
    node = unparenthesised(node)
    if node.type == "identifier" and text(node) in mutated:
        return False
    if node.type == "identifier" and len(values.get(text(node), [])) == 1:
        node = unparenthesised(values[text(node)][0])
    if node.type != "binary_expression" or text(node.child_by_field_name("operator")) != "-":
        return False
    left = _offset_element(node.child_by_field_name("left"), (offsets,))
    right = _offset_element(node.child_by_field_name("right"), (offsets,))
    return (
        left is not None
        and right is not None
        and _compact(right[1]) == segment
        and _summands(left[1]) == sorted([segment, "1"])
    )


GUARDING = ("if_statement", "for_statement", "while_statement", "conditional_expression")
"""The constructs whose condition holds in their first branch or body."""


def _conditions_holding(node: Node) -> list[Node]:
    """The ``&&`` terms of each condition that holds where ``node`` is: an enclosing ``if``'s
    then-branch, a loop's body, a conditional expression's first branch; innermost first."""
    found: list[Node] = []
    child, current = node, node.parent
    while current is not None and current.type != "function_definition":
        condition = current.child_by_field_name("condition")
        held = child in (
            current.child_by_field_name("consequence"),
            current.child_by_field_name("body"),
        )
        if condition is not None and held and current.type in GUARDING:
            found += _operands(_condition_value(condition), "&&")
        child, current = current, current.parent
    return found


NONEMPTY = {"==": lambda n: n >= 1, ">=": lambda n: n >= 1, ">": lambda n: n >= 0}
"""Comparisons ``count <op> n`` that, with a whole number ``n`` the predicate accepts, say the
count is at least 1: the segment's first row exists."""


def _holds_nonempty(
    term: Node, offsets: str, segment: str, values: dict[str, list[Node]], mutated: set[str]
) -> bool:
    """Whether ``term`` is ``count == n`` (n >= 1), ``count >= n`` (n >= 1) or ``count > n``
    (n >= 0), ``count`` the segment's (:func:`_segment_count`)."""
    term = unparenthesised(term)
    if term.type != "binary_expression":
        return False
    operator = text(term.child_by_field_name("operator"))
    left, right = term.child_by_field_name("left"), term.child_by_field_name("right")
    accepts: Callable[[int], bool] | None = NONEMPTY.get(operator)
    if left is None or right is None or accepts is None:
        return False
    number = _compact(right)
    counted = _segment_count(left, offsets, segment, values, mutated)
    return number.isdigit() and accepts(int(number)) and counted


def _holds_below(
    term: Node,
    step: list[str],
    offsets: str,
    segment: str,
    values: dict[str, list[Node]],
    mutated: set[str],
) -> bool:
    """Whether ``term`` is ``k < count`` (or ``count > k``), ``k`` the sum ``step`` (as
    :func:`_summands` spells it) and ``count`` the segment's (:func:`_segment_count`)."""
    term = unparenthesised(term)
    if term.type != "binary_expression":
        return False
    operator = text(term.child_by_field_name("operator"))
    left, right = term.child_by_field_name("left"), term.child_by_field_name("right")
    if left is None or right is None or operator not in ("<", ">"):
        return False
    index, count = (left, right) if operator == "<" else (right, left)
    return _summands(index) == step and _segment_count(count, offsets, segment, values, mutated)


def offset_row(
    term: Node,
    offsets: tuple[str, ...],
    values: dict[str, list[Node]],
    mutated: set[str],
    held: tuple[Node, ...] = (),
) -> str | None:
    """:data:`OFFSET_ROWS` of ``O`` where the row index ``term`` is ``O[s]`` under a condition
    that segment ``s`` holds a row (``count == 1``: :func:`_holds_nonempty`), or ``O[s] + k``
    under ``k < count`` (:func:`_holds_below`), ``count`` being ``O[s + 1] - O[s]``; else None.
    No name of ``s`` or ``k`` may be assigned after its declaration (``mutated``: the
    condition would hold of another value than the one read). ``k`` is taken as non-negative
    (a negative row reads before the tensor, whatever its shape). ``held``: conditions that
    hold where the row is read besides the enclosing ones (a guarded read's guard,
    :func:`~astra_graph.framework.guarded.call_read`)."""
    summands = _operands(term, "+")
    found = [(s, e) for s in summands if (e := _offset_element(s, offsets)) is not None]
    if len(found) != 1:
        return None
    (element, (pointer, segment_node)) = found[0]
    names = {text(n) for s in summands for n in _walk(s, ("identifier",))}
    if names & mutated:
        return None
    segment = _compact(segment_node)
    step = sorted(_compact(s) for s in summands if s != element)
    holding = [*_conditions_holding(term), *held]
    if not step:
        ok = any(_holds_nonempty(t, pointer, segment, values, mutated) for t in holding)
    else:
        ok = any(_holds_below(t, step, pointer, segment, values, mutated) for t in holding)
    return OFFSET_ROWS.format(pointer) if ok else None


def offsets_extents(
    body: Node,
    offsets: tuple[str, ...],
    values: dict[str, list[Node]],
    mutated: set[str],
    plain: Callable[[tuple[str, ...] | None], str | None],
) -> tuple[dict[str, str], dict[str, str]]:
    """({``O``: the bound ``B`` of its segment index}, {``O``: why it has none}) for each of
    ``offsets`` whose every use is a read ``O[s]`` or ``O[s + 1]``, ``s`` below ``B``
    (:func:`~astra_graph.framework.parse._below_factors`, made a product of names the launch
    says by ``plain``): it holds ``B + 1`` elements."""
    bounds: dict[str, set[str]] = {}
    why: dict[str, str] = {}
    for node in _walk(body, ("identifier",)):
        pointer = text(node)
        if pointer not in offsets or pointer in why:
            continue
        parent = node.parent
        element = _offset_element(parent, offsets) if parent is not None else None
        if element is None or parent is None or parent.child_by_field_name("argument") != node:
            why[pointer] = f"reached at `{_compact(parent or node)}`, not O[s]"
            continue
        if _element_written(parent) or _written_through(node):
            why[pointer] = f"written at `{_compact(parent)}`"
            continue
        index = element[1]
        summands = _operands(index, "+")
        lone = [s for s in summands if _compact(s) != "1"]
        if len(lone) != 1 or len(summands) - len(lone) > 1:
            why[pointer] = f"reached at `{_compact(parent)}`, not O[s] or O[s + 1]"
            continue
        bound = plain(_below_factors(lone[0], values, mutated, 0))
        if bound is None:
            why[pointer] = f"reached at `{_compact(parent)}`, a segment of unseen bound"
            continue
        bounds.setdefault(pointer, set()).add(bound)
    out: dict[str, str] = {}
    for pointer, found in bounds.items():
        if pointer in why:
            continue
        if len(found) != 1:
            why[pointer] = f"its segments are bounded by {' and '.join(sorted(found))}"
            continue
        out[pointer] = found.pop()
    return out, why
