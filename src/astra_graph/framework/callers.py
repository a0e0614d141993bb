"""Follow a raw-pointer launcher to its caller: shapes and dtypes from the framework's binding.

A header launcher such as FlashInfer's ``RMSNorm(T* input, T* weight, T* output, uint32_t
batch_size, uint32_t d, uint32_t stride_input, ...)`` takes raw pointers and sizes; which
tensors those are, their shapes and the element types the op dispatches are written in its
caller, the framework's binding (``csrc/norm.cu``: ``rmsnorm(TensorView output, TensorView
input, ...)`` calls ``norm::RMSNorm(static_cast<c_type*>(input.data_ptr()), ...,
input.size(0), input.size(1), input.stride(0), ...)`` inside a DLPack dtype dispatch).

Why the call is followed rather than a contract drafted from the launcher's parameters alone
(``T* input`` with ``batch_size`` and ``d``): the parameters do not say which sizes belong to
which pointer (``d`` is ``input``'s last axis, and ``weight``'s only one, by the binding's
checks), nor that ``stride_input`` is ``d`` for the contiguous tensors the binding passes,
nor which element types ``T`` is instantiated with; a draft would have to guess each, and a
wrong guess is a contract the original itself would not meet. The binding says all of it in
the expressions :mod:`~astra_graph.framework.launchers` already reads for a ``torch::Tensor``
launcher. So the launcher's launch is rewritten in its caller's terms
(:func:`compose`): each launcher parameter becomes the caller's argument, the launcher's
template types the caller's (from the casts of its pointer arguments), the launcher's locals
stay (renamed where the caller has a variable of that name), and the caller's locals,
``if`` conditions and dispatch macros are added around it. The composed launch is then
analysed as if the caller had launched the kernel itself; nothing is guessed that the
analysis would not read in a torch launcher.

Where callers are searched: the imported file itself and the framework headers it includes
(SGLang's JIT headers hold their bindings: ``run_activation_filtered(TensorView input, ...)``
calls its struct's raw-pointer ``launch`` with ``expert_ids.data_ptr()``), then the ``.cu``,
``.cpp`` and ``.cc`` files directly in each of the framework's include folders (``--include
DIR``, or a checkout root's ``csrc/``), which is where bindings live (FlashInfer's
``csrc/*.cu``, vLLM's ``csrc/*.cu``); subfolders hold kernels and generated instantiations, not
bindings, and FlashInfer's hold about 3,000 files. A file is parsed only when its text names the
launcher followed by ``(``. The first caller whose composed launch analyses is taken, one
through which the launch is dead code (it passes nullptr where the launch sits under ``ptr !=
nullptr``) only when every caller is; the others are noted. A launcher nobody calls keeps its
raw-pointer reason; one whose callers pass raw pointers in turn gives a binding's reason first.

A call written in a macro's body (SGLang's rotary ``DISPATCH_DTYPE(code, bits, IS_NEOX, ...)``:
``launch_kernel<float, IS_NEOX>(__VA_ARGS__)``, one per dtype) is found where the macro is
invoked, the macro expanded there on one line. A caller that passes raw pointers in turn
(SGLang's ``dispatch_by_dtype``) is followed to its own callers as the launcher was
(:func:`~astra_graph.framework.importer._followed`, a few callers deep). Calls of one caller
that differ only in the launcher's own type parameter are one operation at each of their types
(:func:`caller_types`). The caller's host checks are read as a launcher's
(:attr:`CallSite.facts`): conditions where they compare sizes (:func:`size_conditions`), shapes
where they assert equalities on every path (:func:`fact_equalities`), an axis equal to a size
computed from dims taking that expression (:func:`size_expression`). A caller whose tests
on one tensor's rank define several forms of it (FlashInfer's ``rope_quantize``: a 2-D or a
3-D key) is read once per form, each an operation of its own (:func:`rank_forms`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from astra_graph.framework.flatten import flatten
from astra_graph.framework.launchers import (
    CPP_TYPES,
    DRAFTED_NOTE,
    EXTENT_NOTE,
    STRIDED_NOTE,
    TEMPLATE_ELEMENT_DTYPES,
    Reshape,
    Unmapped,
    dispatch_dtypes,
    strided_twin,
)
from astra_graph.framework.naming import source_text
from astra_graph.framework.parse import (
    LOOPS,
    MAX_MACRO_DEPTH,
    TYPE_ALIAS,
    Launch,
    Launcher,
    Macro,
    Param,
    TemplateParam,
    _arguments,
    _callee,
    _condition_value,
    _dispatch_chain,
    _enclosing_templates,
    _function_declarator,
    _macros,
    _matchers,
    _own_template,
    _params,
    _parser,
    _scope,
    _walk,
    expand_macros,
    expression_node,
    text,
    unparenthesised,
)
from astra_graph.kernel import expr

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tree_sitter import Node

CALLER_SUFFIXES = (".cu", ".cpp", ".cc")
"""Files of an include folder searched for a launcher's callers (its bindings)."""
SHAPE_NOTES = (DRAFTED_NOTE, STRIDED_NOTE, EXTENT_NOTE)
"""The notes of shapes the launch does not state, dropped for a tensor the caller's checks
shape."""
ELEMENT_ALIAS_VALUE = "scalar_t"
"""What a caller's dispatched type name is aliased to, the name the analysis knows as the
element type (:data:`~astra_graph.framework.launchers.ELEMENT_TYPE_NAME`)."""
NAMED_TYPES = frozenset(
    [*CPP_TYPES, "void", "char", "int8_t", "uint8_t", "int16_t", "uint16_t", "unsigned char"]
)
"""Pointer types of a launcher that are types of their own, not template parameters."""
CHECK_WORD = "CHECK"
"""A call whose name has this word is one of the caller's checks (``CHECK_DIM``,
``TVM_FFI_ICHECK_EQ``, ``TORCH_CHECK``), read for the shapes of the tensors it passes."""
_POINTER_CAST = re.compile(
    r"(?:static_cast|reinterpret_cast)\s*<\s*(?:const\s+)?(?P<a>[\w:]+)\s*(?:const\s*)?\*\s*>"
    r"|data_ptr\s*<\s*(?:const\s+)?(?P<b>[\w:]+)\s*>"
    r"|^\(\s*(?:const\s+)?(?P<c>[\w:]+)\s*\*\s*\)"
)
_SIMPLE = re.compile(r"^[\w:]+(?:\s*(?:\.|->)\s*\w+)*(?:\s*\([^()]*\))?$")
_TOKEN = re.compile(r"(?<![\w.])(?<!->)(?<!::)\b([A-Za-z_]\w*)\b")


