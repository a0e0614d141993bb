"""A by-value struct kernel argument read field by field from the launcher that fills it.

SGLang's JIT kernels take one ``const Params __grid_constant__ params`` and FlashInfer's take
``paged_kv_t`` and the like: an aggregate of pointers and scalars the launcher fills right before
the launch. Each field is then bound exactly as a kernel parameter of its own would be (a
tensor's ``data_ptr()``, a size expression, a launcher scalar, ``nullptr``), and the operation
passes the struct as one argument packed with the C++ layout
(:mod:`astra_graph.kernel.param_struct`, ``Type{...}`` in the header's ``params``).

Three ways of filling a struct are read, all as C++ defines them:

* designated initialisers, ``Params{.input = x.data_ptr(), .eps = eps}``;
* positional aggregate initialisation, ``Params{x.data_ptr(), eps}``, in declaration order;
* member-wise assignment after a plain declaration, ``Params p; p.input = ...; p.eps = ...;``.

A field an initialiser list leaves out is value-initialised (zero, or a null pointer), as the
language says, and that is noted. A field of a plain declaration that is never assigned before
the launch holds an indeterminate value in the framework, so such a launch is refused rather
than given a guessed zero. A field of a type no contract binding holds (an array, a bit-field,
a reference) is refused with its name.

A field that is itself a struct of the file (SGLang's ``FusedRopeStoreParams`` begins with a
``FusedRopeParams base_params``) is read the same way from the value the outer one gives it
(``.base_params = params``, a local holding ``FusedRopeParams{...}``) and its fields take its
place (:func:`flattened`): the contract packs one flat aggregate. That is the same bytes only
where each leaf field lies where C++ lays it inside the nested one (the nested struct aligned to
its widest field, its size rounded up to that, so a field after it never sits in its tail
padding), which is checked; a struct whose nesting moves a field is refused, as is one whose
fields' kinds are not known (an element-typed field) or whose leaf names repeat.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from astra_graph.framework.parse import Param
from astra_graph.kernel.expr import split_top_level
from astra_graph.kernel.param_struct import FIELD_BYTES, Nested, flat_layout_holds
from astra_graph.kernel.signature import MAX_NESTING

ZERO_POINTER = "nullptr"
ZERO_VALUE = "0"
_INITIALISER = re.compile(r"^(?:(?P<type>[\w:]+)\s*)?\{(?P<items>.*)\}$", re.S)
_DESIGNATED = re.compile(r"^\.\s*(?P<field>\w+)\s*=\s*(?P<value>.+)$", re.S)
_UNSUPPORTED = ("array", "bit-field")


class StructUnread(ValueError):
    """The struct argument's fields cannot all be read; ``str()`` says which and why."""


def field_values(
    argument: str, type_name: str, fields: list[Param], found: dict[str, str], notes: list[str]
) -> list[str]:
    """The expression each field of the struct ``argument`` holds at the launch, in
    declaration order; raises StructUnread saying why when one is not known."""
    for member in fields:
        if member.type in _UNSUPPORTED or member.reference:
            raise StructUnread(
                f"{type_name}.{member.name} is {member.type or 'a reference'}: "
                "only pointer and scalar fields can be packed"
            )
    argument = argument.strip()
    local = argument if re.fullmatch(r"\w+(?:\.\w+)*", argument) else None
    value = " ".join(found.get(argument, argument).split())
    initialiser = _INITIALISER.match(value)
    if initialiser is not None and (
        initialiser["type"] is None or initialiser["type"].rsplit("::", 1)[-1] == type_name
    ):
        return _listed(split_top_level(initialiser["items"]), type_name, fields, notes)
    if local is not None and any(f"{local}.{m.name}" in found for m in fields):
        return _assigned(local, type_name, fields, found)
    items = split_top_level(value)
    if local in found and (len(items) > 1 or _DESIGNATED.match(value)):
        # `Params p{a, b};` and `Params p = {a, b};`: the parser keeps a declaration's
        # initialiser list as its items (as for `dim3 grid(n)`); one item could as well be a
        # call returning the struct, which is not read
        return _listed(items, type_name, fields, notes)
    raise StructUnread(
        f"the {type_name} argument {argument!r} is neither an initialiser list nor a local "
        "whose fields are assigned before the launch"
    )


