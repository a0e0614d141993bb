"""The element types a template launcher's caller instantiates it with, per dtype.

A launcher written as a function template (vLLM's ``template <typename scalar_t> void
merge_attn_states_launcher(...)``) has no dispatch of its own: its caller picks ``scalar_t``
under a test of a tensor's ``ScalarType``. Which C++ type stands for which dtype is the caller's
choice, and it is not always torch's or CUDA's: vLLM's merge passes ``uint16_t`` for ``Half``
(its ``from_float(uint16_t&, float)`` overloads are written for that), so a draft that
instantiates the launcher with ``c10::Half`` or ``__half`` compiles no half path at all. This
module reads the caller's choice from the translation unit's syntax tree:

* a call ``launcher<X>(...)`` in a function body, under ``if (x.scalar_type() ==
  ScalarType::Half)``; or
* a macro ``CALL(t)`` whose body calls ``launcher<t>(...)``, handed to a dispatch macro in a
  function body (``DISPATCH_BY_SCALAR_DTYPE(x.scalar_type(), CALL)``) whose body calls
  ``fn(uint16_t)`` under such a test: the dispatch macro's body bound to the call's arguments,
  each ``CALL(X)`` in it expanded, parsed as a function body.

Each instantiation must sit in the then-branch of a test ``tensor.scalar_type() ==
ScalarType::X`` (either way round, no ``?:`` between) of a tensor the call is handed, ``X`` a
type an operation can hold; each dtype must have one type. Otherwise nothing is read and the
launcher is drafted as before.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from astra_graph.framework.launchers import _scalar_types
from astra_graph.framework.parse import (
    Macro,
    _enclosing_conditions,
    _parser,
    _split_args,
    _walk,
    bind_macro,
    in_function_body,
    text,
    unparenthesised,
)
from astra_graph.kernel.expr import split_top_level

if TYPE_CHECKING:
    from collections.abc import Iterable

    from tree_sitter import Node

_DTYPE_QUERY = re.compile(r"^(?P<tensor>\w+)\s*(?:\.|->)\s*scalar_type\s*\(\s*\)$")


def caller_element_types(
    source: str, launchers: Iterable[str], macros: dict[str, Macro]
) -> dict[str, dict[str, str]]:
    """For each of ``launchers``: dtype -> the C++ type its callers in ``source`` instantiate it
    with under a test of that dtype's ``ScalarType``; empty where none is read or any is
    ambiguous. The source is parsed once for all of them."""
    calls = _calls_in_functions(_parse(source))
    return {name: _types(name, calls, macros) for name in launchers}


def _types(launcher: str, calls: list[Node], macros: dict[str, Macro]) -> dict[str, str]:
    found: dict[str, set[str]] = {}
    for unit in [calls, *_dispatch_expansions(calls, launcher, macros)]:
        for dtype, cpp in _instantiations(unit, launcher):
            found.setdefault(dtype, set()).add(cpp)
    if not found or "" in found or any(len(types) != 1 for types in found.values()):
        return {}
    return {dtype: types.pop() for dtype, types in found.items()}


def _parse(source: str) -> Node:
    return _parser().parse(source.encode()).root_node


def _calls_in_functions(root: Node) -> list[Node]:
    return [c for c in _walk(root, ("call_expression",)) if in_function_body(c)]


def _instantiations(calls: list[Node], launcher: str) -> list[tuple[str, str]]:
    """(dtype, type argument) of each call ``launcher<X>(...)`` among ``calls``; the dtype is ''
    where :func:`_tested_dtype` reads none."""
    out = []
    for call in calls:
        function = call.child_by_field_name("function")
        if function is None or function.type != "template_function":
            continue
        name = function.child_by_field_name("name")
        arguments = function.child_by_field_name("arguments")
        if name is None or arguments is None or text(name).rsplit("::", 1)[-1] != launcher:
            continue
        types = [a for a in arguments.named_children if a.type != "comment"]
        if len(types) != 1:
            out.append(("", ""))
            continue
        out.append((_tested_dtype(call), " ".join(text(types[0]).split())))
    return out


def _tested_dtype(call: Node) -> str:
    """The dtype of the innermost test around ``call`` that names a ``ScalarType``, where that
    test is ``tensor.scalar_type() == ScalarType::X`` (either way round) of a tensor ``call`` is
    handed, ``call`` is in its then-branch and no ``?:`` stands between; '' otherwise (a negated
    test, an ``else``, another tensor's type, several types, a type no operation holds)."""
    handed = {text(a) for a in _arguments(call) if a.type == "identifier"}
    for taken, term in _enclosing_conditions(call):
        if not _scalar_types(text(term)):
            continue
        term = unparenthesised(term)
        if not taken or term.type != "binary_expression" or _under_ternary(call, term):
            return ""
        if text(term.child_by_field_name("operator")) != "==":
            return ""
        sides = [s for s in (term.child_by_field_name(f) for f in ("left", "right")) if s]
        named = {dtype for side in sides for dtype in _scalar_types(text(side))}
        queried = [
            q["tensor"] for s in sides if (q := _DTYPE_QUERY.match(" ".join(text(s).split())))
        ]
        if len(named) != 1 or len(queried) != 1 or queried[0] not in handed:
            return ""
        return named.pop()
    return ""


def _arguments(call: Node) -> list[Node]:
    arguments = call.child_by_field_name("arguments")
    return [a for a in arguments.named_children if a.type != "comment"] if arguments else []


def _under_ternary(call: Node, term: Node) -> bool:
    """Whether a ``?:`` stands between ``call`` and the ``if`` whose condition holds ``term``."""
    node = call.parent
    while node is not None:
        if node.type == "conditional_expression":
            return True
        condition = node.child_by_field_name("condition") if node.type == "if_statement" else None
        if condition is not None and condition.start_byte <= term.start_byte < condition.end_byte:
            return False
        node = node.parent
    return False


def _dispatch_expansions(
    calls: list[Node], launcher: str, macros: dict[str, Macro]
) -> list[list[Node]]:
    """For each macro whose body calls ``launcher<p>(`` with ``p`` its parameter, and each call in
    a function body of another macro that is handed that macro's name: the called macro's body,
    bound, with each call of the handed macro in it expanded: the calls in it, parsed as a
    function body."""
    pattern = re.compile(rf"\b{re.escape(launcher)}\s*<\s*(\w+)\s*>\s*\(")
    instantiating = {
        name: macro
        for name, macro in macros.items()
        if (match := pattern.search(macro.body)) is not None and match[1] in macro.params
    }
    out: list[list[Node]] = []
    if not instantiating:
        return out
    for call in calls:
        dispatch = macros.get(text(call.child_by_field_name("function")))
        if dispatch is None or dispatch.name in instantiating:
            continue
        arguments = [a.strip() for a in _split_args(call)]
        handed = [a for a in arguments if a in instantiating]
        if len(handed) != 1:
            continue
        body = f"void astra_dispatch_expansion() {{\n{bind_macro(dispatch, arguments)}\n}}\n"
        out.append(_calls_in_functions(_parse(_expanded(body, instantiating[handed[0]]))))
    return out


def _expanded(body: str, macro: Macro) -> str:
    """``body`` with each call of ``macro`` in it replaced by the macro's bound body, as the
    preprocessor expands it: on the text (``CALL(float);`` is no call in C++'s grammar, whose
    parser reads a parenthesised declarator there)."""
    pieces, at = [], 0
    for match in re.finditer(rf"\b{re.escape(macro.name)}\s*\(", body):
        if match.start() < at:
            continue
        depth, end = 1, match.end()
        while end < len(body) and depth:
            depth += {"(": 1, ")": -1}.get(body[end], 0)
            end += 1
        arguments = split_top_level(body[match.end() : end - 1])
        pieces += [body[at : match.start()], bind_macro(macro, [a.strip() for a in arguments])]
        at = end
    return "".join(pieces) + body[at:]