@dataclass(frozen=True)
class CallSite:
    """One call of a launcher in a caller file, read as :class:`~astra_graph.framework.parse.
    Launch` reads a kernel launch: the caller's parameters, locals, conditions, dispatch."""

    file: Path
    function: str
    params: tuple[Param, ...]
    args: tuple[str, ...]
    template_args: tuple[str, ...]
    locals: dict[str, str]
    conditions: tuple[tuple[str, bool], ...]
    dispatch: tuple[tuple[str, tuple[str, ...]], ...]
    line: int
    checks: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """The caller's checks before the call (``CHECK_DIM(1, weight)``,
    ``TVM_FFI_ICHECK_EQ(input.size(1), weight.size(0))``): (macro or function, arguments)."""
    template: tuple[TemplateParam, ...] = ()
    """The caller's template parameters (its class templates' and its own), as a launcher's
    (:attr:`~astra_graph.framework.parse.Launcher.template`): a binding inside the launcher's
    own class template (SGLang's ``run_*``) instantiates the element type through them."""
    facts: tuple[str, ...] = ()
    """The caller's host checks before the call as a launcher's are read (:func:`~astra_graph.
    framework.parse._matchers`): SGLang's ``RuntimeCheck(c, ...)``, and one under an ``if``
    without an ``else`` as ``!(if) || (c)`` (its rotary binding's ``if (positions_ndim == 1)
    { RuntimeCheck(query.size(0) == positions.size(0) && ...) }``), each a fact of every path
    to the call."""
    own_template: int = 0
    """How many of :attr:`template`'s last parameters are the caller's own (a function
    template's: SGLang's ``template <bool IS_NEOX> void dispatch_by_dtype(...)``), which its
    own callers' explicit template arguments bind where it is followed in turn."""
    form: str = ""
    """The rank form this call site is read at (:func:`rank_forms`: ``k_2d``), a name for its
    operation; '' for a call read as written."""
    form_note: str = ""
    """Why the call site is read at :attr:`form`, and which of the caller's branches that
    leaves out, for the operation's notes."""


@dataclass
class Callers:
    """The caller files of one import, each read and parsed at most once: ``sources`` (the
    imported file and the framework headers it includes), then the include ``folders``'
    binding files."""

    folders: list[Path]
    sources: list[Path] = field(default_factory=list)
    _trees: dict[tuple[Path, tuple[str, ...]], Node] = field(default_factory=dict)
    """Each caller file's tree, with the macros that call a launcher expanded (their names)."""
    _macros: dict[Path, dict[str, Macro]] = field(default_factory=dict)
    _texts: dict[Path, str] = field(default_factory=dict)

    def files(self) -> list[Path]:
        found = list(self.sources)
        for folder in self.folders:
            found += sorted(
                f for f in folder.iterdir() if f.suffix in CALLER_SUFFIXES and f.is_file()
            )
        return list(dict.fromkeys(found))

    def _text(self, path: Path) -> str:
        # read through the import's shared cache once, then kept here: calls() reads every
        # caller file once per launcher, and the folders can hold more files than that cache
        if path not in self._texts:
            self._texts[path] = source_text(path)
        return self._texts[path]

    def calls(self, launcher: Launcher) -> list[CallSite]:
        """Every call of ``launcher`` (by name, with an argument count its parameters take)."""
        named = re.compile(
            rf"(?<![\w.])(?:[\w:]*::)?{re.escape(launcher.name)}\s*(?:<[^;{{}}]*>)?\s*\("
        )
        least = sum(1 for p in launcher.params if "=" not in p.text)
        found = []
        for path in self.files():
            if not named.search(self._text(path)):
                continue
            # a macro that calls the launcher (SGLang's `DISPATCH_DTYPE(code, bits, IS_NEOX,
            # ...)`, one `launch_kernel<float, IS_NEOX>(__VA_ARGS__)` per dtype) is expanded
            # where it is called: the call, its arguments and its branch are the caller's
            calling = {n: m for n, m in self.macros(path).items() if named.search(m.body)}
            key = (path, tuple(sorted(calling)))
            if key not in self._trees:
                source = expand_macros(self._text(path), calling, one_line=True)
                self._trees[key] = _parser().parse(source.encode()).root_node
            for call in _walk(self._trees[key], ("call_expression",)):
                if _callee(call) != launcher.name:
                    continue
                site = _call_site(path, call)
                if site is not None and least <= len(site.args) <= len(launcher.params):
                    found += rank_forms(site, call)
        return found

    def macros(self, path: Path) -> dict[str, Macro]:
        """The macros a caller file sees (its includes inlined): its dispatch macros."""
        if path not in self._macros:
            flat = flatten(path, self.folders)
            self._macros[path] = _macros(_parser().parse(flat.text.encode()).root_node)
        return self._macros[path]


def _call_site(path: Path, call: Node) -> CallSite | None:
    definition = call.parent
    while definition is not None and definition.type != "function_definition":
        definition = definition.parent
    declarator = _function_declarator(definition) if definition is not None else None
    if declarator is None:
        return None
    function = call.child_by_field_name("function")
    targs: tuple[str, ...] = ()
    if function is not None and "<" in text(function):
        inner = text(function).split("<", 1)[1].rsplit(">", 1)[0]
        targs = tuple(a.strip() for a in inner.split(",") if a.strip())
    found, conditions = _scope(call)
    body = definition.child_by_field_name("body") if definition is not None else None
    checks = tuple(
        (_callee(c), _arguments(c.child_by_field_name("arguments")))
        for c in (_walk(body, ("call_expression",)) if body is not None else [])
        if c.start_byte < call.start_byte and CHECK_WORD in _callee(c) and _encloses(c, call)
    )
    return CallSite(
        file=path,
        function=text(declarator.child_by_field_name("declarator")).rsplit("::", 1)[-1],
        params=_params(declarator),
        args=_arguments(call.child_by_field_name("arguments")),
        template_args=targs,
        locals=found,
        conditions=conditions,
        dispatch=_dispatch_chain(call),
        line=call.start_point[0] + 1,
        checks=checks,
        template=_enclosing_templates(definition) if definition is not None else (),
        facts=tuple(c for c, _ in _matchers(call)[1]),
        own_template=len(_own_template(definition)) if definition is not None else 0,
    )


RANK_FORM = "{tensor}_{rank}d"
"""The name of a rank form (:func:`rank_forms`): the tensor its branches test and the rank."""
_CONTROL = ("if_statement", *LOOPS, "lambda_expression", "switch_statement")
"""What runs its body only on some paths, or not where it is written: a check inside one holds
only of that body."""


def _clause(node: Node) -> str:
    """A condition as one spelling: without its parentheses, its whitespace single spaces."""
    return " ".join(text(_condition_value(node)).split())


def _rank_equality(condition: Node | None) -> tuple[str, int, bool] | None:
    """(tensor, rank, whether ``==``) of an ``if`` condition that is one rank comparison,
    ``t.ndim() == r`` or ``!=`` (either side, ``dim()`` alike); None for anything else."""
    node = _condition_value(condition) if condition is not None else None
    if node is None or node.type != "binary_expression":
        return None
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    operator = text(node.child_by_field_name("operator"))
    if left is None or right is None or operator not in ("==", "!="):
        return None
    for query, rank in ((left, right), (right, left)):
        found = _RANK_QUERY.match(text(unparenthesised(query)))
        value = _whole_literal(unparenthesised(rank))
        if found is not None and value is not None:
            return found["tensor"], value, operator == "=="
    return None


