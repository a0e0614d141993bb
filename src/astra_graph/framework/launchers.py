"""Launcher analysis: what a framework's host function passes to the kernel it launches.

For one launch site (:class:`~astra_graph.framework.parse.Launch`) this works out, from the
launcher's own expressions and nothing else:

* each kernel parameter's source: a tensor's ``data_ptr`` (``input.data_ptr<scalar_t>()``,
  ``reinterpret_cast<T*>(x.data_ptr())``), a whole number from ``size()``/``stride()``/
  ``numel()`` expressions, a float or bool parameter of the launcher, or ``nullptr``;
* every tensor's shape: its rank from the ``size(i)`` indices the launcher asks for (a tensor
  used as ``[..., hidden]``, through ``numel()`` and ``size(-1)``, has two axes); an axis is
  named after the launcher's local variable that holds it (``hidden_size = input.size(-1)``).
  A tensor whose sizes the launcher never asks for is given the shape of the first one it does
  ask for (the frameworks check shapes in Python, not here), and that is reported; one it asks
  only strides of, the shape of its twin, a sized tensor its name is made from or else the
  first sized one where the ranks agree (:func:`strided_twin`), reported as an assumption;
* strides as those of contiguous tensors (``input.stride(-2)`` = the product of later axes);
* the dtypes its dispatch macro instantiates (torch's ``AT_DISPATCH_*`` macros by name, a
  framework's own macros by the scalar types their definitions name, recursively); a type a
  dispatch names itself (``*_PRIVATE_CASE_TYPE_USING_HINT``: vLLM's ``fp8_t``) is its one case's
  type, a fixed dtype of the tensors it types (several cases: not importable);
* a launcher's ``std::optional`` in a size: a tensor as given (as its ``data_ptr`` is), an
  integer as absent (its default branch), each noted;
* the grid, block and dynamic shared memory as expressions over those dims, with
  ``sm_count`` for the device's multiprocessor count;
* SGLang's symbolic sizes: a tensor-shape matcher run on every path to the launch gives its
  tensors' shapes and ``N.unwrap()`` the dim it binds (:func:`_matched_reshape`); a host check
  that fixes a dim from others derives it (:func:`_derive_dims`); a pointer chosen by a
  compile-time condition is the branch the site takes (:meth:`_Binder._compile_time_branch`).

C++ integer division becomes ``//``. Anything else (a conditional, a call that is not a size
query) makes the launch not importable, with the reason; nothing is guessed silently. Two shapes
the drafting would get wrong are refused: an output the launcher sizes only by ``size(-1)``
(its leading axes, which the kernel writes, are unstated), unless exactly one read tensor has
every axis read (its leading sizes and its ``size(-1)``), whose leading axes it then takes, or
else the read tensors whose leading sizes are read agree on them (taken as an assumption, noted;
that input's last axis, where no kernel parameter or launch size carries it, is the row length
the kernel's own indexing gives, else the launch is refused), and
one tensor's ``numel()`` divided by another tensor's size (a relation between their shapes the
drafted dims would not keep), unless the launcher's checks tie the divisor's dims to the counted
tensor's (:func:`_tied_ratios`). A tensor whose rank a condition the launch is under states
(``batched = input.dim() == 3; if (batched)``) is drafted with that rank; one whose element
count is divided so, with rows and a row at least.

Equalities of sizes in the launcher's checks are shape facts: a check on every path to the
launch, or under an ``if`` without an ``else`` whose condition the drafted shapes make true
(vLLM's rotary ``if (positions_ndim == 1) { STD_TORCH_CHECK(query.size(0) ==
positions.size(0) && (!key.has_value() || ...)) }``), makes one dim the other
(:func:`_derive_dims`).
"""

from __future__ import annotations

import ast
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from astra_graph.framework import interpret, segments
from astra_graph.framework.device import FRAMEWORK_TYPE
from astra_graph.framework.parse import (
    ARRAY_ITEMS,
    DECLARED_VALUE,
    GIVEN_VALUE,
    MAX_MACRO_DEPTH,
    OCCUPANCY_CALLS,
    POINTER_OFFSET,
    REASSIGNED,
    REASSIGNED_IF_GIVEN,
    SET_BY_REFERENCE,
    SM_COUNT_CALLS,
    TYPE_ALIAS,
    Kernel,
    Launch,
    Launcher,
    Macro,
    Param,
    Procedure,
    ReturnOnly,
    _operands,
    _ternary,
    bind_macro,
    bound_names,
    expression_node,
    text,
    unparenthesised,
)
from astra_graph.framework.structs import StructUnread, field_values, flattened
from astra_graph.framework.vectors import dim_multiples
from astra_graph.kernel import expr, occupancy
from astra_graph.kernel.contract import ELEM_BYTES
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.expr import split_top_level
from astra_graph.kernel.header import SM_COUNT
from astra_graph.kernel.param_struct import FIELD_BYTES, POINTER
from astra_graph.kernel.signature import TYPE_ALIASES

if TYPE_CHECKING:
    from collections.abc import Collection

    from tree_sitter import Node


class Unmapped(ValueError):
    """Something of the launch cannot be expressed in a contract; ``str()`` says what."""


class RawPointer(Unmapped):
    """A kernel pointer gets a raw pointer parameter of the launcher (FlashInfer's header
    launchers): its shape is known to the launcher's callers
    (:mod:`astra_graph.framework.callers`), not here."""


SCALAR_TYPES: dict[str, str] = {
    "Float": "float32",
    "kFloat": "float32",
    "Double": "float64",
    "kDouble": "float64",
    "Half": "float16",
    "kHalf": "float16",
    "BFloat16": "bfloat16",
    "kBFloat16": "bfloat16",
}
"""``at::ScalarType`` spellings and the contract's dtype for each (others are not supported)."""
TORCH_DISPATCH: dict[str, tuple[str, ...]] = {
    "AT_DISPATCH_FLOATING_TYPES": ("float32", "float64"),
    "AT_DISPATCH_FLOATING_TYPES_AND_HALF": ("float32", "float64", "float16"),
    "AT_DISPATCH_REDUCED_FLOATING_TYPES": ("float16", "bfloat16"),
}
"""The types torch's dispatch macros instantiate before their ``_AND<n>`` extras."""
CPP_TYPES: dict[str, str] = {
    **TYPE_ALIASES,
    "c10::Half": "float16",
    "at::Half": "float16",
    "nv_half": "float16",
    "c10::BFloat16": "bfloat16",
    "at::BFloat16": "bfloat16",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "at::Float8_e4m3fn": "float8_e4m3fn",
}
"""C++ spellings of the element and scalar types a contract can hold: the signature check's
(:data:`~astra_graph.kernel.signature.TYPE_ALIASES`, one list) and torch's own names."""
HOST_SWITCHES: dict[str, tuple[bool, str]] = {
    "vllm_is_batch_invariant": (False, "the VLLM_BATCH_INVARIANT environment variable, unset"),
}
"""Host functions a launcher calls for a process-wide setting, with the value they return by
default and where it comes from. A size that depends on one is imported for that default and
the assumption is noted; any other call in a size stays a reason not to import."""
HINT_TYPES: dict[str, tuple[str, str]] = {
    **{k: (v, f"c10::{k}") for k, v in SCALAR_TYPES.items() if not k.startswith("k")},
    "Float8_e4m3fn": ("float8_e4m3fn", "c10::Float8_e4m3fn"),
}
"""``ScalarType`` names a dispatch case may bind a named type to (torch's
``*_PRIVATE_CASE_TYPE_USING_HINT(enum, hint, ...)``: ``using hint = <the enum's type>``): the
contract's dtype and the C++ type (torch's, as :mod:`~astra_graph.framework.device` defines
it) the kernel is instantiated with."""
_HINT_CASE = "PRIVATE_CASE_TYPE_USING_HINT"
"""The tail of torch's (and its header-only copy's) dispatch case that names its type."""
ELEMENT_TYPE_NAME = "scalar_t"
"""What torch's dispatch macros call the element type inside their lambda."""
HARNESS_FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
"""The floating element types a dispatch may instantiate for the harness, in the order a
drafted contract lists them."""
WHOLE_LAUNCH_DTYPE = "float32"
"""The contract's one element type for a launch whose tensors all have fixed integer or bool
types: a contract tests at least one type, and this one (the oracle's own) sizes nothing there."""
TEMPLATE_ELEMENT_DTYPES = ("float16", "bfloat16", "float32")
"""The element types drafted for a launcher whose element type is a type parameter of its own
template (SGLang's ``template <typename DType> struct K { static void run(...) }``): the
framework's caller instantiates it, with no dispatch macro to read, so the floating types the
harness runs are drafted and the importer keeps those whose instantiation compiles (a
``static_assert(sizeof(DType) == 2)`` removes float32). The framework spells them as CUDA's own
types, so the entry takes ``T`` itself, not torch's c10 types."""
TEMPLATE_FLAG_VALUE = "false"
"""The value a ``bool`` template parameter of the launcher's own template (``kUsePDL``,
``kCastXBeforeOutMul``) is imported with: its caller sets it, nothing in the file does, so one
choice is fixed, the off state of an opt-in switch, and noted. Another value is another
operation (import it, then edit the entry)."""
_DATA_PTR = re.compile(
    r"^(?:\(\s*[\w:<>\s*]+\)\s*)?(?P<tensor>\w+)\s*(?:\.\s*value\s*\(\s*\)\s*)?(?:\.|->)\s*"
    r"(?:const_|mutable_)?data_ptr\s*(?:<(?P<type>[^>]*)>)?\s*\(\s*\)$"
)
_ALIASES = re.compile(
    r"\b(\w+)\s*(?:\.|->)\s*data_ptr\s*\(\s*\)\s*==\s*(\w+)\s*(?:\.|->)\s*data_ptr\s*\(\s*\)"
)
"""A check that two tensors share memory: ``input.data_ptr() == out.data_ptr()``."""
_CAST = re.compile(r"^(?:reinterpret_cast|static_cast)\s*<[^()]*>\s*\((?P<inner>.*)\)$", re.S)
_C_CAST = re.compile(r"^\(\s*(?:const\s+)?[\w:]+\s*\)\s*(?P<inner>[\w.]+)$")
NULL_POINTERS = ("nullptr", "NULL")
"""The spellings that are only ever a null pointer."""
NULL_LITERALS = (*NULL_POINTERS, "0")
"""How C++ spells a null pointer argument."""
_FLOAT_LITERAL = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?$")
_USING_CASE = re.compile(r"\busing\s+\w+\s*=\s*([\w:]+)\s*;")
"""A dispatch case's type alias (``using c_type = nv_bfloat16;``)."""
_COMPARISONS = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "==", "!=": "!="}


@dataclass
class TensorUse:
    name: str
    indices: set[int] = field(default_factory=set)
    numel: bool = False
    counted: bool = False
    """Its element count is divided by another tensor's sizes (``query.numel() / num_tokens``):
    a count of rows times a row, so it has an axis past the rows."""
    sized: bool = False
    """Whether a ``size(i)`` of it is asked: a rank read from ``stride(i)`` alone says nothing of
    its sizes (FlashInfer's ``q_rope.stride(1)``)."""
    element: str | None = None
    """The contract dtype (``T`` for ``scalar_t``) from the data_ptr or the kernel parameter."""
    const: bool = True


@dataclass
class Binding:
    """One kernel parameter: ``tensor`` (name), ``expr`` (dims expression), ``scalar`` (a
    launcher parameter by value), ``null``, or ``struct`` (``value`` the C++ type, ``fields``
    the bindings of its data members in declaration order)."""

    param: str
    kind: str
    value: str
    dtype: str
    fields: list[Binding] = field(default_factory=list)
    moved: str = ""
    """For a tensor: the bytes the launch moves its address by, over the dims (SGLang's
    pre-offset ``k``), or ''. The kernel's reach is then relative to the moved address, so no
    shape is read from it (:func:`_at_their_start`)."""


class GatherUse(NamedTuple):
    """One tensor an integer tensor's elements offset (:func:`_gather_tensors`)."""

    tensor: str
    """The tensor; "" for an address that is no tensor's (a local pointer or array)."""
    scaled: bool
    """The element is a row index there (``ids[i] * d``), not an element index added alone."""
    moved: bool
    """The tensor is passed at a moved address: its rows start past its own first."""


@dataclass
class Analysis:
    launcher: str
    kernel: Kernel
    entry: str
    """``ns::kernel<astra_framework_t<T>, 1024>``: ``scalar_t`` as the framework's type for
    the element type under test (``c10::Half`` for ``__half``)."""
    dtypes: tuple[str, ...]
    bindings: list[Binding]
    tensors: dict[str, TensorUse]
    shapes: dict[str, list[str]]
    dims: list[str]
    grid: str
    block: str
    smem: str
    scalars: dict[str, str]
    """Launcher parameters passed by value: name -> dtype (float32, float64, bool)."""
    constants: dict[str, float]
    """Scalars the launcher passes as a literal: name -> the literal (their default)."""
    derived: dict[str, str]
    """Scalars the launcher computes from its float parameters (FlashInfer's
    ``rope_rcp_scale = 1.0f / rope_scale``): name -> the computation over those parameters'
    names (:func:`_float_expression`). Each is a parameter of the contract of its own, the
    kernel's argument, its default the computation at the parameters' drafted defaults."""
    requires: list[str]
    """The ``if`` conditions the launch sits under, as expressions over the dims."""
    notes: list[str]
    drafted_dtypes: bool = False
    """Whether :attr:`dtypes` are :data:`TEMPLATE_ELEMENT_DTYPES` drafted for a template
    element type (the importer keeps those that compile) rather than read from a dispatch."""
    other_gpu: str = ""
    """A condition the launch sits under that reads only the GPU or the build (compute
    capability, ``CUDA_VERSION``) and is false for the import's target: the C++ term and its
    folded value (``cc_major >= 10``: ``9 >= 10``), or '' when there is none."""
    dead: str = ""
    """A condition the launch sits under that is false whatever the GPU, the build and the
    shapes (a macro's literal argument: ``LAUNCH(8, true)`` expands to ``if (true) {...} else
    {<<<>>>}``), as written, or '': the launch is dead code, never made."""
    specializations: dict[str, str] = field(default_factory=dict)
    """Template values that follow a size (:func:`fixed_size`), by specialization name: their
    expressions over the dims (``// astra: specialize``)."""
    built_at: dict[str, int] = field(default_factory=dict)
    """The value of each specialization the import compiles the entry at (the importer's
    search of the sizes it builds at sets it)."""
    followed: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """The dims a value dispatch of the launch follows (:attr:`~astra_graph.framework.parse.
    Launch.followed`), each with the cases the framework builds: dim -> its values."""
    tunables: tuple[GridTunable, ...] = ()
    """Grid dimensions the launcher sets at run time, imported as tunables
    (:func:`opaque_grid_tunable`)."""
    slots: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Integer tensors whose elements place the kernel's stores, each with the tensors whose
    rows they place (:func:`_slot_tensors`): drawn with no two elements alike below those rows
    (``init.distinct``)."""
    gathers: dict[str, tuple[GatherUse, ...]] = field(default_factory=dict)
    """Integer tensors whose elements offset the kernel's reads or writes of other tensors, with
    each such use (:func:`_gather_tensors`): drawn below the rows they index."""
    offsets: dict[str, str] = field(default_factory=dict)
    """Each CSR offsets tensor (its elements differenced by the kernel) and the dim of the
    rows its offsets index (:func:`offset_targets`): drawn by ``init.offsets_into``."""
    multiples: dict[str, int] = field(default_factory=dict)
    """The multiple each dim must be for the kernel's vector-width accesses to be aligned
    (:func:`~astra_graph.framework.vectors.dim_multiples`): the contract's ``multiple_of``."""
    width_folded: bool = False
    """Whether a template argument of the entry is folded from the element's width to a value
    float32's width would not give (``16 / sizeof(T)``: 8 at 16 bits, 4 at 32): the entry at
    float32 is not the launch the framework makes at float32, so no float32 oracle."""
    form: str = ""
    """The rank form of its caller the launch was read at (:func:`~astra_graph.framework.
    callers.rank_forms`: ``k_2d``), which names its operation apart; '' for none."""
    forms: list[Analysis] = field(default_factory=list)
    """The launch read at the caller's other rank forms, each an operation of its own."""


_OPTIONAL_VALUE = re.compile(r"^(\w+)\s*\.\s*value\s*\(\s*\)$")
"""An optional parameter's value (``key.value()``), the tensor it holds."""
_OPTIONAL = re.compile(r"^(?P<condition>[^?]+)\?(?P<then>[^:]+):\s*(?:nullptr|NULL)\s*$")


def _pointer_source(argument: str, launch: Launch, param: str, notes: list[str]) -> str:
    """The ``data_ptr`` expression behind a pointer argument: a local holding it is followed,
    and an optional tensor (``has_x ? x->data_ptr<T>() : nullptr``) is taken as given."""
    if argument in launch.locals:
        local = argument
        argument = strip_cast(launch.locals[argument])
        given = _given_under_launch(launch, local)
        if argument in NULL_LITERALS and given is not None:
            notes.append(
                f"{param}: the launcher's {local} starts as {argument} and is assigned {given} "
                "under the optional's has_value(), a condition the launch sits under too: "
                "passed so"
            )
            argument = strip_cast(given)
        elif argument in NULL_LITERALS:
            # vLLM's `float* output_lse_ptr = nullptr; if (output_lse.has_value()) {...}`:
            # only the declaration is read, so the pointer is passed as its initial nullptr
            notes.append(
                f"{param}: the launcher's {local} starts as {argument} and is passed so "
                "(an assignment to it under a condition is not followed)"
            )
    optional = _OPTIONAL.match(argument)
    if optional:
        notes.append(
            f"{param}: optional tensor, imported as given ({optional['condition'].strip()} true)"
        )
        argument = strip_cast(optional["then"].strip())
    return argument


def _given_under_launch(launch: Launch, local: str) -> str | None:
    """The value a local is assigned in the then-branch of an ``if (opt.has_value())`` where the
    launch sits in the then-branch of an ``if`` of the same condition (its text compared: vLLM's
    merge tests ``output_scale.has_value()`` once to set the pointer and again around the FP8
    launch; :data:`~astra_graph.framework.parse.GIVEN_VALUE`); None otherwise. Raises Unmapped
    where the launch sits there but the value is not read (a compound assignment) or the local
    is assigned again elsewhere, rather than pass an initialiser the launch never sees."""
    where = launch.locals.get(f"{REASSIGNED_IF_GIVEN}{local}")
    if where is None:
        return None
    condition = _bare_condition(where.partition(" under ")[2])
    taken = {(" ".join(c.split()), t) for c, t in launch.conditions}
    if (condition, True) not in taken:
        return None
    value = launch.locals.get(f"{GIVEN_VALUE}{local}")
    again = launch.locals.get(f"{REASSIGNED}{local}")
    if value is None or again is not None:
        raise Unmapped(
            f"{local!r} is assigned under {condition}, which the launch sits under, and "
            + ("that assignment is not read" if value is None else f"again at line {again}")
        )
    return value


def _bare_condition(condition: str) -> str:
    """A condition's text without the parentheses around the whole of it, blanks collapsed."""
    condition = " ".join(condition.split())
    while _enclosed(condition):
        condition = condition[1:-1].strip()
    return condition


def strip_cast(expression: str) -> str:
    """``expression`` without the casts and the parentheses around the whole of it (a caller's
    ``static_cast<const int32_t*>(ids.data_ptr())`` is parenthesised where it replaces the
    launcher's parameter inside a longer text, :func:`~astra_graph.framework.callers.compose`)."""
    expression = expression.strip()
    while True:
        match = _CAST.match(expression) or _C_CAST.match(expression)
        if match is not None:
            expression = match["inner"].strip()
        elif _enclosed(expression):
            expression = expression[1:-1].strip()
        else:
            return expression


def _grouped(expression: str) -> str:
    """``expression`` as one operand: as it is when a name, a number or already parenthesised."""
    simple = re.fullmatch(r"\s*\w+\s*", expression) or _enclosed(expression.strip())
    return expression.strip() if simple else f"({expression.strip()})"


def _enclosed(expression: str) -> bool:
    """Whether the parenthesis that opens ``expression`` is the one that closes it."""
    if not expression.startswith("("):
        return False
    depth = 0
    for index, char in enumerate(expression):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return index == len(expression) - 1
    return False


def dispatch_dtypes(name: str, args: tuple[str, ...], macros: dict[str, Macro]) -> set[str]:
    """The dtypes a dispatch macro call instantiates, or an empty set when unknown."""
    found: set[str] = set()
    base = re.sub(r"_AND\d*$", "", name)
    if base in TORCH_DISPATCH:
        found.update(TORCH_DISPATCH[base])
        extras = int(name.rsplit("_AND", 1)[1] or 1) if re.search(r"_AND\d*$", name) else 0
        for arg in args[:extras]:
            found |= _scalar_types(arg)
        return found
    if name in ("AT_DISPATCH_SWITCH", "AT_DISPATCH_CASE"):
        for arg in args:
            found |= _scalar_types(arg) | _macro_types(arg, macros, set())
        return found
    if name in macros:
        found |= _macro_types(macros[name].body, macros, {name})
    return found


def dispatch_hints(
    name: str, args: tuple[str, ...], macros: dict[str, Macro]
) -> dict[str, set[str]]:
    """The named types a dispatch macro call binds (vLLM's ``VLLM_DISPATCH_FP8_TYPES`` binds
    ``fp8_t`` through ``*_PRIVATE_CASE_TYPE_USING_HINT(ScalarType::Float8_e4m3fn, fp8_t, ...)``)
    and the ``ScalarType`` names of their cases, its definition followed through the macros it
    calls with their parameters bound; empty for a dispatch of ``scalar_t``. The lambda
    argument is not followed (its own dispatches are the launch's other ones)."""
    macro = macros.get(name)
    if macro is None:
        return {}
    bound = tuple("__astra_body__" if a.lstrip().startswith("[") else a for a in args)
    return _hint_cases(bind_macro(macro, bound), macros, {name}, 0)


def _hint_cases(
    body: str, macros: dict[str, Macro], seen: set[str], depth: int
) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    if depth > MAX_MACRO_DEPTH:
        return found
    for match in re.finditer(r"\b(\w+)\s*\(", body):
        word, args = match[1], _call_arguments(body, match.end())
        if word.endswith(_HINT_CASE) and len(args) >= 2:
            enum = re.sub(r"\s+", "", args[0]).rsplit("::", 1)[-1]
            found.setdefault(args[1], set()).add(enum)
        elif word in macros and word not in seen:
            inner = _hint_cases(bind_macro(macros[word], args), macros, seen | {word}, depth + 1)
            for hint, enums in inner.items():
                found.setdefault(hint, set()).update(enums)
    return found


def _call_arguments(body: str, start: int) -> list[str]:
    """The top-level arguments of the call whose ``(`` ends just before ``start``."""
    depth = 1
    for end in range(start, len(body)):
        depth += {"(": 1, ")": -1}.get(body[end], 0)
        if depth == 0:
            return split_top_level(body[start:end])
    return []


