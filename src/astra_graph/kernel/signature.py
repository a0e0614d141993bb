"""The kernel's C++ signature, read from the source, and the check that it matches the contract.

A light parser, not a compiler: it finds ``__global__ ... name(...)`` with comments removed
(namespaces, ``__launch_bounds__`` and templates with type, value and function-pointer parameters
are fine) and reads each parameter's pointer-ness, type and name. :func:`interface_problem` holds
the one rule for "this kernel takes what its bindings pass": count, pointer vs. value, element
type of each tensor and width of each integer. It needs no GPU: the coding agent, ``astra
validate`` and the evaluator run it before anything is compiled.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from astra_graph.kernel.contract import Binding, OperationSpec
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.expr import split_top_level
from astra_graph.kernel.header import Implementation, split_entry
from astra_graph.kernel.param_struct import FIELD_BYTES, POINTER, Nested, flat_layout_holds

_QUALIFIERS = {
    "const",
    "volatile",
    "__restrict__",
    "__restrict",
    "restrict",
    "struct",
    "typename",
    "__grid_constant__",
}
TYPE_ALIASES: dict[str, str] = {
    "__half": "float16",
    "half": "float16",
    "__nv_bfloat16": "bfloat16",
    "nv_bfloat16": "bfloat16",
    "__nv_fp8_e4m3": "float8_e4m3fn",
    "float": "float32",
    "double": "float64",
    "int": "int32",
    "signed": "int32",
    "signed int": "int32",
    "unsigned": "int32",
    "unsigned int": "int32",
    "int32_t": "int32",
    "uint32_t": "int32",
    "uint": "int32",
    "bool": "bool",
    "long": "int64",
    "long int": "int64",
    "long long": "int64",
    "long long int": "int64",
    "unsigned long": "int64",
    "unsigned long long": "int64",
    "int64_t": "int64",
    "uint64_t": "int64",
    "size_t": "int64",
    "int64": "int64",
    "uint8_t": "uint8",
    "unsigned char": "uint8",
    "int8_t": "int8",
    "signed char": "int8",
}
"""C++ spellings of the element and scalar types a contract can name (integers by width; the
one-byte ones by sign too, which their values' range is)."""
_TYPE_WORDS = {"int", "long", "unsigned", "signed", "short", "char", "float", "double"}
_STD_PREFIX = re.compile(r"^(::)?(cuda::)?(std::)?")


@dataclass(frozen=True)
class KernelParam:
    text: str
    pointer: bool
    base_type: str
    """The pointee (or value) type with qualifiers and the parameter name removed."""
    name: str
    const: bool


def _strip_comments(source: str) -> str:
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.S)
    return re.sub(r"//[^\n]*", " ", source)


def _closing(text: str, start: int, open_char: str, close_char: str) -> int:
    """Index of the bracket that closes the one at ``start``, or -1."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_char:
            depth += 1
        elif text[i] == close_char:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _parse_param(text: str) -> KernelParam:
    text = text.split("=")[0].strip()
    pointer = "*" in text or "[" in text
    all_words = re.findall(r"[A-Za-z_][\w:]*", text)
    words = [w for w in all_words if w not in _QUALIFIERS]
    name = ""
    if len(words) > 1 and words[-1] not in _TYPE_WORDS:
        name = words[-1]
        words = words[:-1]  # drop the parameter's name
    return KernelParam(
        text=text, pointer=pointer, base_type=" ".join(words), name=name, const="const" in all_words
    )


def _template_parameter_name(item: str) -> str | None:
    function_pointer = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)", item)
    if function_pointer:
        return function_pointer[1]
    names = re.findall(r"[A-Za-z_]\w*", item.split("=")[0])
    return names[-1] if names else None


def kernel_signature(source: str, kernel_name: str) -> tuple[list[str], list[KernelParam]] | None:
    """(template parameter names, kernel parameters) of a ``__global__`` function, or None.

    None when the definition cannot be found (e.g. built by a macro).
    """
    text = _strip_comments(source)
    for match in re.finditer(rf"\b{re.escape(kernel_name)}\s*\(", text):
        prefix_start = max(text.rfind(c, 0, match.start()) for c in ";}{")
        prefix = text[prefix_start + 1 : match.start()]
        if "__global__" not in prefix:
            continue
        open_at = match.end() - 1
        close_at = _closing(text, open_at, "(", ")")
        if close_at < 0:
            return None
        template_names: list[str] = []
        template = re.search(r"template\s*<", prefix)
        if template:
            start = prefix_start + 1 + template.end() - 1
            end = _closing(text, start, "<", ">")
            for item in split_top_level(text[start + 1 : end]):
                name = _template_parameter_name(item)
                if name:
                    template_names.append(name)
        body = text[open_at + 1 : close_at].strip()
        params = [] if body in ("", "void") else [_parse_param(p) for p in split_top_level(body)]
        return template_names, params
    return None


_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?P<name>[^>"]+)[>"]', re.MULTILINE)


def include_folders(impl: Implementation, include_dirs: Sequence[Path] = ()) -> list[Path]:
    """Where the file's ``#include`` is searched: its own folder, then ``include_dirs``."""
    return list(dict.fromkeys([impl.path.resolve().parent, *include_dirs]))