def _branch(statement: Node, then: bool) -> Node | None:
    """The then-branch of an ``if`` (``then``) or its ``else`` (None when it has none)."""
    if then:
        return statement.child_by_field_name("consequence")
    alternative = statement.child_by_field_name("alternative")
    if alternative is not None and alternative.type == "else_clause":
        alternative = next((c for c in alternative.named_children if c.type != "comment"), None)
    return alternative


def _owner(node: Node) -> Node | None:
    """The nearest :data:`_CONTROL` above ``node``, or None."""
    up = node.parent
    while up is not None and up.type not in _CONTROL:
        up = up.parent
    return up


def _decided_locals(locals_: dict[str, str], decided: dict[str, bool]) -> dict[str, str]:
    """The locals with each chain's conditional (:func:`~astra_graph.framework.parse.
    _branch_values`: ``(c) ? (a) : (b)``) whose condition ``decided`` holds a truth for as the
    value of the branch taken."""

    def value(written: str) -> str:
        node = expression_node(written)
        condition = node.child_by_field_name("condition") if node is not None else None
        if node is None or node.type != "conditional_expression" or condition is None:
            return written
        truth = decided.get(_clause(condition))
        chosen = node.child_by_field_name("consequence" if truth else "alternative")
        return written if truth is None or chosen is None else value(text(unparenthesised(chosen)))

    return {name: value(written) for name, written in locals_.items()}


def rank_forms(site: CallSite, call: Node) -> list[CallSite]:
    """The call site once per rank form of its caller, or ``[site]`` where it has none. A form
    is a rank of the one tensor parameter ``t`` that the caller's ``if``\\ s before the call, on
    its every path, test (``if (k.ndim() == 2) { CHECK_DIM(2, k); heads = 1; } else {
    CHECK_DIM(3, k); heads = k.size(1); }``: FlashInfer's ``rope_quantize`` takes a 2-D MLA key
    or a 3-D GQA one): each rank a test names, and each a ``CHECK_DIM`` of an ``else`` states. At
    a rank every such ``if`` is decided: the form holds the checks of the branches taken (and
    only of those: the others' do not hold there), the rank as a fact, and the locals the chains
    set as the branch taken sets them (a chain's ``(c) ? (a) : (b)`` is ``a`` or ``b``). A rank
    the checks outside the branches contradict is no form. Each form is a real use, an operation
    of its own. An ``else`` that checks no rank of ``t`` gives no form (its rank is not read),
    said in the other forms' notes; tests of several tensors' ranks give no forms (the call is
    read as written, every branch's checks left out)."""
    definition = call.parent
    while definition is not None and definition.type != "function_definition":
        definition = definition.parent
    body = definition.child_by_field_name("body") if definition is not None else None
    if body is None:
        return [site]
    tensors = {p.name for p in site.params}
    statements: list[Node] = []
    tests: dict[int, tuple[str, int, bool]] = {}
    for statement in _walk(body, ("if_statement",)):
        if statement.end_byte > call.start_byte or not _encloses(statement, call):
            continue
        found = _rank_equality(statement.child_by_field_name("condition"))
        if found is not None and found[0] in tensors:
            statements.append(statement)
            tests[statement.id] = found
    if len({tensor for tensor, _, _ in tests.values()}) != 1:
        return [site]
    tensor = next(iter(tests.values()))[0]

    def checks_of(block: Node | None, owner: Node) -> list[Node]:
        """The checks ``block`` (a branch of ``owner``) makes whenever it runs."""
        return [
            c
            for c in (_walk(block, ("call_expression",)) if block is not None else [])
            if CHECK_WORD in _callee(c) and (up := _owner(c)) is not None and up.id == owner.id
        ]

    def stated(nodes: list[Node]) -> set[int]:
        """The ranks the ``CHECK_DIM(r, t)`` among ``nodes`` state."""
        out = set()
        for check in nodes:
            args = _arguments(check.child_by_field_name("arguments"))
            if _RANK_CHECK.search(_callee(check)) and len(args) == 2 and args[0].strip().isdigit():
                out |= {int(args[0])} if args[1].strip() == tensor else set()
        return out

    ranks: set[int] = set()
    for statement in statements:
        _, rank, equal = tests[statement.id]
        other = _branch(statement, not equal)
        ranks |= {rank} | (stated(checks_of(other, statement)) if other is not None else set())
    # an `else` no rank found takes (none of its checks says one): its rank is not read
    unread = [
        f"{tensor}.ndim() != {rank}"
        for statement in statements
        for _, rank, equal in [tests[statement.id]]
        if _branch(statement, not equal) is not None and ranks == {rank}
    ]
    inside = {s.id for s in statements for o in statements if o.id != s.id and _within(s, o)}
    # the checks of the function before the call outside every test (a branch without braces
    # has the block around it: one `if (...) CHECK_DIM(2, k);` is the branch's, not the call's)
    base = [
        c
        for c in _walk(body, ("call_expression",))
        if c.start_byte < call.start_byte
        and CHECK_WORD in _callee(c)
        and _encloses(c, call)
        and not any(_within(c, s) for s in statements)
    ]

    def take(statement: Node, rank: int, taken: list[Node]) -> None:
        """The checks of the branch of ``statement`` taken at ``rank``, and of the tests that
        branch itself decides (an ``else if``), into ``taken``."""
        _, tested, equal = tests[statement.id]
        block = _branch(statement, (tested == rank) == equal)
        taken.extend(checks_of(block, statement))
        for inner in statements:
            up = _owner(inner)
            nested = block is not None and _within(inner, block)
            if nested and inner.id != statement.id and up is not None and up.id == statement.id:
                take(inner, rank, taken)

    forms: list[CallSite] = []
    for rank in sorted(ranks):
        taken: list[Node] = []
        for statement in statements:
            if statement.id not in inside:
                take(statement, rank, taken)
        if stated([*base, *taken]) - {rank}:
            continue  # a check says another rank: this one is never taken
        checks = tuple(
            (_callee(c), _arguments(c.child_by_field_name("arguments"))) for c in [*base, *taken]
        )
        decided = {
            _clause(condition): (tested == rank) == equal
            for s in statements
            if (condition := s.child_by_field_name("condition")) is not None
            for _, tested, equal in [tests[s.id]]
        }
        name = RANK_FORM.format(tensor=tensor, rank=rank)
        left = (
            f"; where {' and '.join(unread)}, no check says {tensor}'s rank: not imported"
            if unread
            else ""
        )
        forms.append(
            replace(
                site,
                checks=checks,
                facts=(*site.facts, f"{tensor}.ndim() == {rank}"),
                locals=_decided_locals(site.locals, decided),
                form=name,
                form_note=(
                    f"{name}: read where {site.function}'s {tensor} has {rank} axes, with the "
                    f"checks and values of its branches there (the other branches' do not "
                    f"hold){left}"
                ),
            )
        )
    return forms or [site]


def _within(node: Node, outer: Node) -> bool:
    """Whether ``node`` lies inside ``outer``."""
    return outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte


FIXED_TYPES = {"int32": "int32_t", "float8_e4m3fn": "__nv_fp8_e4m3"}
"""What a dispatch of types other than the element types is imported with, the first of these
among its cases: FlashInfer's ``pos_ids`` and ``indptr`` are int32 in its own tests and SGLang's
calls (DISPATCH_DLPACK_IDTYPE_TO_CTYPE: int32, int64), and e4m3 is the FP8 output the harness
compares (DISPATCH_DLPACK_DTYPE_TO_CTYPE_FP8: e4m3, e5m2)."""
ELEMENT_DTYPES = frozenset({"float16", "bfloat16", "float32"})
"""The element types of an operation (``T``): a dispatch over any of them is the element's."""


def fixed_dispatch_type(name: str, args: tuple[str, ...], macros: dict[str, Macro]) -> str | None:
    """The C++ type a dispatch of no element type is imported with (:data:`FIXED_TYPES`), or
    None for an element dispatch or one with no case the harness runs. An operation has one
    element type ``T``; the index type of ``pos_ids`` or an FP8 output's is a second, fixed one."""
    found = dispatch_dtypes(name, args, macros)
    if not found or found & ELEMENT_DTYPES:
        return None
    return next((cpp for dtype, cpp in FIXED_TYPES.items() if dtype in found), None)


def _encloses(check: Node, call: Node) -> bool:
    """Whether the block ``check`` is in also holds ``call``: a check of another branch
    (``rmsnorm``'s 2-D branch beside its 3-D one) says nothing of this call's tensors."""
    block = check.parent
    while block is not None and block.type != "compound_statement":
        block = block.parent
    return block is not None and block.start_byte <= call.start_byte < block.end_byte


def _default(param: Param) -> str | None:
    """A parameter's default argument (``float eps = 1e-5`` -> ``1e-5``), or None."""
    _, equals, value = param.text.partition("=")
    return value.strip() if equals else None


def _template_types(launcher: Launcher, call: CallSite) -> dict[str, str]:
    """The launcher's template types as the caller instantiates it: deduced from the casts of
    its pointer arguments (``static_cast<c_type*>(x.data_ptr())`` for ``T* input``) or the
    caller's own pointer parameters they pass on (a relay's ``T const* input``), else the
    call's explicit template arguments: at their positions in the launcher's own template, or
    where that is not read, in the order the types first appear."""
    unknown = [
        p.type
        for p in launcher.params
        if p.pointer and p.type not in NAMED_TYPES and "::" not in p.type
    ]
    unknown = list(dict.fromkeys(unknown))
    types: dict[str, str] = {}
    relayed = {q.name: q for q in call.params if q.pointer}
    for param, arg in zip(launcher.params, call.args, strict=False):
        if param.type in unknown and param.type not in types:
            cast = _POINTER_CAST.search(arg.strip())
            if cast is not None:
                types[param.type] = cast["a"] or cast["b"] or cast["c"]
            elif arg.strip() in relayed:
                # the caller's own pointer parameter passed on (a relay's `T const* input`):
                # its pointee type, which the caller's callers deduce in turn
                types[param.type] = relayed[arg.strip()].type
    # an explicit template argument binds the launcher's own template parameter at its
    # position (SGLang's `launch_kernel<float, IS_NEOX>(...)` for `template <typename scalar_t,
    # bool IS_NEOX>`, whose scalar_t no pointer parameter names); where the launcher's own
    # template is not read, the types in the order they first appear
    own = launcher.template[len(launcher.template) - launcher.own_template :]
    for own_param, explicit in zip(own, call.template_args, strict=False):
        if own_param.kind == "type":
            types.setdefault(own_param.name, explicit)
    for name, explicit in zip(unknown, call.template_args, strict=False):
        if not own:
            types.setdefault(name, explicit)
    missing = [t for t in unknown if t not in types]
    if missing:
        raise Unmapped(
            f"{launcher.name}'s type {missing[0]} is not deduced from {call.function}'s "
            f"arguments ({call.file.name}:{call.line})"
        )
    return types


def _template_flags(launcher: Launcher, call: CallSite) -> dict[str, str]:
    """The launcher's own ``bool`` template parameters as the call sets them: its explicit
    template arguments in order (SGLang's ``launch<true, true>(input, out, ...)``), else their
    defaults (``bool kReuseInput = false``); a flag given neither a literal stays a name."""
    own = launcher.template[len(launcher.template) - launcher.own_template :]
    flags = {}
    for index, param in enumerate(own):
        value = call.template_args[index] if index < len(call.template_args) else param.default
        if param.kind == "flag" and value in ("true", "false"):
            flags[param.name] = value
    return flags


def _type_parameters(macro: Macro, macros: dict[str, Macro], depth: int = 0) -> set[int]:
    """The indices of a dispatch macro's parameters that name the dispatched type: those its
    body (or a case macro it passes them to) declares with ``using P = ...``."""
    found: set[int] = set()
    if depth > MAX_MACRO_DEPTH:
        return found
    for index, name in enumerate(macro.params):
        if re.search(rf"\busing\s+{re.escape(name)}\s*=", macro.body):
            found.add(index)
    for inner, args in re.findall(r"\b([A-Z_][A-Z0-9_]*)\s*\(([^()]*)\)", macro.body):
        if inner not in macros or inner == macro.name:
            continue
        passed = [a.strip() for a in args.split(",")]
        for position in _type_parameters(macros[inner], macros, depth + 1):
            if position < len(passed) and passed[position] in macro.params:
                found.add(macro.params.index(passed[position]))
    return found


def _substituter(mapping: dict[str, str]) -> Callable[[str], str]:
    def one(match: re.Match[str]) -> str:
        value = mapping.get(match[1])
        if value is None:
            return match[0]
        return value if _SIMPLE.match(value.strip()) else f"({value})"

    def sub(source: str) -> str:
        stripped = source.strip()
        if stripped in mapping:  # a whole argument is passed as the caller wrote it
            return mapping[stripped]
        return _TOKEN.sub(one, source)

    return sub


@dataclass(frozen=True)
class CallerTypes:
    """The element types a caller instantiates a launcher with by calling it once per type:
    SGLang's rotary ``DISPATCH_DTYPE`` calls ``launch_kernel<float, IS_NEOX>(...)``,
    ``launch_kernel<half, IS_NEOX>(...)`` and ``launch_kernel<nv_bfloat16, IS_NEOX>(...)``
    with the same arguments, each under its own test of the dtype (:func:`caller_types`)."""

    param: str
    """The launcher's own type parameter the calls differ in (``scalar_t``)."""
    types: tuple[tuple[str, str], ...]
    """(dtype, the C++ type that call passes), one per call."""
    calls: tuple[CallSite, ...]
    conditions: tuple[tuple[str, bool], ...]
    """The conditions every one of the calls is under (each call's own test of the dtype is
    not: the operation takes every one of the types)."""