def _scalar_types(text_: str) -> set[str]:
    """The dtypes a dispatch text names: ``at::ScalarType`` spellings, and the C++ types of its
    ``using c_type = nv_half;`` cases (a DLPack dtype switch such as FlashInfer's). A case type
    no contract can hold (``__nv_fp8_e4m3``) is returned as spelled, so that the launch is
    refused with it named rather than imported with the other types alone."""
    found = {
        SCALAR_TYPES[m]
        for m in re.findall(r"(?:ScalarType::|\b)(k?\w+)\b", text_)
        if m in SCALAR_TYPES and ("ScalarType::" + m in text_ or m.startswith("k"))
    }
    for spelled in _USING_CASE.findall(text_):
        found.add(CPP_TYPES.get(spelled, spelled))
    return found


def _macro_types(body: str, macros: dict[str, Macro], seen: set[str]) -> set[str]:
    found = _scalar_types(body)
    for word in set(re.findall(r"\b[A-Z_][A-Z0-9_]*\b", body)):
        if word in macros and word not in seen:
            found |= _macro_types(macros[word].body, macros, seen | {word})
        elif re.sub(r"_AND\d*$", "", word) in TORCH_DISPATCH:
            found.update(TORCH_DISPATCH[re.sub(r"_AND\d*$", "", word)])
    return found


_UNQUALIFIED = re.compile(r"(?<![\w:.>])([A-Za-z_]\w*)(?![\w(<:])")
"""An identifier that is no call, no template, no qualifier and not qualified itself."""
CPP_WORDS = frozenset(
    {"true", "false", "nullptr", "int", "unsigned", "long", "short", "char", "bool", "float"}
    | {"double", "size_t", "int32_t", "int64_t", "uint32_t", "uint64_t", "const"}
)
"""C++ words a one-return function's body may hold besides its parameters (casts, literals)."""


def _refuse_reassigned(name: str, found: Mapping[str, str], assumed: list[str]) -> None:
    """Raise Unmapped when local ``name`` is assigned after its declaration (parse's
    :data:`~astra_graph.framework.parse.REASSIGNED` mark): its initialiser is not its value at
    the launch (``int t = 256; if (small) t = 64;``), and the branch taken is not read (a chain
    that sets it on every path is its value: :func:`~astra_graph.framework.parse._branch_values`,
    so a mark left is a path that does not, or one not read). One
    assigned only where an optional tensor is given keeps its initialiser, said in ``assumed``."""
    line = found.get(f"{REASSIGNED}{name}")
    if line is not None:
        raise Unmapped(
            f"{name!r} is assigned after its declaration (line {line} of the flattened "
            "source): its value at the launch is not read"
        )
    value = found.get(name, "")
    if value.startswith(SET_BY_REFERENCE):
        raise Unmapped(
            f"{name!r} is passed by reference to {value[len(SET_BY_REFERENCE) :]}, which may "
            "set it: its value at the launch is not read"
        )
    where = found.get(f"{REASSIGNED_IF_GIVEN}{name}")
    if where is not None:
        note = (
            f"{name}: taken at its initialiser {found.get(name, '?')!r}, the value it keeps "
            f"when the optional is absent (assigned at line {where})"
        )
        if note not in assumed:
            assumed.append(note)


GRID_TUNABLE_VALUES = (1, 2, 4, 8, 16)
"""The values a grid tunable offers besides its declared one (:func:`opaque_grid_tunable`):
FlashInfer's rotary launchers split each token's heads over gridDim.y, RopeGridSplit picking
1 to min(heads, 128) from an occupancy model; powers of two up to 16 span the split an H100
takes for serving head counts (8 to 64 heads) while keeping the tuner's sweep short."""


@dataclass(frozen=True)
class GridTunable:
    """A grid dimension's local that the launcher sets at run time, imported as a tunable."""

    name: str
    local: str
    values: tuple[int, ...]
    """The declared value first (the default), then :data:`GRID_TUNABLE_VALUES`."""
    setter: str
    """What sets it at run time, as said in the import's note."""

    def note(self) -> str:
        return (
            f"grid: {self.local!r} is set at run time by {self.setter}, not evaluated: imported "
            f"as tunable {self.name} = {', '.join(map(str, self.values))}, its declared value "
            f"{self.values[0]} the default; a tuned value is kept only where the kernel matches "
            "the original at the default. The framework launches with the value its setter "
            "picks, which may be faster than the default: tune the original before a speedup "
            "over it is read as one over the framework"
        )


def opaque_grid_tunable(name: str, found: Mapping[str, str]) -> GridTunable | None:
    """The tunable a grid dimension's local ``name`` becomes where the launcher sets it at run
    time through something the import does not evaluate (a function taking it by reference, an
    assignment after its declaration: FlashInfer's ``uint32_t split = 1; RopeHeadSplit(...,
    split, ...); dim3 nblks(nblks_x, split)``) and it is declared with a positive literal; None
    otherwise (its value is then read, or refused, as any local's).

    A grid dimension only decides how the work is spread over blocks: a kernel that covers its
    work whatever the grid (a stride loop over gridDim) gives the same result at every value,
    and one that does not fails the check at the value where it does not, so the tuner never
    keeps that value. A block size is no such choice (kernels size shared memory and reductions
    by it) and is never made a tunable."""
    value = found.get(name, "")
    if f"{REASSIGNED}{name}" in found:
        declared, setter = value, f"an assignment at line {found[f'{REASSIGNED}{name}']}"
    elif value.startswith(SET_BY_REFERENCE):
        declared = found.get(f"{DECLARED_VALUE}{name}", "")
        setter = f"{value[len(SET_BY_REFERENCE) :]} (it takes {name!r} by reference)"
    else:
        return None
    literal = declared.strip().rstrip("uUlL")
    if not literal.isdigit() or int(literal) < 1 or not name.isidentifier():
        return None
    first = int(literal)
    values = (first, *(v for v in GRID_TUNABLE_VALUES if v != first))
    return GridTunable(name.upper(), name, values, setter)


_FIXED_SIZE = re.compile(r"^\s*(?P<size>\w+)\.unwrap\(\)\s*==\s*\(\s*(?P<value>\w+)\s*\)\s*$")
"""A symbolic size fixed to a value (parse's reading of SGLang's ``D.set_value(kDim)``)."""


def fixed_size(checks: tuple[str, ...], value: str) -> str | None:
    """``D.unwrap()`` where the launcher fixes the symbolic size ``D`` to its own template value
    ``value`` before a matcher binds ``D`` to a tensor's axis (SGLang's rmsnorm: ``D.set_value(
    kDim)``, then ``TensorMatcher({N, D}).verify(input)``): the value is that axis's size at
    every launch the framework makes, so it is read as that size; None where nothing fixes it."""
    for check in checks:
        match = _FIXED_SIZE.match(check)
        if match is not None and match["value"] == value:
            return f"{match['size']}.unwrap()"
    return None


SPECIALIZATION_PREFIX = "ASTRA_SIZE_"
"""How the import names a template value that follows a size (``kDim`` is
``ASTRA_SIZE_KDIM``): a specialization is a -D macro, and the prefix keeps it off every name
a framework's source declares."""


def _specialized(found: dict[str, str], value: str, size: str, kernel: str) -> str:
    """The specialization name of template value ``value`` (``kDim``: ``ASTRA_SIZE_KDIM``; a
    name already so prefixed stays), recorded in ``found`` as following ``size``; raises
    Unmapped where that name already follows another size."""
    prefixed = value.startswith(SPECIALIZATION_PREFIX)
    special = value if prefixed else f"{SPECIALIZATION_PREFIX}{value.upper()}"
    if found.get(special, size) != size:
        raise Unmapped(
            f"{kernel}'s template value {value} specializes {special} on two sizes "
            f"({found[special]}, {size})"
        )
    found[special] = size
    return special


def _compact(written: str) -> str:
    """A C++ name expression without spaces, a leading ``&`` or a leading ``::``."""
    return re.sub(r"\s+", "", written).lstrip("&").removeprefix("::")


def _same_function(asked: str, launched: str) -> bool:
    """Whether two compacted names (template arguments included) name one function: the same
    template arguments, and one name the other's qualified tail (``k`` and ``fw::k``, not
    ``other::k``)."""
    asked_name, _, asked_args = asked.partition("<")
    launched_name, _, launched_args = launched.partition("<")
    if asked_args != launched_args:
        return False
    short, full = sorted((asked_name, launched_name), key=len)
    return full == short or full.endswith(f"::{short}")


def _chosen_conditions(choice: str) -> dict[str, bool]:
    """The conditions a launch's kernel choice (:attr:`~astra_graph.framework.parse.Launch.
    choice`) took, compacted: ``is_int32 true`` -> {``is_int32``: True}. A selector function's
    choice (``select_kernel(type): type == "silu"``) fixes no host condition by itself."""
    found: dict[str, bool] = {}
    for term in filter(None, choice.split("; ")):
        condition, _, taken = term.rpartition(" ")
        if condition and ": " not in term and taken in ("true", "false"):
            found[_compact(condition)] = taken == "true"
    return found


class _Translator:
    """C++ host expressions to contract expressions with placeholders for tensor queries."""

    def __init__(
        self,
        launcher: Launcher,
        launch: Launch,
        tensors: dict[str, TensorUse],
        device: dict[str, int],
        constants: dict[str, str],
        element_names: set[str],
        returns: dict[str, ReturnOnly | None] | None = None,
        procedures: dict[str, Procedure | None] | None = None,
    ) -> None:
        self.launcher = launcher
        self.element_names = element_names
        """What the launch calls its element type (``scalar_t``, ``T``, a local alias)."""
        self.locals = launch.locals
        self.matched = launch.matched
        self.typed = dict(launch.typed)
        """The element type each tensor's matcher requires (:attr:`~astra_graph.framework.
        parse.Launch.typed`)."""
        self.kernel = launch.kernel
        """The launched kernel (an occupancy query must ask about it), with its template
        arguments as the launch writes them."""
        self.template_args = launch.template_args
        self.kernel_written = launch.written
        self.chosen = _chosen_conditions(launch.choice)
        """The host conditions whose value the launch's kernel choice fixes (``is_int32`` is
        true at the launch of ``is_int32 ? K<int32_t> : K<int64_t>`` that takes K<int32_t>)."""
        self.returns = returns or {}
        """The source's one-return functions (:attr:`~astra_graph.framework.parse.Source.
        returns`), read where a size expression calls one."""
        self.procedures = procedures or {}
        """The source's other host functions (:attr:`~astra_graph.framework.parse.Source.
        procedures`), run where a size expression calls one (:meth:`_interpreted`)."""
        self.loop_bounds: list[str] = []
        """C++ conditions that keep an interpreted call's loops within their unrolling
        (:attr:`~astra_graph.framework.interpret.Outcome.requires`), shared by fresh copies:
        the launch requires them (:func:`_loop_requirements`)."""
        self.device = device
        self.constants = constants
        self.tensors = tensors
        self.params = {p.name: p for p in launcher.params}
        self.host_dims: dict[str, None] = {}
        """The launcher's integer parameters the launch reads, in the order first read (a dict:
        a set's order changes with the hash seed, and the draft's dims with it)."""
        self.switches: set[str] = set()
        """The :data:`HOST_SWITCHES` the launch's sizes or conditions read."""
        self.device_read = False
        """Whether an expression read a device constant (set here, cleared by the caller)."""
        self.axes: dict[str, str] = {}
        """Axes that are expressions over tensor ranks (``query.stride(positions.dim() - 1)``):
        placeholder key -> the axis expression, folded once every rank is known (finish)."""
        self.assumed: list[str] = []
        """What was taken for a value the launcher reads at run time (an absent optional)."""
        self.in_check = False
        """Whether a host check is read (:attr:`~astra_graph.framework.parse.Launch.checks`),
        where an optional's ``has_value()`` reads as the import takes it; in an ``if`` that
        chooses a launch it stays unread, and both launches are imported."""
        self.ratios: list[tuple[str, set[str], set[str]]] = []
        """One tensor's element count over other tensors' sizes, as written, with the counted
        and the dividing tensors (:func:`_tied_ratios` checks them once the shapes are known)."""
        self.pending: list[tuple[str, set[str], set[str]]] = []
        """Ratios of expressions translated but not yet kept (:meth:`keep`): a launch condition
        that is then dropped, or one read again only to fold it, must not tie shapes."""
        self.width_folded = False
        """Whether a folded template argument reads the element's width (:attr:`Analysis.
        width_folded`)."""
        self.holding = False
        """Whether a translated expression's ratios wait for :meth:`keep` or :meth:`drop`
        (otherwise each expression that translates keeps its own)."""
        self.checks = launch.checks
        """The launcher's host checks before the launch (``D.unwrap() == (kDim)`` among them:
        :func:`fixed_size`)."""
        self.in_grid = False
        """Whether the grid is read, where a local the launcher sets at run time becomes a
        tunable (:func:`opaque_grid_tunable`)."""
        self.specializations: dict[str, str] = {}
        """Template values that follow a size, by specialization name (:func:`fixed_size`):
        their size expressions, placeholders not yet finished."""
        self.tunables: dict[str, GridTunable] = {}
        """The grid's locals set at run time, by tunable name (:func:`opaque_grid_tunable`)."""
        self.raw_root = False
        """Whether the launcher's raw pointer parameters are the operation's tensors (a
        launcher no caller passes tensors to, imported directly: :func:`_raw_tensor_binding`)."""
        self.raw_tensors: set[str] = set()
        """The tensors bound so, each shaped only by the kernel's own row-major indices
        (:func:`indexed_axes`, :func:`_refuse_unshaped_raw`)."""
        self.nulls: set[str] = set()
        """Kernel pointer parameters a direct import passes null: counts the kernel may go
        without (:attr:`~astra_graph.framework.parse.DirectExtents.nulls`)."""
        self.offset_totals: dict[str, str] = {}
        """Each raw tensor of CSR offsets, with the dim of the rows they end at
        (:func:`_offsets_total`)."""

    def fresh(self) -> _Translator:
        """A translator of the same launch whose reads are not recorded (its tensor uses and
        host dims stay apart from the analysis')."""
        copy = _Translator.__new__(_Translator)
        copy.__dict__.update(self.__dict__)
        copy.tensors = {k: replace(v, indices=set(v.indices)) for k, v in self.tensors.items()}
        copy.host_dims, copy.switches, copy.ratios, copy.pending = {}, set(), [], []
        return copy

    def keep(self) -> None:
        """Record the pending ratios (:attr:`pending`) for :func:`_tied_ratios`."""
        for ratio in self.pending:
            self.ratios.append(ratio)
            for tensor in ratio[1]:
                self.tensors[tensor].counted = True
        self.pending = []

    def drop(self) -> None:
        self.pending = []

    def expression(self, source: str, depth: int = 0) -> str:
        if depth:
            return self._expression(source, depth)
        # an expression that does not translate is not used: its ratios go with it
        start = len(self.pending)
        try:
            value = self._expression(source, 0)
        except Exception:
            del self.pending[start:]
            raise
        if not self.holding:
            self.keep()
        return value

    def _expression(self, source: str, depth: int) -> str:
        if depth > 16:
            raise Unmapped(f"{source!r}: locals refer to each other too deeply")
        source = self._templated_constants(source)
        value = expression_node(source)
        if value is None:
            raise Unmapped(f"cannot read expression {source!r}")
        return self._node(value, depth)

    def _templated_constants(self, source: str) -> str:
        """Constants of class template specialisations (``VecTraits<true>::N``) replaced by
        their values before parsing: in an expression the parser cannot tell their ``<`` from
        a comparison."""
        compact = re.sub(r"\s+", "", source)
        if "<" not in compact or "::" not in compact:
            return source
        for key, value in sorted(self.constants.items(), key=lambda kv: -len(kv[0])):
            if "<" not in key:
                continue
            parts = key.split("::")
            for start in range(len(parts) - 1):
                suffix = "::".join(parts[start:])
                if suffix in compact:
                    compact = compact.replace(suffix, f"({value})")
        return compact

    def _tensor(self, name: str) -> TensorUse:
        param = self.params.get(name)
        if param is None or "Tensor" not in param.type:
            raise Unmapped(f"{name!r} is not a tensor parameter of {self.launcher.name}")
        return self.tensors.setdefault(name, TensorUse(name))

    def _node(self, node: Node, depth: int) -> str:
        kind = node.type
        if kind == "number_literal":
            literal = text(node).rstrip("uUlLfF")
            if "." in literal or ("e" in literal.lower() and not literal.startswith("0x")):
                raise Unmapped(f"a float literal {text(node)!r} in a size expression")
            return str(int(literal, 0))
        if kind == "parenthesized_expression":
            return f"({self._node(node.named_children[0], depth)})"
        if kind == "binary_expression":
            op = text(node.child_by_field_name("operator"))
            python = {
                "/": "//",
                "+": "+",
                "-": "-",
                "*": "*",
                "%": "%",
                "&&": "and",
                "||": "or",
                **_COMPARISONS,
            }.get(op)
            if python is None:
                raise Unmapped(f"operator {op!r} in {text(node)!r}")
            null_test = self._null_test(node, op)
            if null_test is not None:
                return null_test
            left = self._node(node.child_by_field_name("left"), depth)  # type: ignore[arg-type]
            right = self._node(node.child_by_field_name("right"), depth)  # type: ignore[arg-type]
            if op == "/":
                self._ratio(text(node), left, right)
            return f"{left} {python} {right}"
        if kind == "unary_expression" and text(node.child_by_field_name("operator")) == "-":
            return f"-{self._node(node.child_by_field_name('argument'), depth)}"  # type: ignore[arg-type]
        if kind in ("identifier", "field_expression", "qualified_identifier"):
            return self._name(node, depth)
        if kind == "call_expression":
            return self._call(node, depth)
        if kind == "sizeof_expression":
            return self._sizeof(node)
        if kind == "conditional_expression":
            parts = [
                node.child_by_field_name(f) for f in ("condition", "consequence", "alternative")
            ]
            if any(p is None for p in parts):
                raise Unmapped(f"cannot read {text(node)!r}")
            chosen = self.chosen.get(_compact(text(parts[0])))
            given = chosen if chosen is not None else self._given(parts[0])  # type: ignore[arg-type]
            if given is not None:
                return self._node(parts[1 if given else 2], depth)  # type: ignore[arg-type]
            inner = ", ".join(self._node(p, depth) for p in parts)  # type: ignore[arg-type]
            return f"select({inner})"
        if kind == "unary_expression" and text(node.child_by_field_name("operator")) == "!":
            return f"({self._node(node.child_by_field_name('argument'), depth)}) == 0"  # type: ignore[arg-type]
        if kind in ("true", "false"):
            return "1" if kind == "true" else "0"
        if kind == "subscript_expression":
            return self._array_item(node, depth)
        if kind == "cast_expression":  # (size_t)NUM_WARPS: a C cast to a whole number
            spelled = " ".join(text(node.child_by_field_name("type")).split())
            if CPP_TYPES.get(spelled) in ("int32", "int64"):
                return self._node(node.child_by_field_name("value"), depth)  # type: ignore[arg-type]
        raise Unmapped(f"{kind.replace('_', ' ')} {text(node)!r} in a size expression")

    def _null_test(self, node: Node, op: str) -> str | None:
        """``p == nullptr`` or ``p != nullptr`` folded where ``p`` is known at the launch site
        (``1`` or ``0``): a null literal is null and a tensor parameter's ``data_ptr()`` is not
        (a caller that passes SGLang's launcher ``nullptr`` or ``ids.data_ptr()`` for its
        ``expert_ids`` picks the launch under ``expert_ids != nullptr`` by it); None for any
        other comparison. Raises Unmapped for another pointer, which only the run knows."""
        sides = [strip_cast(text(node.child_by_field_name(f))) for f in ("left", "right")]
        # `0` is a null pointer too, but `n % 8 == 0` compares a number: a spelled null only
        if op not in ("==", "!=") or not any(side in NULL_POINTERS for side in sides):
            return None
        other = sides[1] if sides[0] in NULL_POINTERS else sides[0]
        match = _DATA_PTR.match(other)
        tensor = self.params.get(match["tensor"]) if match is not None else None
        if other in NULL_LITERALS:
            null = True
        elif tensor is not None and "Tensor" in tensor.type:
            null = False
        else:
            raise Unmapped(f"{text(node)!r}: a pointer whose nullness only the run knows")
        return "1" if null == (op == "==") else "0"

    def _given(self, condition: Node) -> bool | None:
        """Whether the optional that ``condition`` asks ``has_value()`` of is taken as given
        (:meth:`_optional`), the assumption recorded; None when it asks no such thing."""
        optional, given = self._optional(condition)
        if not optional:
            return None
        said = (
            "optional tensor, imported as given"
            if given
            else "optional integer, imported as absent"
        )
        self.assumed.append(f"{optional}: {said}")
        return given

    def _optional(self, condition: Node) -> tuple[str, bool]:
        """(the launcher's ``std::optional`` parameter that ``condition`` asks ``has_value()``
        of, or '', and whether it is taken as given). An optional tensor is given, as its
        ``data_ptr`` is (:func:`_pointer_source`): its sizes (vLLM's ``key->numel()``) are
        then the tensor's. An optional integer (vLLM's ``prefill_tokens_with_context``) is
        absent: its default branch is what every caller gets without it, and a given value has
        bounds the launcher only checks at run time (``STD_TORCH_CHECK``), which a contract
        would not hold."""
        call = unparenthesised(condition)
        function = call.child_by_field_name("function")
        args = call.child_by_field_name("arguments")
        owner = (
            function.child_by_field_name("argument")
            if function is not None
            and function.type == "field_expression"
            and text(function.child_by_field_name("field")) == "has_value"
            and args is not None
            and not args.named_children
            else None
        )
        param = self.params.get(text(owner)) if owner is not None else None
        if param is None or "optional" not in param.type.lower():  # TVM-FFI's `Optional<T>`
            return "", False
        if "Tensor" in param.type:
            return param.name, True
        inner = re.search(r"optional\s*<\s*([\w:\s]+?)\s*>", param.text)
        kind = CPP_TYPES.get(inner[1].removeprefix("std::") if inner else "")
        return (param.name, False) if kind in ("int32", "int64") else ("", False)

    def _sizeof(self, node: Node) -> str:
        """``sizeof(scalar_t)`` is the element's bytes (``elem_bytes``), ``sizeof(float)`` its
        own (FlashInfer's shared memory of ``num_warps * sizeof(float)`` does not scale with
        the element); the size of any other type is not known here."""
        operand = node.child_by_field_name("type") or node.child_by_field_name("value")
        spelled = " ".join(text(operand).strip("() ").split())
        if spelled in self.element_names:
            return "elem_bytes"
        dtype = DTYPES.get(CPP_TYPES.get(spelled, ""))
        if dtype is None:
            raise Unmapped(f"sizeof({spelled}) in a size expression: its size is not known")
        return str(dtype.itemsize)

    def _array_item(self, node: Node, depth: int) -> str:
        """One item of a local array initialised by a list, at an index that is a constant
        where the launch is (SGLang's ``kOccupancyTable[is_int32 ? 0 : 1]`` under the kernel
        choice that fixes ``is_int32``); anything else is refused."""
        array = text(node.child_by_field_name("argument"))
        indices = node.child_by_field_name("indices")
        index_nodes = indices.named_children if indices is not None else []
        if f"{ARRAY_ITEMS}{array}" not in self.locals or len(index_nodes) != 1:
            raise Unmapped(f"subscript expression {text(node)!r} in a size expression")
        index = self._node(index_nodes[0], depth)
        if expr.names(index):
            raise Unmapped(f"{text(node)!r}: the index is not a constant at the launch")
        position = expr.evaluate_int(index, {})
        items = split_top_level(self.locals[array])
        if not 0 <= position < len(items):
            raise Unmapped(f"{text(node)!r}: index {position} outside its {len(items)} items")
        return f"({self.expression(items[position], depth + 1)})"

    def _name(self, node: Node, depth: int) -> str:
        name = text(node)
        chosen = self.chosen.get(_compact(name))
        if chosen is not None:
            return "1" if chosen else "0"
        if name.endswith("multiProcessorCount"):
            return SM_COUNT
        if name in self.device:
            self.device_read = True
            return str(self.device[name])
        compact = re.sub(r"\s+", "", name).lstrip(":")
        constant = next(
            (v for k, v in self.constants.items() if k == compact or k.endswith(f"::{compact}")),
            None,
        )
        if constant is not None:
            return f"({self.expression(constant, depth + 1)})"
        if node.type == "field_expression" and "->" in name:
            field_name = text(node.child_by_field_name("field"))
            if field_name in ("major", "minor") and "prop" in name.lower():
                self.device_read = True
                return str(self.device[f"cc_{field_name}"])
        if name in self.locals:
            tunable = opaque_grid_tunable(name, self.locals) if self.in_grid else None
            if tunable is not None:
                self.tunables[tunable.name] = tunable
                return tunable.name
            _refuse_reassigned(name, self.locals, self.assumed)
            return f"({self.expression(self.locals[name], depth + 1)})"
        param = self.params.get(name)
        if param is not None and CPP_TYPES.get(param.type) in ("int32", "int64"):
            # `d = d * 2;` before the launch: the dim is not the value the kernel gets (a raw
            # pointer's shape, read from the kernel in these parameters, would be too small)
            _refuse_reassigned(name, self.locals, self.assumed)
            self.host_dims[name] = None
            return name
        if any(t.name == name and t.kind == "value" for t in self.launcher.template):
            size = fixed_size(self.checks, name)
            if size is None:
                raise Unmapped(
                    f"{name!r} is a compile-time value of {self.launcher.name}'s own template, "
                    "chosen by its caller: no value to import"
                )
            return f"({self.expression(size, depth + 1)})"
        _refuse_reassigned(name, self.locals, self.assumed)  # declared bare, set in branches
        raise Unmapped(f"{name!r} is neither a size query nor a local of {self.launcher.name}")

    def _call(self, node: Node, depth: int) -> str:
        function = node.child_by_field_name("function")
        args_node = node.child_by_field_name("arguments")
        args = [a for a in (args_node.named_children if args_node else [])]
        name = text(function)
        if function is not None and function.type == "field_expression":
            # an optional's tensor (`key.value().numel()`), taken as given as its data_ptr() is
            tensor = _OPTIONAL_VALUE.sub(r"\1", text(function.child_by_field_name("argument")))
            method = text(function.child_by_field_name("field"))
            if method in ("size", "stride") and len(args) == 1:
                axis = self.expression(text(args[0]), depth + 1)
                index_text = axis.strip("()")
                use = self._tensor(tensor)
                if not re.fullmatch(r"-?\d+", index_text):
                    return self._ranked_axis(node, tensor, method, axis)
                index = int(index_text)
                use.indices.add(index)
                use.sized = use.sized or method == "size"
                return f"{tensor}__{method}__{'m' if index < 0 else ''}{abs(index)}"
            if method == "has_value" and not args and self.in_check:
                given = self._given(node)
                if given is not None:
                    return "1" if given else "0"  # `!key.has_value() || key->size(0) == n`
            if method == "numel" and not args:
                self._tensor(tensor).numel = True
                return f"{tensor}__numel"
            if method == "element_size" and not args:
                self._tensor(tensor)
                return "elem_bytes"
            if method in ("dim", "ndim") and not args:  # ndim: TVM-FFI's TensorView
                self._tensor(tensor)
                return f"{tensor}__dim"
            if method == "unwrap" and not args and tensor in self.locals:
                return self._unwrapped(node, tensor)
        short = name.split("<", 1)[0].rsplit("::", 1)[-1]  # std::min<int64_t> is min
        if short == "gcd" and len(args) == 2:
            return f"gcd({self._node(args[0], depth)}, {self._node(args[1], depth)})"
        if short in HOST_SWITCHES and not args:
            self.switches.add(short)
            return "1" if HOST_SWITCHES[short][0] else "0"
        if short in SM_COUNT_CALLS:
            return SM_COUNT
        if short in OCCUPANCY_CALLS:
            return self._occupancy(node, args, depth)
        returned = self._returned(function, args)
        if returned is not None:
            return self.expression(returned, depth + 1)
        if short == "dim3":
            inner = ", ".join(self._node(a, depth) for a in args)
            return f"({inner},)" if len(args) == 1 else f"({inner})"
        if short in ("min", "max", "gcd") and len(args) == 2:
            inner = ", ".join(self._node(a, depth) for a in args)
            return f"{short}({inner})"
        if short in ("static_cast", "int", "int64_t") or name.startswith("static_cast"):
            return self._node(args[0], depth)
        if (
            short in ("ceil_div", "div_ceil", "cdiv", "DIVIDE_ROUND_UP", "ceildiv")
            and len(args) == 2
        ):
            return f"ceil_div({self._node(args[0], depth)}, {self._node(args[1], depth)})"
        interpreted = self._interpreted(function, args)
        if interpreted is not None:
            return self.expression(interpreted, depth + 1)
        raise Unmapped(f"call {text(node)!r} in a size expression")

    def _occupancy(self, node: Node, args: list[Node], depth: int) -> str:
        """``blocks_per_sm(threads, smem)`` for an occupancy query of the launched kernel
        (:data:`~astra_graph.framework.parse.OCCUPANCY_CALLS`); the harness asks CUDA for the
        compiled kernel's answer at launch. A query of another kernel is refused: the import
        compiles only the launched one."""
        if len(args) not in (2, 3):
            raise Unmapped(f"occupancy query {text(node)!r}: (kernel, threads[, smem]) expected")
        written = _compact(text(args[0]))
        asked = self._aliased(written)
        # one name in one scope is the same kernel; so is the expression the launched one's
        # local stands for at this launch (`kernel = is_int32 ? K<int32_t> : K<int64_t>`)
        same = written == _compact(self.kernel_written) or (
            bool(self.kernel_written) and asked == self._aliased(self.kernel_written)
        )
        launched = _compact(self.kernel)
        if self.template_args:
            launched += f"<{','.join(_compact(a) for a in self.template_args)}>"
        if not same and not _same_function(asked, launched):
            raise Unmapped(
                f"occupancy query {text(node)!r} asks about {asked!r}, not the launched kernel "
                f"{launched!r}"
            )
        threads = self._node(args[1], depth)
        smem = self._node(args[2], depth) if len(args) == 3 else "0"
        return f"{occupancy.EXPRESSION_NAME}({threads}, {smem})"

    def _returned(self, function: Node | None, args: list[Node]) -> str | None:
        """The expression a call of a one-return function returns, its template parameters and
        parameters replaced by the call's arguments (parenthesised), or None: ``function`` names
        no such function, or several functions share its name in the source (other scopes,
        overloads, specialisations), or it calls itself, or its body names something
        unqualified that is neither a parameter nor a constant of its own scope (looked up
        innermost first, as C++ does: ``fw::inner::kBlock`` before ``fw::kBlock``)."""
        if function is None:
            return None
        bare, _, rest = _compact(text(function)).partition("<")
        function_def = one_named(self.returns, bare)
        if function_def is None:
            return None
        targs = split_top_level(rest[:-1]) if rest.endswith(">") else []
        if len(targs) != len(function_def.template) or len(args) != len(function_def.params):
            return None
        if re.search(
            rf"(?<![\w:]){re.escape(bare.rsplit('::', 1)[-1])}\s*[(<]", function_def.returned
        ):
            return None  # recursive: no fixed expression
        bound = dict(zip(function_def.template, targs, strict=True))
        bound.update(zip(function_def.params, (text(a) for a in args), strict=True))
        for free in set(_UNQUALIFIED.findall(function_def.returned)) - set(bound) - CPP_WORDS:
            qualified = self._scoped_constant(free, function_def.scope)
            if qualified is None:
                return None  # a name of its scope that is no constant here
            bound[free] = qualified
        if not bound:
            return function_def.returned
        pattern = re.compile(r"(?<![\w:])(" + "|".join(map(re.escape, bound)) + r")(?![\w])")
        return pattern.sub(lambda m: f"({bound[m[1]]})", function_def.returned)

    def _interpreted(self, function: Node | None, args: list[Node]) -> str | None:
        """The value of a call of a host function that does more than return, as C++ text, by
        running its body (:func:`~astra_graph.framework.interpret.call`) over the arguments
        (each a number where it folds to one here), or None where ``function`` names no single
        such function; raises Unmapped where its body cannot be run. The requirements the run
        makes (a loop on a size, unrolled so far) are kept in :attr:`loop_bounds`."""
        if function is None:
            return None
        bare, _, rest = _compact(text(function)).partition("<")
        procedure = one_named(self.procedures, bare)
        if procedure is None:
            return None
        targs = split_top_level(rest[:-1]) if rest.endswith(">") else []
        if len(targs) != len(procedure.template):
            return None
        values: list[interpret.Value] = [self._folded_argument(text(a)) for a in args]
        bound = dict(zip(procedure.template, targs, strict=True))
        if bound:  # the template's values and types, spelled into the body as the call gives them
            pattern = re.compile(r"(?<![\w:.])(" + "|".join(map(re.escape, bound)) + r")(?!\w)")
            body = pattern.sub(lambda m: f"({bound[m[1]]})", procedure.body)
            procedure = replace(procedure, body=body)
        try:
            outcome = interpret.call(
                procedure, values, lambda name: self._scoped_constant(name, procedure.scope)
            )
        except interpret.NotInterpreted as exc:
            raise Unmapped(f"call {text(function)}(...) in a size expression: {exc}") from None
        self.loop_bounds.extend(r for r in outcome.requires if r not in self.loop_bounds)
        return outcome.value

    def _folded_argument(self, written: str) -> interpret.Value:
        """A call's argument as a number where it translates to one here (a literal, a
        constant), else its C++ text, parenthesised."""
        try:
            value = self.fresh().expression(written)
        except Unmapped:
            return f"({written})"
        if expr.names(value) or "__" in value:
            return f"({written})"
        try:
            number = expr.evaluate_int(value, {})
        except expr.ExprError:
            return f"({written})"
        return interpret.Num(number, *interpret.INTEGER_TYPES["int64_t"])

    def _scoped_constant(self, name: str, scope: tuple[str, ...]) -> str | None:
        """The source constant an unqualified ``name`` of a function in ``scope`` names, looked
        up innermost scope first as C++ does, or None."""
        return next(
            (
                "::".join([*scope[:depth], name])
                for depth in range(len(scope), -1, -1)
                if "::".join([*scope[:depth], name]) in self.constants
            ),
            None,
        )

    def _aliased(self, written: str) -> str:
        """A kernel expression through the launcher's locals that alias it (``auto kernel =
        QKRMSNormKernel<VEC_SIZE, T>``), compacted. Class members are not followed: several
        classes name theirs ``kernel``."""
        name = _compact(written)
        for _ in range(MAX_MACRO_DEPTH):
            alias = self.locals.get(name)
            if alias is None:
                break
            name = _compact(alias)
            ternary = _ternary(name)
            taken = self.chosen.get(ternary[0]) if ternary is not None else None
            if ternary is not None and taken is not None:
                # `kernel = is_int32 ? K<int32_t> : K<int64_t>`, at the launch of one choice
                name = _compact(ternary[1] if taken else ternary[2])
        return name

    def _unwrapped(self, node: Node, symbol: str) -> str:
        """``N.unwrap()`` of a symbolic size (SGLang's ``SymbolicSize``): the size or stride of
        the first tensor a matcher before the launch binds it to (:attr:`~astra_graph.
        framework.parse.Launch.matched`), whose shape is then the matcher's
        (:func:`_matched_shapes`). Raises Unmapped when no matcher read on every path to the
        launch binds it."""
        for tensor, sizes, strides in self.matched:
            for method, names in (("size", sizes), ("stride", strides)):
                if symbol in names and tensor in self.params:
                    self._tensor(tensor)
                    return f"{tensor}__{method}__{names.index(symbol)}"
        raise Unmapped(
            f"{text(node)!r}: the symbolic size {symbol} is bound by no tensor matcher that runs "
            f"on every path to the launch in {self.launcher.name} (none, or only under a "
            "condition), so which tensor's size it is cannot be read"
        )

    def _ratio(self, written: str, left: str, right: str) -> None:
        """Record ``left / right`` when it divides one tensor's element count by another
        tensor's sizes, for :func:`_tied_ratios`."""
        counted = {m[1] for m in _QUERY.finditer(left) if m[2] == "numel"}
        divisors = {m[1] for m in _QUERY.finditer(right)}
        if counted and divisors and not counted & divisors:
            self.pending.append((written, counted, divisors))

    def _ranked_axis(self, node: Node, tensor: str, method: str, index: str) -> str:
        """A placeholder for a size or stride whose axis reads tensor ranks (vLLM's
        ``query.stride(seq_dim_idx)`` with ``seq_dim_idx = positions.dim() - 1``): the ranks
        come from every use of the tensors, so the axis is folded when the shapes are known
        (:func:`_substitute`). Any other axis that is not a constant is not importable."""
        if not index or re.search(r"\b(?!\w+__dim\b)[A-Za-z_]\w*\b", index):
            raise Unmapped(f"{text(node)!r}: the axis is not a constant")
        key = f"{tensor}__{method}__r{len(self.axes)}"
        self.axes[key] = index
        return key


