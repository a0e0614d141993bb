"""Guarded reads a device function makes through a pointer parameter, read as a summary.

A kernel that stages rows into shared memory hands its global pointer to a device function of
the unit (FlashInfer's ``cp_async::pred_load<bits>(smem, V + off, row < count)``) that reads a
fixed number of bytes there only when a flag parameter holds: by an inline-asm ``cp.async``
predicated on the flag, or by a C++ vector copy under ``if (flag)`` where the unit is compiled
without it. :func:`_summary` summarises such a function at one pointer parameter ``P``
(:class:`GuardedRead`): it reads within ``bits / 8`` bytes from ``P``, and nothing when its
parameter ``Q`` is false. A caller's read is then that many bytes at its argument, under the
condition it passes as ``Q`` (:func:`call_read`), which the bound analysis takes as a guard.

The summary holds only where EVERY use of ``P`` in the body (each preprocessor alternative and
each ``if constexpr`` branch: all are read) is one of:

* ``*((V*)P)`` read (never written), ``V`` a CUDA vector type
  (:data:`~astra_graph.framework.vectors.VECTOR_BYTES`), under ``if (Q)``;
* the ``"l"`` operand of an inline-asm statement whose every instruction naming it is
  ``cp.async.{ca,cg}.shared.global[...] [d], [P], n[, s]`` (:data:`CP_ASYNC`), ``n`` an ``"n"``
  immediate (the bytes read), and either predicated ``@p`` with ``p`` set once by ``setp.ne``
  from ``Q`` (or ``(int)Q``), or given ``src-size`` ``s`` = ``Q ? m : 0`` (directly or by a
  local of that one value), or under ``if (Q)``;
* an argument ``P`` or ``P + c / sizeof(T)`` (``T`` what ``P`` points to: at most ``c`` bytes
  on) of a call of a function of the unit every definition of which is so summarised at that
  position, ``Q`` handed on bare as its guard.

``Q`` is one by-value parameter, the same at every use, and neither it nor ``P`` is assigned in
the body. ``bits`` is a whole number (eight times the farthest byte read), or a non-type
template parameter ``N`` of the function where every use lies in a branch that fixes ``N``
(``if constexpr (N == c)``, or its ``else`` with ``static_assert(N == a || N == b)`` leaving one
value) to a value of at least eight times the farthest byte it reads. Anything else (a PTX
instruction not recognised, an unpredicated copy, an address from arithmetic not read) gives
a one-line reason instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from astra_graph.framework.parse import (
    _callee_name,
    _compact,
    _declared_names,
    _function_declarator,
    _local_values,
    _mutated_names,
    _only_read,
    _operands,
    _params,
    _walk,
    _whole_sum,
    expression_node,
    text,
    unparenthesised,
)
from astra_graph.framework.segments import _conditions_holding
from astra_graph.framework.vectors import (
    MAX_CALL_DEPTH,
    FunctionIndex,
    _Function,
    _split_type,
    _vector_cast,
)

if TYPE_CHECKING:
    from tree_sitter import Node

BITS_PER_BYTE = 8
CP_ASYNC = re.compile(
    r"^(?:@(?P<pred>\w+)\s+)?cp\.async\.(?:ca|cg)\.shared\.global(?:\.[\w:]+)*\s+"
    r"\[%(?P<dst>\d+)\]\s*,\s*\[%(?P<src>\d+)\]\s*,\s*%(?P<size>\d+)"
    r"(?:\s*,\s*%(?P<src_size>\d+))?$"
)
"""An asynchronous copy from global to shared memory (PTX ISA ``cp.async``): ``cp-size`` bytes
from the source address, ``src-size`` of them at most where given (the rest zero-filled)."""
SETP = re.compile(r"^setp\.ne\.[bsu]32\s+(?P<pred>\w+)\s*,\s*%(?P<operand>\d+)\s*,\s*0$")
"""A predicate set where an operand is not zero."""
PREDICATE_WRITE = re.compile(r"^\S+\s+(?P<pred>\w+)\s*[,|]")
"""An instruction's first destination (what a ``setp`` or any other writes)."""


@dataclass(frozen=True)
class GuardedRead:
    """A function's read at one of its pointer parameters: within ``bits`` / 8 bytes from it
    (``bits`` a whole number, or the name of a template parameter of the function), nothing
    when the parameter at position ``guard`` is false."""

    guard: int
    bits: str