def _listed(items: list[str], type_name: str, fields: list[Param], notes: list[str]) -> list[str]:
    """Field values of a designated or positional initialiser list, value-initialising the rest."""
    items = [i for i in items if i.strip()]
    designated = [_DESIGNATED.match(i) for i in items]
    if items and all(designated):
        given = {m["field"]: m["value"].strip() for m in designated if m is not None}
        unknown = sorted(set(given) - {f.name for f in fields})
        if unknown:
            raise StructUnread(f"{type_name} has no field {unknown[0]!r}")
    elif any(designated):
        raise StructUnread(f"the {type_name} initialiser mixes designated and positional items")
    else:
        if len(items) > len(fields):
            raise StructUnread(f"{type_name} has {len(fields)} fields, {len(items)} are given")
        given = {f.name: v for f, v in zip(fields, items, strict=False)}
    left = [f.name for f in fields if f.name not in given]
    if left:
        notes.append(
            f"{type_name}: {', '.join(left)} not in the initialiser, value-initialised "
            "(zero or nullptr) as C++ does"
        )
    return [given.get(f.name, ZERO_POINTER if f.pointer else ZERO_VALUE) for f in fields]


def _assigned(local: str, type_name: str, fields: list[Param], found: dict[str, str]) -> list[str]:
    """Field values of a struct filled member by member (``p.eps = eps;``)."""
    missing = [f.name for f in fields if f"{local}.{f.name}" not in found]
    if missing:
        raise StructUnread(
            f"{local}.{missing[0]} ({type_name}) is not assigned before the launch: its value "
            "is indeterminate, not imported as a guess"
        )
    return [found[f"{local}.{f.name}"] for f in fields]


def flattened(
    type_name: str,
    fields: list[Param],
    values: list[str],
    structs: Mapping[str, list[Param]],
    found: dict[str, str],
    notes: list[str],
    kind_of: Callable[[Param], str | None],
) -> tuple[list[Param], list[str]]:
    """``fields`` and their ``values`` with each field whose type is a struct of ``structs``
    replaced by that struct's own fields, read from its value (:func:`field_values`), to any
    depth; ``kind_of`` gives a leaf field's :data:`~astra_graph.kernel.param_struct.
    FIELD_BYTES` kind, or None. Raises StructUnread where the flat fields would not lie where
    C++ lays out the nested ones, or a leaf's kind is not known, or two leaves share a name."""
    if not any(_nested_type(f, structs) for f in fields):
        return fields, values
    members, leaves = _leaves(type_name, fields, values, structs, found, notes)
    names = [m.name for m in members]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise StructUnread(f"{type_name}: nested fields repeat the name {repeated[0]!r}")
    shape = _kinds(type_name, fields, structs, kind_of)
    if not flat_layout_holds(shape):
        raise StructUnread(
            f"{type_name}: a nested struct's alignment or tail padding moves fields from where "
            "a flat list of them lies"
        )
    return members, leaves


def _nested_type(member: Param, structs: Mapping[str, list[Param]]) -> str | None:
    type_name = member.type.rsplit("::", 1)[-1]
    return type_name if not member.pointer and type_name in structs else None


def _leaves(
    type_name: str,
    fields: list[Param],
    values: list[str],
    structs: Mapping[str, list[Param]],
    found: dict[str, str],
    notes: list[str],
    depth: int = 0,
) -> tuple[list[Param], list[str]]:
    if depth >= MAX_NESTING:  # `a::P { b::P p; }` by unqualified names would never end
        raise StructUnread(f"{type_name}: structs nest more than {MAX_NESTING} deep")
    members: list[Param] = []
    leaves: list[str] = []
    for member, value in zip(fields, values, strict=True):
        nested = _nested_type(member, structs)
        if nested is None:
            members.append(member)
            leaves.append(value)
            continue
        inner = structs[nested]
        if value.strip() in (ZERO_VALUE, ZERO_POINTER):  # left out: value-initialised
            inner_values = [ZERO_POINTER if f.pointer else ZERO_VALUE for f in inner]
        else:
            inner_values = field_values(value, nested, inner, found, notes)
        more, more_values = _leaves(nested, inner, inner_values, structs, found, notes, depth + 1)
        members += more
        leaves += more_values
    return members, leaves


def _kinds(
    type_name: str,
    fields: list[Param],
    structs: Mapping[str, list[Param]],
    kind_of: Callable[[Param], str | None],
) -> Nested:
    """The field kinds of ``fields``, each nested struct's as a list of its own."""
    out: list[str | Nested] = []
    for member in fields:
        nested = _nested_type(member, structs)
        if nested is not None:
            out.append(_kinds(nested, structs[nested], structs, kind_of))
            continue
        kind = kind_of(member)
        if kind not in FIELD_BYTES:
            raise StructUnread(
                f"{type_name}.{member.name} ({member.type}): its size is not known, so the "
                "nested struct's layout is not either"
            )
        out.append(kind)
    return out