_QUERY = re.compile(r"\b(\w+?)__(size|stride|numel|dim)\b")


def _tied_ratios(
    ratios: list[tuple[str, set[str], set[str]]], shapes: dict[str, list[str]]
) -> None:
    """Raise Unmapped for one tensor's element count divided by another tensor's sizes (vLLM's
    rotary ``query.numel() / num_tokens`` with ``num_tokens = positions.numel()``,
    :meth:`_Translator._ratio`) unless the drafted shapes, after the launcher's checks have
    tied their dims (:func:`_derive_dims`: ``query.size(0) == positions.size(0)``), give the
    dividing tensors only dims of the counted one: otherwise the launcher relies on a relation
    between the two shapes that it does not state (its callers keep it), and the drafted
    shapes, whose dims are each tensor's own, would not hold it, so the kernel would index past
    the smaller tensor."""
    for written, counted, divisors in ratios:
        have = {name for t in counted for axis in shapes[t] for name in expr.names(axis)}
        need = {name for t in divisors for axis in shapes[t] for name in expr.names(axis)}
        if not need <= have:
            raise Unmapped(
                f"{' '.join(written.split())!r}: {', '.join(sorted(counted))}'s element count "
                f"over a size of {', '.join(sorted(divisors))}, a relation of their shapes the "
                "launcher does not state"
            )


def _resolve_kernel(launch: Launch, kernels: list[Kernel]) -> Kernel:
    short = launch.kernel.rsplit("::", 1)[-1]
    matches = [k for k in kernels if k.name == short]
    if not matches:
        raise Unmapped(f"kernel {launch.kernel!r} is not defined in the file or its includes")
    exact = [k for k in matches if k.qualified.endswith(launch.kernel.lstrip(":"))]
    return (exact or matches)[0]


def _element_type(
    param: Param, template_args: dict[str, str], element_names: Collection[str] = ()
) -> str | None:
    spelled = template_args.get(param.type, param.type)
    spelled = template_args.get(TYPE_ALIAS + spelled, spelled)
    if spelled in (ELEMENT_TYPE_NAME, "T") or spelled in element_names:
        return "T"
    return CPP_TYPES.get(spelled)


def device_constants(arch: str, cuda_version: tuple[int, int]) -> dict[str, int]:
    """What a launcher may ask of the build and the GPU, fixed by the import's target:
    ``CUDA_VERSION`` (the compiler's, 13050 for 13.5), the compute capability of ``arch``, and
    ``__CUDACC__``, which nvcc defines in the host pass that compiles the launchers (an
    ``#ifdef __CUDACC__`` around a header's macros is taken; ``__CUDA_ARCH__``, defined in the
    device pass only, is not defined here)."""
    digits = arch.removeprefix("sm_").rstrip("a")
    return {
        "CUDA_VERSION": cuda_version[0] * 1000 + cuda_version[1] * 10,
        "cc_major": int(digits[:-1]),
        "cc_minor": int(digits[-1]),
        "__CUDACC__": 1,
    }


def analyse(
    launcher: Launcher,
    launch: Launch,
    kernels: list[Kernel],
    macros: dict[str, Macro],
    device: dict[str, int],
    source_constants: dict[str, str] | None = None,
    structs: dict[str, list[Param]] | None = None,
    reshape: Reshape | None = None,
    returns: dict[str, ReturnOnly | None] | None = None,
    procedures: dict[str, Procedure | None] | None = None,
    raw_root: bool = False,
) -> Analysis:
    """The contract-level description of one launch; raises Unmapped with the reason.

    ``device`` (:func:`device_constants`) binds what the launcher asks of the build and GPU;
    ``source_constants`` (:attr:`~astra_graph.framework.parse.Source.constants`) the source's,
    ``returns`` (:attr:`~astra_graph.framework.parse.Source.returns`) its one-return functions,
    ``procedures`` (:attr:`~astra_graph.framework.parse.Source.procedures`) its other ones;
    ``structs`` (:attr:`~astra_graph.framework.parse.Source.structs`) the fields of by-value
    struct parameters.
    ``reshape(shapes, notes, read_only)`` (:data:`Reshape`), where given, corrects the tensors'
    shapes before strides and sizes are written over them.
    With ``raw_root`` (a raw-pointer launcher no caller passes tensors to), each raw pointer
    parameter is a tensor (:func:`_raw_tensor_binding`) that the kernel's row-major indices
    must shape (:func:`_refuse_unshaped_raw`), the launcher's integer parameters its dims.
    """
    kernel = _launched_kernel(launch, kernels)
    checked, unread = _kernel_checks(launch, kernel, launcher)
    asserted = checked.checks[len(launch.checks) :]
    launch = checked
    notes: list[str] = [*launch.notes, *unread]
    if launch.choice:
        notes.append(f"kernel chosen at run time: imported for {launch.choice}")
    targs, element_names = _element_names(kernel, launch, notes)
    own_types = {t.name for t in launcher.template if t.kind == "type"}
    dtypes, hinted = _dispatched(launch, macros, notes)
    targs.update({TYPE_ALIAS + hint: cpp for hint, cpp in hinted.items()})
    tensors: dict[str, TensorUse] = {}
    translator = _Translator(
        launcher,
        launch,
        tensors,
        device,
        source_constants or {},
        element_names | own_types | {"T"},
        returns,
        procedures,
    )
    translator.raw_root = raw_root
    if raw_root and kernel.direct is not None:
        kernel = _read_directly(kernel, translator, notes)
    bound = _bind_parameters(
        kernel, launch, launcher, translator, targs, element_names | own_types, notes, structs or {}
    )
    _refuse_unnulled(translator.nulls, bound.bindings)
    if raw_root and kernel.direct is not None:
        kernel = _raw_offsets_left_to_direct(kernel, bound.bindings, translator)
    offset_rows = offset_targets(kernel, bound.bindings, returns or {})
    grid, block, smem = _geometry(launch, translator)
    notes += [tunable.note() for tunable in translator.tunables.values()]
    if not tensors:
        raise Unmapped("the kernel takes no tensor")
    ranks = _stated_ranks(launch, translator.fresh())
    extents = read_extents(kernel, bound.bindings)
    for name, (_, at) in extents.items():
        if at != WHOLE_SHAPE:  # the kernel only reads it, whatever its parameter's const says
            tensors[name].const = True
    indexed = indexed_axes(kernel, bound.bindings, launch, translator, (grid, block))
    free_rows = free_row_axes(kernel, bound.bindings)
    shapes, dims, unstated = _shapes(
        launch,
        tensors,
        notes,
        _matched_reshape(launch, reshape),
        ranks,
        extents,
        strided_axes(kernel, bound.bindings),
        {name: found.axes for name, found in indexed.items()},
        {t: (source, axis) for t, (source, axis, _) in free_rows.items()},
    )
    _refuse_unshaped_raw(translator.raw_tensors, kernel, bound.bindings, indexed, notes)
    index_types = _offset_index_types(launcher, translator, tensors, notes)
    if index_types:
        hinted = {**hinted, **index_types}
        launcher = replace(
            launcher, template=tuple(t for t in launcher.template if t.name not in index_types)
        )
    dims += [name for name in translator.host_dims if name not in dims]
    dims += [name for name in translator.offset_totals.values() if name not in dims]
    _checked_drafts(launch, translator.fresh(), tensors, shapes, dims, notes)

    def finish(expression: str) -> str:
        return _substitute(expression, tensors, shapes, translator.axes)

    _finish_bindings(bound.bindings, finish)
    followed = _followed_dims(launch, translator, finish)
    requires, other_gpu = _launch_requirements(launch, translator, finish, notes, asserted)
    requires += _loop_requirements(launch, translator, finish, requires)
    for name, found in indexed.items():  # where the shape is the row-major index's
        if any(n.startswith(f"{name}: {INDEXED_NOTE}") for n in notes):
            requires += [r for r in map(finish, found.requires) if r not in requires]
    for requirement, note in row_reach_requirements(
        kernel, bound.bindings, launch, translator, (grid, block)
    ):
        finished = _branches_taken(finish(requirement))
        if finished not in requires:
            requires.append(finished)
            notes.append(note)
    dead = _dead_condition(launch, translator)
    geometry = [finish(grid), finish(block), finish(smem)]
    _derive_dims(requires, shapes, dims, bound.bindings, geometry, notes)
    _tied_ratios(translator.ratios, shapes)
    _row_lengths(unstated, shapes, dims, kernel, bound.bindings, geometry, requires, notes)
    _note_host_reads(translator, notes)
    dispatched = bool(dtypes)
    by_callers = dict(launcher.instantiated)
    dtypes, drafted = _element_dtypes(dtypes, own_types, tensors, notes, by_callers)
    _refuse_unindexed_rows(free_rows, tensors, notes)
    # the callers' types spell the entry only where they gave the dtypes
    own_element = _caller_type({} if dispatched or drafted else by_callers)
    entry = _entry(
        kernel,
        launch,
        launcher,
        macros,
        dtypes,
        element_names,
        hinted,
        translator,
        notes,
        own_element,
        finish,
    )
    specializations = {
        n: ast.unparse(expr.parse(finish(e)).body) for n, e in translator.specializations.items()
    }
    if followed:
        _check_followed(followed, specializations, shapes)
    _refuse_moved_drafts(bound.bindings, notes)
    offsets = {**_offset_dims(offset_rows, shapes), **translator.offset_totals}
    analysis = Analysis(
        launcher=launcher.name,
        kernel=kernel,
        entry=entry,
        dtypes=tuple(d for d in HARNESS_FLOAT_DTYPES if d in dtypes),
        bindings=bound.bindings,
        tensors=tensors,
        shapes=shapes,
        dims=dims,
        grid=geometry[0],
        block=geometry[1],
        smem=geometry[2],
        scalars=bound.scalars,
        constants=bound.constants,
        derived=bound.derived,
        requires=requires,
        notes=notes,
        other_gpu=other_gpu,
        drafted_dtypes=drafted,
        width_folded=translator.width_folded,
        dead=dead,
        tunables=tuple(translator.tunables.values()),
        specializations=specializations,
        followed=followed,
        slots={
            t: rows for t, rows in _slot_tensors(kernel, bound.bindings).items() if t not in offsets
        },
        gathers={
            t: rows
            for t, rows in _gather_tensors(kernel, bound.bindings).items()
            if t not in offsets
        },
        offsets=offsets,
    )
    analysis.multiples = dim_multiples(analysis)
    return analysis