def local_headers(source: str, folders: Sequence[Path]) -> dict[str, str]:
    """{path: text} of every header ``source`` includes from ``folders``, recursively."""
    found: dict[str, str] = {}
    pending = [source]
    while pending:
        for match in _INCLUDE.finditer(pending.pop()):
            for folder in folders:
                path = folder / match["name"]
                if path.is_file():
                    key = str(path.resolve())
                    if key not in found:
                        found[key] = path.read_text(errors="replace")
                        pending.append(found[key])
                    break
    return found


def find_signature(
    impl: Implementation, include_dirs: Sequence[Path] = ()
) -> tuple[list[str], list[KernelParam]] | None:
    """The entry kernel's signature in the file or in a local header it includes, or None."""
    texts = [impl.source, *local_headers(impl.source, include_folders(impl, include_dirs)).values()]
    for text in texts:
        found = kernel_signature(text, impl.header.kernel_name)
        if found is not None:
            return found
    return None


def _expected(spec: OperationSpec, binding: Binding, dtype: str) -> tuple[bool, str]:
    """(passed as a pointer, contract type name) for one binding and element type."""
    if binding.kind == "struct":
        return False, binding.name
    if binding.kind == "tensor":
        arg = next(a for a in spec.contract.args if a.name == binding.name)
        return True, spec.contract.dtype_of(arg, dtype).name
    if binding.kind == "null":
        return True, "null"
    assert binding.dtype is not None
    return False, binding.dtype


def entry_problem(impl: Implementation, texts: Sequence[str]) -> str | None:
    """One line when the header's entry names a function that appears nowhere in the file or
    the local headers it includes (NVRTC would only say ``__nv_name_map``); None when the name
    is there, even if its definition is beyond this reading (built by a macro, say)."""
    name = impl.header.kernel_name
    if any(re.search(rf"\b{re.escape(name)}\b", _strip_comments(t)) for t in texts):
        return None
    return (
        f"{impl.path}: header.entry: {impl.header.entry!r} names no function in the file or "
        f"the headers it includes from its folder; expected the __global__ kernel's name"
    )


_DECLARED = r"(?:\bint|\bunsigned|\blong|\bsize_t|\bauto|\bconstexpr)"
"""Words that declare a name a macro would then replace. Not ``#define``: ``#ifndef BLOCK /
#define BLOCK 256`` is the usual way to give a tunable a default, and harmless."""


def tunable_collision(
    impl: Implementation, texts: Sequence[str], template_names: Sequence[str]
) -> str | None:
    """One line naming both when a tunable or specialization (a ``-D`` macro) has the name of one
    of the kernel's template parameters or of something the source declares: the macro would
    replace it, and NVRTC's complaint (``expected a "," or ">"``) names neither."""
    keys = {
        **{name: "tunable" for name in impl.header.tunables},
        **{name: "specialize" for name in impl.header.specializations},
    }
    for tunable, key in keys.items():
        if tunable in template_names:
            return (
                f"{impl.path}: header.{key} {tunable}: the kernel "
                f"{impl.header.kernel_name} has a template parameter {tunable}, and a {key} "
                f"value is a -D macro that would replace it; rename the {key} (pass it as the "
                f"template argument: entry = {impl.header.kernel_name}<..., NEW_NAME>)"
            )
        for text in texts:
            declared = re.search(rf"{_DECLARED}\s+{re.escape(tunable)}\b", _strip_comments(text))
            if declared is not None:
                return (
                    f"{impl.path}: header.{key} {tunable}: the source declares "
                    f"{declared[0]!r}, and a {key} value is a -D macro that would replace it; "
                    "rename one of them"
                )
    return None