def caller_types(launcher: Launcher, call: CallSite, calls: list[CallSite]) -> CallerTypes | None:
    """The element types ``call`` and its siblings instantiate ``launcher`` with, where the
    calls of one caller function that pass the same arguments differ only in one explicit
    template argument for a type parameter of the launcher's own template, each a type whose
    dtype an operation can hold (CUDA's own spelling: ``half`` is float16), one call per dtype;
    None otherwise (one call, another difference, a type such as ``uint16_t`` that says no
    dtype). The kernel instantiated with a type reads its tensors as that type, so the dtype
    follows from the type, whatever test of the caller's picks the call."""
    own = launcher.template[len(launcher.template) - launcher.own_template :]
    for index, param in enumerate(own):
        if param.kind != "type" or index >= len(call.template_args):
            continue
        siblings = tuple(
            other
            for other in calls
            if (other.file, other.function, other.args) == (call.file, call.function, call.args)
            and len(other.template_args) == len(call.template_args)
            and all(
                a == b
                for at, (a, b) in enumerate(
                    zip(other.template_args, call.template_args, strict=True)
                )
                if at != index
            )
        )
        spelled = [" ".join(other.template_args[index].split()) for other in siblings]
        types = {CPP_TYPES.get(cpp, ""): cpp for cpp in spelled}
        if len(siblings) < 2 or len(types) != len(siblings):
            continue
        if not set(types) <= set(TEMPLATE_ELEMENT_DTYPES):
            return None
        common = tuple(c for c in call.conditions if all(c in o.conditions for o in siblings))
        return CallerTypes(param.name, tuple(sorted(types.items())), siblings, common)
    return None


def compose(
    launcher: Launcher,
    launch: Launch,
    call: CallSite,
    macros: dict[str, Macro],
    element: CallerTypes | None = None,
) -> tuple[Launcher, Launch]:
    """``launch`` of ``launcher`` rewritten in the terms of its caller ``call``: a launcher of
    the caller's parameters whose one launch passes the caller's values; raises Unmapped when a
    parameter has no argument or a template type is not deduced. With ``element``, the
    launcher's type parameter the caller's calls differ in stays the element type, a type
    parameter of the composed launcher instantiated with their types
    (:attr:`~astra_graph.framework.parse.Launcher.instantiated`), under the conditions common
    to the calls; one the launcher carries so from its own callee is carried on."""
    mapping: dict[str, str] = {}
    for index, param in enumerate(launcher.params):
        value = call.args[index] if index < len(call.args) else _default(param)
        if value is None:
            raise Unmapped(f"{call.function} passes {launcher.name} no {param.name}")
        mapping[param.name] = value.strip()
    aliases = {}
    element_dispatch = []
    for name, args in call.dispatch:
        macro = macros.get(name)
        fixed = fixed_dispatch_type(name, args, macros)
        if fixed is None:
            element_dispatch.append((name, args))
        for index in _type_parameters(macro, macros) if macro is not None else set():
            if index < len(args) and re.fullmatch(r"\w+", args[index].strip()):
                aliases[TYPE_ALIAS + args[index].strip()] = fixed or ELEMENT_ALIAS_VALUE
    fixed_types = {
        k.removeprefix(TYPE_ALIAS): v for k, v in aliases.items() if v != ELEMENT_ALIAS_VALUE
    }
    # a launcher type the caller instantiates with a fixed dispatched name: the type imported
    types = _template_types(launcher, call)
    if element is not None:
        types.pop(element.param, None)  # each call's own: the element type
    mapping.update({k: fixed_types.get(v, v) for k, v in types.items()})
    mapping.update(_template_flags(launcher, call))
    # the element type left open by the calls, here or (carried) in the launcher's own callee
    open_types = (
        (TemplateParam(element.param, "type"),)
        if element is not None
        else tuple(
            t
            for t in launcher.template
            if launcher.instantiated and t.kind == "type" and t.name not in mapping
        )
    )
    instantiated = element.types if element is not None else launcher.instantiated
    taken = set(call.locals) | {p.name for p in call.params}
    renames = {}
    for key in launch.locals:
        base = key.removeprefix(TYPE_ALIAS).split(".", 1)[0]
        if base in taken and base not in mapping:
            renames[base] = f"{base}__{launcher.name}"  # the launcher's own, kept apart
    mapping.update(renames)
    sub = _substituter(mapping)
    checked = size_conditions(call)
    local_values = {}
    for key, value in launch.locals.items():
        prefix = TYPE_ALIAS if key.startswith(TYPE_ALIAS) else ""
        base, dot, member = key.removeprefix(TYPE_ALIAS).partition(".")
        local_values[f"{prefix}{renames.get(base, base)}{dot}{member}"] = sub(value)
    composed = replace(
        launch,
        template_args=tuple(sub(a) for a in launch.template_args),
        grid=sub(launch.grid),
        block=sub(launch.block),
        smem=sub(launch.smem),
        stream=sub(launch.stream),
        args=tuple(sub(a) for a in launch.args),
        dispatch=(
            *((n, tuple(sub(a) for a in args)) for n, args in launch.dispatch),
            *element_dispatch,
        ),
        locals={**call.locals, **aliases, **local_values},
        conditions=(
            *(element.conditions if element is not None else call.conditions),
            *((c, True) for c in checked),
            *((sub(c), p) for c, p in launch.conditions),
        ),
        # the caller's checks are the launch's host checks as well: facts of every path to it
        checks=(*checked, *(sub(c) for c in launch.checks)),
        notes=(
            *launch.notes,
            f"shapes and dtypes from {launcher.name}'s caller {call.function} "
            f"({call.file.name}:{call.line})",
        ),
    )
    host = Launcher(
        launcher.name,
        call.params,
        (composed,),
        launcher.line,
        (*open_types, *call.template),  # the caller's own template parameters stay last
        call.own_template,
        instantiated if open_types else (),
    )
    return host, composed


_ORDER_CHECKS = {"CHECK_LE": "<=", "CHECK_LT": "<", "CHECK_GE": ">=", "CHECK_GT": ">"}
"""Two-argument checks of an order, as the comparison they assert (``TVM_FFI_ICHECK_LE``)."""
_COMPARISON = re.compile(r"==|!=|<=|>=|<|>|%")
DLPACK_PREFIX = "dl_"
"""TVM-FFI's DLPack dtype constants (``dl_bfloat16``): the contract's dtype after it."""


def size_conditions(call: CallSite) -> list[str]:
    """What the caller's checks assert of sizes before the call, as launch conditions (so that
    they become ``requires``): ``TVM_FFI_ICHECK(hidden_size % 8 == 0)``, the order checks
    (``*_CHECK_LE(d, 16384)``) and the comparisons among its :attr:`CallSite.facts` (SGLang's
    ``RuntimeCheck``, a check under an ``if``). A check the analysis cannot express is noted
    there, not guessed; shape equalities are :func:`checked_shapes`' and dtype checks
    :func:`checked_dtypes`'."""
    out = []
    for name, args in call.checks:
        order = next((op for suffix, op in _ORDER_CHECKS.items() if name.endswith(suffix)), None)
        if order is not None and len(args) == 2:
            out.append(f"({args[0]}) {order} ({args[1]})")
        elif (
            name.endswith(CHECK_WORD)
            and args
            and _COMPARISON.search(args[0])
            and "dtype" not in args[0]  # a dtype check is checked_dtypes'
        ):
            out.append(args[0])
    for fact in call.facts:
        # a check read as a launcher's takes its first argument as its condition, which a
        # two-argument one (`CHECK_EQ(a, b)`, `CHECK_DIM(2, x)`) does not hold: only a
        # comparison is a condition here, as above; under an `if`, the guarded check's
        node = expression_node(fact)
        guarded = (
            node.child_by_field_name("right")
            if node is not None
            and node.type == "binary_expression"
            and text(node.child_by_field_name("operator")) == "||"
            and node.child_by_field_name("left").type == "unary_expression"  # type: ignore[union-attr]
            else node
        )
        said = text(guarded) if guarded is not None else ""
        if _COMPARISON.search(said) and "dtype" not in said and fact not in out:
            out.append(fact)
    return out