def _check_followed(
    followed: dict[str, tuple[int, ...]],
    specializations: dict[str, str],
    shapes: dict[str, list[str]],
) -> None:
    """Raises Unmapped unless each followed dim is an axis of a tensor the kernel gets (a size,
    not a flag the caller passes, nor a dim a derivation replaced) and each specialization
    reads the followed dims alone (a size fixed by another dim is searched by the importer's
    other path): the importer then fixes one case of the dispatch instead."""
    axes = {axis for shape in shapes.values() for axis in shape}
    for dim in followed:
        if dim not in axes:
            raise Unmapped(f"the dispatch switches on {dim}, which is no tensor's axis")
    for name, value in specializations.items():
        if expr.names(value) - set(followed):
            raise Unmapped(f"{name} = {value} reads dims the dispatch does not switch on")


def _followed_dims(
    launch: Launch, translator: _Translator, finish: Callable[[str], str]
) -> dict[str, tuple[int, ...]]:
    """Each size dispatch the launch follows (:attr:`~astra_graph.framework.parse.Launch.
    followed`) as the dim it switches on, with its cases; raises Unmapped where the run-time
    expression is not one dim of the operation (``vec_size``, a gcd of the width and the hidden
    size, or a rank): the importer then fixes one case instead."""
    out: dict[str, tuple[int, ...]] = {}
    for runtime, cases in launch.followed:
        dim = ast.unparse(expr.parse(finish(translator.fresh().expression(runtime))).body)
        if not dim.isidentifier():
            raise Unmapped(f"the dispatch on {runtime} switches on {dim}, not one dim")
        out[dim] = cases
    return out


ANY_SIZE = ("-1", "kAnySize", "host::kAnySize")
"""How a tensor-shape matcher spells an axis it lets be any size (SGLang's ``SizeRef(-1)``:
``TensorMatcher({-1, rotary_dim})`` binds no symbol for that axis)."""


def _matched_reshape(
    launch: Launch,
    reshape: Reshape | None,
) -> Reshape | None:
    """``reshape`` preceded by the launch's tensor-shape matchers (:attr:`~astra_graph.
    framework.parse.Launch.matched`): each matched tensor the kernel gets has the matcher's
    shape, one dim per symbolic size, named after the size's label (``SymbolicSize{"num_tokens"}``
    is ``num_tokens``) or else its variable, so that tensors matched with one size share its
    dim, as the matcher checks at run time. A size that is not a symbol raises Unmapped."""
    if not launch.matched:
        return reshape
    names: dict[str, str] = {}
    for _, sizes, _ in launch.matched:
        for symbol in sizes:
            label = re.fullmatch(r'\s*[\w:]*\s*\{\s*"(\w+)"\s*\}\s*', launch.locals.get(symbol, ""))
            dim = label[1] if label else symbol
            while symbol not in names and dim in names.values():
                dim = f"{dim}_"  # two sizes of one label: each its own dim
            names.setdefault(symbol, dim)

    def matched(
        shapes: dict[str, list[str]], notes: list[str], read_only: frozenset[str]
    ) -> dict[str, list[str]]:
        out = dict(shapes)
        for tensor, sizes, _ in launch.matched:
            if tensor not in out:
                continue
            odd = [
                s
                for s in sizes
                if s.strip() not in ANY_SIZE
                and (s not in launch.locals or not re.fullmatch(r"\w+", s))
            ]
            if odd:
                raise Unmapped(
                    f"{tensor}: its matcher names the size {odd[0]!r}, not a symbolic size "
                    "of the launcher"
                )
            # an axis the matcher lets be any size is a dim of its own, tied to no other
            out[tensor] = [
                f"{tensor}_{axis}" if s.strip() in ANY_SIZE else names[s]
                for axis, s in enumerate(sizes)
            ]
            # the matcher's shape, not a draft: a twin's (or none) for a tensor of strides alone
            drafts = (f"{tensor}: {DRAFTED_NOTE}", f"{tensor}: {STRIDED_NOTE}")
            notes[:] = [n for n in notes if not n.startswith(drafts)]
            notes.append(f"{tensor}: shape [{', '.join(out[tensor])}] from its tensor matcher")
        return reshape(out, notes, read_only) if reshape is not None else out

    return matched


def _derive_dims(
    requires: list[str],
    shapes: dict[str, list[str]],
    dims: list[str],
    bindings: list[Binding],
    geometry: list[str],
    notes: list[str],
) -> None:
    """Each requirement ``dim == e`` with ``e`` over other dims (SGLang's ``RuntimeCheck(
    hidden_size * 2 == D_in.unwrap())``), or such an equality a requirement implies
    (:func:`_implied_equations`: a term of an ``&&`` check, or of a check under an ``if`` the
    drafted shapes make true), made to hold by construction: the dim is replaced by ``(e)`` in
    the shapes, bindings, geometry and other requirements, and is no dim any more (in place).
    The suites' dims are drawn independently, so such a requirement held for none of them; a
    requirement with a constant (``head_dim == 128``) pins its dim instead
    (:func:`~astra_graph.framework.draft.suites`)."""
    derived = _derivable(requires, dims)
    while derived is not None:
        requirement, dim, value = derived
        if expr.equation(requirement) is not None:
            requires.remove(requirement)  # held by construction; a compound one is kept
        _replace_dim(dim, f"({value})", shapes, dims, bindings, geometry, requires)
        notes.append(f"{dim} = {value}: the launcher checks {requirement}")
        derived = _derivable(requires, dims)


def _replace_dim(
    dim: str,
    value: str,
    shapes: dict[str, list[str]],
    dims: list[str],
    bindings: list[Binding],
    geometry: list[str],
    requires: list[str],
) -> None:
    """``dim`` replaced by the expression text ``value`` in the shapes, the bindings' size
    expressions, the launch geometry and the requirements, and no dim any more (in place): the
    one substitution a derived dim (:func:`_derive_dims`) and a row length the kernel gives
    (:func:`_row_lengths`) make. These are the importer's own expression strings, not C++."""
    pattern = re.compile(rf"\b{re.escape(dim)}\b")

    def put(text_: str) -> str:
        return pattern.sub(value, text_)

    for name, shape in shapes.items():
        shapes[name] = [put(axis) for axis in shape]
    _finish_bindings(bindings, put)
    geometry[:] = [put(g) for g in geometry]
    requires[:] = [put(r) for r in requires]
    if dim in dims:
        dims.remove(dim)


def _derivable(requires: list[str], dims: list[str]) -> tuple[str, str, str] | None:
    """The first (requirement, dim, expression over other dims) that a requirement's implied
    equalities (:func:`_implied_equations`) make a dim equal to, or None."""
    for requirement in requires:
        for left, right in _implied_equations(requirement):
            for side, other in ((left, right), (right, left)):
                if not isinstance(side, ast.Name) or side.id not in dims:
                    continue
                value = ast.unparse(other)
                used = expr.names(value)
                if used and side.id not in used and used <= set(dims):
                    return requirement, side.id, value
    return None


def _implied_equations(requirement: str) -> list[tuple[ast.expr, ast.expr]]:
    """The equalities ``a == b`` a requirement implies: itself when one, each term of an
    ``and``, and the one term of an ``or`` whose other terms are constant and false (a host
    check under an ``if`` the drafted shapes decide, ``(1 == 1) == 0 or (q == p)``)."""
    try:
        body = expr.parse(requirement).body
    except expr.ExprError:
        return []
    found: list[tuple[ast.expr, ast.expr]] = []
    stack: list[ast.expr] = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
            found.append((node.left, node.comparators[0]))
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            stack.extend(reversed(node.values))
        elif isinstance(node, ast.BoolOp):
            live = [v for v in node.values if not expr.constant_false(ast.unparse(v))]
            stack.extend(live if len(live) == 1 else [])
    return found


def _launched_kernel(launch: Launch, kernels: list[Kernel]) -> Kernel:
    """The kernel the launch names; raises Unmapped for a launch the parser could not read, a
    kernel defined neither in the file nor its includes, or an argument count that is not the
    kernel's parameter count."""
    if launch.unread:
        raise Unmapped(launch.unread)
    kernel = _resolve_kernel(launch, kernels)
    if len(launch.args) != len(kernel.params):
        raise Unmapped(
            f"{launch.kernel} takes {len(kernel.params)} parameters, the launch passes "
            f"{len(launch.args)}"
        )
    return kernel


def _kernel_checks(launch: Launch, kernel: Kernel, launcher: Launcher) -> tuple[Launch, list[str]]:
    """The launch with its kernel's own ``static_assert`` s (:attr:`~astra_graph.framework.
    parse.Kernel.asserted`) as host checks, as the launcher's are (:func:`~astra_graph.
    framework.parse._asserted`): each read at the launch's template arguments, a parameter the
    launch leaves to its default at the default, and a flag of the launcher's template at
    :data:`TEMPLATE_FLAG_VALUE`, as the entry instantiates it (:func:`_entry`). The framework
    builds the launch only where its kernel builds, so they hold at every call it makes;
    SGLang's rope kernel asserts that its rope dim splits into whole vectors, which its
    launcher's class does not, and its original, drafted at an odd rope dim, did not compile
    (H100). An assert that reads a parameter bound to nothing is left out (the launcher's
    scope may give the name another value); the notes (second) say which, and which the body's
    reader left out (:attr:`~astra_graph.framework.parse.Kernel.asserts_unread`)."""
    bound: dict[str, str] = {}
    for index, param in enumerate(kernel.template):
        value = launch.template_args[index] if index < len(launch.template_args) else None
        value = value if value is not None else param.default
        if value is not None:
            bound[param.name] = value.strip()
    flags = {t.name: TEMPLATE_FLAG_VALUE for t in launcher.template if t.kind == "flag"}
    unbound = {t.name for t in kernel.template} - set(bound)
    found: list[str] = []
    notes = [f"the kernel's {why}: not a requirement" for why in kernel.asserts_unread]
    for condition in kernel.asserted:
        left = sorted(set(re.findall(r"\w+", condition)) & unbound)
        if left:
            notes.append(
                f"the kernel's static_assert({condition}) reads {', '.join(left)}, which the "
                "launch binds to nothing: not a requirement"
            )
            continue
        read = bound_names(bound_names(condition, bound), flags)
        if read not in launch.checks and read not in found:
            found.append(read)
    if not found:
        return launch, notes
    checked = replace(
        launch,
        conditions=launch.conditions + tuple((c, True) for c in found),
        checks=launch.checks + tuple(found),
    )
    return checked, notes


def _geometry(launch: Launch, translator: _Translator) -> tuple[str, str, str]:
    """(grid, block, dynamic shared memory) as contract expressions whose tensor queries are
    still placeholders (:func:`_substitute` replaces them once the shapes are drafted); one the
    launch leaves out is 0."""

    def translated(value: str) -> str:
        if translator.in_grid and opaque_grid_tunable(value.strip(), launch.locals):
            return translator.expression(value.strip())  # `<<<split, ...>>>`: the tunable
        _refuse_reassigned(value.strip(), launch.locals, translator.assumed)
        return translator.expression(launch.locals.get(value, value)) if value.strip() else "0"

    translator.in_grid = True
    try:
        grid = translated(launch.grid)
    finally:
        translator.in_grid = False
    return grid, translated(launch.block), translated(launch.smem)


def _finish_bindings(bindings: list[Binding], finish: Callable[[str], str]) -> None:
    """Each size expression a kernel parameter or struct field is bound to, written over the
    drafted shapes' dims by ``finish`` (in place)."""
    for binding in bindings:
        for one in binding.fields or [binding]:
            if one.kind == "expr":
                one.value = finish(one.value)
            if one.moved:
                one.moved = finish(one.moved)


def _note_host_reads(translator: _Translator, notes: list[str]) -> None:
    """Notes what was taken for each value the launcher reads at run time: an absent optional,
    a process-wide switch (:data:`HOST_SWITCHES`) at its default."""
    notes.extend(dict.fromkeys(translator.assumed))
    for switch in sorted(translator.switches):
        default, origin = HOST_SWITCHES[switch]
        notes.append(f"{switch}() taken as {str(default).lower()} ({origin})")


def _element_names(
    kernel: Kernel, launch: Launch, notes: list[str]
) -> tuple[dict[str, str], set[str]]:
    """(the kernel's template parameters bound to the launch's arguments, the names the
    launcher gives the dispatched element type: scalar_t and its nested dispatches' aliases)."""
    aliases = {
        k: v
        for k, v in launch.locals.items()
        if k.startswith(TYPE_ALIAS) and v == ELEMENT_TYPE_NAME
    }
    targs = {
        **aliases,
        **dict(zip((t.name for t in kernel.template), launch.template_args, strict=False)),
    }
    element_names = {ELEMENT_TYPE_NAME, *(k.removeprefix(TYPE_ALIAS) for k in aliases)}
    if len(aliases) > 1:
        notes.append(
            "nested dispatches ("
            + ", ".join(k.removeprefix(TYPE_ALIAS) for k in aliases)
            + "): imported with one element type for all"
        )
    return targs, element_names


def _element_dtypes(
    dispatched: set[str],
    own_types: set[str],
    tensors: dict[str, TensorUse],
    notes: list[str],
    instantiated: Mapping[str, str],
) -> tuple[set[str], bool]:
    """(the launch's element types, whether they are drafted rather than read): the dispatch's;
    with no dispatch, for a tensor typed by a type parameter of the launcher's own template,
    those its callers instantiate it with (``instantiated``, noted), else
    :data:`TEMPLATE_ELEMENT_DTYPES` (noted), else the tensors' one fixed type; raises Unmapped
    for a type the harness cannot run (:func:`_checked_dtypes`)."""
    templated = (
        not dispatched and bool(own_types) and any(t.element == "T" for t in tensors.values())
    )
    if templated and instantiated:
        notes.append(
            f"element type {'/'.join(sorted(own_types))}: instantiated by its caller with "
            + ", ".join(f"{cpp} for {dtype}" for dtype, cpp in sorted(instantiated.items()))
        )
        return _checked_dtypes(set(instantiated), tensors), False
    drafted = templated
    if drafted:
        dispatched = set(TEMPLATE_ELEMENT_DTYPES)
        notes.append(
            f"element type {'/'.join(sorted(own_types))}: a parameter of the launcher's template "
            f"with no dispatch; drafted as {', '.join(TEMPLATE_ELEMENT_DTYPES)} "
            "(those that compile are kept)"
        )
    return _checked_dtypes(dispatched, tensors), drafted


def _checked_dtypes(dtypes: set[str], tensors: dict[str, TensorUse]) -> set[str]:
    """The dispatch's element types, or the one fixed type of a launch with no dispatch: its
    tensors' floating type where they have one (an index tensor beside them, SGLang's int64
    ``positions`` beside a caller's ``launch_kernel<float, ...>``, is not the element), else
    the first tensor's; where every tensor's type is a whole number's or bool's (FlashInfer's
    bit packing: ``bool`` in, ``uint8_t`` out), :data:`WHOLE_LAUNCH_DTYPE`, which no argument
    takes (each keeps its own). Raises Unmapped for a type the harness cannot run."""
    if not dtypes:
        if any(t.element == "T" for t in tensors.values()):
            raise Unmapped("element type scalar_t with no dispatch macro that names its types")
        fixed = [t.element for t in tensors.values() if t.element is not None]
        floating = {e for e in fixed if e in HARNESS_FLOAT_DTYPES}
        whole = all(e in DTYPES and not DTYPES[e].floating for e in fixed)
        dtypes = floating if len(floating) == 1 else {WHOLE_LAUNCH_DTYPE} if whole else {fixed[0]}
    unsupported = sorted(dtypes - set(HARNESS_FLOAT_DTYPES))
    if unsupported:
        raise Unmapped(f"dispatch types {unsupported} are not supported")
    return dtypes


def _dispatched(
    launch: Launch, macros: dict[str, Macro], notes: list[str]
) -> tuple[set[str], dict[str, str]]:
    """(the element types the launch's dispatches instantiate as ``scalar_t``, the C++ type of
    each type a dispatch binds by name instead: vLLM's ``fp8_t``)."""
    dtypes: set[str] = set()
    hinted: dict[str, str] = {}
    for name, args in launch.dispatch:
        hints = dispatch_hints(name, args, macros)
        if hints:
            hinted.update(_hinted_types(name, hints, notes))
        else:
            dtypes |= dispatch_dtypes(name, args, macros)
    return dtypes, hinted


def _hinted_types(name: str, hints: dict[str, set[str]], notes: list[str]) -> dict[str, str]:
    """Each type a dispatch binds by name, as the C++ type of its one case; raises Unmapped
    when a case is a type the harness cannot run or when there are several (an operation has
    one element type ``T``; a second dispatched type would need a second)."""
    out: dict[str, str] = {}
    for hint, enums in hints.items():
        if len(enums) != 1 or next(iter(enums)) not in HINT_TYPES:
            raise Unmapped(
                f"{name} binds {hint} to {sorted(enums)}: one type the harness runs "
                f"({', '.join(sorted(HINT_TYPES))}) is needed"
            )
        dtype, cpp = HINT_TYPES[next(iter(enums))]
        out[hint] = cpp
        notes.append(f"{hint}: {dtype} ({cpp}), the one type {name} dispatches it to")
    return out


_LITERAL_ARGUMENT = re.compile(r"^(?:-?\d+[uUlL]*|true|false)$")


def _folded_template_args(
    kernel: Kernel,
    launch: Launch,
    dtypes: set[str],
    translator: _Translator,
    specialized: dict[str, str],
    notes: list[str],
) -> tuple[str, ...]:
    """The launch's template arguments with each compile-time value that the launcher computes
    (FlashInfer's ``constexpr uint32_t vec_size = std::max(16U / sizeof(DTypeIn), HEAD_DIM /
    32U)``) folded to its literal, which the entry must spell. An argument that cannot be read
    is kept as written (NVRTC then names it); one that differs between the dispatched element
    types cannot be one entry and raises Unmapped. One that is a size, as the launcher reads
    it (SGLang's ``rmsnorm_cta<kDim, ...>`` with ``D.set_value(kDim)``: :func:`fixed_size`),
    is written as a specialization on the shape, added to ``specialized`` (name -> the size's
    expression, its placeholders not yet finished): the framework builds one kernel per size it
    is called with, and so does the harness. A value that mixes a size with the element's width
    takes the width where every dispatched type has the same one (FlashInfer's ``vec_size`` at
    fp16 and bf16); where they differ, it is one value per width, and a specialization follows
    the dims alone: the types of the width most of them share (:func:`_shared_width`) are kept
    and the others taken out of ``dtypes`` (in place), noted, each the framework's instantiation
    of its own."""
    out = []
    for param, arg in zip(kernel.template, launch.template_args, strict=False):
        spelled = " ".join(arg.split())
        if param.kind not in ("value", "flag") or _LITERAL_ARGUMENT.match(spelled):
            out.append(arg)
            continue
        try:
            value = translator.expression(spelled)
        except Unmapped:
            out.append(arg)
            continue
        if expr.names(value) - {ELEM_BYTES}:
            if param.kind != "value":
                raise Unmapped(
                    f"template argument {param.name} = {spelled!r} of {kernel.name} depends on "
                    f"the sizes ({value}): a compile-time value cannot"
                )
            if ELEM_BYTES in expr.names(value):
                # every dispatched type has this width (FlashInfer's vec_size = max(16 /
                # sizeof(DType), HEAD_DIM / 32) at fp16 and bf16): the value follows the dims
                # alone, and the entry at another width is not the framework's launch
                width = _shared_width(dtypes, f"{param.name} = {spelled!r}", notes)
                value = re.sub(rf"\b{ELEM_BYTES}\b", str(width), value)
                translator.width_folded = width != DTYPES["float32"].itemsize
            out.append(_specialized(specialized, param.name, value, kernel.name))
            continue
        try:
            values = {expr.evaluate_int(value, {ELEM_BYTES: DTYPES[d].itemsize}) for d in dtypes}
        except expr.ExprError:
            out.append(arg)  # not a whole number (a comparison): kept for NVRTC to read
            continue
        if len(values) != 1:
            raise Unmapped(
                f"template argument {param.name} = {spelled!r} of {kernel.name} is "
                f"{sorted(values)} across the element types {sorted(dtypes)}: one entry cannot"
            )
        number = values.pop()
        if expr.evaluate_int(value, {ELEM_BYTES: DTYPES["float32"].itemsize}) != number:
            translator.width_folded = True
        out.append(str(bool(number)).lower() if param.kind == "flag" else str(number))
    return (*out, *launch.template_args[len(out) :])


def _shared_width(dtypes: set[str], value: str, notes: list[str]) -> int:
    """The element width of most of ``dtypes`` (the narrower of two as common: the 16-bit
    serving types), the types of other widths taken out of ``dtypes`` (in place) and noted:
    ``value`` reads the width beside the sizes, so each width is an instantiation of its own."""
    counts = Counter(DTYPES[d].itemsize for d in dtypes)
    width = min(counts, key=lambda w: (-counts[w], w))
    gone = sorted(d for d in dtypes if DTYPES[d].itemsize != width)
    if gone:
        dtypes.difference_update(gone)
        notes.append(
            f"element types {', '.join(gone)} left out: {value} reads the element's width "
            f"beside the sizes, one instantiation per width; the {width}-byte types are kept"
        )
    return width


CUDA_ELEMENT_SPELLINGS = ("half", "__half", "nv_half", "__nv_bfloat16", "nv_bfloat16")
"""CUDA's own 16-bit types, as a dispatch case spells them (FlashInfer's ``using c_type =
nv_half;``): the framework instantiates its kernels with these, not with torch's c10 types."""


def _cuda_spelled(launch: Launch, macros: dict[str, Macro]) -> bool:
    """Whether the launch's dispatch instantiates CUDA's 16-bit types themselves (its cases say
    ``using c_type = nv_half;``), so that ``T`` is the framework's type as it is: the c10 types
    stand in only for torch's dispatch, whose ``scalar_t`` is ``c10::Half``. A FlashInfer kernel
    instantiated with ``c10::Half`` finds no ``vec_t<c10::Half, 8>`` specialisation."""
    for name, _ in launch.dispatch:
        seen: set[str] = set()
        pending = [name]
        while pending:
            current = pending.pop()
            if current in seen or current not in macros:
                continue
            seen.add(current)
            body = macros[current].body
            if any(s in CUDA_ELEMENT_SPELLINGS for s in _USING_CASE.findall(body)):
                return True
            pending += re.findall(r"\b[A-Z_][A-Z0-9_]*\b", body)
    return False