def _summary(
    function: _Function, position: int, index: FunctionIndex, depth: int
) -> GuardedRead | str:
    """``function``'s :class:`GuardedRead` at the pointer parameter at ``position``, or why it
    has none (see the module docstring); cached by function and position, except where the
    call is too deep to read (a call nearer the kernel may read it)."""
    if depth > MAX_CALL_DEPTH:
        return "calls nested too deep"
    key = (id(function.node), position)
    if key in index.reads:
        return index.reads[key]
    index.reads[key] = "a recursive call"
    index.reads[key] = found = _read(function, position, index, depth)
    return found


def call_read(name: Node, index: FunctionIndex) -> tuple[str, list[Node], Node] | str | None:
    """For a pointer's use ``p + a + b`` that is an argument of a call of a function of the
    unit: (the bits it reads as the call spells them, the summands but ``p``, the argument it
    passes as the guard), or why every definition of that name has no one
    :class:`GuardedRead` there; None where the use is no such argument."""
    top = _whole_sum(name)
    arguments = top.parent
    call = arguments.parent if arguments is not None else None
    if arguments is None or arguments.type != "argument_list" or call is None:
        return None
    target = call.child_by_field_name("function")
    callee, _ = _callee_name(target)
    found = index.by_name.get(callee, [])
    if call.type != "call_expression" or not found:
        return None
    handed = [a for a in arguments.named_children if a.type != "comment"]
    position = next(i for i, a in enumerate(handed) if a == top)
    summaries = {_summary(f, position, index, 0) for f in found}
    summary = summaries.pop()
    if summaries or isinstance(summary, str):
        why = summary if isinstance(summary, str) else "its definitions read differently"
        return f"handed to `{callee}`, no guarded read: {why}"
    if summary.guard >= len(handed):
        return f"handed to `{callee}`, its guard left to a default"
    bits = summary.bits
    if not bits.isdigit():
        explicit = _split_type(text(target))[1] or ()
        places = {f.template.index(bits) if bits in f.template else len(explicit) for f in found}
        at = places.pop()
        if places or at >= len(explicit):
            return f"handed to `{callee}`, its `{bits}` not given"
        bits = explicit[at]
    rest = [
        s
        for s in _operands(top, "+")
        if (s.start_byte, s.end_byte) != (name.start_byte, name.end_byte)
    ]
    if len(rest) == len(_operands(top, "+")):
        return f"handed to `{callee}` inside a summand"
    return bits, rest, handed[summary.guard]


def read_width(
    bits: str, pointee: str, values: dict[str, list[Node]], mutated: set[str]
) -> str | None:
    """The elements of ``pointee`` that ``bits`` bits are, as a product of names: ``bits`` (or
    the one initialiser of the local it names) a product with a factor ``sizeof(pointee)`` and
    whole numbers a multiple of eight (FlashInfer's ``vec_bits = sizeof(DTypeIn) * vec_size *
    8`` read at a ``DTypeIn*``: ``vec_size``); None for any other."""
    node = expression_node(bits)
    if node is None:
        return None
    node = unparenthesised(node)
    given = values.get(text(node), []) if node.type == "identifier" else []
    if node.type == "identifier" and len(given) == 1 and text(node) not in mutated:
        node = given[0]
    factors = [_compact(f) for f in _operands(node, "*")]
    size = f"sizeof({_compact_type(pointee)})"
    if size not in factors:
        return None
    factors.remove(size)
    number = 1
    for factor in [f for f in factors if f.isdigit()]:
        number *= int(factor)
    names = [f for f in factors if not f.isdigit()]
    if number % BITS_PER_BYTE or not all(re.fullmatch(r"[A-Za-z_]\w*", f) for f in names):
        return None
    number //= BITS_PER_BYTE
    return "*".join([*names, *([str(number)] if number != 1 or not names else [])])