def interface_problem(
    spec: OperationSpec, impl: Implementation, dtype: str, tunables: Mapping[str, int] | None = None
) -> str | None:
    """Why the entry kernel's parameters do not match the bindings for ``dtype``, or None.

    Checked: the number of parameters, pointer vs. by-value in each position, and, where the
    source spells a known type, the element type of each tensor and the width of each scalar.
    Unknown spellings (``uint4*``, typedefs) are accepted; a kernel whose definition cannot be
    found (in the file or the local headers it includes) is not checked. The message is one line
    naming the parameter by position and as the kernel spells it.
    """
    texts = [impl.source, *local_headers(impl.source, include_folders(impl, spec.include_paths))
             .values()]  # fmt: skip
    found = find_signature(impl, spec.include_paths)
    if found is None:
        return entry_problem(impl, texts)
    template_names, params = found
    collision = tunable_collision(impl, texts, template_names)
    if collision is not None:
        return collision
    settings = {**impl.header.default_tunables(), **(tunables or {})}
    _, entry_args = split_entry(impl.header.entry_for(DTYPES[dtype], settings))
    bound = dict(zip(template_names, entry_args or [], strict=False))
    where = f"{impl.path}: kernel {impl.header.kernel_name}"
    if len(params) != len(impl.bindings):
        names = ", ".join(b.name for b in impl.bindings)
        return (
            f"{where} takes {len(params)} parameters, its bindings pass {len(impl.bindings)} "
            f"({names}); list the kernel's order with 'params'"
        )
    for index, (param, binding) in enumerate(zip(params, impl.bindings, strict=True)):
        pointer, type_name = _expected(spec, binding, dtype)
        label = f"parameter {index + 1} ({param.text!r})"
        if param.pointer != pointer:
            what = "a pointer" if pointer else "a value"
            return f"{where}: {label} must be {what} for {binding.name!r}"
        if binding.kind == "null":
            continue  # a null pointer fits any pointer parameter
        if binding.kind == "struct":
            problem = struct_problem(spec, binding, param, texts, bound, dtype)
            if problem:
                return f"{where}: {label}: {problem}"
            continue
        spelled = bound.get(param.base_type, param.base_type)
        actual = TYPE_ALIASES.get(_STD_PREFIX.sub("", spelled))
        if actual is None:
            continue
        mismatch = _type_mismatch(pointer, actual, type_name, binding.name)
        if mismatch:
            return f"{where}: {label} {mismatch}"
    return None


def _type_mismatch(pointer: bool, actual: str, type_name: str, name: str) -> str:
    """How a parameter (or field) spelled ``actual`` differs from what binding ``name`` passes
    (``type_name``), or ''."""
    if pointer and DTYPES[type_name].floating and actual != type_name:
        return f"points to {actual}, {name!r} holds {type_name}"
    if not pointer and actual != type_name:
        return f"is {actual}, {name!r} is passed as {type_name}"
    return ""


class StructUnreadable(ValueError):
    """A struct whose layout the packed bytes cannot be shown to match (one line)."""


def struct_fields(texts: Sequence[str], name: str) -> list[KernelParam] | None:
    """The data members of ``struct name { ... }`` (or ``class``) in ``texts``, in declaration
    order, or None when none defines it. Static members, member functions and type aliases are
    no part of the layout and are skipped. Raises :class:`StructUnreadable` for a struct the
    packing cannot match: an array or bit-field member (an array was read as a pointer, a
    bit-field as a whole int: both shift every later field) or two definitions of that name."""
    short = name.rsplit("::", 1)[-1]
    bodies = []
    for text in texts:
        clean = _strip_comments(text)
        for match in re.finditer(rf"\b(?:struct|class)\s+{re.escape(short)}\s*\{{", clean):
            close = _closing(clean, match.end() - 1, "{", "}")
            bodies.append(clean[match.end() : close])
    if not bodies:
        return None
    if len({" ".join(b.split()) for b in bodies}) > 1:
        raise StructUnreadable(f"struct {name} is defined more than once, differently")
    fields: list[KernelParam] = []
    for member in _members(bodies[0]):
        words = set(re.findall(r"[A-Za-z_]\w*", member))
        if words & _NOT_DATA or "(" in member or member.startswith("#"):
            continue
        if "[" in member or re.search(r":\s*\w+\s*$", member):
            raise StructUnreadable(
                f"struct {name}: member {member!r} is an array or a bit-field, which the "
                "packed parameter does not lay out"
            )
        fields.extend(_parse_param(m) for m in _declarators(member))
    return fields


ACCESS_LABELS = ("public", "private", "protected")
_NOT_DATA = {"static", "using", "typedef", "friend", "template", *ACCESS_LABELS}
"""Words of a class member that is no data member of each object (or an access label)."""


def _members(body: str) -> list[str]:
    """The ``;``-ended members of a class body at its top level (nested bodies skipped)."""
    members, depth, current = [], 0, ""
    for char in body:
        depth += (char == "{") - (char == "}")
        if char == ";" and depth == 0:
            members.append(current.strip())
            current = ""
        elif depth == 0 and char != "}":
            current += char
    return [m.split(":", 1)[-1].strip() if m.split(":", 1)[0].strip() in ACCESS_LABELS else m
            for m in members if m]  # fmt: skip


def _declarators(member: str) -> list[str]:
    """``int a, b`` as ``int a`` and ``int b``; one declarator as itself."""
    parts = split_top_level(member)
    if len(parts) == 1:
        return parts
    base = re.sub(r"[*&\s]*[A-Za-z_]\w*\s*$", "", parts[0])
    return [parts[0], *(f"{base} {p}" for p in parts[1:])]