def _entry(
    kernel: Kernel,
    launch: Launch,
    launcher: Launcher,
    macros: dict[str, Macro],
    dtypes: set[str],
    element_names: set[str],
    hinted: dict[str, str],
    translator: _Translator,
    notes: list[str],
    own_element: str = "T",
    finish: Callable[[str], str] = str,
) -> str:
    """The kernel's entry expression: the launch's template arguments with their compile-time
    values folded (:func:`_folded_template_args`), a dispatch's element type written as the
    framework's type of T (``T`` itself where the dispatch spells CUDA's types:
    :func:`_cuda_spelled`), a type parameter of the launcher's own template as
    ``own_element`` (:func:`_caller_type`: ``T`` itself, or the callers' own types where they
    gave the dtypes), either of them as that where it is the element type, a flag of that
    template as
    :data:`TEMPLATE_FLAG_VALUE`, a value parameter of that template that the launcher fixes to
    a size (:func:`fixed_size`: SGLang's ``kDim``) as a specialization on that size; raises
    Unmapped for any other value parameter of that template (a compile-time value the caller
    picks, whose value nothing in the file gives); each type a dispatch binds by name (vLLM's
    ``fp8_t``) is written as that type. ``finish`` writes a specialized value's size over the
    operation's dims for its note."""
    folding = translator.fresh()  # reads not recorded; what the folding read about widths is
    specialized: dict[str, str] = {}
    template_args = _folded_template_args(kernel, launch, dtypes, folding, specialized, notes)
    for special, followed in specialized.items():  # one name, one size, whichever way it came
        _specialized(translator.specializations, special, followed, kernel.name)
    notes += [
        f"{name.removeprefix(SPECIALIZATION_PREFIX)}: a template value the launcher reads as a "
        f"size ({ast.unparse(expr.parse(finish(size)).body)}): specialized on the shape as "
        f"{name}, one build per value, as the framework builds one per size it is called with"
        for name, size in specialized.items()
    ]
    translator.width_folded = folding.width_folded
    framework_type = (
        own_element
        if own_element != "T"
        else "T"
        if _cuda_spelled(launch, macros)
        else f"{FRAMEWORK_TYPE}<T>"
    )
    element_pattern = r"\b(" + "|".join(sorted(element_names)) + r")\b"
    entry_args = [
        re.sub(element_pattern, framework_type, " ".join(a.split())) for a in template_args
    ]
    for own in launcher.template:
        pattern = rf"(?<![\w:])\b{re.escape(own.name)}\b(?!\s*::)"
        if not any(re.search(pattern, a) for a in entry_args):
            continue
        if own.kind == "value":
            size = fixed_size(translator.checks, own.name)
            if size is None:
                raise Unmapped(
                    f"template argument {own.name} of {kernel.name} is a compile-time value of "
                    f"{launcher.name}'s own template, chosen by its caller: no value to import"
                )
            # the framework builds one instantiation per size it is called with: so does the
            # harness, one per the shape's value (a specialization)
            value = translator.expression(size)
            special = _specialized(translator.specializations, own.name, value, kernel.name)
            entry_args = [re.sub(pattern, special, a) for a in entry_args]
            notes.append(
                f"{own.name}: a value of {launcher.name}'s template that it fixes to "
                f"{size.removesuffix('.unwrap()')}'s size ({own.name} = that size at every "
                f"launch): specialized on the shape as {special}, one build per value"
            )
            continue
        replacement = {"type": own_element, "flag": TEMPLATE_FLAG_VALUE}.get(own.kind)
        if replacement is None:
            raise Unmapped(f"template argument {own.name} of {kernel.name}: a function pointer")
        entry_args = [re.sub(pattern, replacement, a) for a in entry_args]
        if own.kind == "flag":
            notes.append(
                f"{own.name}: a flag of {launcher.name}'s template, imported as "
                f"{TEMPLATE_FLAG_VALUE} (its caller sets it)"
            )
    entry_args = [re.sub(r"\b\w+\b", lambda m: hinted.get(m[0], m[0]), a) for a in entry_args]
    return f"{kernel.qualified}<{', '.join(entry_args)}>" if entry_args else kernel.qualified


CALLER_TYPE = "astra_caller_t"
"""The alias (framework/include/astra_torch_types.h) that picks, for the element type under
test, the type a launcher's caller instantiates it with: ``astra_caller_t<T, F16, BF16, F32>``."""


def _caller_type(types: Mapping[str, str]) -> str:
    """How an entry spells a type parameter of the launcher's own template: ``T`` itself (the
    caller instantiates it with CUDA's types), or, given the callers' own types per dtype
    (:attr:`~astra_graph.framework.parse.Launcher.instantiated`), those."""
    if not types:
        return "T"
    picks = [types.get(d, "T") for d in ("float16", "bfloat16", "float32")]
    return f"{CALLER_TYPE}<T, {', '.join(picks)}>"


@dataclass
class _Bound:
    """The kernel parameters bound to the launcher's values (:func:`_bind_parameters`)."""

    bindings: list[Binding] = field(default_factory=list)
    scalars: dict[str, str] = field(default_factory=dict)
    constants: dict[str, float] = field(default_factory=dict)
    derived: dict[str, str] = field(default_factory=dict)


def _bind_parameters(
    kernel: Kernel,
    launch: Launch,
    launcher: Launcher,
    translator: _Translator,
    targs: dict[str, str],
    element_names: set[str],
    notes: list[str],
    structs: dict[str, list[Param]],
) -> _Bound:
    """Each kernel parameter bound to what the launch passes it (a tensor, a null pointer, a
    scalar of the launcher or a constant, a size expression, a struct of those field by field);
    raises Unmapped with the reason."""
    bound = _Bound()
    binder = _Binder(
        launch, launcher, translator, targs, element_names, notes, bound, dict(kernel.casts)
    )
    for param, arg in zip(kernel.params, launch.args, strict=True):
        type_name = param.type.rsplit("::", 1)[-1]
        struct = structs.get(type_name) if not param.pointer else None
        if struct is None:
            bound.bindings.append(binder.bind(param, arg))
            continue
        try:
            values = field_values(arg, type_name, struct, launch.locals, notes)
            members, values = flattened(
                type_name, struct, values, structs, launch.locals, notes, binder.field_kind
            )
        except StructUnread as exc:
            raise Unmapped(f"kernel parameter {param.name!r}: {exc}") from None
        fields = [binder.bind(member, value) for member, value in zip(members, values, strict=True)]
        bound.bindings.append(Binding(param.name, "struct", param.type, "struct", fields))
    return bound


@dataclass
class _Binder:
    """Binds one kernel parameter, or one field of a struct parameter, to a launch's value."""

    launch: Launch
    launcher: Launcher
    translator: _Translator
    targs: dict[str, str]
    element_names: set[str]
    notes: list[str]
    bound: _Bound
    casts: dict[str, str] = field(default_factory=dict)
    """The kernel's :attr:`~astra_graph.framework.parse.Kernel.casts`."""

    def field_kind(self, param: Param) -> str | None:
        """A struct field's :data:`~astra_graph.kernel.param_struct.FIELD_BYTES` kind as its
        declared type says (a template type as the launch instantiates it), or None."""
        if param.pointer:
            return POINTER
        kind = CPP_TYPES.get(self.targs.get(param.type, param.type))
        return kind if kind in FIELD_BYTES else None

    def bind(self, param: Param, arg: str) -> Binding:
        raw = arg.strip()
        inner = strip_cast(raw)
        host = {p.name: p for p in self.launcher.params}
        if param.pointer:
            inner = self._compile_time_branch(param, raw, inner)
            inner = _pointer_source(inner, self.launch, param.name, self.notes)
            return _pointer_binding(
                param,
                raw,
                inner,
                host,
                self.translator,
                self.targs,
                self.element_names,
                self.casts.get(param.name, ""),
            )
        kind = CPP_TYPES.get(self.targs.get(param.type, param.type))
        if kind is None and _element_type(param, self.targs, self.element_names) is None:
            raise Unmapped(
                f"kernel parameter {param.name!r} has type {param.type!r}: a class type that is "
                "neither a scalar nor a struct of pointers and scalars defined in the file"
            )
        if kind in ("float32", "float64", "bool"):
            return self._scalar(param, raw, inner, kind, host)
        if kind in ("int32", "int64"):
            return Binding(param.name, "expr", self.translator.expression(inner), kind)
        raise Unmapped(f"kernel parameter {param.name!r} has unsupported type {param.type!r}")

    def _aliased(self, tensor: str) -> str | None:
        """The tensor a check of the launch says shares ``tensor``'s memory
        (``input.data_ptr() == out.data_ptr()``), or None: a host check, a fact of every path
        to the launch (an ``if`` branch is not)."""
        for condition in self.launch.checks:
            for a, b in _ALIASES.findall(condition):
                if tensor in (a, b) and a != b:
                    return b if a == tensor else a
        return None

    def _compile_time_branch(self, param: Param, raw: str, inner: str) -> str:
        """The branch a pointer argument ``COND ? a : b`` takes at this launch site when COND
        is a compile-time constant of it (SGLang's ``kReuseInput ? nullptr : out.data_ptr()``):
        literals, ``constexpr`` constants of the source and flags of the launcher's own
        template, each flag at :data:`TEMPLATE_FLAG_VALUE`, the value the entry instantiates
        the kernel with (:func:`_entry`), so the pointer and the kernel agree. ``inner`` as
        it is for any other argument, or a condition that reads a local, a parameter or a
        size (a run-time choice, left to :func:`_pointer_source`). Raises Unmapped where the
        site passes nullptr for a pointer the kernel writes through while the other branch
        passes a tensor: the kernel then writes elsewhere (in place), which is read only where
        a check of the launch says which tensor shares that one's memory (:meth:`_aliased`):
        that tensor is then written."""
        parts = _ternary(inner)
        if parts is None:
            return inner
        condition, then, other = (p.strip() for p in parts)
        flags = {t.name for t in self.launcher.template if t.kind == "flag"}
        runtime = set(self.launch.locals) | {p.name for p in self.launcher.params}
        names = set(re.findall(r"(?<![\w.:>])\b[A-Za-z_]\w*\b(?!\s*::)", condition))
        if names & runtime:
            return inner
        folded = condition
        for flag in sorted(names & flags):
            folded = re.sub(rf"(?<![\w:])\b{re.escape(flag)}\b", TEMPLATE_FLAG_VALUE, folded)
        translator = self.translator.fresh()
        try:
            value = translator.expression(folded)
            if expr.names(value) or "__" in value or translator.host_dims:
                return inner
            taken = bool(expr.evaluate(value, {}))
        except (Unmapped, expr.ExprError):
            return inner
        chosen, dropped = (then, other) if taken else (other, then)
        spelled = " ".join(condition.split())
        nulled = strip_cast(chosen) in NULL_LITERALS and not param.const
        written = _DATA_PTR.match(strip_cast(dropped))
        alias = self._aliased(written["tensor"]) if nulled and written else None
        if alias is not None and written is not None:
            # SGLang's in-place activation: `kReuseInput ? nullptr : out.data_ptr()` beside
            # RuntimeCheck(input.data_ptr() == out.data_ptr()): the kernel writes its input
            self.translator._tensor(alias).const = False
            self.notes.append(
                f"{param.name}: nullptr at this site ({spelled!r} is {str(taken).lower()}); the "
                f"launcher checks {alias}.data_ptr() == {written['tensor']}.data_ptr(), so the "
                f"kernel writes {alias} in place: {alias} is imported as written"
            )
            return strip_cast(chosen)
        if nulled and written:
            raise Unmapped(
                f"pointer argument {raw!r} for {param.name!r}: {spelled!r} is "
                f"{str(taken).lower()} at this site, so the kernel gets nullptr where "
                "otherwise a tensor it writes; where it writes instead (in place) is not read"
            )
        flagged = sorted(names & flags)
        how = (
            f" ({', '.join(flagged)}: a flag of {self.launcher.name}'s template, "
            f"{TEMPLATE_FLAG_VALUE} as the entry instantiates it)"
            if flagged
            else ""
        )
        self.notes.append(
            f"{param.name}: {spelled!r} is {str(taken).lower()} at compile time{how}; "
            f"passed {' '.join(chosen.split())}"
        )
        return strip_cast(chosen)

    def _scalar(
        self, param: Param, raw: str, inner: str, kind: str, host: dict[str, Param]
    ) -> Binding:
        """A float or bool parameter: a launcher parameter by value, or a literal constant."""
        scalars, constants = self.bound.scalars, self.bound.constants
        if inner not in host:
            _refuse_reassigned(inner, self.launch.locals, self.notes)
        value = self.launch.locals.get(inner, inner) if inner not in host else inner
        value = strip_cast(value)
        if value in host:
            scalars[value] = kind
            return Binding(param.name, "scalar", value, kind)
        if _FLOAT_LITERAL.match(value) or value in ("true", "false"):
            constant = {"true": 1.0, "false": 0.0}.get(value)
            number = constant if constant is not None else float(value.rstrip("fF"))
            name = param.name if param.name not in host else f"{param.name}_value"
            scalars[name] = kind
            constants[name] = number
            self.notes.append(f"scalars.{name}: the launcher passes the constant {value}")
            return Binding(param.name, "scalar", name, kind)
        derived = _float_expression(value, self.launch, host)
        if derived is None:
            raise Unmapped(
                f"{param.name!r} ({param.type}) gets {raw!r}, neither a launcher parameter, a "
                "constant nor arithmetic of the launcher's float parameters"
            )
        name = param.name if param.name not in host else f"{param.name}_value"
        scalars[name] = kind
        self.bound.derived[name] = derived
        return Binding(param.name, "scalar", name, kind)


MATH_CONSTANTS: dict[str, float] = {
    "M_PI": math.pi,
    "M_PI_2": math.pi / 2,
    "M_E": math.e,
    "M_LN2": math.log(2),
    "M_SQRT2": math.sqrt(2),
}
"""``<math.h>``'s constants, which a launcher's float arithmetic may use (FlashInfer's Llama 3.1
rotary ``smooth_a`` divides by ``2 * M_PI * high_freq_factor``)."""
_FLOAT_OPERATORS = ("+", "-", "*", "/")


def _float_expression(value: str, launch: Launch, host: dict[str, Param]) -> str | None:
    """``value``, a float the launcher computes, as an expression (:mod:`~astra_graph.kernel.
    expr`) over the launcher's float parameters, or None when it reads anything else (a size,
    a call, a run-time state): number literals, those parameters, the launcher's locals that
    are such arithmetic, :data:`MATH_CONSTANTS`, ``+ - * /``, parentheses and casts."""
    floats = {n for n, p in host.items() if CPP_TYPES.get(p.type) in ("float32", "float64")}

    def walk(node: Node, depth: int) -> str | None:
        kind = node.type
        if kind == "number_literal":
            literal = text(node).rstrip("fFlLuU")
            return repr(float(literal)) if _FLOAT_LITERAL.match(literal) else None
        if kind == "identifier":
            name = text(node)
            if name in floats:
                return name
            if name in MATH_CONSTANTS:
                return repr(MATH_CONSTANTS[name])
            if name in launch.locals and name not in host and depth < MAX_MACRO_DEPTH:
                _refuse_reassigned(name, launch.locals, [])
                inner = whole(launch.locals[name], depth + 1)
                return f"({inner})" if inner is not None else None
            return None
        if kind == "parenthesized_expression":
            inner = walk(node.named_children[0], depth)
            return f"({inner})" if inner is not None else None
        if kind == "unary_expression" and text(node.child_by_field_name("operator")) == "-":
            inner = walk(node.child_by_field_name("argument"), depth)  # type: ignore[arg-type]
            return f"-{inner}" if inner is not None else None
        if kind == "binary_expression":
            op = text(node.child_by_field_name("operator"))
            left = walk(node.child_by_field_name("left"), depth)  # type: ignore[arg-type]
            right = walk(node.child_by_field_name("right"), depth)  # type: ignore[arg-type]
            if op not in _FLOAT_OPERATORS or left is None or right is None:
                return None
            return f"{left} {op} {right}"
        if kind == "cast_expression":
            return walk(node.child_by_field_name("value"), depth)  # type: ignore[arg-type]
        return None

    def whole(source: str, depth: int) -> str | None:
        found = expression_node(strip_cast(source))
        return walk(found, depth) if found is not None else None

    derived = whole(value, 0)
    return derived if derived is not None and expr.names(derived) else None


_TYPED_POINTER = re.compile(
    r"<\s*(?:const\s+)?(?P<type>[\w:]+)\s*\*\s*>|^\(\s*(?:const\s+)?(?P<c>[\w:]+)\s*\*\s*\)"
)
"""The pointee of a cast to a typed pointer (``static_cast<const T*>``, ``(T*)``)."""


def _moved_pointer(inner: str) -> tuple[str, str] | None:
    """(the pointer moved, the move in bytes as C++) for a pointer argument that moves a
    pointer by whole elements or bytes: SGLang's ``pointer::offset(k.data_ptr(), -k_offset)``
    (bytes; ``pointer::offset<T>`` counts ``T`` s) and ``x.data_ptr<T>() + n`` or
    ``static_cast<T*>(x.data_ptr()) - n`` (``T`` s); None for anything else (an untyped
    ``void*`` moved by ``+`` is no C++)."""
    node = expression_node(inner)
    if node is None:
        return None
    node = unparenthesised(node)
    if node.type == "call_expression":
        function = _compact(text(node.child_by_field_name("function")))
        form = POINTER_OFFSET.match(function)
        args_node = node.child_by_field_name("arguments")
        args = [text(a) for a in (args_node.named_children if args_node else [])]
        if form is None or len(args) < 2:
            return None
        moves = " + ".join(f"({a})" for a in args[1:])
        unit = form["unit"]
        return args[0], f"({moves}) * sizeof({unit})" if unit else f"({moves})"
    if node.type != "binary_expression":
        return None
    op = text(node.child_by_field_name("operator"))
    left, right = (node.child_by_field_name(f) for f in ("left", "right"))
    if op not in ("+", "-") or left is None or right is None:
        return None
    base = text(left)
    typed = _DATA_PTR.match(strip_cast(base))
    cast = _TYPED_POINTER.search(base)
    # the outermost cast's pointee counts (`reinterpret_cast<char*>(x.data_ptr<float>()) + n`
    # moves n bytes), else the typed data_ptr's
    unit = ((cast["type"] or cast["c"]) if cast is not None else None) or (
        typed["type"] if typed is not None else None
    )
    if typed is None or not unit or unit.strip() == "void":
        return None
    sign = "-" if op == "-" else ""
    return base, f"{sign}({text(right)}) * sizeof({unit.strip()})"


def _pointer_binding(
    param: Param,
    raw: str,
    inner: str,
    host: dict[str, Param],
    translator: _Translator,
    targs: dict[str, str],
    element_names: set[str],
    cast: str = "",
) -> Binding:
    """A pointer parameter's binding: null, or the tensor whose ``data_ptr()`` the launch
    passes, with its element type (for a ``void`` pointer, the type the kernel casts it to,
    ``cast``), its address moved where the launch moves it (:func:`_moved_pointer`); raises
    Unmapped for anything else (a raw pointer)."""
    if inner in NULL_LITERALS:
        return Binding(param.name, "null", "", "pointer")
    moved = _moved_pointer(inner)
    if moved is not None:
        base, offset = moved
        base = strip_cast(base)
        binding = _pointer_binding(param, raw, base, host, translator, targs, element_names, cast)
        if binding.kind != "tensor":
            raise Unmapped(f"pointer argument {raw!r} for {param.name!r} moves a null pointer")
        binding.moved = translator.expression(offset)
        return binding
    match = _DATA_PTR.match(inner)
    if match is None and inner in host and host[inner].pointer:
        # FlashInfer's header launchers (`RMSNorm(T* input, ..., uint32_t d, ...)`):
        # a raw pointer says nothing of the tensor's shape, which its caller knows
        if translator.raw_root and param.name in translator.nulls:
            return Binding(param.name, "null", "", "pointer")
        if translator.raw_root:
            return _raw_tensor_binding(param, host[inner], translator, targs, element_names)
        raise RawPointer(
            f"pointer argument {raw!r} for {param.name!r} is the launcher's raw pointer "
            f"parameter ({' '.join(host[inner].text.split())}), not a tensor's "
            "data_ptr(): shapes behind raw pointers are not read"
        )
    if match is None:
        raise Unmapped(f"pointer argument {raw!r} for {param.name!r} is not a data_ptr()")
    use = translator._tensor(match["tensor"])
    spelled = (match["type"] or "").strip()
    # a type bound by a caller's fixed-type dispatch (callers.fixed_dispatch_type): its alias
    spelled = translator.locals.get(TYPE_ALIAS + spelled, spelled) if spelled else spelled
    use.element = (
        "T"
        if spelled in element_names
        else CPP_TYPES.get(spelled) or _element_type(param, targs, element_names)
    )
    if use.element is None and param.type == "void" and not spelled and cast:
        # a `const void*` field the kernel reads as `static_cast<const IdType*>(params.ids)`:
        # its element is IdType as this launch instantiates it (int32_t under `is_int32`)
        use.element = _element_type(replace(param, type=cast), targs, element_names)
    typed = CPP_TYPES.get(translator.typed.get(match["tensor"], ""))
    if use.element is None and param.type == "void" and not spelled and typed is not None:
        # a `const void*` field whose tensor the launcher's matcher requires to hold one type
        # (SGLang's `with_dtype<float>()` on a float cos/sin cache beside half q and k): that
        # type, not the launch's element type
        use.element = typed
    if use.element is None and param.type == "void" and not spelled and element_names:
        # a `const void*` field or parameter (SGLang's params structs) says nothing of the
        # element: the launch's element type is the one the kernel reads it as
        use.element = "T"
    if use.element is None:
        spelled_type = targs.get(param.type, param.type)
        raise Unmapped(f"tensor {use.name!r}: element type {spelled_type!r} is not supported")
    use.const = use.const and param.const
    return Binding(param.name, "tensor", use.name, use.element)


def _raw_tensor_binding(
    param: Param,
    host: Param,
    translator: _Translator,
    targs: dict[str, str],
    element_names: set[str],
) -> Binding:
    """Kernel pointer ``param`` bound, in a direct import (:attr:`_Translator.raw_root`), to
    the launcher's raw pointer parameter ``host`` as a tensor of that name, its element the
    kernel parameter's type as the launch instantiates it (else the launcher parameter's);
    its shape is left to the kernel's row-major indices (:func:`indexed_axes`); read-only
    where either pointer is ``const`` (the kernel cannot write through its own). Raises
    Unmapped for an element type the contract cannot hold."""
    element = _element_type(param, targs, element_names) or _element_type(
        host, targs, element_names
    )
    if element is None:
        raise Unmapped(
            f"raw pointer {host.name!r}: element type {targs.get(param.type, param.type)!r} "
            "is not supported"
        )
    use = translator.tensors.setdefault(host.name, TensorUse(host.name))
    use.element = element
    use.const = use.const and (param.const or host.const)
    translator.raw_tensors.add(host.name)
    return Binding(param.name, "tensor", host.name, element)