def _read(
    function: _Function, position: int, index: FunctionIndex, depth: int
) -> GuardedRead | str:
    declarator = _function_declarator(function.node)
    body = function.node.child_by_field_name("body")
    params = _params(declarator) if declarator is not None else ()
    if body is None or position >= len(params) or not params[position].pointer:
        return "no pointer parameter there"
    pointer = params[position]
    # a name assigned, or declared again in the body (another variable where it is), is no
    # parameter's value at every use
    mutated = _mutated_names(body)
    changed = mutated | _declared_names(body)
    if pointer.name in changed:
        return f"`{pointer.name}` is assigned or declared again"
    flags = {p.name for p in params if not p.pointer and not p.reference} - changed
    locals_ = _local_values(body)
    uses: list[tuple[Node, int, str]] = []  # (use, farthest byte, guard)
    for node in _walk(body, ("identifier",)):
        if text(node) != pointer.name:
            continue
        use = _use(node, pointer.type, flags, locals_, mutated, index, depth)
        if isinstance(use, str):
            return use
        uses.append((node, *use))
    guards = {g for _, _, g in uses}
    if len(guards) != 1:
        return f"`{pointer.name}` is not read (or under {len(guards)} guards)"
    guard = guards.pop()
    names = [p.name for p in params]
    farthest = max(end for _, end, _ in uses)
    bits = _template_bits(function, body, [(n, end) for n, end, _ in uses])
    return GuardedRead(names.index(guard), bits or str(farthest * BITS_PER_BYTE))


def _use(
    node: Node,
    pointee: str,
    flags: set[str],
    locals_: dict[str, list[Node]],
    mutated: set[str],
    index: FunctionIndex,
    depth: int,
) -> tuple[int, str] | str:
    """(the farthest byte read, the guard) of one use of the pointer, or why it is no guarded
    read."""
    where = f"`{' '.join(text(node.parent or node).split())[:60]}`"
    parent = node.parent
    while parent is not None and parent.type == "parenthesized_expression":
        parent = parent.parent
    if parent is not None and parent.type == "gnu_asm_input_operand":
        return _asm_use(parent, flags, locals_, mutated)
    if parent is not None and (cast := _vector_cast(parent)) is not None:
        deref = parent.parent
        while deref is not None and deref.type == "parenthesized_expression":
            deref = deref.parent
        read = (
            deref is not None
            and deref.type == "pointer_expression"
            and text(deref.child_by_field_name("operator")) == "*"
            and _only_read(deref)
        )
        guard = _held_flag(parent, flags)
        if not read or guard is None:
            return f"{where} is no vector read under a flag parameter"
        return cast[0], guard
    handed = _call_use(node, pointee, flags, index, depth)
    return handed if handed is not None else f"{where} is not read"


def _held_flag(node: Node, flags: set[str]) -> str | None:
    """A flag parameter that is a condition holding where ``node`` is."""
    held = [_compact(t) for t in _conditions_holding(node)]
    return next((f for f in held if f in flags), None)


def _flag(node: Node | None, flags: set[str]) -> str | None:
    """The flag parameter ``node`` is, bare or cast (``(int)Q``)."""
    node = unparenthesised(node) if node is not None else None
    if node is not None and node.type == "cast_expression":
        node = node.child_by_field_name("value")
        node = unparenthesised(node) if node is not None else None
    return (
        text(node)
        if node is not None and node.type == "identifier" and text(node) in flags
        else None
    )


def _ptx(asm: Node) -> list[str]:
    """The instructions of an asm statement's PTX, one per ``;``, scope braces and blanks
    aside."""
    code = asm.child_by_field_name("assembly_code")
    pieces: list[str] = []
    for part in _walk(code, ("string_content", "escape_sequence")) if code is not None else []:
        pieces.append(" " if part.type == "escape_sequence" else text(part))
    out: list[str] = []
    for piece in "".join(pieces).split(";"):
        # a scope's braces open or close a statement; an operand list's stand after its opcode
        words = " ".join(piece.split()).lstrip("{} ")
        if words:
            out.append(words)
    return out


def _asm_use(
    operand: Node, flags: set[str], locals_: dict[str, list[Node]], mutated: set[str]
) -> tuple[int, str] | str:
    """A pointer handed to an asm statement as its ``"l"`` operand (see the module docstring)."""
    asm = operand.parent.parent if operand.parent is not None else None
    if asm is None or asm.type != "gnu_asm_expression":
        return "an asm operand not read"
    operands = _asm_operands(asm)
    number = next(i for i, o in enumerate(operands) if o == operand)
    constraint = _spelled(operand.child_by_field_name("constraint")).strip('"')
    values = [o.child_by_field_name("value") for o in operands]
    where = f"asm `{' '.join(text(asm).split())[:60]}`"
    if constraint != "l":
        return f"{where} takes the pointer as `{constraint}`, not an address operand"
    instructions = _ptx(asm)
    end = 0
    guards: set[str] = set()
    for instruction in instructions:
        if f"%{number}" not in re.findall(r"%\d+", instruction):
            continue
        copy = CP_ASYNC.match(instruction)
        if copy is None or int(copy["src"]) != number:
            return f"{where}: PTX `{instruction[:40]}` not recognised as a read"
        size = _immediate(operands, values, int(copy["size"]))
        if size is None:
            return f"{where}: cp.async of no immediate size"
        guard = _ptx_guard(copy, instructions, operands, values, flags, locals_, mutated, size)
        guard = guard or _held_flag(asm, flags)
        if guard is None:
            return f"{where}: cp.async neither predicated nor sized by a flag parameter"
        end = max(end, size)
        guards.add(guard)
    if len(guards) != 1:
        return f"{where} reads under {len(guards)} flags"
    return end, guards.pop()