_DTYPE_QUERY = re.compile(r"(\w+)\s*\.\s*dtype\s*\(\s*\)")
"""A tensor's dtype query (``x.dtype()``)."""


def checked_dtypes(call: CallSite, element_tensors: set[str]) -> set[str] | None:
    """The element types the caller's checks allow the dispatched tensors
    (``TVM_FFI_ICHECK_EQ(input.dtype(), dl_bfloat16)``: bfloat16 only), or None when it
    checks none."""
    allowed: set[str] | None = None
    for name, args in call.checks:
        if _EQUALITY_CHECK.search(name) and len(args) == 2:
            terms = [(args[0].strip(), args[1].strip())]
        elif name.endswith(CHECK_WORD) and args:
            # `TVM_FFI_ICHECK(x.dtype() == dl_float16 || x.dtype() == dl_bfloat16)`
            terms = [
                (t.split("==")[0], t.split("==")[1])
                for t in args[0].split("||")
                if t.count("==") == 1
            ]
            if len(terms) != args[0].count("||") + 1:
                continue
        else:
            continue
        accepted: set[str] = set()
        for left, right in terms:
            tensor = _DTYPE_QUERY.fullmatch(left.strip())
            if tensor is None or tensor[1] not in element_tensors:
                break
            if _DTYPE_QUERY.fullmatch(right.strip()):
                break  # two tensors' dtypes alike (`a.dtype() == b.dtype()`): no dtype named
            spelled = right.strip()
            accepted.add(spelled[len(DLPACK_PREFIX) :] if spelled.startswith(DLPACK_PREFIX) else "")
        else:
            allowed = accepted if allowed is None else allowed & accepted
    return allowed


_SIZE_QUERY = re.compile(
    r"^(?P<tensor>\w+)(?:\s*\.\s*value\s*\(\s*\))?\s*(?:\.|->)\s*(?:size\s*\(\s*(?P<axis>-?\d+)\s*\)|shape\s*\(\s*\)\s*\[\s*(?P<index>-?\d+)\s*\])$"
)
"""A size query (``x.size(1)``, ``x.shape()[1]``; of an optional's tensor, ``x.value().size(1)``,
as the analysis takes an optional tensor: given)."""
_RANK_QUERY = re.compile(r"^\s*(?P<tensor>\w+)\s*(?:\.|->)\s*n?dim\s*\(\s*\)\s*$")
"""A rank query (``x.dim()``, TVM-FFI's ``x.ndim()``)."""
_EQUALITY_CHECK = re.compile(r"CHECK_EQ$")
_RANK_CHECK = re.compile(r"CHECK_DIM$")
_SHAPE_CHECK = re.compile(r"CHECK_SHAPE$")


@dataclass
class _Axes:
    """Union-find over tensor axes ``(tensor, axis)`` and locals ``("", name)``."""

    parent: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)

    def find(self, node: tuple[str, str]) -> tuple[str, str]:
        while self.parent.get(node, node) != node:
            node = self.parent[node]
        return node

    def join(self, a: tuple[str, str], b: tuple[str, str]) -> None:
        self.parent[self.find(a)] = self.find(b)

    def joined(self, node: tuple[str, str]) -> bool:
        """Whether ``node``'s class holds another node: something was checked equal to it."""
        root = self.find(node)
        return any(other != root and self.find(other) == root for other in self.parent)


def _axis_node(expression: str, call: CallSite) -> tuple[str, str] | None:
    """The axis or local an equality check's side names, a local holding a size query
    followed to its axis (``hidden_size = input.size(1)``); None for anything else."""
    expression = expression.strip()
    seen: set[str] = set()
    while expression in call.locals and expression not in seen:
        seen.add(expression)
        expression = call.locals[expression].strip()
    query = _SIZE_QUERY.match(expression)
    if query is not None:
        return (query["tensor"], query["axis"] or query["index"])
    return ("", expression) if re.fullmatch(r"\w+", expression) else None


MAX_LOCAL_DEPTH = 8
"""How many caller locals deep :func:`size_expression` follows one local's initialiser."""
_SIZE_OPERATORS = {"+": "+", "-": "-", "*": "*", "/": "//", "%": "%"}
"""C++'s integer operators of a size expression, as the contract writes them (sizes are whole
numbers, so ``/`` is the floor division it is on unsigned values)."""


def size_expression(written: str, locals_: dict[str, str], dims: set[str]) -> str | None:
    """A caller's C++ size expression over ``dims`` as a contract expression, or None where it
    reads anything else: whole-number literals, ``dims`` by name, other locals through their
    initialisers (``m_pad = (batch_size + 3) & ~3u``), parentheses, ``+ - * / %``, and the
    rounding down by a mask ``a & ~M`` with ``M + 1`` a power of two, ``a // (M + 1) * (M +
    1)`` for the whole numbers sizes are (the contract's grammar has no bitwise operators).
    An expression of more than one term comes parenthesised."""

    def read(node: Node | None, depth: int) -> str | None:
        if node is None or depth > MAX_LOCAL_DEPTH:
            return None
        node = unparenthesised(node)
        if node.type == "number_literal":
            value = _whole_literal(node)
            return None if value is None else str(value)
        if node.type == "identifier":
            name = text(node)
            if name in dims:
                return name
            return read(expression_node(locals_[name]), depth + 1) if name in locals_ else None
        if node.type != "binary_expression":
            return None
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        operator = text(node.child_by_field_name("operator"))
        if operator == "&":
            mask = _inverted_literal(right) if right is not None else None
            rounded = read(left, depth)
            if mask is None or rounded is None or mask & (mask + 1):
                return None  # a mask that is no power of two less one is no rounding
            return f"({rounded}) // {mask + 1} * {mask + 1}"
        a, b = read(left, depth), read(right, depth)
        if operator not in _SIZE_OPERATORS or a is None or b is None:
            return None
        return f"({a}) {_SIZE_OPERATORS[operator]} ({b})"

    found = read(expression_node(written), 0)
    if found is None:
        return None
    body = expr.parse(found).body
    # parenthesised as a derived dim is: a shape's axes are multiplied as written
    return (
        ast.unparse(body) if isinstance(body, ast.Name | ast.Constant) else f"({ast.unparse(body)})"
    )