def _launch_requirements(
    launch: Launch,
    translator: _Translator,
    finish: Callable[[str], str],
    notes: list[str],
    asserted: tuple[str, ...] = (),
) -> tuple[list[str], str]:
    """(the launch's conditions as ``requires``, the first condition term that reads another
    GPU or build, or ""); a condition that cannot be expressed is noted, with the readable terms
    of a then-branch's ``&&`` chain kept. Those of ``asserted`` are the kernel's own
    ``static_assert`` s (:func:`_kernel_checks`), noted as such."""
    requires: list[str] = []
    other_gpu = ""
    # a condition's ratios count only where it is kept (a dropped one states nothing)
    translator.holding = True
    for condition, positive in launch.conditions:
        translator.in_check = condition in launch.checks
        try:
            translated = finish(translator.expression(condition))
        except Unmapped as exc:
            translator.drop()
            branch = "then" if positive else "else"
            # the then-branch of `a && b` needs each term, so the terms that can be read are
            # kept (vLLM's width-8 path: `hidden % 8 == 0` kept, a pointer's alignment not);
            # the else-branch needs `!a || !b`, which no part of it implies
            kept = []
            for term in _conjuncts(condition) if positive else []:
                try:
                    kept.append(finish(translator.expression(term)))
                except Unmapped:
                    translator.drop()
                    continue
                translator.keep()
            requires.extend(kept)
            partly = f"; {len(kept)} of its && terms kept" if kept else ""
            what = "the kernel's static_assert" if condition in asserted else "launch condition"
            notes.append(
                f"{what} {' '.join(condition.split())!r} ({branch}) not expressed{partly}: {exc}"
            )
            if positive and not other_gpu:
                other_gpu = _false_device_term(translator, condition)
            continue
        translator.keep()
        requires.append(translated if positive else f"({translated}) == 0")
        if positive and not other_gpu:
            other_gpu = _false_device_term(translator, condition)
    translator.in_check = False
    translator.holding = False
    return requires, other_gpu


def _loop_requirements(
    launch: Launch, translator: _Translator, finish: Callable[[str], str], requires: list[str]
) -> list[str]:
    """The requirements of the interpreted calls the launch's sizes and conditions make
    (:attr:`_Translator.loop_bounds`), those not in ``requires`` yet. The template arguments,
    which the entry reads later, are read here first (a fresh copy shares the bounds), so that
    every requirement is in place before dims are derived from the requirements."""
    for argument in launch.template_args:
        try:
            translator.fresh().expression(argument)
        except Unmapped:
            continue
    out: list[str] = []
    for bound in translator.loop_bounds:
        translated = finish(translator.fresh().expression(bound))
        if translated not in requires and translated not in out:
            out.append(translated)
    return out


def _dead_condition(launch: Launch, translator: _Translator) -> str:
    """The first condition around the launch that folds to false from literals alone (no size,
    no tensor, no GPU or build fact), as written, or ''."""
    for condition, positive in launch.conditions:
        translator.device_read = False
        try:
            folded = _folded_only(translator, condition)
        except Unmapped:
            continue
        if translator.device_read or expr.names(folded) or "__" in folded:
            continue
        try:
            if bool(expr.evaluate(folded, {})) != positive:
                return condition if positive else f"!({condition})"
        except expr.ExprError:
            continue
    return ""


def _conjuncts(condition: str) -> list[str]:
    """The C++ terms of a condition's top-level ``&&`` chain (the whole condition if none)."""
    value = expression_node(condition)
    if value is None:
        return [condition]
    terms: list[str] = []
    stack = [value]
    while stack:
        node = stack.pop()
        operator = node.child_by_field_name("operator")
        if node.type == "binary_expression" and text(operator) == "&&":
            stack.extend(
                n for n in (node.child_by_field_name(f) for f in ("right", "left")) if n is not None
            )
        else:
            terms.append(text(node))
    return terms


def _folded_only(translator: _Translator, condition: str) -> str:
    """``condition`` translated to be folded, its ratios not kept: it was read already where
    the launch's conditions were (:func:`_launch_requirements`), kept or dropped there."""
    holding, translator.holding = translator.holding, True
    try:
        return translator.expression(condition)
    finally:
        translator.drop()
        translator.holding = holding


def _false_device_term(translator: _Translator, condition: str) -> str:
    """``term: folded`` for the first ``&&`` term of ``condition`` that reads a device constant,
    nothing else, and is false on the import's target; '' when there is none. Dead branches of
    a macro's literal flag (``if (false)``) read no device constant and are not such terms."""
    for term in _conjuncts(condition):
        translator.device_read = False
        try:
            folded = _folded_only(translator, term)
        except Unmapped:
            continue
        if translator.device_read and expr.constant_false(folded):
            return f"{' '.join(term.split())}: {folded}"
    return ""


_RANK_TEST = re.compile(
    r"^\(*(?:(?P<t>\w+)__dim == (?P<k>\d+)|(?P<k2>\d+) == (?P<t2>\w+)__dim)\)*$"
)


def _stated_ranks(launch: Launch, translator: _Translator) -> dict[str, int]:
    """The rank a condition the launch sits in the then-branch of states for a tensor
    (``batched = input.dim() == 3; if (batched) {...}``): in that branch the tensor has that
    rank, so it is drafted with it rather than with the fewest axes its size queries need (a
    rank-2 draft made the launch never taken). Only a whole condition that is one rank
    equality is read."""
    out: dict[str, int] = {}
    for condition, positive in launch.conditions:
        if not positive:
            continue
        try:
            translated = translator.expression(condition)
        except Unmapped:
            continue
        match = _RANK_TEST.match(translated.strip())
        if match:
            out[match["t"] or match["t2"]] = int(match["k"] or match["k2"])
    return out


def _checked_drafts(
    launch: Launch,
    translator: _Translator,
    tensors: dict[str, TensorUse],
    shapes: dict[str, list[str]],
    dims: list[str],
    notes: list[str],
) -> None:
    """A tensor drafted with another's shape (:data:`DRAFTED_NOTE`: the launch asks none of its
    sizes) whose host checks state both its last axis and its element count (vLLM's
    ``STD_TORCH_CHECK(scale.size(-1) == num_groups && scale.numel() == num_tokens *
    num_groups)``) is drafted as those checks say, in place: ``[rows, last]``, where the count
    is a product with ``last`` as a factor and ``rows`` the other factors, or ``[last]`` where
    the count is ``last`` itself. Either shape meets both checks at every dims; a tensor with
    more axes of that count is the same memory to a kernel given no strides of it. Only checks
    on every path to the launch (:attr:`~astra_graph.framework.parse.Launch.checks`) and sides
    over tensors that have shapes of their own are read; anything else keeps the draft. A
    launcher integer the shape reads (``group_size``) becomes a dim, as a size reading it does.
    One whose element count a condition the launch is under tests against 1, alone or as a term
    of its ``&&`` or ``||`` (vLLM's per-tensor ``scale.dim() == 0 || scale.numel() == 1``), is
    drafted as ``[1]``, where that term holds (:func:`_single_element`)."""
    drafted = [t for t in shapes if any(n.startswith(f"{t}: {DRAFTED_NOTE}") for n in notes)]
    single = _single_element(launch, translator)
    for tensor in drafted:
        if tensor in single:
            shapes[tensor] = ["1"]
            notes[:] = [n for n in notes if not n.startswith(f"{tensor}: {DRAFTED_NOTE}")]
            notes.append(f"{tensor}: [1], as the launch's condition {single[tensor]!r} allows")
            continue
        last, count = _checked_size(launch, translator, tensor, tensors, shapes)
        if last is None or count is None:
            continue
        if ast.dump(count.body) == ast.dump(last.body):
            axes = [last.body]
        else:
            factors = expr.factors(count.body)
            same = [i for i, f in enumerate(factors) if ast.dump(f) == ast.dump(last.body)]
            if not same:
                continue
            rest = [f for i, f in enumerate(factors) if i != same[0]]
            rows = expr.parse(_cancelled(" * ".join(f"({ast.unparse(f)})" for f in rest))).body
            axes = [rows, last.body]
        # an axis is a factor of a numel() product: parenthesised unless one name
        shape = [a.id if isinstance(a, ast.Name) else f"({ast.unparse(a)})" for a in axes]
        shapes[tensor] = shape
        dims.extend(n for a in shape for n in sorted(expr.names(a)) if n not in dims)
        notes[:] = [n for n in notes if not n.startswith(f"{tensor}: {DRAFTED_NOTE}")]
        notes.append(
            f"{tensor}: shape [{', '.join(shape)}], as the launcher's checks of its last axis "
            "and element count state"
        )


def _single_element(launch: Launch, translator: _Translator) -> dict[str, str]:
    """The tensors whose ``numel() == 1`` is a term of the ``&&``/``||`` tree of a condition
    the launch is in the then-branch of (or a host check), each with that condition as
    written."""
    out: dict[str, str] = {}
    for condition, positive in launch.conditions:
        if not positive:
            continue
        try:
            tree = expr.parse(translator.expression(condition)).body
        except (Unmapped, expr.ExprError):
            continue
        stack: list[ast.expr] = [tree]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.BoolOp):
                stack.extend(node.values)
                continue
            equation = expr.equation(ast.unparse(node))
            for side, other in (equation, equation[::-1]) if equation is not None else ():
                counted = re.fullmatch(r"(\w+?)__numel", ast.unparse(side))
                if counted and isinstance(other, ast.Constant) and other.value == 1:
                    out.setdefault(counted[1], " ".join(condition.split()))
    return out


def _checked_size(
    launch: Launch,
    translator: _Translator,
    tensor: str,
    tensors: dict[str, TensorUse],
    shapes: dict[str, list[str]],
) -> tuple[ast.Expression | None, ast.Expression | None]:
    """(last axis, element count) of ``tensor`` that the ``==`` terms of the launch's host
    checks' ``&&`` chains state, each parsed, over the dims of the other tensors' shapes; None
    for one no check states, or states over a tensor without a shape of its own."""
    said: dict[str, ast.Expression] = {}
    own = {f"{tensor}__size__m1": "last", f"{tensor}__numel": "count"}
    for check in launch.checks:
        for term in _conjuncts(check):
            parsed = expression_node(term)
            node = unparenthesised(parsed) if parsed is not None else None
            if node is None or node.type != "binary_expression":
                continue
            if text(node.child_by_field_name("operator")) != "==":
                continue
            try:
                sides = [
                    translator.expression(text(node.child_by_field_name(f)))
                    for f in ("left", "right")
                ]
            except Unmapped:
                continue
            for side, other in (sides, sides[::-1]):
                what = own.get(side.strip())
                if what is None or f"{tensor}__" in other or what in said:
                    continue
                try:
                    said[what] = expr.parse(_substitute(other, tensors, shapes, translator.axes))
                except (Unmapped, expr.ExprError):
                    continue
    return said.get("last"), said.get("count")


def _cancelled(expression: str) -> str:
    """``(x * d) // d`` written as ``x`` (``num_tokens = input.numel() / input.size(-1)`` over
    the drafted ``[tokens, hidden]``): exact, a dim being at least 1; else ``expression``."""
    tree = expr.parse(expression).body

    class Cancel(ast.NodeTransformer):
        def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
            self.generic_visit(node)
            if isinstance(node.op, ast.FloorDiv) and isinstance(node.right, ast.Name):
                factors = expr.factors(node.left)
                same = [i for i, f in enumerate(factors) if ast.dump(f) == ast.dump(node.right)]
                if same and len(factors) > 1:
                    rest = [f for i, f in enumerate(factors) if i != same[0]]
                    out = rest[0]
                    for factor in rest[1:]:
                        out = ast.BinOp(out, ast.Mult(), factor)
                    return out
            return node

    return ast.unparse(Cancel().visit(tree))


def _local_for(launch: Launch, tensor: str, index: int, rank: int) -> str | None:
    for name, value in launch.locals.items():
        compact = re.sub(r"\s+", "", value)
        for i in {index, index - rank}:
            if "." not in name and compact in (f"{tensor}.size({i})", f"{tensor}.sizes()[{i}]"):
                return name
    return None


_SIZE_PLACEHOLDER = re.compile(r"(?P<tensor>\w+?)__size__(?P<index>m?\d+)")
_STRIDE_PLACEHOLDER = re.compile(r"(?P<tensor>\w+?)__stride__(?P<index>m?\d+)")


Reshape = Callable[[dict[str, list[str]], list[str], frozenset[str]], dict[str, list[str]]]
"""A hook that corrects drafted shapes (a caller's checks, a tensor matcher): ``reshape(shapes,
notes, read_only)``, ``read_only`` the tensors the launcher asks only strides of that the kernel
only reads (:func:`strided_twin` gives such a tensor no main tensor's shape)."""
DRAFTED_NOTE = "no size is asked for in the launcher"
"""How the note of a tensor the launch never sizes begins, after its name: drafted from another
tensor's shape, which a caller's checks must replace (callers.shape_checker)."""
STRIDED_NOTE = "only its strides are asked"
"""How the note of a tensor whose rank is read from ``stride(i)`` alone begins, after its name."""
LAST_AXIS_NOTE = "the launcher reads only its last axis"
"""How the note of a tensor whose leading axes :func:`_rows_of` drafted begins, after its name."""
EXTENT_NOTE = "extent read from the kernel"
"""How the note of a shape taken from :func:`read_extents` begins, after the tensor's name: a
caller's checks replace such a shape (callers.shape_checker)."""
WHOLE_SHAPE = "*"
"""The axis :func:`read_extents` gives a tensor that has another's whole shape."""
UNSIZED_NOTES = (DRAFTED_NOTE, STRIDED_NOTE, EXTENT_NOTE, LAST_AXIS_NOTE)
"""The notes of tensors whose shape is not (wholly) their own size queries': none is a twin
(:func:`strided_twin`)."""


def assumed_shape_notes(notes: list[str]) -> list[str]:
    """The notes of ``notes`` that say a tensor's shape is not (wholly) its own size queries'
    (one of :data:`UNSIZED_NOTES` after the tensor's name)."""
    return [n for n in notes if n.partition(": ")[2].startswith(UNSIZED_NOTES)]


def _name_tokens(name: str) -> set[str]:
    return {token for token in name.lower().split("_") if token}


def strided_twin(
    name: str,
    rank: int,
    exact: bool,
    read_only: bool,
    shapes: dict[str, list[str]],
    notes: list[str],
) -> tuple[str, str] | None:
    """The tensor whose shape ``name``, a tensor the launcher asks only strides of, is drafted
    with, and the note that says so; None where no tensor qualifies. In the frameworks such a
    tensor is an output or companion of one the launcher does size, with its shape (vLLM's
    ``residual.stride(-2)`` beside ``input``, FlashInfer's ``q_rope``/``k_rope`` beside
    ``q``/``k``): drafted with dims of its own, random draws gave it fewer rows than the kernel
    writes (vLLM launchers that failed against themselves on the H100).

    The candidates are the tensors of ``shapes`` sized by their own queries (no note of
    :data:`UNSIZED_NOTES`), in order; ``rank`` is the one read from its strides (a least one:
    ``q_rope.stride(1)`` of a 3-D tensor reads two axes), or, ``exact``, one a check states.
    First a candidate of that many axes whose name is made of ``_``-separated tokens of its own
    (``q`` of ``q_rope``, ``output`` of ``prefix_output``), the most tokens first: the other
    way round (``out`` of ``out_scale``) the sized tensor is this one's companion, not its
    shape. Else, where no candidate's name shares a token with it (one that does says it is
    not the main tensor's companion), the launcher's main tensor (the first candidate), and
    only where its rank is the very one and the kernel writes ``name`` (``read_only`` False):
    with no word in the names, a tensor of fewer axes is no companion of it (vLLM's
    merge_attn_states asks strides alone of ``prefix_lse``, [heads, tokens], beside its sized
    ``output``, [tokens, heads, head_size]), and an input the kernel reads beside the output it
    sizes may be wider than it (a gated input of 2d beside its d-wide output)."""
    unsized = {n.partition(": ")[0] for n in assumed_shape_notes(notes)}
    sized = [t for t in shapes if t != name and t not in unsized]
    own = _name_tokens(name)
    related = [t for t in sized if own & _name_tokens(t)]
    fitting = [
        (-len(_name_tokens(other)), order, other)
        for order, other in enumerate(related)
        if _name_tokens(other) <= own
        and (len(shapes[other]) == rank if exact else len(shapes[other]) >= rank)
    ]
    if fitting:
        twin = min(fitting)[-1]
        why = f"the sized tensor its name is made from, {twin}"
    elif sized and not related and not read_only and len(shapes[sized[0]]) == rank:
        twin = sized[0]
        why = (
            f"the launcher's main tensor {twin}, of its rank (no sized tensor's name relates, "
            "and the kernel writes it)"
        )
    else:
        return None
    note = (
        f"{name}: {STRIDED_NOTE}; drafted as {twin}'s shape (an assumption: a tensor asked only "
        f"for strides is taken to be an output or companion with the shape of {why})"
    )
    return twin, note


def _refuse_moved_drafts(bindings: list[Binding], notes: list[str]) -> None:
    """Raises Unmapped for a tensor passed at a moved address whose shape is a draft (no check
    states it, :data:`UNSIZED_NOTES`): where the kernel reaches from the moved address is not
    read, so no draft can be known to hold it."""
    for one in (f for b in bindings for f in b.fields or [b]):
        if one.kind == "tensor" and one.moved:
            drafted = tuple(f"{one.value}: {note}" for note in UNSIZED_NOTES)
            if any(n.startswith(drafted) for n in notes):
                raise Unmapped(
                    f"tensor {one.value!r} is passed at a moved address ({one.moved} bytes) and "
                    "no check states its shape: how far the kernel reaches it is not read"
                )


def _at_their_start(bindings: list[Binding]) -> list[Binding]:
    """The top-level bindings but the tensors passed at a moved address (:attr:`Binding.moved`):
    how far the kernel reaches such a pointer says nothing of the tensor's extent (a struct's
    fields are filtered where they are read, :func:`read_extents`)."""
    return [b for b in bindings if not b.moved]


def read_extents(kernel: Kernel, bindings: list[Binding]) -> dict[str, tuple[str, str]]:
    """For each tensor whose extent the kernel's body shows
    (:attr:`~astra_graph.framework.parse.Kernel.extents`), (``tensor``, ``axis``): the one axis
    of the tensor whose size the bound parameter is passed (``pos_ids[idx]`` under ``idx <
    nnz``, ``nnz`` passed ``q.size(0)``: ``pos_ids`` has ``q``'s axis 0); ("", a whole number)
    for constant indices (``scale[0]``: one element); (``tensor``, :data:`WHOLE_SHAPE`) for a
    pointer offset exactly as that tensor's. A bound passed anything else (a product, a
    launcher constant) gives nothing. A struct's field is bound as ``params.field``, as the
    kernel's body names it; a tensor passed at a moved address gives nothing
    (:func:`_at_their_start`)."""
    flat = _flat_bindings(bindings)
    passes = Counter(b.value for b in flat.values() if b.kind == "tensor")
    passed = {name: b for name, b in flat.items() if not b.moved}
    bound_twice = {tensor for tensor, count in passes.items() if count > 1}

    out: dict[str, tuple[str, str]] = {}
    for extent in kernel.extents:
        tensor = passed.get(extent.pointer)
        if tensor is None or tensor.kind != "tensor" or tensor.value in bound_twice:
            continue  # a tensor the launch passes twice may be written through the other one
        size = passed.get(extent.bound)
        if extent.like:
            if size is not None and size.kind == "tensor" and size.value != tensor.value:
                out[tensor.value] = (size.value, WHOLE_SHAPE)
            continue
        if extent.bound.isdigit():
            out[tensor.value] = ("", extent.bound)
            continue
        query = (
            _SIZE_PLACEHOLDER.fullmatch(strip_cast(size.value).strip("() "))
            if size is not None and size.kind == "expr"
            else None
        )
        if query is not None and query["tensor"] != tensor.value:
            index = query["index"]
            out[tensor.value] = (query["tensor"], f"-{index[1:]}" if index[0] == "m" else index)
    return out


INDEXED_NOTE = f"{EXTENT_NOTE}: its row-major index"
"""How the note of a shape taken from :func:`indexed_axes` begins, after the tensor's name."""
FREE_ROWS_NOTE = f"{EXTENT_NOTE}: read only at rows integer ids name, so its rows are"
"""How the note of a shape taken from :func:`free_row_axes` begins, after the tensor's name."""
FREE_ROWS_SUFFIX = "_rows"
"""Appended to a tensor's name for the dim of its rows (:func:`free_rows_dim`)."""


def free_rows_dim(tensor: str) -> str:
    """The dim of the rows of a table read only at id rows (:func:`free_row_axes`)."""
    return f"{tensor}{FREE_ROWS_SUFFIX}"


def free_row_axes(kernel: Kernel, bindings: list[Binding]) -> dict[str, tuple[str, int, str]]:
    """For each tensor the kernel reads only at rows named by another tensor's integer elements
    (:attr:`~astra_graph.framework.parse.Kernel.id_rows`: FlashInfer's ``cos_sin_cache + pos *
    rope_dim + vec_idx``, ``pos = pos_ids[idx]``), the (tensor, axis) the launch passes as its
    row length, and the ids' tensor: a row length of one kernel parameter bound to one size query
    of another tensor (``rope_dim = q_rope_in.size(-1)``). Nobody sizes its rows, and none needs
    to: the ids are drawn below them (:func:`~astra_graph.framework.draft._index_rows`), so
    they are a dim of its own (:func:`free_rows_dim`). A table passed at a moved address or
    twice, one whose ids are no tensor, or a row length the launch does not pass as one sized
    axis, gives nothing: its columns would be a guess."""
    flat = _flat_bindings(bindings)
    passes = Counter(b.value for b in flat.values() if b.kind == "tensor")
    out: dict[str, tuple[str, int, str]] = {}
    for table, ids, length in kernel.id_rows:
        tensor, source = flat.get(table), flat.get(ids)
        if tensor is None or source is None or len(length) != 1:
            continue
        if tensor.kind != "tensor" or source.kind != "tensor" or tensor.moved:
            continue
        query = _placeholder(_SIZE_PLACEHOLDER, flat.get(length[0]))
        if passes[tensor.value] != 1 or query is None or query[0] in (tensor.value, source.value):
            continue
        out[tensor.value] = (*query, source.value)
    return out


ROW_ID_DTYPES = ("int32", "int64")
"""The element types whose values the draft draws as row ids (draft._index_rows)."""


def _refuse_unindexed_rows(
    free_rows: dict[str, tuple[str, int, str]], tensors: dict[str, TensorUse], notes: list[str]
) -> None:
    """Raises Unmapped where a table given rows of its own (:func:`free_row_axes`) is read at
    rows of a tensor the draft does not draw as row ids (a float or one-byte element, or one of
    no known type): its values would name rows past the table's."""
    for table, (_, _, ids) in free_rows.items():
        if not any(n.startswith(f"{table}: {FREE_ROWS_NOTE}") for n in notes):
            continue  # shaped otherwise (a caller's checks)
        element = tensors[ids].element
        if element not in ROW_ID_DTYPES:
            raise Unmapped(
                f"tensor {table!r}: read only at rows named by {ids}'s elements, which are no "
                f"row ids ({element or 'an unknown type'}), and nothing else says its rows"
            )


@dataclass
class IndexedAxes:
    """What :func:`indexed_axes` reads of one tensor: each axis as a (tensor, axis) the launch
    sizes, and the conditions (placeholder expressions) under which that shape holds every
    index the kernel reaches."""

    axes: list[tuple[str, int] | str]
    """Each axis as a (tensor, axis) the launch sizes, or, for a tensor bound to a raw pointer
    (:attr:`_Translator.raw_tensors`), the launch's own size (:func:`_launch_axis`)."""
    requires: list[str]
    reason: str = ""
    """For a raw pointer's tensor that gets no axes: why (:func:`_refuse_unshaped_raw`)."""


