"""A kernel's vector-width accesses, and the multiples their element offsets must be.

A kernel that reads or writes through a pointer cast to a CUDA vector type (``float4``,
``int4``, ``uint2``, ``half2`` ...) moves that type's width in bytes at once, and the GPU faults
(``cudaErrorMisalignedAddress``) unless the address is a multiple of the width. The contract
guarantees each tensor's base 16 bytes (``args.align``), so what is left is the element offset:
at each such access it must be a multiple of width / element size at every shape the contract
admits. FlashInfer's ``BatchQKApplyRotaryPosIdsCosSinCacheKernel`` loads ``vec_t<float, N>``
(whose ``load`` reads ``((float4*)ptr)[i]``) from ``cos_sin_cache + pos * rotary_dim +
vec_idx``, ``vec_idx`` a remainder by ``rotary_dim / 2``; no check of the framework states that
``rotary_dim`` is then a multiple of 8 (its Python callers only pass such widths), and the
import's domain drew others, at which the original faulted on the H100.

:func:`kernel_vector_accesses` finds the accesses on the syntax tree (:class:`VectorAccess`): a cast
to a vector pointer in the kernel's body, an inline-asm ``cp.async`` from an address operand (its
``cp-size`` bytes, which the copy needs aligned:
:func:`~astra_graph.framework.guarded.copy_sources`), or a call whose callee makes one through a
pointer parameter, followed into free functions and into the member functions of the receiver's
class (every specialisation whose template arguments can be the receiver's, so the widest one
counts) up to :data:`MAX_CALL_DEPTH` calls deep. The offset is written in the kernel's terms: a
callee's parameters are replaced by the call's arguments (its defaults where the call leaves them
out), a local by each value it is given (initialiser and assignments, each one an alternative that
must hold). A function that reads a pointer's address as an integer
(``reinterpret_cast<uintptr_t>``: a run-time alignment test before a vector path, as vLLM's) chooses
its path by it, so its accesses and its callees' ask nothing.

:func:`required_multiples` reads an offset as sums, products, quotients and remainders: each
summand must be a multiple of k, so a launch value (a by-value parameter, a template parameter)
multiplied by a run-time one (a thread index, a loaded position) must itself be a multiple of k
(``pos * rotary_dim``: ``rotary_dim`` of 4 floats), a quotient by a constant ``c`` its dividend one
of ``c * k`` (enough, if more than needed), a remainder both its operands. What it does not read
is None: the importer notes it and keeps the domain as it was. An offset a helper computes that
only returns an expression (FlashInfer's ``get_elem_offset_impl``) is read as that expression
over the call's arguments (:func:`_inline_returns`).

:func:`kernel_vector_guards` finds the tests of a thread's first vector element against a launch
value (:class:`VectorGuard`): the value must then be a whole number of vectors, or the last one
moves elements past it.

:func:`dim_multiples` turns a requirement on a by-value parameter the launch passes one dim into
that dim's multiple, the contract's ``multiple_of`` (a stride passed as a product of dims: its
last dim's), which every shape the harness draws keeps to (suites, random shapes, the domain
suite's limits and thresholds), and each guard into a multiple, or a ``requires`` over the dims
where its width follows them. Template arguments are not
deduced, so the widest specialisation a call may run counts: FlashInfer's fp8-output norms
(``vec_t<fp8, 8>``, 8 bytes, whose partial specialisation for other widths moves 16) get a hidden
size of 16 where 8 would do, a domain narrower than the framework's, never one that faults.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from astra_graph.framework.parse import (
    EXPRESSION_PREFIX,
    Param,
    _condition_value,
    _early_exit_terms,
    _function_declarator,
    _operands,
    _own_template,
    _params,
    _walk,
    bound_names,
    expression_node,
    name_pattern,
    text,
    unparenthesised,
)
from astra_graph.kernel import expr
from astra_graph.kernel.dtypes import DTYPES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tree_sitter import Node

    from astra_graph.framework.guarded import GuardedRead
    from astra_graph.framework.launchers import Analysis, Binding

VECTOR_BYTES: dict[str, int] = {
    **dict.fromkeys(("float4", "int4", "uint4", "double2", "longlong2", "ulonglong2"), 16),
    **dict.fromkeys(("float2", "int2", "uint2", "double1", "longlong1", "ulonglong1"), 8),
    **dict.fromkeys(("half2", "__half2", "nv_bfloat162", "__nv_bfloat162"), 4),
    **dict.fromkeys(("short2", "ushort2", "char4", "uchar4"), 4),
    **dict.fromkeys(("char2", "uchar2"), 2),
}
"""CUDA's vector types (``vector_types.h``, ``cuda_fp16.h``, ``cuda_bf16.h``) by their size in
bytes, which is their alignment: an access through a pointer to one needs an address that is a
multiple of it."""
ADDRESS_INTEGERS = ("uintptr_t", "intptr_t")
"""Integer types a pointer's address is read as (a run-time alignment test)."""
MAX_CALL_DEPTH = 8
"""Calls followed from a kernel into the functions that make its vector accesses: FlashInfer's
rotary kernel reaches ``float4`` through three (``vec_t::cast_load``, ``cast_load_impl``,
``vec_t::load``)."""
MAX_FORMS = 16
"""Alternatives one offset may take (a local given several values multiplies them); past this
the access is left unread."""
LOCAL_MARK = "__local"
"""Appended to a function's local left in an offset (no launch value, and no caller's name)."""
MAX_LOCAL_DEPTH = 8
"""Locals followed inside each other's values in one offset."""


@dataclass(frozen=True)
class VectorAccess:
    """A vector-width access of a kernel: through ``pointer`` (a pointer parameter of the kernel,
    '' where the base the access reaches is not read) at each of ``offsets`` elements (each an
    expression over the kernel's parameters, template parameters and run-time values, as C++;
    '' for none; empty where the offset is not read), ``width`` bytes at once; ``where`` the
    access as written, for notes."""

    pointer: str
    offsets: tuple[str, ...]
    width: int
    where: str