MAX_NESTING = 8
"""Deepest struct nesting read; deeper is refused (a struct cannot hold itself by value, so
only a name two scopes define alike could recur)."""


def _nested_members(
    texts: Sequence[str],
    name: str,
    members: list[KernelParam],
    bound: Mapping[str, str],
    depth: int = 0,
) -> list[KernelParam]:
    """``members`` with each by-value member whose type is a struct of ``texts`` replaced by
    that struct's own members, to any depth: a binding packs them flat, the same bytes only
    where the nesting moves no field (:func:`~astra_graph.kernel.param_struct.
    flat_layout_holds`), else StructUnreadable."""
    nested = {
        m.name: inner
        for m in members
        if not m.pointer and (inner := struct_fields(texts, m.base_type)) is not None
    }
    if not nested:
        return members
    if depth >= MAX_NESTING:
        raise StructUnreadable(f"struct {name} nests structs more than {MAX_NESTING} deep")
    kinds: list[str | Nested] = []
    out: list[KernelParam] = []
    for member in members:
        if member.name in nested:
            inner = _nested_members(texts, member.base_type, nested[member.name], bound, depth + 1)
            out += inner
            kinds.append(_member_kinds(texts, member.base_type, nested[member.name], bound))
            continue
        out.append(member)
        kinds.append(_member_kind(name, member, bound))
    if not flat_layout_holds(kinds):
        raise StructUnreadable(
            f"struct {name}: a nested struct's alignment or tail padding moves fields from "
            "where the packed (flat) parameter puts them"
        )
    return out


def _member_kinds(
    texts: Sequence[str], name: str, members: list[KernelParam], bound: Mapping[str, str]
) -> Nested:
    """The field kinds of a nested struct's members, its own nested ones as lists."""
    out: list[str | Nested] = []
    for member in members:
        inner = None if member.pointer else struct_fields(texts, member.base_type)
        if inner is None:
            out.append(_member_kind(name, member, bound))
        else:
            out.append(_member_kinds(texts, member.base_type, inner, bound))
    return out


def _member_kind(name: str, member: KernelParam, bound: Mapping[str, str]) -> str:
    if member.pointer:
        return POINTER
    spelled = bound.get(member.base_type, member.base_type)
    kind = TYPE_ALIASES.get(_STD_PREFIX.sub("", spelled))
    if kind not in FIELD_BYTES:
        raise StructUnreadable(
            f"struct {name}.{member.name} is {spelled!r}: its width is not known, so neither is "
            "the layout of the struct it is nested in"
        )
    return kind


def struct_problem(
    spec: OperationSpec,
    binding: Binding,
    param: KernelParam,
    texts: Sequence[str],
    bound: Mapping[str, str],
    dtype: str,
) -> str:
    """Why a struct binding does not fit the kernel parameter it passes, or '': the parameter
    must be of that struct type by value, and the struct's data members (found in the source)
    must match the binding's fields in number, pointer or value, and in each spelled width or
    element type: the bytes are packed from the fields (:mod:`~astra_graph.kernel.param_struct`),
    so a field more, less or wider in the source would shift every later one."""
    short = binding.name.rsplit("::", 1)[-1]
    if param.base_type.rsplit("::", 1)[-1] != short:
        return f"is {param.base_type!r}, the bindings pass struct {binding.name}"
    try:
        members = struct_fields(texts, binding.name)
        if members is not None:
            members = _nested_members(texts, binding.name, members, bound)
    except StructUnreadable as exc:
        return str(exc)
    if members is None:
        return f"struct {binding.name} is not defined in the file or its local headers"
    fields = binding.fields or []
    if len(members) != len(fields):
        return (
            f"struct {binding.name} has {len(members)} data members, its binding lists "
            f"{len(fields)} ({', '.join(f.name for f in fields)})"
        )
    for member, field in zip(members, fields, strict=True):
        pointer, type_name = _expected(spec, field, dtype)
        if member.pointer != pointer:
            what = "a pointer" if pointer else "a value"
            return f"{binding.name}.{member.name} must be {what} for {field.name!r}"
        spelled = bound.get(member.base_type, member.base_type)
        actual = TYPE_ALIASES.get(_STD_PREFIX.sub("", spelled))
        if actual is None and not pointer:  # a value's width is its layout: unknown is no match
            return f"{binding.name}.{member.name} is {spelled!r}, a type whose width is not known"
        if field.kind == "null" or actual is None:
            continue
        mismatch = _type_mismatch(pointer, actual, type_name, field.name)
        if mismatch:
            return f"{binding.name}.{member.name} {mismatch}"
    return ""