def _inverted_literal(node: Node) -> int | None:
    """``M`` of ``~M`` (a whole-number literal), or None."""
    node = unparenthesised(node)
    operand = node.child_by_field_name("argument")
    if node.type != "unary_expression" or text(node.child_by_field_name("operator")) != "~":
        return None
    return _whole_literal(operand) if operand is not None else None


def _whole_literal(node: Node) -> int | None:
    """The value of a decimal or hexadecimal whole-number literal (any suffix), or None."""
    literal = text(node).rstrip("uUlL")
    if node.type != "number_literal" or not re.fullmatch(r"0[xX][0-9a-fA-F]+|\d+", literal):
        return None
    return int(literal, 0)


def _counted_from_end(call: CallSite, tensor: str, dim: str) -> bool:
    """Whether ``dim`` is a local of the caller holding a size of ``tensor`` counted from the
    end (``rope_dim = q_rope_in.size(-1)``)."""
    query = _SIZE_QUERY.match(call.locals.get(dim, "").strip())
    return (
        query is not None
        and query["tensor"] == tensor
        and (query["axis"] or query["index"]).startswith("-")
    )


def _checked_ranks(call: CallSite) -> dict[str, int]:
    """The rank ``CHECK_DIM(r, t)`` states for each tensor it checks."""
    return {
        args[1].strip(): int(args[0])
        for name, args in call.checks
        if _RANK_CHECK.search(name) and len(args) == 2 and args[0].strip().isdigit()
    }


def _sizes_checked(call: CallSite, tensor: str) -> bool:
    """Whether a check of the caller other than its rank's names ``tensor``'s sizes
    (``block_scale.size(0) == hidden_size >> 7``, through a local or not, or
    ``CHECK_SHAPE(tensor, other)``)."""
    query = re.compile(rf"(?<![\w.]){re.escape(tensor)}\s*(?:\.|->)\s*(?:size|sizes|shape|numel)\b")
    for name, args in call.checks:
        if _RANK_CHECK.search(name):
            continue
        if _SHAPE_CHECK.search(name) and tensor in (a.strip() for a in args):
            return True
        for arg in args:
            held = [call.locals[w] for w in re.findall(r"\w+", arg) if w in call.locals]
            if any(query.search(said) for said in (arg, *held)):
                return True
    return False


def fact_equalities(fact: str, call: CallSite) -> list[tuple[str, str]]:
    """The equalities a host-check fact (:attr:`CallSite.facts`) asserts whenever the call is
    made: each ``a == b`` term of its top-level ``&&`` chain, and of ``E`` in ``!x.has_value()
    || E`` where ``x`` is one of the caller's optional tensors (taken as given, as the analysis
    takes its ``data_ptr()``); no term of any other disjunction (a check under an ``if``,
    ``!(c) || (...)``, holds only where ``c`` does)."""
    optional = {p.name for p in call.params if re.search(r"(?i)optional\b.*tensor", p.type)}
    found: list[tuple[str, str]] = []
    node = expression_node(fact)
    stack = [node] if node is not None else []
    while stack:
        term = unparenthesised(stack.pop())
        left, right = term.child_by_field_name("left"), term.child_by_field_name("right")
        if term.type != "binary_expression" or left is None or right is None:
            continue
        operator = text(term.child_by_field_name("operator"))
        if operator == "&&":
            stack += [right, left]
        elif operator == "||" and _absent_test(left) in optional:
            stack.append(right)
        elif operator == "==":
            found.append((text(left), text(right)))
    return found


def _absent_test(node: Node) -> str:
    """The name ``!x.has_value()`` tests, or ''."""
    match = re.fullmatch(r"!\s*(\w+)\s*\.\s*has_value\s*\(\s*\)", " ".join(text(node).split()))
    return match[1] if match else ""


def checked_shapes(
    call: CallSite,
    shapes: dict[str, list[str]],
    fallback: dict[str, list[str]] | None = None,
) -> dict[str, list[str]]:
    """Shapes the caller's checks give tensors: the rank from ``CHECK_DIM(r, t)``, each axis
    the dim of an axis in ``shapes`` (or of a local) it is checked equal to, through
    ``*_CHECK_EQ`` of sizes, ``CHECK_SHAPE(a, b)`` and the equalities of its other checks
    (:func:`fact_equalities`: SGLang's ``RuntimeCheck(out.size(0) == idx.size(0))``, and
    ``idx.ndim() == 1`` a rank); an axis tied to no dim, the one size expression over the dims
    of ``shapes`` it is checked equal to (:func:`size_expression`: FlashInfer's
    ``block_scale.size(0) == hidden_size / 128`` is ``hidden_size // 128``, ``indptr.size(0) ==
    batch_size + 1`` is ``batch_size + 1``). Axes the checks tie to each other and to no known
    dim take the launch's own fallback name for one of them (``fallback``, the shapes before the
    known ones were picked: FlashInfer's ``apply_rope`` passes ``q.size(0)`` itself and checks
    ``q.size(0) == k.size(0)``, so q's and k's rows are one dim, ``tokens``, where the launch
    alone named k's ``k_0``). A dim the launch drafted at fewer axes than the checked rank that
    is a size counted from the end (``rope_dim = q.size(-1)`` of a q checked 3-D, drafted
    ``[nnz, rope_dim]``) names no axis counted from the front (:func:`_counted_from_end`): its
    local names the last. A tensor of unknown rank, or with an axis tied to none of these,
    is left out."""
    ranks = _checked_ranks(call)
    least: dict[str, int] = {}
    axes = _Axes()
    same: list[tuple[str, str]] = []
    equal = [
        (args[0], args[1])
        for name, args in call.checks
        if _EQUALITY_CHECK.search(name) and len(args) == 2
    ]
    for fact in call.facts:
        for pair in fact_equalities(fact, call):
            counted = next(
                (
                    (query["tensor"], other.strip())
                    for side, other in (pair, pair[::-1])
                    if (query := _RANK_QUERY.match(side)) is not None
                ),
                None,
            )
            if counted is not None and counted[1].isdigit():
                ranks.setdefault(counted[0], int(counted[1]))  # `x.ndim() == 1`
            else:
                equal.append(pair)
    for name, args in call.checks:
        if _SHAPE_CHECK.search(name) and len(args) == 2:
            same.append((args[0].strip(), args[1].strip()))
    computed: dict[tuple[str, str], list[str]] = {}
    for pair in equal:
        left, right = (_axis_node(a, call) for a in pair)
        if left is not None and right is not None:
            axes.join(left, right)
            for side, side_axis in (left, right):
                if side and side_axis.isdigit():
                    least[side] = max(least.get(side, 0), int(side_axis) + 1)
        for node, other in ((left, pair[1]), (right, pair[0])):
            if node is not None and node[0] and (left is None or right is None):
                # `block_scale.size(0) == hidden_size / 128`: an axis of a computed size
                computed.setdefault(node, []).append(other)
    # a tensor without CHECK_DIM has at least the axes its checks name (gemma_rmsnorm checks
    # output.size(1) and no rank), as the launch's own queries give a rank
    for checked, count in least.items():
        ranks.setdefault(checked, count)
    for a, b in same:
        if a in ranks or b in ranks:
            common = ranks.get(a, ranks.get(b, 0))
            ranks.setdefault(a, common)
            ranks.setdefault(b, common)
        for index in range(max(ranks.get(a, 0), ranks.get(b, 0))):
            axes.join((a, str(index)), (b, str(index)))
    known: dict[tuple[str, str], str] = {}
    clashes: set[tuple[str, str]] = set()

    def learn(node: tuple[str, str], dim: str) -> None:
        root = axes.find(node)
        if known.setdefault(root, dim) != dim:
            clashes.add(root)  # checked equal to two different dims: neither is taken

    for tensor, dims in shapes.items():
        # an axis counted from the end names the same axis only at the tensor's true rank
        # (two axes read of a tensor checked as 3-D: its -1 is not the second)
        whole = ranks.get(tensor, len(dims)) == len(dims)
        for axis, dim in enumerate(dims):
            if not whole and _counted_from_end(call, tensor, dim):
                # drafted at too few axes from `size(-1)`: at the checked rank not this axis
                continue
            for index in (axis, axis - len(dims)) if whole else (axis,):
                learn((tensor, str(index)), dim)
        for dim in dims:
            learn(("", dim), dim)
    for local, value in call.locals.items():
        # `head_dim = x.size(2)`: the caller's name for that axis, as the analysis names it
        query = _SIZE_QUERY.match(value.strip())
        if query is not None and re.fullmatch(r"\w+", local):
            learn((query["tensor"], query["axis"] or query["index"]), local)

    # a tie of axes no known dim names takes the first fallback name among them, in the
    # launch's order of tensors (a class the checks did not join stays one axis: no evidence)
    for tensor, dims in (fallback or {}).items():
        for axis, dim in enumerate(dims):
            root = axes.find((tensor, str(axis)))
            taken = dim in known.values()  # another class's name: two dims would become one
            if root not in known and root not in clashes and not taken and axes.joined(root):
                known[root] = dim

    def dim_of(node: tuple[str, str]) -> str | None:
        root = axes.find(node)
        return None if root in clashes else known.get(root)

    named = {dim for dims in shapes.values() for dim in dims}

    def computed_of(shaped: str, index: int, rank: int) -> str | None:
        """The one size expression over ``named`` dims the checks equate the axis with."""
        written = computed.get((shaped, str(index)), []) + computed.get(
            (shaped, str(index - rank)), []
        )
        values = {size_expression(w, call.locals, named) for w in written}
        return values.pop() if len(values) == 1 else None

    out: dict[str, list[str]] = {}
    for shaped, rank in ranks.items():
        found: list[str] = []
        for index in range(rank):
            forward = (shaped, str(index))
            # counted from the end only where counted from the front says nothing (a clash
            # there is no gap to fill)
            found_dim = dim_of(forward)
            if found_dim is None and axes.find(forward) not in clashes:
                found_dim = dim_of((shaped, str(index - rank)))
            if found_dim is None:
                found_dim = computed_of(shaped, index, rank)
            if found_dim is None:
                break
            found.append(found_dim)
        else:
            out[shaped] = found
    return out