@dataclass(frozen=True)
class _Value:
    """A template parameter's value at the launch, read as a binding is (``expr``: over dims)."""

    param: str
    kind: str
    value: str


@dataclass(frozen=True)
class _Function:
    node: Node
    params: tuple[str, ...]
    defaults: tuple[str | None, ...]
    template: tuple[str, ...]
    owner: str
    """The class the function is a member of ('' for a free function)."""
    owner_args: tuple[str, ...] | None
    """The class's template arguments where it is a specialisation (``vec_t<float, 1>``)."""
    owner_free: frozenset[str] = frozenset()
    """The class's own template parameters (a partial specialisation's ``vec_size``)."""


@dataclass(frozen=True)
class _Need:
    """A vector access inside one function: through ``base`` (a parameter or local pointer's
    name) at ``offsets`` elements, ``width`` bytes."""

    base: str
    offsets: tuple[str, ...]
    width: int
    where: str


@dataclass
class FunctionIndex:
    """Every function definition of a translation unit by unqualified name, and what each asks
    of its pointer parameters (computed once, on demand)."""

    root: Node
    by_name: dict[str, list[_Function]] = field(default_factory=dict)
    needs: dict[int, tuple[_Need, ...]] = field(default_factory=dict)
    reads: dict[tuple[int, int], GuardedRead | str] = field(default_factory=dict)
    scopes: dict[int, _Scope] = field(default_factory=dict)
    """Each function's :class:`_Scope`, by its node."""
    """Each function's guarded read at a pointer parameter, by (function, position)
    (:func:`~astra_graph.framework.guarded._summary`)."""

    def __post_init__(self) -> None:
        for definition in _walk(self.root, ("function_definition",)):
            function = _function(definition)
            if function is not None:
                name = _declarator_name(definition)
                self.by_name.setdefault(name, []).append(function)


def _declarator_name(definition: Node) -> str:
    """The unqualified name a definition declares (``vec_t<float, 1>::load`` gives ``load``)."""
    declarator = _function_declarator(definition)
    inner = declarator.child_by_field_name("declarator") if declarator is not None else None
    return re.split(r"::", text(inner))[-1].split("<", 1)[0].strip()


def _template_of(node: Node) -> tuple[str, ...]:
    """The names of the template parameters of the template ``node`` declares (none for a
    plain function or class)."""
    return tuple(t.name for t in _own_template(node))


def _split_type(spelled: str) -> tuple[str, tuple[str, ...] | None]:
    """(template name, its arguments or None) of a class type as written: ``vec_t<float,
    vec_size>`` gives (``vec_t``, (``float``, ``vec_size``))."""
    words = re.sub(r"\b(?:const|volatile|struct|class|typename)\b|[&*]", " ", spelled).strip()
    name, angle, rest = words.partition("<")
    base = name.strip().rsplit("::", 1)[-1]
    if not angle:
        return base, None
    return base, tuple(a.strip() for a in expr.split_top_level(rest.rsplit(">", 1)[0]))


def _function(definition: Node) -> _Function | None:
    declarator = _function_declarator(definition)
    if declarator is None or definition.child_by_field_name("body") is None:
        return None
    params = _params(declarator)
    plist = declarator.child_by_field_name("parameters")
    defaults = tuple(
        text(c.child_by_field_name("default_value")) or None
        if c.type == "optional_parameter_declaration"
        else None
        for c in (plist.named_children if plist is not None else [])
        if c.type in ("parameter_declaration", "optional_parameter_declaration")
    )
    owner, owner_args, owner_free = "", None, frozenset[str]()
    qualified = text(declarator.child_by_field_name("declarator"))
    if "::" in qualified:  # defined outside its class: ``vec_t<half, 1>::load``
        owner, owner_args = _split_type(qualified.rsplit("::", 1)[0])
        owner_free = frozenset(_template_of(definition))
    else:
        parent = definition.parent
        while parent is not None and parent.type not in ("struct_specifier", "class_specifier"):
            if parent.type in ("function_definition", "translation_unit"):
                parent = None
                break
            parent = parent.parent
        if parent is not None:
            owner, owner_args = _split_type(text(parent.child_by_field_name("name")))
            owner_free = frozenset(_template_of(parent))
    return _Function(
        definition,
        tuple(p.name for p in params),
        defaults,
        _template_of(definition),
        owner,
        owner_args,
        owner_free,
    )


def _local_facts(body: Node) -> tuple[dict[str, list[str]], dict[str, str], set[str]]:
    """(each local's values: initialiser and plain assignments; each local's declared type;
    the names updated otherwise: ``+=``, ``++``, passed by address)."""
    values: dict[str, list[str]] = {}
    types: dict[str, str] = {}
    updated: set[str] = set()
    for declaration in _walk(body, ("declaration", "parameter_declaration")):
        spelled = text(declaration.child_by_field_name("type"))
        for declarator in declaration.named_children:
            node: Node | None = declarator
            name = ""
            while node is not None:
                if node.type == "identifier":
                    name = text(node)
                    break
                node = node.child_by_field_name("declarator")
            if not name:
                continue
            pointer = "*" in text(declarator).split("=", 1)[0]
            types[name] = spelled + ("*" if pointer else "")
            value = declarator.child_by_field_name("value")
            if declarator.type == "init_declarator" and value is not None:
                if value.type in ("initializer_list", "argument_list"):
                    updated.add(name)
                else:
                    values.setdefault(name, []).append(text(value))
    for assignment in _walk(body, ("assignment_expression",)):
        left = assignment.child_by_field_name("left")
        right = assignment.child_by_field_name("right")
        if left is None or left.type != "identifier":
            continue
        if text(assignment.child_by_field_name("operator")) == "=" and right is not None:
            values.setdefault(text(left), []).append(text(right))
        else:
            updated.add(text(left))
    for name, given in values.items():  # ``x = x + 1``: a value of its own past values
        if any(re.search(name_pattern([name]), v) for v in given):
            updated.add(name)
    for update in _walk(body, ("update_expression", "pointer_expression")):
        argument = update.child_by_field_name("argument")
        taken = update.type == "update_expression" or text(update).startswith("&")
        if argument is not None and argument.type == "identifier" and taken:
            updated.add(text(argument))
    return values, types, updated


