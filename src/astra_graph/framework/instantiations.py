"""The element types a template launcher's caller instantiates it with, per dtype.

A launcher written as a function template (vLLM's ``template <typename scalar_t> void
merge_attn_states_launcher(...)``) has no dispatch of its own: its caller picks ``scalar_t``
under a test of the tensor's ``ScalarType``. Which C++ type stands for which dtype is the
caller's choice, and it is not always torch's or CUDA's: vLLM's merge passes ``uint16_t`` for
``Half`` (its ``from_float(uint16_t&, float)`` overloads are written for that), so a draft that
instantiates the launcher with ``c10::Half`` or ``__half`` compiles no half path at all. This
module reads the caller's choice from the translation unit, as its build expands it:

* a call ``launcher<X>(...)`` in a function body, under ``if (... == ScalarType::Half)``; or
* a macro ``CALL(t)`` whose body calls ``launcher<t>(...)``, handed to a dispatch macro
  (``DISPATCH_BY_SCALAR_DTYPE(x.scalar_type(), CALL)``) whose body calls ``fn(uint16_t)`` under
  such a test: the dispatch macro's body is bound to the call's arguments, ``CALL(X)`` expanded
  in it, and the result parsed as C++ like any function body.

Each instantiation must sit under exactly one ``ScalarType`` the contract can hold and each
dtype must have one type; otherwise nothing is read (the launcher is drafted as before).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from astra_graph.framework.parse import (
    Macro,
    _enclosing_conditions,
    _parser,
    _walk,
    bind_macro,
    text,
)
from astra_graph.kernel.expr import split_top_level

if TYPE_CHECKING:
    from tree_sitter import Node

DTYPE_OF_SCALAR_TYPE: dict[str, str] = {
    "Float": "float32",
    "Half": "float16",
    "BFloat16": "bfloat16",
}
"""The ``ScalarType`` names whose dtype an operation can have, as a caller's test spells them
(``torch::headeronly::ScalarType::Half``, ``at::ScalarType::Half``, ``at::kHalf``)."""
_SCALAR_TYPE = re.compile(r"(?:ScalarType::|\bk)(Float|Half|BFloat16)\b")
_MACRO_CALL = re.compile(r"\b(\w+)\s*\(")


def caller_element_types(source: str, launcher: str, macros: dict[str, Macro]) -> dict[str, str]:
    """dtype -> the C++ type ``launcher``'s callers in ``source`` instantiate it with under a
    test of that dtype's ``ScalarType``; empty where none is read or any is ambiguous."""
    found: dict[str, set[str]] = {}
    texts = [source, *_dispatch_expansions(source, launcher, macros)]
    for unit in texts:
        for dtype, cpp in _instantiations(unit, launcher):
            found.setdefault(dtype, set()).add(cpp)
    if not found or "" in found or any(len(types) != 1 for types in found.values()):
        return {}
    return {dtype: types.pop() for dtype, types in found.items()}


def _instantiations(unit: str, launcher: str) -> list[tuple[str, str]]:
    """(dtype, type argument) of each call ``launcher<X>(...)`` in a function body of ``unit``;
    the dtype is '' where the call is under no single ``ScalarType`` test."""
    if launcher + "<" not in re.sub(r"\s+", "", unit):
        return []
    out = []
    for call in _walk(_parser().parse(unit.encode()).root_node, ("call_expression",)):
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
    """The dtype of the one ``ScalarType`` the innermost test around ``call`` compares with on
    its taken branch; '' for none, several, or a type no operation holds."""
    for taken, term in _enclosing_conditions(call):
        named = set(_SCALAR_TYPE.findall(text(term)))
        if not named:
            continue
        if not taken or len(named) != 1 or "==" not in text(term):
            return ""
        return DTYPE_OF_SCALAR_TYPE[named.pop()]
    return ""


def _dispatch_expansions(source: str, launcher: str, macros: dict[str, Macro]) -> list[str]:
    """For each macro whose body calls ``launcher<p>(`` with ``p`` its parameter, and each call
    in ``source`` of another macro that is handed that macro's name: the called macro's body,
    bound, with each call of the handed macro in it expanded; as a function body to parse."""
    pattern = re.compile(rf"\b{re.escape(launcher)}\s*<\s*(\w+)\s*>\s*\(")
    instantiating = {
        name: macro
        for name, macro in macros.items()
        if (match := pattern.search(macro.body)) is not None and match[1] in macro.params
    }
    out = []
    for match in _MACRO_CALL.finditer(source):
        dispatch = macros.get(match[1])
        if dispatch is None or match[1] in instantiating:
            continue
        arguments = _arguments(source, match.end())
        handed = [a.strip() for a in arguments if a.strip() in instantiating]
        if len(handed) != 1:
            continue
        body = bind_macro(dispatch, arguments)
        inner = instantiating[handed[0]]
        expanded = _expand_calls(body, inner)
        out.append(f"void astra_dispatch_expansion() {{\n{expanded}\n}}\n")
    return out


def _expand_calls(body: str, macro: Macro) -> str:
    """``body`` with each call ``MACRO(args)`` replaced by the macro's bound body."""
    pieces, at = [], 0
    for match in re.finditer(rf"\b{re.escape(macro.name)}\s*\(", body):
        if match.start() < at:
            continue
        arguments = _arguments(body, match.end())
        end = _closing(body, match.end())
        pieces += [body[at : match.start()], bind_macro(macro, [a.strip() for a in arguments])]
        at = end + 1
    return "".join(pieces) + body[at:]


def _closing(body: str, start: int) -> int:
    """The index of the ``)`` that closes the ``(`` just before ``start`` (the end if none)."""
    depth = 1
    for end in range(start, len(body)):
        depth += {"(": 1, ")": -1}.get(body[end], 0)
        if depth == 0:
            return end
    return len(body)


def _arguments(body: str, start: int) -> list[str]:
    """The top-level arguments of the call whose ``(`` ends just before ``start``."""
    return split_top_level(body[start : _closing(body, start)])