def shape_checker(
    call: CallSite,
) -> Reshape:
    """The ``reshape`` hook of :func:`~astra_graph.framework.launchers.analyse` for a launch
    composed with ``call``: each tensor the caller's checks shape (:func:`checked_shapes`)
    takes that shape, over the ranks read from the launch's own queries (``output.stride(1)``
    alone reads two axes of a tensor the binding checks as 3-D). The dims known are those named
    after the caller's locals; fallback names (``output_0``) are no evidence. A tensor the
    launch never sizes and the checks do not shape is refused: a binding checks its shapes in
    C++, so an unchecked one is not guessed. One the launch asks only strides of and the
    checks do not shape takes its twin's shape, as checked (:func:`~astra_graph.framework.
    launchers.strided_twin`, of the rank a ``CHECK_DIM`` states exactly), where the checks name
    none of its sizes (``block_scale.size(0) == hidden_size >> 7`` says a shape that no dim or
    size expression gives, which a twin's may contradict); it is refused where there is no
    twin."""

    def reshape(
        shapes: dict[str, list[str]], notes: list[str], read_only: frozenset[str]
    ) -> dict[str, list[str]]:
        def noted(how: str) -> set[str]:  # the tensors whose shape the analysis noted so
            return {t for t in shapes if any(n.startswith(f"{t}: {how}") for n in notes)}

        drafted = noted(DRAFTED_NOTE)
        strided = noted(STRIDED_NOTE)
        extended = noted(EXTENT_NOTE)
        named = {  # what the launch itself says of shapes (an extent or a twin is no word of it)
            t: s
            for t, s in shapes.items()
            if t not in drafted | strided | extended and all(d in call.locals for d in s)
        }
        checked = checked_shapes(call, named, shapes)
        out = dict(shapes)
        unchecked: list[str] = []
        for name, shape in shapes.items():
            if name in checked and (
                name in drafted | strided | extended or len(checked[name]) >= len(shape)
            ):
                out[name] = checked[name]
                if checked[name] != shape:
                    notes.append(f"{name}: shape {checked[name]} from {call.function}'s checks")
            elif name in drafted:
                raise Unmapped(
                    f"tensor {name!r}: neither the launcher asks its sizes nor does its "
                    f"caller {call.function} ({call.file.name}:{call.line}) check its shape"
                )
            elif name in strided:
                unchecked.append(name)
        stated = _checked_ranks(call)
        where = f"{call.function} ({call.file.name}:{call.line})"
        for name in unchecked:  # after the checks have shaped its twin
            if _sizes_checked(call, name):
                raise Unmapped(
                    f"tensor {name!r}: the launcher asks only its strides and its caller {where} "
                    "checks sizes of it that give no shape, so no other tensor's is assumed"
                )
            # the twin the analysis chose, over the shapes it chose from (it drafted the tensor
            # with that twin's axes, or with the rank its strides read where there was none);
            # a CHECK_DIM's rank is exact, and a twin's checked rank must be it
            reads = name in read_only
            twin = (
                strided_twin(name, stated[name], True, reads, out, notes)
                if name in stated
                else strided_twin(name, len(shapes[name]), False, reads, shapes, notes)
            )
            if twin is None:
                # its rank read from strides alone: FlashInfer's `q_rope.stride(1)`, drafted
                # 2-D with a unit head stride, faulted against itself on the H100 (537347b)
                raise Unmapped(
                    f"tensor {name!r}: the launcher asks only its strides and its caller "
                    f"{where} does not check its shape, and no tensor it sizes is its twin "
                    "(a name related to its own, or the main tensor's rank)"
                )
            out[name] = list(out[twin[0]])
            notes[:] = [n for n in notes if not n.startswith(f"{name}: {STRIDED_NOTE}")]
            notes.append(twin[1])
        shaped = drafted | ((strided | extended) & set(checked))
        said = tuple(f"{t}: {how}" for t in shaped for how in SHAPE_NOTES)
        notes[:] = [n for n in notes if not n.startswith(said)]
        return out

    return reshape