def _forms(expression: str, values: dict[str, list[str]], updated: set[str]) -> list[str] | None:
    """``expression`` with each local replaced by each of its values (every combination, locals
    inside values too, :data:`MAX_LOCAL_DEPTH` deep), or None past :data:`MAX_FORMS`."""
    forms = [expression]
    for _ in range(MAX_LOCAL_DEPTH):
        expanded: list[str] = []
        for form in forms:
            words = [
                w for w in dict.fromkeys(_WORD.findall(form)) if w in values and w not in updated
            ]
            out = [form]
            for word in words:
                out = [bound_names(f, {word: v}) for f in out for v in values[word]]
                if len(out) > MAX_FORMS:
                    return None
            expanded += out
        expanded = list(dict.fromkeys(expanded))
        if len(expanded) > MAX_FORMS:
            return None
        if expanded == forms:
            return forms
        forms = expanded
    return forms


_WORD = re.compile(r"(?<![\w.])(?<!->)[A-Za-z_]\w*")
"""A name that is not a field (``.x``, ``->x``) nor inside a number (``a>b`` names ``b``)."""


def _based(node: Node, pointers: set[str]) -> tuple[str, list[str]] | None:
    """(base pointer, offset summands) of a pointer expression: ``p``, ``p + a - b``, ``a + p``,
    ``&p[i]``; None where no named pointer is its base."""
    node = unparenthesised(node)
    if node.type == "identifier":
        return (text(node), []) if text(node) in pointers else None
    if node.type == "pointer_expression" and text(node).startswith("&"):
        inner = node.child_by_field_name("argument")
        inner = unparenthesised(inner) if inner is not None else None
        if inner is not None and inner.type == "subscript_expression":
            base = inner.child_by_field_name("argument")
            indices = inner.child_by_field_name("indices")
            index = indices.named_children if indices is not None else []
            named = base is not None and base.type == "identifier" and text(base) in pointers
            if named and len(index) == 1:
                return text(base), [text(index[0])]
        return None
    if node.type != "binary_expression":
        return None
    operator = text(node.child_by_field_name("operator"))
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    if left is None or right is None or operator not in ("+", "-"):
        return None
    found = _based(left, pointers)
    if found is not None:
        term = text(right) if operator == "+" else f"-({text(right)})"
        return found[0], [*found[1], term]
    found = _based(right, pointers) if operator == "+" else None
    return (found[0], [text(left), *found[1]]) if found is not None else None


def _renamed(expression: str, names: dict[str, str]) -> str:
    return _WORD.sub(lambda m: names.get(m[0], m[0]), expression)


def _joined(terms: list[str]) -> str:
    return " + ".join(f"({t})" for t in terms)


def _vector_cast(node: Node) -> tuple[int, Node] | None:
    """(width, operand) of a cast to a pointer to a CUDA vector type, else None."""
    if node.type == "cast_expression":
        spelled = text(node.child_by_field_name("type"))
        operand = node.child_by_field_name("value")
    else:
        function = node.child_by_field_name("function")
        form = re.match(r"^(?:reinterpret_cast|static_cast)\s*<(.+)>$", text(function))
        args = node.child_by_field_name("arguments")
        operands = args.named_children if args is not None else []
        if form is None or len(operands) != 1:
            return None
        spelled, operand = form[1], operands[0]
    if spelled.count("*") != 1 or not spelled.strip().endswith("*") or operand is None:
        return None
    words = [w for w in re.findall(r"\w+", spelled) if w not in ("const", "volatile")]
    width = VECTOR_BYTES.get(words[0]) if len(words) == 1 else None
    return (width, operand) if width is not None else None


def _reads_address(body: Node) -> bool:
    """Whether the body reads a pointer's address as an integer (a run-time alignment test)."""
    for node in _walk(body, ("cast_expression", "call_expression")):
        if node.type == "cast_expression":
            spelled = text(node.child_by_field_name("type"))
        else:
            form = re.match(
                r"^reinterpret_cast\s*<(.+)>$", text(node.child_by_field_name("function"))
            )
            if form is None:
                continue
            if "*" not in form[1] and "&" not in form[1]:  # pointer to integer: an address
                return True
            spelled = form[1]
        if any(re.search(rf"\b{t}\b", spelled) for t in ADDRESS_INTEGERS):
            return True
    return False