def _asm_operands(asm: Node) -> list[Node]:
    """An asm statement's operands in the order ``%0``, ``%1`` ... number them (outputs
    first)."""
    outputs = asm.child_by_field_name("output_operands")
    inputs = asm.child_by_field_name("input_operands")
    return [
        *(outputs.children_by_field_name("operand") if outputs is not None else []),
        *(inputs.children_by_field_name("operand") if inputs is not None else []),
    ]


def copy_sources(asm: Node) -> list[tuple[Node, int]]:
    """(the address, its ``cp-size``) of each ``cp.async`` (:data:`CP_ASYNC`) of an asm
    statement whose source is an ``"l"`` operand and whose size an immediate: the copy needs
    its source aligned to that size (PTX ISA), as a vector access of that width does."""
    operands = _asm_operands(asm)
    values = [o.child_by_field_name("value") for o in operands]
    out: list[tuple[Node, int]] = []
    for instruction in _ptx(asm):
        copy = CP_ASYNC.match(instruction)
        source = int(copy["src"]) if copy is not None else len(operands)
        value = values[source] if source < len(operands) else None
        constraint = _spelled(operands[source].child_by_field_name("constraint")) if value else ""
        size = _immediate(operands, values, int(copy["size"])) if copy is not None else None
        if value is not None and constraint == '"l"' and size is not None:
            out.append((value, size))
    return out


def _immediate(operands: list[Node], values: list[Node | None], number: int) -> int | None:
    if (
        number >= len(operands)
        or _spelled(operands[number].child_by_field_name("constraint")) != '"n"'
    ):
        return None
    value = values[number]
    written = _compact(value) if value is not None else ""
    return int(written) if written.isdigit() else None


def _ptx_guard(
    copy: re.Match[str],
    instructions: list[str],
    operands: list[Node],
    values: list[Node | None],
    flags: set[str],
    locals_: dict[str, list[Node]],
    mutated: set[str],
    size: int,
) -> str | None:
    """The flag a ``cp.async`` reads only under: its predicate set once by ``setp.ne`` from the
    flag, or its ``src-size`` the flag's ``Q ? m : 0`` (``m`` at most the copy's size)."""
    if copy["pred"]:
        writes = [
            m for i in instructions if (m := PREDICATE_WRITE.match(i)) and m["pred"] == copy["pred"]
        ]
        sets = [m for i in instructions if (m := SETP.match(i)) and m["pred"] == copy["pred"]]
        if len(writes) != 1 or len(sets) != 1 or int(sets[0]["operand"]) >= len(values):
            return None
        return _flag(values[int(sets[0]["operand"])], flags)
    if copy["src_size"] is None or int(copy["src_size"]) >= len(values):
        return None
    value = values[int(copy["src_size"])]
    value = unparenthesised(value) if value is not None else None
    if value is not None and value.type == "identifier":
        given = locals_.get(text(value), [])
        value = (
            unparenthesised(given[0]) if len(given) == 1 and text(value) not in mutated else None
        )
    if value is None or value.type != "conditional_expression":
        return None
    flag = _flag(value.child_by_field_name("condition"), flags)
    taken = _spelled(value.child_by_field_name("consequence"))
    other = _spelled(value.child_by_field_name("alternative"))
    return flag if taken.isdigit() and int(taken) <= size and other == "0" else None