def _spelled(expression: str) -> str:
    """One spelling of a contract expression (redundant parentheses dropped), to compare two."""
    return ast.unparse(ast.parse(expression, mode="eval").body)


def _launch_extent(geometry: str, axis: str) -> str:
    """Component ``axis`` (``x``, ``y``, ``z``) of a translated grid or block: a tuple's item
    (``(a, b)``, ``(a,)``) or a lone size; one it leaves out is 1."""
    body = ast.parse(geometry, mode="eval").body
    components = body.elts if isinstance(body, ast.Tuple) else [body]
    index = "xyz".index(axis)
    return f"({ast.unparse(components[index])})" if index < len(components) else "1"


def _kernel_name_value(
    name: str,
    flat: dict[str, Binding],
    templates: dict[str, int],
    launch: Launch,
    translator: _Translator,
    geometry: tuple[str, str],
) -> str | None:
    """What the launch gives a name of the kernel's body: ``gridDim.y`` / ``blockDim.x`` the
    translated grid's or block's component, a by-value parameter the expression it is bound to,
    a template parameter its argument translated; None for anything else (a tensor, an
    argument that does not translate)."""
    grid, block = geometry
    extent, _, axis = name.partition(".")
    if extent in ("gridDim", "blockDim") and axis in ("x", "y", "z"):
        return _launch_extent(grid if extent == "gridDim" else block, axis)
    binding = flat.get(name)
    if binding is not None:
        return binding.value if binding.kind == "expr" else None
    at = templates.get(name)
    if at is None or at >= len(launch.template_args):
        return None
    try:
        return translator.expression(launch.template_args[at])
    except ValueError:
        return None


def indexed_axes(
    kernel: Kernel,
    bindings: list[Binding],
    launch: Launch,
    translator: _Translator,
    geometry: tuple[str, str],
) -> dict[str, IndexedAxes]:
    """For each tensor whose shape the kernel's row-major indices give
    (:attr:`~astra_graph.framework.parse.Kernel.indexed`), its axes in the launch's terms: each
    factor of each axis is what the launch passes (a by-value parameter's size expression, a
    template argument, ``gridDim.y`` the grid's second size); an axis that is one size query of
    another tensor (``v.size(2)``) is that tensor's axis; one that reads one size query among
    constants (FlashInfer's ``vec_size * bdx``, ``HEAD_DIM / vec_size`` times ``vec_size``) is
    that axis too, the launch requiring the two equal. A tensor bound to a raw pointer
    (:attr:`_Translator.raw_tensors`, no tensor sized beside it) takes instead each axis that is
    one of the launcher's integer parameters or a constant (:func:`_launch_axis`). Each inner
    index's reach must stay within its axis (``blockDim.y <= num_heads``), and each axis a
    shorter use leaves out (:attr:`~astra_graph.framework.parse.IndexedExtent.left_out`) at
    least 1, conditions of the launch. A tensor any factor of which the launch does not say, or
    passed twice or at a moved address, gives nothing (a raw pointer's: why, :attr:`IndexedAxes.
    reason`)."""
    flat = _flat_bindings(bindings)
    passes = Counter(b.value for b in flat.values() if b.kind == "tensor")
    templates = {t.name: i for i, t in enumerate(kernel.template)}

    def factor(name: str) -> str | None:
        if name.isdigit():
            return name
        return _kernel_name_value(name, flat, templates, launch, translator, geometry)

    def product(written: str) -> str | None:
        factors = [factor(f) for f in written.split("*")]
        if any(f is None for f in factors):
            return None
        return " * ".join(f"({f})" for f in factors)

    out: dict[str, IndexedAxes] = {}
    for extent in kernel.indexed:
        tensor = flat.get(extent.pointer)
        if tensor is None or tensor.kind != "tensor":
            continue
        raw = tensor.value in translator.raw_tensors
        if tensor.moved or passes[tensor.value] > 1:
            # moved: the index is relative to the moved address; passed twice: written through
            # the other pointer too, at offsets of its own
            if raw:
                how = "at a moved address" if tensor.moved else "to two kernel pointers"
                out[tensor.value] = IndexedAxes([], [], f"the launch passes it {how}")
            continue
        axes: list[tuple[str, int] | str] = []
        requires: list[str] = []
        for written in extent.axes:
            placed = _offsets_total(written, flat, translator) if raw else None
            if placed is not None:
                axes.append(placed)
                continue
            value = product(written)
            names = expr.names(value) if value is not None else set()
            sizes = [m for n in names if (m := _SIZE_PLACEHOLDER.fullmatch(n)) is not None]
            own = _launch_axis(value, translator) if raw and value is not None else None
            if own is not None:
                axes.append(own[0])
                requires += own[1:]
                continue
            # one size query, and nothing else that varies (a count, another dim) beside it
            if value is None or len(sizes) != 1 or names - {sizes[0][0], ELEM_BYTES}:
                if raw:
                    said = f"{written} = {value}" if value is not None else written
                    reason = f"axis {said} of its row-major index is no size the launch fixes"
                    out[tensor.value] = IndexedAxes([], [], reason)
                break
            source, index = sizes[0]["tensor"], sizes[0]["index"]
            if source == tensor.value:
                break
            plain = _SIZE_PLACEHOLDER.fullmatch(strip_cast(value))
            axes.append((source, -int(index[1:]) if index[0] == "m" else int(index)))
            if not plain:
                requires.append(f"({value}) == ({source}__size__{index})")
        else:
            for reach, within in extent.reaches:
                far, room = product(reach), product(within)
                if far is None or room is None:
                    if raw:
                        reason = f"how far it is reached ({reach} within {within}) is not read"
                        out[tensor.value] = IndexedAxes([], [], reason)
                    break
                if _spelled(far) != _spelled(room):
                    requires.append(f"({far}) <= ({room})")
            else:
                left_out = [product(axis) for axis in extent.left_out]
                requires += [f"({axis}) >= 1" for axis in left_out if axis is not None]
                if None in left_out:
                    if raw:
                        unread = ", ".join(
                            a for a, v in zip(extent.left_out, left_out, strict=True) if v is None
                        )
                        reason = f"axis {unread}, left out of a shorter form, is no size it fixes"
                        out[tensor.value] = IndexedAxes([], [], reason)
                    continue
                out[tensor.value] = IndexedAxes(axes, requires)
    if translator.raw_root and kernel.direct is not None:
        out.update(_offsets_axes(kernel.direct.offsets, flat, translator, product))
    return out


OFFSETS_TOTAL = "{}_total"
"""The dim a direct import gives the rows CSR offsets end at (their last element), by the
offsets tensor's name: no launcher parameter says it."""


def _offsets_total(written: str, flat: dict[str, Binding], translator: _Translator) -> str | None:
    """The dim of an axis :data:`~astra_graph.framework.segments.OFFSET_ROWS` of CSR offsets
    bound to a raw tensor (:data:`OFFSETS_TOTAL`, recorded in :attr:`_Translator.offset_totals`
    for the offsets to be drawn into); None for any other axis."""
    pointer = segments.offsets_of(written)
    binding = flat.get(pointer) if pointer is not None else None
    if binding is None or binding.kind != "tensor" or binding.value not in translator.raw_tensors:
        return None
    return translator.offset_totals.setdefault(binding.value, OFFSETS_TOTAL.format(binding.value))


def _offsets_axes(
    offsets: tuple[tuple[str, str], ...],
    flat: dict[str, Binding],
    translator: _Translator,
    product: Callable[[str], str | None],
) -> dict[str, IndexedAxes]:
    """The shape of each raw tensor of CSR offsets that the kernel reaches at ``O[s]`` and
    ``O[s + 1]`` alone, ``s`` below a bound (:attr:`~astra_graph.framework.parse.DirectExtents.
    offsets`): that bound, one of the launch's sizes (:func:`_launch_axis`), plus one; where the
    bound is no such size, why (:attr:`IndexedAxes.reason`)."""
    out: dict[str, IndexedAxes] = {}
    for pointer, bound in offsets:
        binding = flat.get(pointer)
        if binding is None or binding.kind != "tensor":
            continue
        if binding.value not in translator.raw_tensors:
            continue
        value = product(bound)
        own = _launch_axis(value, translator) if value is not None else None
        if own is None:
            said = f"{bound} = {value}" if value is not None else bound
            out[binding.value] = IndexedAxes(
                [], [], f"CSR offsets of {said} segments, no size the launch fixes"
            )
            continue
        out[binding.value] = IndexedAxes([f"{own[0]} + 1"], list(own[1:]))
    return out


OFFSETS_INDEX_TYPE = ("int32_t", "int32")
"""(C++ type, contract dtype) a direct import gives a launcher's type parameter that only CSR
offsets are of: offsets are counts of rows, and 32 bits hold every row count a serving batch
has (FlashInfer's callers instantiate its ``IdType`` so)."""
INTEGER_PREFIXES = ("int", "uint")
"""How the contract's integer dtypes are spelled (``int32``, ``uint8`` ...): CSR offsets are
counts of rows, drawn as whole numbers."""


def _offset_index_types(
    launcher: Launcher, translator: _Translator, tensors: dict[str, TensorUse], notes: list[str]
) -> dict[str, str]:
    """Each type parameter of the launcher's own template that types only raw tensors of CSR
    offsets (:attr:`_Translator.offset_totals`), given :data:`OFFSETS_INDEX_TYPE`, those
    tensors' element set to it (noted); a type parameter that also types another pointer stays
    the element type. Raises Unmapped for offsets then of no integer type: drawn as whole
    numbers, they would not be what the kernel reads."""
    own = {t.name for t in launcher.template if t.kind == "type"}
    typed: dict[str, set[str]] = {}
    for param in launcher.params:
        if param.pointer and param.type in own:
            typed.setdefault(param.type, set()).add(param.name)
    out: dict[str, str] = {}
    cpp, dtype = OFFSETS_INDEX_TYPE
    for name, pointers in typed.items():
        if not pointers or not pointers <= set(translator.offset_totals):
            continue
        out[name] = cpp
        for pointer in sorted(pointers):
            tensors[pointer].element = dtype
            notes.append(
                f"{pointer}: CSR offsets of type {name}, a parameter of {launcher.name}'s "
                f"template that types nothing else: imported as {cpp}"
            )
    for pointer in translator.offset_totals:
        element = tensors[pointer].element or ""
        if not element.startswith(INTEGER_PREFIXES):
            raise Unmapped(
                f"raw pointer {pointer!r}: CSR offsets (the kernel differences its elements) "
                f"of element type {element or 'unknown'}, no integer"
            )
    return out


def _refuse_unnulled(nulls: set[str], bindings: list[Binding]) -> None:
    """Raises Unmapped where a count the direct reading took as null
    (:func:`_read_directly`) is passed something else (a local, an expression): the shapes
    read with it null would not hold."""
    for binding in bindings:
        if binding.param in nulls and binding.kind != "null":
            raise Unmapped(
                f"kernel parameter {binding.param!r} is read as `{binding.param} ? "
                f"*{binding.param} : ...` (shapes read with it null), and the launch passes it "
                "something other than the launcher's raw pointer"
            )


def _read_directly(kernel: Kernel, translator: _Translator, notes: list[str]) -> Kernel:
    """``kernel`` as a direct import reads it (:attr:`~astra_graph.framework.parse.Kernel.
    direct`): each count it may go without passed null (noted), its pointers' shapes those
    read with them null and rows placed by CSR offsets (drawn as such:
    :attr:`_Translator.offset_totals`)."""
    direct = kernel.direct
    if direct is None:
        return kernel
    translator.nulls = set(direct.nulls)
    notes += [
        f"{p}: passed null, as a caller may (the kernel reads it only as `{p} ? *{p} : ...`, "
        "and uses the other value then)"
        for p in direct.nulls
    ]
    return replace(kernel, indexed=direct.indexed, unindexed=direct.unindexed)


def _raw_offsets_left_to_direct(
    kernel: Kernel, bindings: list[Binding], translator: _Translator
) -> Kernel:
    """``kernel`` with the CSR offsets bound to raw tensors left out of its differenced
    pointers: the direct reading shapes them and the rows they place (:func:`indexed_axes`),
    or names why it cannot (:func:`_refuse_unshaped_raw`), rather than :func:`offset_targets`,
    which reads offsets that scale a tensor's strides."""
    flat = _flat_bindings(bindings)
    raw = {
        pointer
        for pointer in kernel.differenced
        if (b := flat.get(pointer)) is not None
        and b.kind == "tensor"
        and b.value in translator.raw_tensors
    }
    return replace(kernel, differenced=tuple(d for d in kernel.differenced if d not in raw))


ROW_REACH_NOTE = "the kernel reaches"
"""How the note of a requirement from :func:`row_reach_requirements` begins, after the tensor's
name."""


def row_reach_requirements(
    kernel: Kernel,
    bindings: list[Binding],
    launch: Launch,
    translator: _Translator,
    geometry: tuple[str, str],
) -> list[tuple[str, str]]:
    """For each tensor bound to a pointer the kernel writes through strided rows
    (:attr:`~astra_graph.framework.parse.Kernel.row_reaches`), each row's requirement ``reach
    <= stride`` in the launch's terms (to be finished over the drafted dims), with its note: two
    adjacent rows, or the last row and the tensor's end, are otherwise reached by one element
    twice or past it (SGLang's rotary launcher, which never checks its cache's width against
    the head size). A requirement reading a value the launch does not say (a kernel parameter
    bound to no expression) is left out: nothing is claimed of it."""
    flat = _flat_bindings(bindings)
    templates = {t.name: i for i, t in enumerate(kernel.template)}

    def value(name: str) -> str | None:
        found = _kernel_name_value(name, flat, templates, launch, translator, geometry)
        return f"({found})" if found is not None else None

    def launched(written: str) -> str | None:
        names = re.findall(r"(?<![\w.])[A-Za-z_]\w*(?:\.[xyz])?", written)
        values = {n: value(n) for n in names}
        if any(v is None for v in values.values()):
            return None
        return re.sub(
            r"(?<![\w.])[A-Za-z_]\w*(?:\.[xyz])?", lambda m: values[m[0]] or m[0], written
        )

    out: list[tuple[str, str]] = []
    for found in kernel.row_reaches:
        tensor = flat.get(found.pointer)
        if tensor is None or tensor.kind != "tensor":
            continue
        for reach, stride in found.rows:
            far, room = launched(reach), launched(stride)
            if far is not None and room is not None:
                note = (
                    f"{tensor.value}: {ROW_REACH_NOTE} {_spelled(reach)} elements past the start "
                    f"of each row of stride {stride} it writes through; each row must hold them"
                )
                out.append((f"({far}) <= ({room})", note))
    return out