def _callees(
    call: Node, function: _Function, types: dict[str, str], index: FunctionIndex
) -> tuple[list[_Function], tuple[str, ...]]:
    """The definitions a call may run, with the call's template arguments: a member call's among
    the receiver class's specialisations its template arguments can be, a plain call's among the
    free functions of its name (or the caller's class's members)."""
    target = call.child_by_field_name("function")
    if target is None:
        return [], ()
    explicit: tuple[str, ...] = ()
    if target.type == "template_function":
        _, args = _split_type(text(target))
        explicit = args or ()
        target = target.child_by_field_name("name") or target
    if target.type == "field_expression":
        receiver = target.child_by_field_name("argument")
        member = target.child_by_field_name("field")
        if receiver is None or member is None:
            return [], ()
        name = text(member).split("<", 1)[0]
        if member.type == "template_method":
            explicit = _split_type(text(member))[1] or ()
        spelled = types.get(text(unparenthesised(receiver)).lstrip("*"), "")
        if text(receiver) in ("this", "*this"):
            owner, args = function.owner, function.owner_args
            free = set(function.owner_free) | set(function.template)
        elif spelled:
            owner, args = _split_type(spelled)
            free = set(function.template) | set(function.owner_free)
        else:
            return [], ()
        candidates = [
            f
            for f in index.by_name.get(name, [])
            if f.owner == owner and _can_match(args, f.owner_args, free, f.owner_free)
        ]
        return candidates, explicit
    name = text(target).rsplit("::", 1)[-1].split("<", 1)[0].strip()
    own = [f for f in index.by_name.get(name, []) if function.owner and f.owner == function.owner]
    return own or [f for f in index.by_name.get(name, []) if not f.owner], explicit


def _can_match(
    receiver: tuple[str, ...] | None,
    specialised: tuple[str, ...] | None,
    free: set[str],
    own_free: frozenset[str],
) -> bool:
    """Whether a class written with ``receiver`` template arguments can be the specialisation
    with ``specialised`` ones: equal where both are fixed, anything where either is a template
    parameter (``free`` the caller's, ``own_free`` the specialisation's)."""
    if receiver is None or specialised is None:
        return True
    if len(receiver) != len(specialised):
        return False
    return all(
        a.replace(" ", "") == b.replace(" ", "") or a in free or b in own_free
        for a, b in zip(receiver, specialised, strict=True)
    )


class _Scope(NamedTuple):
    """What a function body's readings share: each local's values, every name's declared type
    (the parameters' included), the names updated otherwise (:func:`_local_facts`), the
    parameters, and the pointers among parameters and locals."""

    values: dict[str, list[str]]
    types: dict[str, str]
    updated: set[str]
    params: tuple[Param, ...]
    pointers: set[str]


def _scope(function: _Function, index: FunctionIndex) -> _Scope:
    """``function``'s :class:`_Scope`, read once per function (its vector accesses and its
    guards both ask)."""
    key = id(function.node)
    if key not in index.scopes:
        body = function.node.child_by_field_name("body")
        values, types, updated = _local_facts(body) if body is not None else ({}, {}, set())
        declarator = _function_declarator(function.node)
        params = _params(declarator) if declarator is not None else ()
        for param, node in zip(function.params, _param_nodes(function), strict=False):
            types.setdefault(param, text(node.child_by_field_name("type")) if node else "")
        pointers = {p.name for p in params if p.pointer} | {
            n for n, t in types.items() if t.endswith("*")
        }
        index.scopes[key] = _Scope(values, types, updated, tuple(params), pointers)
    return index.scopes[key]


def _needs(function: _Function, index: FunctionIndex, depth: int) -> tuple[_Need, ...]:
    """The vector accesses of ``function`` (its callees' included), through its parameters and
    the local pointers it cannot follow to one; the offsets in its own terms."""
    key = id(function.node)
    if key in index.needs:
        return index.needs[key]
    body = function.node.child_by_field_name("body")
    if body is None or depth > MAX_CALL_DEPTH:
        return ()  # not kept: a call nearer the kernel reads it
    index.needs[key] = ()  # a recursive call asks nothing more
    if _reads_address(body):
        # a run-time alignment test (the guarded path): the function's accesses are not read,
        # and the note says so (one tested pointer turns off the reading of all of them)
        index.needs[key] = (_Need("", (), 0, f"{_where(function.node)} (tests an address)"),)
        return index.needs[key]
    values, types, updated, params, pointers = _scope(function, index)
    # what reaches memory it was given without being a pointer of its own: a struct parameter
    # (``p.out``) and the names a structured binding of one declares (``[out, in] = p``); an
    # access through them is noted, not read
    structs = {p.name for p in params if not p.pointer}
    unpacked = {
        text(c)
        for binding in _walk(body, ("structured_binding_declarator",))
        for c in binding.named_children
        if c.type == "identifier"
    }
    found: list[_Need] = []

    def add(
        base_node: Node,
        extra: list[str],
        width: int,
        where: str,
        seen: frozenset[str] = frozenset(),
    ) -> None:
        based = _based(base_node, pointers)
        if based is None:
            # through a pointer the function was given or holds, at a place not read; through
            # none of them (``&data``, a member or local array) the function's own memory,
            # which the compiler aligns to its type
            written = text(base_node)
            fields = set(re.findall(r"(\w+)\s*(?:\.|->)\s*\w", written)) & structs
            if set(_WORD.findall(written)) & (pointers | unpacked) or fields:
                found.append(_Need("", (), width, where))
            return
        base, terms = based
        terms = [*terms, *extra]
        if base not in function.params and base in values and base not in updated:
            for value in values[base]:  # a local pointer: each value it is given
                node = expression_node(value)
                if node is None or base in seen:
                    found.append(_Need("", (), width, where))
                else:
                    add(node, terms, width, where, seen | {base})
            return
        if base in updated:  # moved by ``+=`` or ``++`` somewhere: its offsets are not all here
            found.append(_Need("", (), width, where))
            return
        if base not in function.params:
            # a local array or register (``&data``): the function's own memory, which the
            # compiler aligns; a local pointer given no value here is not read
            if types.get(base, "").endswith("*"):
                found.append(_Need("", (), width, where))
            return
        joined = _inline_returns(_joined(terms), index) if terms else ""
        forms = _forms(joined, values, updated) if terms else [""]
        # a local left in (a loop counter) is a run-time value of this function: renamed, so
        # that a caller's local of the same name is not put in its place
        own = {n: f"{n}{LOCAL_MARK}" for n in types if n not in function.params}
        kept = tuple(_renamed(f, own) for f in forms) if forms is not None else ()
        found.append(_Need(base, kept, width, where))

    for site in _sites(body, function, types, index, depth):
        if site.base is None:  # not read inside the callee
            found.append(_Need("", (), site.width, site.where))
        else:
            add(site.base, list(site.offsets), site.width, site.where)
    index.needs[key] = _widest(found)
    return index.needs[key]