def _call_use(
    node: Node,
    pointee: str,
    flags: set[str],
    index: FunctionIndex,
    depth: int,
) -> tuple[int, str] | str | None:
    """A pointer handed on (``P`` or ``P + c / sizeof(T)``) to a summarised call, or why the
    call reads otherwise; None where the use is no argument of a call of the unit's."""
    top = _whole_sum(node)
    arguments = top.parent
    call = arguments.parent if arguments is not None else None
    if arguments is None or arguments.type != "argument_list" or call is None:
        return None
    handed = [a for a in arguments.named_children if a.type != "comment"]
    position = next(i for i, a in enumerate(handed) if a == top)
    skip = 0
    for term in _operands(top, "+"):
        if (term.start_byte, term.end_byte) == (node.start_byte, node.end_byte):
            continue
        quotient = unparenthesised(term)
        left = quotient.child_by_field_name("left")
        right = quotient.child_by_field_name("right")
        if (
            quotient.type != "binary_expression"
            or text(quotient.child_by_field_name("operator")) != "/"
            or left is None
            or not _compact(left).isdigit()
            or _spelled(right) != f"sizeof({_compact_type(pointee)})"
            or skip
        ):
            return f"`{' '.join(text(top).split())[:60]}` is no address read"
        skip = int(_compact(left))  # c / sizeof(T) elements of T: at most c bytes
    name, _ = _callee_name(call.child_by_field_name("function"))
    found = index.by_name.get(name, [])
    ends: list[int] = []
    guard: str | None = None
    for callee in found:
        summary = _summary(callee, position, index, depth + 1)
        if isinstance(summary, str):
            return f"`{name}`: {summary}"
        if not summary.bits.isdigit() or summary.guard >= len(handed):
            return f"`{name}` reads bits this call does not fix"
        given = _flag(handed[summary.guard], flags)
        if given is None or guard not in (None, given):
            return f"`{name}` is handed no flag parameter as its guard"
        guard = given
        ends.append(skip + int(summary.bits) // BITS_PER_BYTE)
    return (max(ends), guard) if ends and guard is not None else None


def _spelled(node: Node | None) -> str:
    """``node`` as written without blanks ('' for none)."""
    return _compact(node) if node is not None else ""


def _compact_type(spelled: str) -> str:
    return re.sub(r"\b(?:const|volatile)\b|\s", "", spelled)


def _template_bits(function: _Function, body: Node, uses: list[tuple[Node, int]]) -> str | None:
    """A non-type template parameter ``N`` of the function every use of the pointer lies in a
    branch fixing, to at least eight times the farthest byte the use reads."""
    for name in function.template:
        allowed = _asserted_values(body, name)
        if all(
            (value := _fixed(node, name, allowed)) is not None and value >= end * BITS_PER_BYTE
            for node, end in uses
        ):
            return name
    return None


def _asserted_values(body: Node, name: str) -> set[int] | None:
    """The values a ``static_assert(N == a || N == b ...)`` of the body leaves ``name``."""
    for assertion in _walk(body, ("static_assert_declaration",)):
        condition = assertion.child_by_field_name("condition")
        terms = _operands(condition, "||") if condition is not None else []
        values = [_equality(t, name) for t in terms]
        if values and all(v is not None for v in values):
            return {v for v in values if v is not None}
    return None


def _equality(term: Node, name: str) -> int | None:
    """``c`` where ``term`` is ``name == c`` or ``c == name``."""
    term = unparenthesised(term)
    if term.type != "binary_expression" or text(term.child_by_field_name("operator")) != "==":
        return None
    sides = [_spelled(term.child_by_field_name(f)) for f in ("left", "right")]
    other = sides[1] if sides[0] == name else sides[0] if sides[1] == name else ""
    return int(other) if other.isdigit() else None


def _fixed(node: Node, name: str, allowed: set[int] | None) -> int | None:
    """The value the ``if constexpr`` branches around ``node`` fix template parameter ``name``
    to (its ``== c`` branch, or its ``else`` where ``allowed`` leaves one other value)."""
    excluded: set[int] = set()
    child, current = node, node.parent
    while current is not None and current.type != "function_definition":
        constexpr = current.type == "if_statement" and any(
            c.type == "constexpr" for c in current.children
        )
        condition = current.child_by_field_name("condition") if constexpr else None
        value = (
            _equality(condition.child_by_field_name("value") or condition, name)
            if condition
            else None
        )
        if value is not None and child == current.child_by_field_name("consequence"):
            return value
        if value is not None and child == current.child_by_field_name("alternative"):
            excluded.add(value)
        child, current = current, current.parent
    left = (allowed or set()) - excluded
    return left.pop() if allowed is not None and len(left) == 1 else None