def _branches_taken(expression: str) -> str:
    """``expression`` with each ``select`` whose condition is a constant (a rank test the
    shapes decided: ``select((2 == 3), query_1, head_size)``) replaced by the branch it takes,
    in one spelling (:func:`_spelled`)."""

    class Taken(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            if isinstance(node.func, ast.Name) and node.func.id == "select" and len(node.args) == 3:
                try:
                    taken = expr.evaluate(ast.unparse(node.args[0]), {})
                except (expr.ExprError, ArithmeticError):  # not a constant: kept as written
                    return node
                return node.args[1] if taken else node.args[2]
            return node

    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:  # not Python: the requirement as written, for validation to refuse
        return expression
    return _spelled(ast.unparse(Taken().visit(tree)))


RAW_ROOT_NOTE = (
    "imported directly: no caller passes tensors, so each raw pointer is a tensor whose shape "
    "is the kernel's own row-major index, the launcher's integer parameters its dims; each "
    "pointer is given a buffer of its own (a caller that passes one buffer for two, in place, "
    "is not checked)"
)
"""The note of an operation imported from a raw-pointer launcher itself (``raw_root``)."""


def _refuse_unshaped_raw(
    raw: set[str],
    kernel: Kernel,
    bindings: list[Binding],
    indexed: dict[str, IndexedAxes],
    notes: list[str],
) -> None:
    """Raises Unmapped naming the first raw pointer's tensor (:func:`_raw_tensor_binding`)
    whose shape is not read from the kernel (a row-major index, :func:`indexed_axes`, or
    constant indices, :func:`read_extents`), with why: any other shape would be a guess, and
    a guess too small sends the original past its tensor. Notes :data:`RAW_ROOT_NOTE` where
    there are such tensors."""
    if not raw:
        return
    flat = _flat_bindings(bindings)
    unindexed = dict(kernel.unindexed)
    for name in sorted(raw):
        if any(n.startswith(f"{name}: {EXTENT_NOTE}") for n in notes):
            continue
        pointers = [p for p, b in flat.items() if b.kind == "tensor" and b.value == name]
        why = next(
            (unindexed[p] for p in pointers if p in unindexed),
            indexed[name].reason if name in indexed else "",
        )
        raise Unmapped(
            f"raw pointer {name!r} (kernel parameter {', '.join(pointers)}): "
            + (why or "the kernel never reaches it, so nothing says its shape")
        )
    notes.append(RAW_ROOT_NOTE)


def _launch_axis(value: str, translator: _Translator) -> tuple[str, ...] | None:
    """(the axis, and what the launch must then require) for a factor product ``value`` of a
    raw pointer's row-major index (:func:`indexed_axes`) that the launch fixes: one of the
    launcher's integer parameters (:attr:`_Translator.host_dims`), alone or among constants
    (FlashInfer's ``(HEAD_DIM / vec_size) * vec_size`` under a dispatch that binds ``HEAD_DIM``
    to ``head_dim``: the axis ``head_dim``, the launch requiring the two equal), or a positive
    whole number; None for anything else (another dim beside it, an element width alone). A
    multiple or part of one parameter (``2 * d``, ``d / 2``: not equal to it at every value) is
    the axis as written: required equal, it would exclude every serving shape (review of
    rawroot)."""
    names = expr.names(value)
    dims = names & set(translator.host_dims)
    if not names:
        try:
            number = expr.evaluate_int(value, {})
        except expr.ExprError:
            return None
        return (str(number),) if number >= 1 else None
    if len(dims) != 1 or names - dims - {ELEM_BYTES}:
        return None
    dim = dims.pop()
    if _spelled(value) == dim:
        return (dim,)
    if ELEM_BYTES not in names and not _equal_at_probes(value, dim):
        return (_spelled(value),)
    return (dim, f"({value}) == {dim}")


AXIS_PROBES = (64, 128, 4096)
"""Values of a launcher parameter at which :func:`_launch_axis` tells an expression equal to it
under a dispatch (``(head_dim // 8) * 8``) from a multiple or part of it (``2 * d``)."""


def _equal_at_probes(value: str, dim: str) -> bool:
    """Whether ``value`` equals ``dim`` at each of :data:`AXIS_PROBES` (or cannot be evaluated
    there, which leaves the equality for the launch to require)."""
    try:
        return all(expr.evaluate_int(value, {dim: probe}) == probe for probe in AXIS_PROBES)
    except expr.ExprError:
        return True


def offset_targets(
    kernel: Kernel, bindings: list[Binding], returns: dict[str, ReturnOnly | None]
) -> dict[str, set[tuple[str, int]]]:
    """For each tensor bound to a pointer whose elements the kernel subtracts
    (:attr:`~astra_graph.framework.parse.Kernel.differenced`: offsets whose differences are
    counts, a CSR indptr), the (tensor, axis) its offsets index: at every place the kernel
    offsets another pointer by an expression reading its elements
    (:attr:`~astra_graph.framework.parse.Kernel.offset_uses`), one-return helpers expanded
    (``get_elem_offset_impl(indptr[b] + i, h, 0, q_stride_n, q_stride_h)``), each term that
    reads them is one product with one stride parameter the launch passes as that pointer's
    tensor's own ``stride(a)``: axis ``a``. Raises Unmapped where a use is of another form or
    there is none: drawn at random, a negative difference (a count near 2^32 as an unsigned)
    sends the original far outside its tensors, and drawn as offsets, they must end within
    the rows they index."""
    passed = _flat_bindings(bindings)
    out: dict[str, set[tuple[str, int]]] = {}
    for pointer in kernel.differenced:
        binding = passed.get(pointer)
        if binding is None or binding.kind != "tensor":
            continue
        where = (
            f"tensor {binding.value!r}: the kernel subtracts its elements ({pointer}[a] - "
            f"{pointer}[b]), offsets whose differences are counts (a CSR indptr)"
        )
        found: set[tuple[str, int]] = set()
        for differenced, base, offset in kernel.offset_uses:
            if differenced != pointer:
                continue
            target = passed.get(base)
            axis = _offset_axis(_expanded(offset, returns), pointer, passed)
            if target is None or target.kind != "tensor" or target.moved or axis is None:
                raise Unmapped(
                    f"{where}, and its offsets reach {base} through {offset}, no row index "
                    "times one of that tensor's strides"
                )
            if axis[0] != target.value:
                raise Unmapped(
                    f"{where}, and its offsets reach {base} ({target.value}) by a stride of "
                    f"{axis[0]}"
                )
            found.add(axis)
        if not found:
            raise Unmapped(
                f"{where}: the rows they index are not seen (no pointer is offset by them)"
            )
        out[binding.value] = found
    return out


def _expanded(offset: str, returns: dict[str, ReturnOnly | None]) -> str:
    """``offset`` with each call of a one-return function (:class:`~astra_graph.framework.
    parse.ReturnOnly`, by its unqualified name, one definition) replaced by the returned
    expression over the call's arguments."""
    node = expression_node(offset)
    if node is None:
        return offset
    for call in _walk_calls(node):
        function = one_named(returns, _compact(text(call.child_by_field_name("function"))))
        arguments = call.child_by_field_name("arguments")
        values = [text(a) for a in arguments.named_children] if arguments is not None else []
        if function is None or len(values) != len(function.params):
            continue
        returned = function.returned
        for param, value in zip(function.params, values, strict=True):
            # a name stays bare: `(a) + (b)` parses as a cast of `+(b)` to the type `a`
            bare = value if re.fullmatch(r"\w+", value) else f"({value})"
            returned = re.sub(rf"(?<![\w.]){re.escape(param)}(?!\w)", bare, returned)
        offset = offset.replace(text(call), f"({returned})", 1)
    return offset


_Found = TypeVar("_Found")


def one_named(table: Mapping[str, _Found | None], spelled: str) -> _Found | None:
    """The one function of ``table`` (keyed by scope-qualified name) a call spelled ``spelled``
    names, template arguments dropped: the key is that name, or ends with ``::`` and it (a
    call's own qualification is kept: ``fw::f`` is not ``other::f``); None where no key or
    several match, or the one matched is unreadable (None)."""
    bare = spelled.split("<", 1)[0]
    found = [f for key, f in table.items() if key == bare or key.endswith(f"::{bare}")]
    return found[0] if len(found) == 1 else None


def _walk_calls(node: Node) -> list[Node]:
    """The outermost call expressions under ``node``, in source order."""
    if node.type == "call_expression":
        return [node]
    return [call for child in node.named_children for call in _walk_calls(child)]


def _offset_axis(offset: str, pointer: str, passed: dict[str, Binding]) -> tuple[str, int] | None:
    """(tensor, axis) of the one stride that multiplies the terms of ``offset`` reading
    ``pointer``'s elements, or None: a term reading them that is not exactly a row index times
    one stride parameter bound to a tensor's ``stride(a)`` (another factor, ``(indptr[b] + i) *
    2 * stride``, would reach past the rows the offsets end at: review of 2299c7d), or strides
    of two axes."""
    node = expression_node(offset)
    if node is None:
        return None
    axes: set[tuple[str, int]] = set()
    for term in _operands(node, "+"):
        if f"{pointer}[" not in re.sub(r"\s+", "", text(term)):
            continue
        factors = _operands(term, "*")
        strides = [_placeholder(_STRIDE_PLACEHOLDER, passed.get(text(f))) for f in factors]
        known = [s for s in strides if s is not None]
        if len(factors) != 2 or len(known) != 1:
            return None
        axes.add(known[0])
    return axes.pop() if len(axes) == 1 else None


def _offset_dims(
    rows: dict[str, set[tuple[str, int]]], shapes: dict[str, list[str]]
) -> dict[str, str]:
    """Each offsets tensor's dim (:func:`offset_targets`), the one axis all its targets have;
    raises Unmapped where the tensor is not 1-D or its targets' axes are different dims (the
    launch does not tie them, and offsets ending at one could pass the other's end)."""
    out: dict[str, str] = {}
    for tensor, targets in rows.items():
        dims = {shapes[t][axis] for t, axis in targets}
        if len(shapes[tensor]) != 1 or len(dims) != 1:
            reached = ", ".join(
                f"{t}'s axis {axis} ({shapes[t][axis]})" for t, axis in sorted(targets)
            )
            raise Unmapped(
                f"tensor {tensor!r}: CSR offsets (its elements differenced) into {reached}: "
                + ("not one dim the launch ties" if len(dims) != 1 else "the tensor is not 1-D")
            )
        out[tensor] = dims.pop()
    return out


def _slot_tensors(kernel: Kernel, bindings: list[Binding]) -> dict[str, tuple[str, ...]]:
    """Each tensor bound to a pointer whose elements place the kernel's stores
    (:attr:`~astra_graph.framework.parse.Kernel.scattered`), with the tensors it places rows
    of: slots, such as a KV cache's slot mapping, that a framework never passes with two
    alike. (CSR offsets place stores too, each a segment's first row, and are drawn as offsets
    instead: the caller leaves them out.)"""
    passed = _flat_bindings(bindings)
    out: dict[str, tuple[str, ...]] = {}
    for source, written in kernel.scattered:
        slot, target = passed.get(source), passed.get(written)
        if slot is None or target is None or slot.kind != "tensor" or target.kind != "tensor":
            continue
        out[slot.value] = tuple(dict.fromkeys([*out.get(slot.value, ()), target.value]))
    return out


def _gather_tensors(kernel: Kernel, bindings: list[Binding]) -> dict[str, tuple[GatherUse, ...]]:
    """Each tensor bound to a pointer whose elements offset the kernel's reads or writes of
    another tensor (:attr:`~astra_graph.framework.parse.Kernel.gathered`), with each use."""
    passed = _flat_bindings(bindings)
    out: dict[str, tuple[GatherUse, ...]] = {}
    for source, offset, scaled in kernel.gathered:
        ids, target = passed.get(source), passed.get(offset)
        if ids is None or ids.kind != "tensor":
            continue
        if target is None or target.kind != "tensor":
            # a local pointer or array, or a pointer no tensor is passed for: not read
            use = GatherUse("", scaled, False)
        elif ids.value != target.value:
            use = GatherUse(target.value, scaled, bool(target.moved))
        else:
            continue
        out[ids.value] = tuple(dict.fromkeys([*out.get(ids.value, ()), use]))
    return out


def _flat_bindings(bindings: list[Binding]) -> dict[str, Binding]:
    """Each binding by the name the kernel's body reaches it by: a parameter by its name, a
    struct parameter's field by ``params.field``."""
    out: dict[str, Binding] = {}
    for binding in bindings:
        out[binding.param] = binding
        for member in binding.fields:
            out[f"{binding.param}.{member.param}"] = member
    return out


def _placeholder(pattern: re.Pattern[str], binding: Binding | None) -> tuple[str, int] | None:
    """(tensor, axis) of a binding that is exactly one size or stride query, cast or not."""
    if binding is None or binding.kind != "expr":
        return None
    query = pattern.fullmatch(strip_cast(binding.value).strip("() "))
    if query is None:
        return None
    index = query["index"]
    return query["tensor"], -int(index[1:]) if index[0] == "m" else int(index)


def strided_axes(kernel: Kernel, bindings: list[Binding]) -> dict[str, list[tuple[str, int]]]:
    """For each tensor the kernel reaches only by strides
    (:attr:`~astra_graph.framework.parse.Kernel.strided`) where the launch passes those strides
    as the tensor's own ``stride(0)``, ``stride(1)``, ... (every axis, in some order) and each
    stride's index bound as a size of another tensor: per axis, that tensor and its axis. vLLM's
    merge passes ``prefix_lse.stride(0)`` as the stride of ``head_idx``, below ``num_heads =
    output.size(1)``: ``prefix_lse`` is [output's axis 1, output's axis 0], [heads, tokens]."""
    passed = {b.param: b for b in _at_their_start(bindings)}
    out: dict[str, list[tuple[str, int]]] = {}
    for extent in kernel.strided:
        tensor = passed.get(extent.pointer)
        if tensor is None or tensor.kind != "tensor":
            continue
        axes: dict[int, tuple[str, int]] = {}
        for stride, bound in extent.axes:
            query = _placeholder(_STRIDE_PLACEHOLDER, passed.get(stride))
            size = _placeholder(_SIZE_PLACEHOLDER, passed.get(bound))
            if query is None or size is None or query[0] != tensor.value:
                break
            if size[0] == tensor.value or query[1] < 0 or query[1] in axes:
                break
            axes[query[1]] = size
        else:
            if sorted(axes) == list(range(len(axes))):
                out[tensor.value] = [axes[i] for i in range(len(axes))]
    return out


def _shapes(
    launch: Launch,
    tensors: dict[str, TensorUse],
    notes: list[str],
    reshape: Reshape | None = None,
    ranks: dict[str, int] | None = None,
    extents: dict[str, tuple[str, str]] | None = None,
    strided_reach: dict[str, list[tuple[str, int]]] | None = None,
    indexed: dict[str, list[tuple[str, int] | str]] | None = None,
    free_rows: dict[str, tuple[str, int]] | None = None,
) -> tuple[dict[str, list[str]], list[str], dict[str, tuple[str, str]]]:
    """Each tensor's drafted axes, the dims in order of first use, and for each read tensor
    whose rows an output was assumed to have (:func:`_rows_of`, checked by
    :func:`_row_lengths`) its last axis and that output; ``ranks`` (:func:`_stated_ranks`)
    raises a tensor's rank to the one the launch's condition states. A tensor the launcher
    never sizes takes its one axis from how far the kernel reads it (``extents``,
    :func:`read_extents`), after the caller's checks have shaped the others; one it asks only
    strides of and that has no twin, its axes from the sizes its strided indices stay below
    (``strided_reach``, :func:`strided_axes`), where it has that rank; one it neither sizes
    nor asks strides of, the axes its row-major index stays within (``indexed``,
    :func:`indexed_axes`), where each is a sized tensor's; else, one the kernel reads only at
    rows integer ids name (``free_rows``, :func:`free_row_axes`), rows of its own
    (:func:`free_rows_dim`) and the sized axis its row length is."""
    shapes: dict[str, list[str]] = {}
    dims: list[str] = []
    unstated: dict[str, tuple[str, str]] = {}
    main: str | None = None
    last_only: list[str] = []
    strided: list[tuple[str, int, bool]] = []

    def own_axes(name: str, rank: int) -> None:
        axes = []
        for axis in range(rank):
            local = _local_for(launch, name, axis, rank)
            dim = local or (
                "tokens" if axis == 0 and rank > 1 and main is None else f"{name}_{axis}"
            )
            axes.append(dim)
            if dim not in dims:
                dims.append(dim)
        shapes[name] = axes

    for name, use in tensors.items():
        if not use.indices and not use.numel:
            continue
        if not use.const and not use.numel and use.indices == {-1}:
            # vLLM's masked_moe_activation reads only `out.size(-1)` of an [E, T, d] output:
            # a rank of 1 would draft [d], and the kernel writes its rows past it
            last_only.append(name)
            continue
        rows = use.indices or use.counted  # numel() over them: a row past them
        rank = max(
            [i + 1 if i >= 0 else -i for i in use.indices] + [2 if use.numel and rows else 1]
        )
        if use.counted and not use.indices and rank == 2:
            notes.append(
                f"{name}: 2 axes, rows and a row: the launcher divides its element count by "
                "another tensor's sizes"
            )
        stated = (ranks or {}).get(name, 0)
        if stated > rank:
            notes.append(f"{name}: rank {stated}, as the launch's condition states")
        if not use.sized and not use.numel:
            # after every sized tensor, which may come later, has its axes: its twin's
            strided.append((name, max(rank, stated), stated >= rank))
            continue
        own_axes(name, max(rank, stated))
        main = main or name
    for name, rank, exact in strided:
        twin = strided_twin(name, rank, exact, tensors[name].const, shapes, notes)
        reach = (strided_reach or {}).get(name, [])
        if (
            twin is None
            and len(reach) == rank
            and all(
                source in shapes and -len(shapes[source]) <= axis < len(shapes[source])
                for source, axis in reach
            )
        ):
            shapes[name] = [shapes[source][axis] for source, axis in reach]
            notes.append(
                f"{name}: {STRIDED_NOTE}; {EXTENT_NOTE}: "
                + ", ".join(f"axis {i} below {s}'s axis {a}" for i, (s, a) in enumerate(reach))
                + " (each stride's index, by the kernel's own bounds)"
            )
        elif twin is None:
            notes.append(f"{name}: {STRIDED_NOTE}; drafted with {rank} axes")
            own_axes(name, rank)
        else:
            shapes[name] = list(shapes[twin[0]])
            notes.append(twin[1])
        main = main or name
    for name in last_only:
        shapes[name], source, assumed = _rows_of(launch, name, tensors, shapes)
        dims.extend(d for d in shapes[name] if d not in dims)
        notes.append(
            f"{name}: {LAST_AXIS_NOTE}; its leading axes drafted as "
            + (
                f"{source}'s (an assumption: the launcher reads only {source}'s leading axes, "
                "and an output with its input's rows is the framework's convention)"
                if assumed
                else f"{source}'s, the one read tensor whose every axis the launcher reads"
            )
        )
        if assumed:
            unstated[source] = (shapes[source][-1], name)

    found = extents or {}

    def read_axis(name: str) -> list[str] | None:
        source, at = found[name]
        if not source:
            return [at]
        axes = shapes.get(source, [])
        if at == WHOLE_SHAPE:
            return list(axes) or None
        return [axes[int(at)]] if -len(axes) <= int(at) < len(axes) else None

    # an axis of a sized tensor now; an axis or the whole shape of another once every tensor
    # has one (the caller's checks may shape a tensor the launcher never sizes: FlashInfer's
    # `s_a`; a tensor matcher one it does not index: SGLang's `out`)
    read = [n for n in found if n in tensors and n not in shapes and read_axis(n)]
    unsized = {n for n in found if n in tensors and n not in shapes}
    # of a tensor that gets its shape otherwise: sized, read, drafted below and then shaped by
    # a matcher or the caller's checks, or refused (parse._extents: the tensor a tensor is like
    # is like none)
    read += sorted(n for n in unsized - set(read) if found[n][0] in tensors)

    def indexed_shape(name: str) -> list[str] | None:
        axes = (indexed or {}).get(name, [])
        if not axes or not all(
            isinstance(axis, str)
            or (axis[0] in shapes and -len(shapes[axis[0]]) <= axis[1] < len(shapes[axis[0]]))
            for axis in axes
        ):
            return None
        return [axis if isinstance(axis, str) else shapes[axis[0]][axis[1]] for axis in axes]

    def free_shape(name: str) -> list[str] | None:
        source, axis = (free_rows or {}).get(name, ("", 0))
        axes = shapes.get(source, [])
        return [free_rows_dim(name), axes[axis]] if -len(axes) <= axis < len(axes) else None

    by_index: list[str] = []
    by_ids: list[str] = []
    for name in tensors:
        if name in shapes or name in read:
            continue
        if (shape := indexed_shape(name)) is not None:
            shapes[name] = shape
            by_index.append(name)
            notes.append(
                f"{name}: {INDEXED_NOTE} stays within "
                + ", ".join(
                    axis if isinstance(axis, str) else f"{axis[0]}'s axis {axis[1]}"
                    for axis in (indexed or {})[name]
                )
                + " (each index's bound by the launch)"
            )
            continue
        if (shape := free_shape(name)) is not None:
            shapes[name] = shape
            by_ids.append(name)
            dims.extend(d for d in shape if d not in dims)
            source, axis = (free_rows or {})[name]
            notes.append(
                f"{name}: {FREE_ROWS_NOTE}: a dim of its own, {shape[0]}; its row length is "
                f"{source}'s axis {axis}, the length the kernel's row offset is passed"
            )
            continue
        if main is None:
            shapes[name] = ["n"]
            if "n" not in dims:
                dims.append("n")
            notes.append(f"{name}: {DRAFTED_NOTE}; drafted as [n]")
        else:
            shapes[name] = list(shapes[main])
            notes.append(f"{name}: {DRAFTED_NOTE}; drafted as {main}'s shape")
    for name in read:
        shapes[name] = read_axis(name) or []  # never empty: each source has its shape by now
        source, at = found[name]
        notes.append(
            f"{name}: {EXTENT_NOTE}: "
            + (
                f"{source}'s shape, reached exactly where {source} is"
                if at == WHOLE_SHAPE
                else f"{at} element(s), its constant indices"
                if not source
                else f"{source}'s axis {at}, the size passed as the bound of its every index"
            )
        )
    if reshape is not None:
        # shapes the launcher's caller checks (callers.py) win over ranks read from the
        # launch's queries, before any stride is written in terms of them
        drafted = {name: shapes[name] for name in [*read, *by_index, *by_ids]}
        shapes = reshape(shapes, notes, frozenset(n for n, _, _ in strided if tensors[n].const))
        for name in read:  # the source's axis as the caller's checks name it, unless they shape it
            if shapes[name] == drafted[name]:
                shapes[name] = read_axis(name) or shapes[name]
        for name in by_index:
            if shapes[name] == drafted[name]:
                shapes[name] = indexed_shape(name) or shapes[name]
        for name in by_ids:  # its row length as the caller's checks name that axis
            if shapes[name] == drafted[name]:
                shapes[name] = free_shape(name) or shapes[name]
        # an axis the checks give as an expression (`batch_size + 1`) is no dim: its names are
        dims = list(
            dict.fromkeys(d for shape in shapes.values() for a in shape for d in _dims_of(a))
        )
    for name in read:
        if not shapes[name]:  # its source was drafted, and nothing shaped it after
            raise Unmapped(
                f"tensor {name!r}: the kernel reads it no further than {found[name][0]}'s "
                "extent, and neither the launcher nor its caller says that tensor's shape"
            )
    for name, _, _ in strided:  # neither a twin, nor a caller's checks or a matcher shaped it
        if any(n.startswith(f"{name}: {STRIDED_NOTE}; drafted with") for n in notes):
            # vLLM's merge_attn_states: prefix_lse, [heads, tokens], drafted with dims of its
            # own, was read past on the H100 when a random draw gave it fewer (fadeb98)
            raise Unmapped(
                f"tensor {name!r}: the launcher asks only its strides, and no tensor it sizes "
                "is its twin (strided_twin), so its shape is not stated"
            )
    return shapes, dims, unstated


def _dims_of(axis: str) -> list[str]:
    """The dims an axis of a shape names, in order: itself, or those of an expression a
    caller's checks equate it with (:func:`~astra_graph.framework.callers.size_expression`:
    ``hidden_size // 128``); none for a number."""
    return [n for n in re.findall(r"[A-Za-z_]\w*", axis) if n not in expr.FUNCTIONS]


def _row_lengths(
    unstated: dict[str, tuple[str, str]],
    shapes: dict[str, list[str]],
    dims: list[str],
    kernel: Kernel,
    bindings: list[Binding],
    geometry: list[str],
    requires: list[str],
    notes: list[str],
) -> None:
    """For a read tensor whose rows an output was assumed to have (:func:`_rows_of`) and whose
    last axis is in none of the kernel parameters' size expressions and the launch geometry
    (a ``select`` whose condition is a constant counts for the branch taken), the kernel works
    its row length out from other sizes, and a dim of its own would be drawn too short for it
    (vLLM's gated activations read 2 * d of a row). That axis becomes the length the kernel's
    own indexing gives (:func:`kernel_row_length`) everywhere, the requirements included, in
    place, noted; raises Unmapped when the kernel does not say it either. A requirement that
    names the axis (``in.size(-1) % 8 == 0``) only restricts it and gives the kernel nothing,
    so it does not count as carrying it."""
    sizes = [one.value for b in bindings for one in b.fields or [b] if one.kind == "expr"]
    live = set().union(*(_live_names(size) for size in [*sizes, *geometry]))
    for tensor, (axis, written) in unstated.items():
        if shapes[tensor][-1] != axis or axis in live:
            continue
        length = kernel_row_length(kernel, bindings, tensor, written, shapes[written][-1])
        if length is None:
            raise Unmapped(
                f"{tensor}: the kernel reads it, and neither a kernel parameter, a launch size "
                f"nor the kernel's row indexing carries its last axis {axis!r}, so a row's "
                "length is not stated"
            )
        _replace_dim(axis, _grouped(length), shapes, dims, bindings, geometry, requires)
        notes.append(
            f"{tensor}: its last axis is {length}, the row length the kernel indexes it with "
            f"(the launcher states none; {written}'s rows are {written}'s last axis apart)"
        )


def kernel_row_length(
    kernel: Kernel, bindings: list[Binding], read: str, written: str, written_last: str
) -> str | None:
    """The row length of tensor ``read`` as the kernel indexes it, over the dims, or None: in
    the kernel's body (:attr:`Kernel.row_offsets`, read on its syntax tree), its pointer offset
    by a row index times a product of the kernel's size parameters and whole numbers
    (``input + row * 2 * d``, or indexed: ``input[row * d + idx]``, also through an index
    local), where the same row index offsets ``written``'s pointer by
    ``written_last``, its drafted last axis (``out + row * d``), so that the index counts rows
    of both. One such offset each, or the indexing is not read."""
    params = {b.value: b.param for b in _at_their_start(bindings) if b.kind == "tensor"}
    sizes = {
        one.param: one.value for b in bindings for one in b.fields or [b] if one.kind == "expr"
    }
    if read not in params or written not in params:
        return None

    def offsets(pointer: str) -> set[tuple[str, str]]:
        found = set()
        for offset in kernel.row_offsets:
            named = [f for f in offset.length if not f.isdigit()]
            if offset.pointer == pointer and named and set(named) <= set(sizes):
                spelled = (f if f.isdigit() else _grouped(sizes[f]) for f in offset.length)
                found.add((offset.row, " * ".join(spelled)))
        return found

    read_offsets, written_offsets = offsets(params[read]), offsets(params[written])
    if len(read_offsets) != 1 or len(written_offsets) != 1:
        return None
    (row, length), (written_row, written_length) = (*read_offsets, *written_offsets)
    if row != written_row or written_length.strip("() ") != written_last.strip("() "):
        return None
    return length


def _live_names(expression: str) -> set[str]:
    """The names ``expression`` uses, a ``select`` whose condition is a constant
    (``select((2 == 3), input_1, tokens)``, a rank test the shapes decided) read for the branch
    it takes."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "select" and len(node.args) == 3:
                try:
                    taken = expr.evaluate(ast.unparse(node.args[0]), {})
                except expr.ExprError:
                    pass
                else:
                    visit(node.args[1] if taken else node.args[2])
                    return
            for arg in node.args:
                visit(arg)
            return
        if isinstance(node, ast.Name):
            found.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(expr.parse(expression))
    return found


def _rows_of(
    launch: Launch, name: str, tensors: dict[str, TensorUse], shapes: dict[str, list[str]]
) -> tuple[list[str], str, bool]:
    """The axes of a written tensor whose last axis alone the launcher reads, its own last axis
    after leading axes taken from a read tensor; also that tensor's name and whether they are
    an assumption. First the one read tensor whose every axis the launcher reads (each leading
    axis by index and the last through ``size(-1)``, so a size read only in a branch of another
    rank is not taken for its last): the launcher counts the rows from it. Failing that, the
    read tensors whose leading axes alone the launcher reads (vLLM's masked_moe_activation
    reads ``input.size(0)``, ``input.size(1)`` of an [E, T, 2d] input and ``out.size(-1)``),
    when they all have the same leading axes: the framework's convention of an output with its
    input's rows, which the launcher does not state, so it is an assumption the notes say.
    Raises Unmapped when there is no such tensor or two disagree (which rows the kernel writes
    is then not stated)."""
    full: list[str] = []
    leading_only: list[str] = []
    for other, axes in shapes.items():
        use = tensors[other]
        rank = len(axes)
        leading = all(i in use.indices or i - rank in use.indices for i in range(rank - 1))
        if not use.const or rank < 2 or not leading:
            continue
        (full if -1 in use.indices else leading_only).append(other)
    rows = {tuple(shapes[other][:-1]) for other in leading_only}
    if len(full) == 1 or (not full and len(rows) == 1):
        source = full[0] if full else leading_only[0]
        last = _local_for(launch, name, 0, 1) or f"{name}_last"
        return [*shapes[source][:-1], last], source, not full
    if full:
        why = f"more than one read tensor ({', '.join(full)}) could give them"
    elif leading_only:
        why = f"the read tensors {', '.join(leading_only)} have different leading axes"
    else:
        why = "no read tensor has its leading sizes read by the launcher to give them"
    raise Unmapped(
        f"{name}: the kernel writes it and the launcher reads only its last axis "
        f"(size(-1)), so its leading axes are not stated: {why}"
    )


def _substitute(
    expression: str,
    tensors: dict[str, TensorUse],
    shapes: dict[str, list[str]],
    ranked: dict[str, str] | None = None,
) -> str:
    """Tensor queries replaced by the dims of the drafted shapes; ``ranked`` holds the axes that
    read tensor ranks (:meth:`_Translator._ranked_axis`), folded here."""

    def one(match: re.Match[str]) -> str:
        tensor, what, index = match["tensor"], match["what"], match["index"]
        if tensor not in shapes:  # a host check of a tensor the kernel does not get
            raise Unmapped(f"{tensor}: the kernel does not get it, so it has no drafted shape")
        axes = shapes[tensor]
        if what == "numel":
            return "(" + " * ".join(axes) + ")"
        if what == "dim":
            return str(len(axes))
        if index.startswith("r"):
            folded = _substitute((ranked or {})[match[0]], tensors, shapes)
            index = str(expr.evaluate_int(folded, {}))
        i = int(index.lstrip("m")) * (-1 if index.startswith("m") else 1)
        i = i + len(axes) if i < 0 else i
        if not 0 <= i < len(axes):
            raise Unmapped(f"{tensor}: axis {index} outside its {len(axes)} axes")
        if what == "size":
            return axes[i]
        later = axes[i + 1 :]
        return "(" + " * ".join(later) + ")" if later else "1"

    names = "|".join(re.escape(t) for t in tensors)
    if not names:
        return expression
    pattern = rf"\b(?P<tensor>{names})__(?P<what>size|stride|numel|dim)(?:__(?P<index>[mr]?\d+))?\b"
    return re.sub(pattern, one, expression)