def _return_only(name: str, index: FunctionIndex) -> tuple[tuple[str, ...], str] | None:
    """(parameters, returned expression) of the one free function of the unit named ``name``
    whose body is a single ``return`` (FlashInfer's ``get_elem_offset_impl``: ``elem_idx *
    stride_n + head_idx * stride_h + feat_idx``), else None (none, several, or more than a
    return)."""
    found = [f for f in index.by_name.get(name, []) if not f.owner]
    if len(found) != 1 or found[0].template:
        return None  # a template's parameters are no names of the caller's
    body = found[0].node.child_by_field_name("body")
    statements = [c for c in (body.named_children if body else []) if c.type != "comment"]
    if len(statements) != 1 or statements[0].type != "return_statement":
        return None
    returned = [c for c in statements[0].named_children if c.type != "comment"]
    if len(returned) != 1 or re.search(rf"\b{re.escape(name)}\s*\(", text(returned[0])):
        return None  # a recursive helper is not unrolled
    return found[0].params, text(returned[0])


def _inline_returns(expression: str, index: FunctionIndex) -> str:
    """``expression`` with each call of a function that only returns an expression
    (:func:`_return_only`) replaced by that expression over the call's arguments, so that an
    offset computed by a helper is read as the sum it is (:data:`MAX_CALL_DEPTH` calls deep)."""
    expression = expression.strip()
    for _ in range(MAX_CALL_DEPTH):
        node = expression_node(expression)
        if node is None:
            return expression
        base = len(EXPRESSION_PREFIX.encode())
        source = expression.encode()
        edits: list[tuple[int, int, str]] = []
        for call in _walk(node, ("call_expression",)):
            start, end = call.start_byte - base, call.end_byte - base
            if any(s <= start < e for s, e, _ in edits):
                continue  # inside a call replaced already: read in the next pass
            target = call.child_by_field_name("function")
            args_node = call.child_by_field_name("arguments")
            name = text(target).rsplit("::", 1)[-1].strip() if target is not None else ""
            inlined = _return_only(name, index) if name.isidentifier() else None
            given = args_node.named_children if args_node is not None else []
            args = [text(a) for a in given if a.type != "comment"]
            if inlined is None or len(args) != len(inlined[0]):
                continue
            bound = dict(zip(inlined[0], args, strict=True))
            edits.append((start, end, f"({bound_names(inlined[1], bound)})"))
        if not edits:
            return expression
        for start, end, value in sorted(edits, reverse=True):
            source = source[:start] + value.encode() + source[end:]
        expression = source.decode()
    return expression


@dataclass(frozen=True)
class _Site:
    """One vector access a function's body makes: by ``node`` (a cast to a vector pointer, a
    ``cp.async`` or a call of a function that makes one), at the expression ``base`` of the body
    plus ``offsets`` more elements (a callee's offset in the call's terms; none for the body's
    own access), ``width`` bytes; ``base`` None where the callee's access is not read."""

    node: Node
    base: Node | None
    offsets: tuple[str, ...]
    width: int
    where: str


def _sites(
    root: Node, function: _Function, types: dict[str, str], index: FunctionIndex, depth: int
) -> Iterator[_Site]:
    """The vector accesses made under ``root`` (a body of ``function``, or a part of one), its
    own and its callees' (:func:`_needs`, one call deeper)."""
    from astra_graph.framework.guarded import copy_sources  # it reads this module's helpers

    for node in _walk(root, ("cast_expression", "call_expression", "gnu_asm_expression")):
        if node.type == "gnu_asm_expression":  # cp.async: its source aligned to its size
            for source, size in copy_sources(node):
                yield _Site(node, source, (), size, _where(node))
            continue
        cast = _vector_cast(node)
        if cast is not None:
            yield _Site(node, cast[1], (), cast[0], _where(node))
            continue
        if node.type != "call_expression":
            continue
        callees, explicit = _callees(node, function, types, index)
        args_node = node.child_by_field_name("arguments")
        given = args_node.named_children if args_node is not None else []
        arg_nodes = [a for a in given if a.type != "comment"]
        args = [text(a) for a in arg_nodes]
        for callee in callees:
            bound = {
                p: a
                for p, a in zip(
                    callee.params,
                    [*args, *(d or "" for d in callee.defaults[len(args) :])],
                    strict=False,
                )
                if a
            }
            bound.update(dict(zip(callee.template, explicit, strict=False)))
            for need in _needs(callee, index, depth + 1):
                if not need.base or not need.offsets:
                    yield _Site(node, None, (), need.width, need.where)
                    continue
                at = callee.params.index(need.base)
                if at >= len(arg_nodes):
                    continue  # a defaulted pointer: the callee's own (nullptr or a constant)
                for offset in need.offsets:  # each alternative must hold
                    moved = (bound_names(offset, bound),) if offset else ()
                    yield _Site(node, arg_nodes[at], moved, need.width, need.where)


def _widest(found: list[_Need]) -> tuple[_Need, ...]:
    """One need per base and offsets, the widest (every specialisation a call may run counts)."""
    out: dict[tuple[str, tuple[str, ...]], _Need] = {}
    for need in found:
        key = (need.base, need.offsets)
        if key not in out or need.width > out[key].width:
            out[key] = need
    return tuple(out.values())


def _param_nodes(function: _Function) -> list[Node | None]:
    declarator = _function_declarator(function.node)
    plist = declarator.child_by_field_name("parameters") if declarator is not None else None
    return [
        c
        for c in (plist.named_children if plist is not None else [])
        if c.type in ("parameter_declaration", "optional_parameter_declaration")
    ]


def _where(node: Node) -> str:
    line = " ".join(text(node).split())
    return f"line {node.start_point[0] + 1}: {line[:80]}"


def kernel_vector_accesses(definition: Node, index: FunctionIndex) -> tuple[VectorAccess, ...]:
    """The kernel's vector-width accesses (see the module docstring)."""
    function = _function(definition)
    if function is None:
        return ()
    return tuple(
        VectorAccess(n.base, n.offsets, n.width, n.where) for n in _needs(function, index, 0)
    )


@dataclass(frozen=True)
class VectorGuard:
    """A test ``t * width < extent`` in the kernel's body (``t`` read from ``threadIdx``: a
    thread's first element) that guards a vector-width access through a pointer parameter: the
    thread then moves its whole vector, so unless ``extent`` is a multiple of ``width`` the last
    vector moves elements past it. FlashInfer's cos/sin-cache rotary kernel tests ``tx *
    vec_size < rotary_dim`` and loads ``vec_size`` floats of each cache row; at ``rotary_dim`` 56
    and ``vec_size`` 16 its loads passed the row and the last row's passed the cache, and the
    original differed from itself."""

    extent: str
    """A by-value or template parameter of the kernel."""
    width: str
    """A by-value or template parameter, or a whole number (a literal's value, in decimal)."""
    where: str
    """The condition as written, with its line, for notes."""


MIN_COPY_BYTES = 8
"""The narrowest ``cp.async`` taken for a vector: a 4-byte copy moves one float."""
THREAD_INDEX_DEPTH = 4
"""Locals followed inside each other's values to find a ``threadIdx`` read."""


def kernel_vector_guards(definition: Node, index: FunctionIndex) -> tuple[VectorGuard, ...]:
    """The kernel's :class:`VectorGuard` s: each ``if`` whose condition (or one of its ``&&``
    terms) is ``a * w < e`` or ``e > a * w``, ``w`` and ``e`` launch values (by-value or template
    parameters; ``w`` also a number) and ``a`` read from ``threadIdx`` (itself or through locals),
    whose then-branch makes a vector access through a pointer parameter outside any inner
    ``if`` that tests ``e`` again (a kernel that handles its own tail there asks nothing); and
    each early return (``if (... || a * w >= e) return;``,
    :func:`~astra_graph.framework.parse._early_exit_terms`) before a statement of its block that
    makes one."""
    function = _function(definition)
    body = definition.child_by_field_name("body")
    if function is None or body is None:
        return ()
    values, types, _, params, pointers = _scope(function, index)
    fixed = set(function.template) | {p.name for p in params if not p.pointer}

    def threaded(expression: str) -> bool:
        return _reads_thread_index(expression, values)

    def moves(node: Node, extent: str) -> bool:
        return _moves_vectors(node, extent, pointers, function, types, index)

    found: list[VectorGuard] = []
    for branch in _walk(body, ("if_statement",)):
        condition = branch.child_by_field_name("condition")
        then = branch.child_by_field_name("consequence")
        if condition is None or then is None:
            continue
        terms = _operands(_condition_value(condition), "&&")
        guards = [g for t in terms if (g := _guard(t, fixed, threaded, ("<", ">"))) is not None]
        found += [VectorGuard(e, w, _where(condition)) for e, w in guards if moves(then, e)]
        exits = [
            g
            for t in _early_exit_terms(branch)
            if (g := _guard(t, fixed, threaded, (">=", "<="))) is not None
        ]
        block = branch.parent
        if not exits or block is None or block.type != "compound_statement":
            continue
        later = [c for c in block.named_children if c.start_byte >= branch.end_byte]
        found += [
            VectorGuard(e, w, _where(condition))
            for e, w in exits
            if any(moves(c, e) for c in later)
        ]
    return tuple(dict.fromkeys(found))


def _reads_thread_index(expression: str, values: dict[str, list[str]], depth: int = 0) -> bool:
    """Whether ``expression`` reads ``threadIdx``, itself or through the values of the locals it
    names (:data:`THREAD_INDEX_DEPTH` deep)."""
    if re.search(r"\bthreadIdx\b", expression):
        return True
    if depth >= THREAD_INDEX_DEPTH:
        return False
    return any(
        _reads_thread_index(value, values, depth + 1)
        for word in set(_WORD.findall(expression))
        for value in values.get(word, [])
    )


def _guard(
    test: Node,
    fixed: set[str],
    threaded: Callable[[str], bool],
    operators: tuple[str, str],
) -> tuple[str, str] | None:
    """(extent, width) of ``a * w < e`` or ``e > a * w`` (``operators`` ``("<", ">")``; an
    early return's ``a * w >= e`` or ``e <= a * w`` with ``(">=", "<=")``), ``a`` read from
    ``threadIdx`` (``threaded``), else None."""
    test = unparenthesised(test)
    if test.type != "binary_expression":
        return None
    operator = text(test.child_by_field_name("operator"))
    left, right = test.child_by_field_name("left"), test.child_by_field_name("right")
    if left is None or right is None or operator not in operators:
        return None
    product, extent = (left, right) if operator == operators[0] else (right, left)
    product, extent = unparenthesised(product), unparenthesised(extent)
    if extent.type != "identifier" or text(extent) not in fixed:
        return None
    if product.type != "binary_expression" or text(product.child_by_field_name("operator")) != "*":
        return None
    sides = [product.child_by_field_name(f) for f in ("left", "right")]
    for width, other in (sides, sides[::-1]):
        if width is None or other is None:
            return None
        width = unparenthesised(width)
        number = _literal(width)
        launch_value = width.type == "identifier" and text(width) in fixed
        if (launch_value or number is not None) and threaded(text(other)):
            return text(extent), text(width) if number is None else str(number)
    return None


def _moves_vectors(
    node: Node,
    extent: str,
    pointers: set[str],
    function: _Function,
    types: dict[str, str],
    index: FunctionIndex,
) -> bool:
    """Whether ``node`` makes a vector-width access (:func:`_sites`; a ``cp.async`` of at least
    :data:`MIN_COPY_BYTES`) through one of ``pointers`` (the kernel's pointer parameters and
    local pointers), outside any inner ``if`` whose condition reads ``extent``."""

    def retested(inner: Node) -> bool:
        parent = inner.parent
        while parent is not None and parent != node:
            condition = parent.child_by_field_name("condition")
            tested = condition is not None and extent in _WORD.findall(text(condition))
            if parent.type == "if_statement" and tested:
                return True
            parent = parent.parent
        return False

    return any(
        site.base is not None
        and site.width >= (MIN_COPY_BYTES if site.node.type == "gnu_asm_expression" else 1)
        and _based(site.base, pointers) is not None
        and not retested(site.node)
        for site in _sites(node, function, types, index, 0)
    )


def _literal(node: Node) -> int | None:
    if node.type != "number_literal":
        return None
    try:
        return int(re.sub(r"[uUlL]+$", "", text(node)), 0)
    except ValueError:
        return None


def required_multiples(node: Node, k: int, fixed: set[str]) -> list[tuple[str, int]] | None:
    """``(name, m)`` pairs, each ``name % m == 0``, that together make the expression a multiple
    of ``k`` for every run-time value it reads; ``fixed`` the names a launch fixes (by-value
    parameters, template parameters). None where the expression is not read so."""
    if k == 1:
        return []
    node = unparenthesised(node)
    number = _literal(node)
    if number is not None:
        return [] if number % k == 0 else None
    if node.type == "identifier":
        return [(text(node), k)] if text(node) in fixed else None
    if node.type == "cast_expression":
        value = node.child_by_field_name("value")
        return required_multiples(value, k, fixed) if value is not None else None
    if node.type == "unary_expression" and text(node).lstrip().startswith("-"):
        argument = node.child_by_field_name("argument")
        return required_multiples(argument, k, fixed) if argument is not None else None
    if node.type == "conditional_expression":
        sides = [node.child_by_field_name(f) for f in ("consequence", "alternative")]
        return _all([required_multiples(s, k, fixed) if s else None for s in sides])
    if node.type != "binary_expression":
        return None
    operator = text(node.child_by_field_name("operator"))
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    if left is None or right is None:
        return None
    if operator in ("+", "-", "%"):  # a remainder: dividend and divisor both multiples
        return _all([required_multiples(left, k, fixed), required_multiples(right, k, fixed)])
    if operator == "*":
        for one, other in ((left, right), (right, left)):
            factor = _literal(unparenthesised(one))
            if factor is not None:
                return required_multiples(other, k // math.gcd(factor, k), fixed)
        # a launch value times a run-time one: the launch value must be the multiple
        found = required_multiples(right, k, fixed)
        return found if found is not None else required_multiples(left, k, fixed)
    divisor = _literal(unparenthesised(right))
    if operator == "/" and divisor is not None and divisor > 0:
        return required_multiples(left, k * divisor, fixed)
    if operator == "<<" and divisor is not None and divisor >= 0:
        return required_multiples(left, k // math.gcd(1 << divisor, k), fixed)
    return None


def _all(parts: list[list[tuple[str, int]] | None]) -> list[tuple[str, int]] | None:
    if any(p is None for p in parts):
        return None
    return [pair for p in parts if p is not None for pair in p]


NOTED_ACCESSES = 3
"""Unread accesses a note names (it counts the rest)."""


def dim_multiples(analysis: Analysis) -> dict[str, int]:
    """The multiple each dim must be for the kernel's vector accesses to be aligned at every
    shape (``[dims.X] multiple_of``): for each access through a tensor, width / element bytes
    (the smallest element the launch dispatches, for a template element), read over each of its
    offsets (:func:`required_multiples`); a requirement on a by-value parameter the launch
    passes one dim gives that dim's multiple, on a constant is checked here. What is not read so
    (an offset through a call, a parameter given an expression of several dims, a template
    parameter) is noted, and the domain is left as it was."""
    kernel = analysis.kernel
    bindings: dict[str, Binding | _Value] = {b.param: b for b in analysis.bindings}
    _, entry_args = _split_type(analysis.entry)
    for param, value in zip(kernel.template, entry_args or (), strict=False):
        # a template value the entry spells as a number, or as a specialisation over the dims
        spelled = analysis.specializations.get(value, value)
        bindings.setdefault(param.name, _Value(param.name, "expr", spelled))
    fixed = {p.name for p in kernel.params if not p.pointer} | {t.name for t in kernel.template}
    multiples: dict[str, int] = {}
    unread: list[str] = []
    for access in kernel.vectors:
        binding = bindings.get(access.pointer)
        if not access.pointer:
            unread.append(f"{access.where} (its pointer or offset)")
            continue
        if binding is None or binding.kind != "tensor" or binding.value not in analysis.tensors:
            unread.append(f"{access.where} (its pointer is not a tensor's)")
            continue
        if not isinstance(binding, _Value) and binding.moved:
            # passed at a moved address: alignment depends on the move too, which is not read
            unread.append(f"{access.where} through {access.pointer} (a tensor at a moved address)")
            continue
        k = _elements(access.width, analysis.tensors[binding.value].element, analysis.dtypes)
        if k <= 1:
            continue
        if not access.offsets:
            unread.append(f"{access.where} through {access.pointer} (its offset)")
            continue
        for offset in access.offsets:
            node = expression_node(offset) if offset else None
            needed = required_multiples(node, k, fixed) if node is not None else []
            if offset and node is None:
                needed = None
            for name, m in needed or []:
                problem = _dim_multiple(name, m, bindings, analysis.dims, multiples)
                if problem:
                    unread.append(f"{access.where} through {access.pointer} ({problem})")
            if needed is None:
                unread.append(f"{access.where} through {access.pointer} (offset {offset!r})")
    for guard in kernel.vector_guards:
        problem = _whole_vectors(guard, bindings, analysis, multiples)
        if problem:
            unread.append(f"{guard.where} ({problem})")
    for dim, m in multiples.items():
        analysis.notes.append(
            f"dims.{dim}: a multiple of {m}, which the kernel's vector-width accesses need "
            "(aligned, and whole vectors where a thread's first element is tested against it; "
            "no check of the framework's states it)"
        )
    if unread:
        rest = len(unread) - NOTED_ACCESSES
        named = "; ".join(dict.fromkeys(unread[:NOTED_ACCESSES]))
        analysis.notes.append(
            f"vector-width accesses whose alignment is not read (the domain is not narrowed for "
            f"them): {named}" + (f"; and {rest} more" if rest > 0 else "")
        )
    return multiples


def _launch_value(name: str, bindings: dict[str, Binding | _Value]) -> str | None:
    """What the launch gives a kernel parameter or template parameter, over the dims (a whole
    number, as :func:`_guard` writes a literal width, as itself), or None where it gives no
    expression."""
    if name.isdigit():
        return name
    binding = bindings.get(name)
    return binding.value if binding is not None and binding.kind == "expr" else None


def _whole_vectors(
    guard: VectorGuard,
    bindings: dict[str, Binding | _Value],
    analysis: Analysis,
    multiples: dict[str, int],
) -> str:
    """Keep the guard's extent a whole number of its vectors (:class:`VectorGuard`): a dim's
    multiple where the launch fixes the width to a number, else a requirement of the launch
    (``rotary_dim % (max(8, head_dim // 32)) == 0``: one build per width); '' when kept, else
    why not, as a note's words."""
    width, extent = _launch_value(guard.width, bindings), _launch_value(guard.extent, bindings)
    if width is None or extent is None:
        return f"{guard.extent} % {guard.width} == 0 over a launcher parameter"
    try:
        width_body, extent_body = expr.parse(width).body, expr.parse(extent).body
    except expr.ExprError:
        return f"{guard.extent} % {guard.width} == 0 over {extent} and {width}"
    if isinstance(width_body, ast.Constant) and type(width_body.value) is int:
        if width_body.value <= 1:
            return ""
        return _dim_multiple(guard.extent, width_body.value, bindings, analysis.dims, multiples)
    if not isinstance(extent_body, ast.Name) or extent_body.id not in analysis.dims:
        return f"{guard.extent} % {guard.width} == 0 over {extent}"
    requirement = f"({width}) <= 1 or {extent_body.id} % ({width}) == 0"
    if requirement not in analysis.requires:
        analysis.requires.append(requirement)
        analysis.notes.append(
            f"requires {requirement}: the kernel tests a thread's first element against "
            f"{guard.extent} and moves its whole vector of {guard.width} ({guard.where}); no "
            "check of the framework's states it"
        )
    return ""


def _elements(width: int, element: str | None, dtypes: tuple[str, ...]) -> int:
    """Elements per vector: ``width`` over the element's bytes (the smallest dispatched one for
    a template element), 1 where the vector is no wider than one element or not a whole number
    of them."""
    sizes = (
        [DTYPES[d].itemsize for d in dtypes if d in DTYPES]
        if element in (None, "T")
        else [DTYPES[element].itemsize]
        if element in DTYPES
        else []
    )
    if not sizes:
        return 1
    size = min(sizes)
    return width // size if width > size and width % size == 0 else 1


def _dim_multiple(
    name: str,
    m: int,
    bindings: dict[str, Binding | _Value],
    dims: list[str],
    multiples: dict[str, int],
) -> str:
    """Record ``name % m == 0`` as a dim's multiple where the launch passes one dim, or a
    product of dims and numbers (a stride: its last dim takes it), or check a constant; else why
    not, as a note's words."""
    binding = bindings.get(name)
    if binding is None or binding.kind != "expr":
        return f"{name} % {m} == 0 over a template or launcher parameter"
    try:
        body = expr.parse(binding.value).body
    except expr.ExprError:
        return f"{name} % {m} == 0 over {binding.value}"
    if isinstance(body, ast.Name) and body.id in dims:
        multiples[body.id] = math.lcm(multiples.get(body.id, 1), m)
        return ""
    factors = expr.factors(body)
    named = [f.id for f in factors if isinstance(f, ast.Name) and f.id in dims]
    numbers = [n for f in factors if (n := _positive_int(f)) is not None]
    if len(factors) > 1 and named and len(named) + len(numbers) == len(factors):
        # a stride (``num_heads * head_dim``): its last dim, taken to be the innermost (a
        # row-major stride is the product of the dims after its own, outer first; the row length
        # the framework's widths are multiples of), takes what the numbers leave; written in
        # another order, a dim the stride's alignment holds by is still narrowed, never wrongly
        left = m // math.gcd(m, math.prod(numbers))
        if left > 1:
            multiples[named[-1]] = math.lcm(multiples.get(named[-1], 1), left)
        return ""
    if isinstance(body, ast.Constant) and type(body.value) is int:
        return "" if body.value % m == 0 else f"{name} = {body.value}, not a multiple of {m}"
    return f"{name} % {m} == 0 over {binding.value}"


def _positive_int(node: ast.expr) -> int | None:
    """A positive whole-number factor's value, else None."""
    value = node.value if isinstance(node, ast.Constant) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
