"""Read a framework's CUDA C++ with a real parser: kernels, host launchers, launch sites, macros.

The parser is tree-sitter with its CUDA grammar (``tree-sitter-cuda``). Measured on this
project's framework-style fixtures (tests/fixtures/framework/csrc/layernorm.cu, whose torch
headers are not installed here): libclang 18.1.1 (``-x cuda --cuda-host-only -nocudainc
-nocudalib``, keep-going) reported 21 diagnostics and found **0 of 3** kernel launches, because
every launch sits in a lambda passed to an ``AT_DISPATCH`` macro that is undeclared without
torch's headers, and clang drops such an invalid call with its body; tree-sitter found 3 of 3
(launch syntax ``<<<...>>>`` is a node of the grammar) in under 1 ms, where libclang took
70 ms. A syntax tree is what the analysis needs: which host function launches which kernel with
which argument expressions, inside which dispatch macro. Types are not needed from the compiler
because the device code is compiled separately (:mod:`astra_graph.framework.device`).

Besides ``<<<>>>``, three launch calls are read into the same :class:`Launch` (kernel, template
arguments, grid, block, dynamic shared memory, arguments), so every launch form meets one
analysis: ``cudaLaunchKernel(kernel, grid, block, args, smem, stream)`` with the arguments as a
local ``void* args[] = {&a, &b}`` (FlashInfer), ``cudaLaunchKernelEx(&config, kernel, a, b)``
with the geometry from the fields of a local ``cudaLaunchConfig_t`` assigned before the call
(FlashInfer), and a launch helper applied to the kernel, ``LaunchKernel(grid, block, device[,
smem])[.enable_pdl(on)](kernel, a, b)`` (SGLang's JIT kernels). The kernel may be a local
(``auto kernel = K<VEC_SIZE, T>;``) or a member of the launcher's class, and may be cast
(``(void*)kernel``). What such a call does not say plainly (a kernel chosen at run time, a
class member declared under an ``#if`` the build does not decide, an ``args`` array that is not
a local list of addresses, a config field never assigned) is kept as the launch's
:attr:`Launch.unread` reason rather than guessed; a member under an ``#if``/``#else`` the build
decides (the arch flag a JIT injects, ``CUDA_VERSION``) is the branch the build takes. A call
whose kernel is a parameter of its own function (SGLang's ``LaunchKernel::operator()``
forwarding to ``cudaLaunchKernelEx``) is the helper itself, not a
launch site: its callers' launches are the sites.

A launch inside a generic lambda whose template parameter is one of its template arguments
(``[&]<bool BATCHED>() {... K<scalar_t, BATCHED><<<...>>> ...}``) is one :class:`Launch` per
call of the lambda (``launch.template operator()<true>()``), bound to that call's value and under
its ``if`` conditions: the parameter has a value only there.

Macros are read, not expanded, with one exception: a function-like macro whose body launches a
kernel (vLLM's ``LAUNCH_ACTIVATION_GATE_KERNEL``) is expanded where a host function calls it, so
the launch it writes is seen in the launcher that calls it.

tree-sitter is imported here only; ``astra kernels``, ``check`` and ``compile`` never import
this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from typing import TYPE_CHECKING

from astra_graph.kernel.expr import split_top_level

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from tree_sitter import Node, Parser

    from astra_graph.framework.reach import Facts, RowReach
    from astra_graph.framework.vectors import FunctionIndex, VectorAccess, VectorGuard

    # a pointer use's guarded read by a call (:func:`~astra_graph.framework.guarded.call_read`)
    CallReads = Callable[[Node], tuple[str, list[Node], Node] | str | None]


MAX_MACRO_DEPTH = 8
"""How deep macros are followed inside each other (a dispatch macro's case macros, the
object-like macros of a declaration) before giving up."""
ARGS_ARRAY_LAUNCH = "cudaLaunchKernel"
"""``cudaLaunchKernel(kernel, grid, block, args, smem = 0, stream = 0)``: arguments by address."""
CONFIG_LAUNCH = "cudaLaunchKernelEx"
"""``cudaLaunchKernelEx(&config, kernel, args...)``: geometry in a ``cudaLaunchConfig_t``."""
HELPER_LAUNCH = "LaunchKernel"
"""SGLang's ``LaunchKernel(grid, block, device[, smem])(kernel, args...)``."""
ARGS_ARRAY_MIN_ARGS = 4
"""``cudaLaunchKernel``'s shared memory and stream have defaults; kernel to ``args`` do not."""
HELPER_MIN_ARGS = 3
"""``LaunchKernel``'s grid, block and device; the dynamic shared memory is optional."""
CONFIG_FIELDS = {"grid": "gridDim", "block": "blockDim", "smem": "dynamicSmemBytes"}
"""The ``cudaLaunchConfig_t`` fields a launch's geometry is read from."""
ATTRIBUTES_NOTE = (
    "launch attributes (programmatic dependent launch and the like) are not in the contract; "
    "the operation launches without them"
)
UNREAD_LAUNCH_CALLS = ("cudaLaunchCooperativeKernel", "cudaLaunchKernelExC", "cuLaunchKernel")
"""Launch calls that are found and reported, not read yet."""
_VOID_CAST = re.compile(r"^\(\s*(?:const\s+)?void\s*\*\s*\)\s*")


SM_COUNT_ATTRIBUTE = "cudaDevAttrMultiProcessorCount"
"""The device attribute a launcher reads the multiprocessor count through."""
SM_COUNT_CALLS = ("get_sm_count",)
"""Framework helpers that return the multiprocessor count (SGLang's ``runtime::get_sm_count(
device_id)``, which asks :data:`SM_COUNT_ATTRIBUTE`)."""
SET_BY_CALL = "value_set_through_its_address_by_"
"""What a local set through its address by a call (``cudaOccupancyMaxActiveBlocks...(&n,
...)``) holds in :attr:`Launch.locals`: a call no size expression reads, so that a size
depending on it is refused with the call named, not taken at its initialiser."""
SET_BY_REFERENCE = "value_set_through_a_reference_by_"
"""What a local passed to a function of the source that takes that parameter by non-const
reference holds in :attr:`Launch.locals` (FlashInfer's ``uint32_t num_ctas = 0;
RopeResidentCtas(kernel, threads, num_ctas)``): the function may set it, so its initialiser is
not its value at the launch, and a size or condition that reads it is refused with the function
named (read at 0, FlashInfer's rotary launchers took the wrong branch for every shape)."""
OCCUPANCY_CALLS = ("cudaOccupancyMaxActiveBlocksPerMultiprocessor", "get_blocks_per_sm")
"""Calls that answer a kernel's resident blocks per multiprocessor: CUDA's runtime query (its
answer through its first, address argument) and SGLang's ``runtime::get_blocks_per_sm(kernel,
threads[, smem])``, which returns it; a size expression reads them as ``blocks_per_sm``
(:mod:`astra_graph.kernel.occupancy`)."""
DECLARED_VALUE = "declared as: "
"""Prefix of a :attr:`Launch.locals` key holding the initialiser of a local that a later call
sets through a reference (its own key then holds :data:`SET_BY_REFERENCE`): FlashInfer's
``uint32_t split = 1; RopeHeadSplit(..., split, ...)``. A launch dimension may take it as a
tunable's default (:func:`~astra_graph.framework.launchers.opaque_grid_tunable`); nothing else
reads it."""
REASSIGNED = "assigned after its declaration: "
"""Prefix of a :attr:`Launch.locals` key marking a local assigned after its declaration (the
value: the assignment's line): a size or scalar that reads it is refused with the assignment
named; a pointer keeps its initialiser, said in a note (an optional tensor taken as absent).
Assignments whose value at the launch is read carry no mark: a plain one in the launch's own
blocks (:func:`_assigned_value`) and a chain's on every path (:func:`_branch_values`)."""
REASSIGNED_IF_GIVEN = "assigned if an optional is given: "
"""Prefix of a :attr:`Launch.locals` key marking a local assigned only under an optional
tensor's ``has_value()`` (the value: where): it keeps its initialiser, the optional taken as
absent as its pointer is (:func:`~astra_graph.framework.launchers._pointer_source`), and the
import says so."""
GIVEN_VALUE = "value if an optional is given: "
"""Prefix of a :attr:`Launch.locals` key holding the value a local is first assigned under an
optional's ``has_value()`` (``output_scale_ptr = output_scale.value().data_ptr<float>()``): a
pointer passed at a launch that sits under that very condition is that value, not its
initialiser (vLLM's merge with an FP8 output reads its scale)."""
TYPE_ALIAS = "using "
"""Prefix of a :attr:`Launch.locals` key that holds a type alias (``using query_t = scalar_t``)."""
ARRAY_ITEMS = "array of: "
"""Prefix of a :attr:`Launch.locals` key marking a local array initialised by a list (SGLang's
``static const uint32_t kOccupancyTable[2] = {a, b}``; its own key holds the items joined by
commas; the marker's value is empty): a size expression may read one item at a constant index."""


class ParserUnavailable(RuntimeError):
    """tree-sitter or its CUDA grammar is not installed."""


@cache
def _parser() -> Parser:
    try:
        import tree_sitter
        import tree_sitter_cuda
    except ImportError as exc:
        raise ParserUnavailable(
            f"{exc.name} is not installed; `pip install tree-sitter tree-sitter-cuda`"
        ) from None
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_cuda.language()))


def text(node: Node | None) -> str:
    """The source text of a node (empty for None)."""
    return "" if node is None or node.text is None else node.text.decode(errors="replace")


@dataclass(frozen=True)
class Param:
    """One parameter of a kernel or host function, as written."""

    text: str
    name: str
    type: str
    """The type with qualifiers, ``*`` and ``&`` removed (``scalar_t``, ``torch::Tensor``)."""
    pointer: bool
    reference: bool
    const: bool


@dataclass(frozen=True)
class TemplateParam:
    name: str
    kind: str
    """``type``, ``value`` (an integer or enum), ``flag`` (bool) or ``function`` (a pointer)."""
    default: str | None = None
    """The default argument as written (``bool kReuseInput = false`` -> ``false``), or None."""


@dataclass(frozen=True)
class RowOffset:
    """A kernel's pointer parameter offset by a row index times a length in its body:
    ``input + row * 2 * d`` is (``input``, ``row``, (``2``, ``d``))."""

    pointer: str
    row: str
    length: tuple[str, ...]
    """The length's factors as written: names and decimal whole numbers."""


@dataclass(frozen=True)
class Extent:
    """How far a kernel reads a pointer parameter that it only reads by subscript: ``pos_ids[idx]``
    under ``if (idx < nnz)`` is (``pos_ids``, ``nnz``), a kernel parameter by value; ``scale[0]``
    alone is (``scale``, ``1``), one past the largest constant index."""

    pointer: str
    bound: str
    like: bool = False
    """Whether ``bound`` is another pointer parameter, offset exactly as this one is: this
    one's extent is that one's, whatever it is (and the kernel may write either)."""


@dataclass(frozen=True)
class StridedExtent:
    """How far a kernel reaches a pointer parameter that it only subscripts as a sum of index
    times stride: vLLM's ``prefix_lse[head_idx * prefix_lse_head_stride + token_idx *
    prefix_lse_token_stride]``, with ``head_idx = token_head_idx % num_heads`` and ``token_idx``
    below ``num_tokens`` by the kernel's early return, is (``prefix_lse``,
    ((``prefix_lse_head_stride``, ``num_heads``), (``prefix_lse_token_stride``, ``num_tokens``))):
    each by-value stride parameter with the by-value parameter its index stays below."""

    pointer: str
    axes: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class IndexedExtent:
    """How far a kernel reaches a pointer parameter at a row-major index of bounded indices
    (:func:`_indexed_extents`): FlashInfer's ``v_merged + (pos * num_heads + head_idx) *
    head_dim + tx * vec_size`` stored as a ``vec_t<float, vec_size>``, ``pos = blockIdx.x``,
    ``head_idx = threadIdx.y``, ``tx = threadIdx.x``, is (``v_merged``, (``gridDim.x``,
    ``num_heads``, ``head_dim``), ((``blockDim.y``, ``num_heads``), (``blockDim.x*vec_size``,
    ``head_dim``))). Each expression is a product (``*``-joined) of the kernel's by-value
    parameters, template parameters, whole numbers and ``gridDim``/``blockDim`` fields."""

    pointer: str
    axes: tuple[str, ...]
    """The first index's bound, then each stride: a tensor of this shape holds every index."""
    reaches: tuple[tuple[str, str], ...]
    """(how far an inner index reaches, the axis it must stay within) where the two are not
    written alike: the launch must keep each reach at most its axis."""
    left_out: tuple[str, ...] = ()
    """The axes a shorter row-major form of another use leaves out, where every other use's
    axes are these with some left out, in order (FlashInfer's ``AttentionSumKernel`` reads
    ``V`` at ``(pos * num_heads + head) * head_dim`` under ``num_index_sets == 1``, beside
    ``((pos * num_index_sets + iter) * num_heads + head) * head_dim``): such a use's index
    stays below its own axes' product, which is this shape's over the left-out axes', so the
    launch must keep each left-out axis at least 1 (:func:`_covering_axes`)."""


@dataclass(frozen=True)
class DirectExtents:
    """How far a kernel that takes CSR offsets or counts it may go without
    (:mod:`~astra_graph.framework.segments`) reaches its pointers, read for a direct import of a
    raw-pointer launcher (:func:`_indexed_extents` with those offsets and nulls): the launch
    passes null for each of ``nulls``, and a tensor of CSR offsets for each of ``offsets``."""

    nulls: tuple[str, ...]
    """The pointer parameters read only as ``p ? *p : e``, passed null."""
    offsets: tuple[tuple[str, str], ...]
    """(CSR offsets pointer, the bound of its segment index): it holds that many + 1."""
    indexed: tuple[IndexedExtent, ...]
    """As :attr:`Kernel.indexed`, a row placed by the offsets of the axis
    :data:`~astra_graph.framework.segments.OFFSET_ROWS`."""
    unindexed: tuple[tuple[str, str], ...]
    """As :attr:`Kernel.unindexed`."""


@dataclass(frozen=True)
class Kernel:
    """A ``__global__`` function definition."""

    name: str
    qualified: str
    """With its namespaces: ``fw::act_and_mul_kernel``."""
    template: tuple[TemplateParam, ...]
    params: tuple[Param, ...]
    line: int
    row_offsets: tuple[RowOffset, ...] = ()
    """How the body offsets its pointer parameters by rows (:func:`_row_offsets`), where the
    kernel's own row lengths are read
    (:func:`~astra_graph.framework.launchers.kernel_row_length`)."""
    extents: tuple[Extent, ...] = ()
    """How far the body reads the pointers it only subscripts (:func:`_extents`)."""
    strided: tuple[StridedExtent, ...] = ()
    """How far the body reaches the pointers it subscripts by strides (:func:`_strided_extents`)."""
    differenced: tuple[str, ...] = ()
    """The pointers whose elements the body subtracts from each other (:func:`_differenced`)."""
    casts: tuple[tuple[str, str], ...] = ()
    """The one pointee type the body casts each pointer parameter or params-struct field to
    (:func:`_pointer_casts`): SGLang's ``static_cast<const IdType*>(params.positions)`` gives
    its ``const void*`` field the element ``IdType``."""
    offset_uses: tuple[tuple[str, str, str], ...] = ()
    """Where the body offsets another pointer parameter by an expression reading a
    :attr:`differenced` pointer's elements (:func:`_offset_uses`): (differenced pointer, offset
    pointer, the offset as written without blanks)."""
    scattered: tuple[tuple[str, str], ...] = ()
    """(slot pointer, written pointer): the pointers whose elements place the body's stores
    into another (:func:`_scattered`)."""
    gathered: tuple[tuple[str, str, bool], ...] = ()
    """(id pointer, offset pointer, scaled): the pointers whose elements offset the body's reads
    and writes of another, as row ids (scaled) or element ids (:func:`_gathered`)."""
    indexed: tuple[IndexedExtent, ...] = ()
    """How far the body reaches the pointers it reaches at row-major indices
    (:func:`_indexed_extents`)."""
    vectors: tuple[VectorAccess, ...] = ()
    """The body's vector-width accesses and their offsets
    (:func:`~astra_graph.framework.vectors.kernel_vector_accesses`)."""
    vector_guards: tuple[VectorGuard, ...] = ()
    """The body's tests of a thread's first vector element against an extent
    (:func:`~astra_graph.framework.vectors.kernel_vector_guards`)."""
    asserted: tuple[str, ...] = ()
    """The conditions of the body's ``static_assert`` s outside any branch, in the kernel's
    template parameters (:func:`_kernel_asserted`): every instantiation that builds meets them."""
    asserts_unread: tuple[str, ...] = ()
    """Why each other such ``static_assert`` is not among :attr:`asserted` (it reads a local that
    is not read in), for the operation's notes."""
    row_reaches: tuple[RowReach, ...] = ()
    """How far the body (its device functions included) reaches past the start of each strided
    row of the pointers it writes through
    (:func:`~astra_graph.framework.reach.kernel_row_reaches`)."""
    unindexed: tuple[tuple[str, str], ...] = ()
    """(pointer, why) for each pointer parameter the body reaches that has no
    :attr:`indexed` shape (:func:`_indexed_extents`): a launcher whose raw pointer is one has
    no shape to import for it, and says why."""
    direct: DirectExtents | None = None
    """What a direct import reads instead of :attr:`indexed` and :attr:`unindexed`, where the
    kernel takes CSR offsets or counts it may go without (:func:`_direct_extents`)."""
    id_rows: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    """(table pointer, id pointer, row length factors) for each pointer parameter the body
    reaches only at rows an id pointer's elements name (:func:`_id_row_tables`)."""


@dataclass(frozen=True)
class BranchPath:
    """One path through an ``if``/``else`` chain that reaches its end: the conditions that
    choose it, as ``(condition, True in its then-branch)``; the locals it declares or sets, in
    order, each with its value there; and its host checks."""

    conditions: tuple[tuple[str, bool], ...]
    values: tuple[tuple[str, str], ...]
    checks: tuple[str, ...]
    declared: tuple[str, ...] = ()
    """The locals among :attr:`values` that the path declares (of its branch's own scope)."""


@dataclass(frozen=True)
class Chain:
    """An ``if``/``else`` chain before a launch (:attr:`Launch.branches`): its paths, and the
    lines it spans (a :data:`REASSIGNED` mark of a line inside it is one of its paths')."""

    paths: tuple[BranchPath, ...]
    first_line: int
    last_line: int


@dataclass(frozen=True)
class Launch:
    """One ``kernel<targs><<<grid, block, smem, stream>>>(args)`` inside a host function."""

    kernel: str
    """The name as written at the launch (may be qualified)."""
    template_args: tuple[str, ...]
    grid: str
    block: str
    smem: str
    stream: str
    args: tuple[str, ...]
    dispatch: tuple[tuple[str, tuple[str, ...]], ...]
    """The enclosing dispatch macro calls, innermost first: (macro name, argument texts)."""
    line: int
    locals: dict[str, str] = field(default_factory=dict)
    """Each local variable visible at the launch and its initialiser (``d`` ->
    ``input.size(-1) / 2``; ``dim3 grid(n)`` -> ``n``), inner scopes winning; a field assigned
    before the launch (``params.rows = ...``) is keyed ``params.rows``."""
    conditions: tuple[tuple[str, bool], ...] = ()
    """The ``if`` conditions the launch sits under: (condition, True in its then-branch), and
    the host checks before it (:func:`_matchers`)."""
    checks: tuple[str, ...] = ()
    """The host checks among :attr:`conditions`: facts of every path to the launch, not a
    choice between launches, so an optional tensor's ``has_value()`` in one reads as the import
    takes it (given)."""
    api: str = ""
    """The launch call (``cudaLaunchKernelEx``), or '' for ``<<<>>>``."""
    unread: str = ""
    """Why a launch call could not be read (a kernel chosen by a device value...), or ''."""
    choice: str = ""
    """Which of the kernels a run-time choice picks this launch stands for (``is_int32 true``,
    ``select_kernel(type): type == "silu"``), or '' when the launch names one kernel."""
    notes: tuple[str, ...] = ()
    """What the launch call sets that the contract does not hold (launch attributes)."""
    matched: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = ()
    """The tensor-shape matchers run before the launch on every path to it (SGLang's
    ``TensorMatcher({N, D}).with_strides({S, 1}).verify(x)``): (tensor, its sizes, its
    strides) as the matcher names them, the first matcher of each tensor (:func:`_matchers`)."""
    typed: tuple[tuple[str, str], ...] = ()
    """(tensor, C++ element type) for each tensor a matcher before the launch on every path to
    it requires to have one element type (SGLang's ``TensorMatcher({-1, D}).with_dtype<float>()
    .verify(cos_sin_cache)``), the first such matcher of each tensor (:func:`_matcher_types`):
    the framework's own statement of what a ``void*`` field holds."""
    written: str = ""
    """The launch call's kernel argument as written (``kernel``, a local or class member that
    names :attr:`kernel`), '' for ``<<<>>>``: an occupancy query of the same expression in the
    same scope asks about the launched kernel."""
    followed: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """The value dispatches this launch follows at run time rather than fixing one case
    (:func:`~astra_graph.framework.values.value_variants`): (the run-time expression switched
    on, as written; its cases' values)."""
    branches: tuple[Chain, ...] = ()
    """The ``if``/``else`` chains before the launch on every path to it that set locals the
    launch's own blocks leave marked (:data:`REASSIGNED`): each chain's paths
    (:func:`chain_paths`), one of which runs; :func:`~astra_graph.framework.values.
    branch_variants` makes one launch of each."""


@dataclass(frozen=True)
class Launcher:
    """A host function that launches at least one ``__global__`` kernel."""

    name: str
    params: tuple[Param, ...]
    launches: tuple[Launch, ...]
    line: int
    template: tuple[TemplateParam, ...] = ()
    """The template parameters of the launcher's enclosing class templates and its own
    (SGLang's ``template <typename DType, bool kUsePDL> struct K { static void run(...); }``):
    the caller instantiates them, so the element type may be one of them."""
    own_template: int = 0
    """How many of :attr:`template`'s last parameters are the launcher's own (a function
    template's), which a call's explicit template arguments bind in order."""
    instantiated: tuple[tuple[str, str], ...] = ()
    """(dtype, C++ type) for each element type its callers in the file instantiate its one
    type parameter with (:func:`~astra_graph.framework.instantiations.caller_element_types`:
    vLLM's merge, ``uint16_t`` for float16); empty where they are not read."""


@dataclass(frozen=True)
class Macro:
    name: str
    params: tuple[str, ...]
    body: str


@dataclass(frozen=True)
class ReturnOnly:
    """A host function whose body is one ``return`` beside ``static_assert`` s (SGLang's
    ``constexpr uint32_t get_cta_threads() { return (kDim / 256) * device::kWarpThreads; }``):
    a size expression that calls it reads the returned expression, its template parameters and
    parameters replaced by the call's arguments."""

    template: tuple[str, ...]
    params: tuple[str, ...]
    returned: str
    scope: tuple[str, ...] = ()
    """The namespaces and classes it is defined in, outermost first: an unqualified name in
    :attr:`returned` is looked up there, innermost first, as C++ does."""


@dataclass(frozen=True)
class Procedure:
    """A host function whose body does more than return (SGLang's ``constexpr auto
    next_pow2(uint32_t target, uint32_t factor = 1)``, a ``while`` loop): a size expression that
    calls it runs the body over the call's arguments
    (:func:`~astra_graph.framework.interpret.call`)."""

    template: tuple[str, ...]
    params: tuple[str, ...]
    kinds: tuple[str, ...]
    """Each parameter's type as :class:`Param` spells it (``uint32_t``), '' for a reference or
    pointer, which holds no whole number."""
    defaults: tuple[str | None, ...]
    """Each parameter's default argument as written, or None."""
    body: str
    """The body's source, braces included."""
    scope: tuple[str, ...] = ()
    """The namespaces and classes it is defined in, outermost first (:attr:`ReturnOnly.scope`)."""


@dataclass
class Source:
    """What one (flattened) translation unit declares."""

    kernels: list[Kernel] = field(default_factory=list)
    launchers: list[Launcher] = field(default_factory=list)
    macros: dict[str, Macro] = field(default_factory=dict)
    structs: dict[str, list[Param]] = field(default_factory=dict)
    """Struct and class fields by unqualified name (a kernel's ``Params`` argument)."""
    constants: dict[str, str] = field(default_factory=dict)
    """``constexpr`` values at namespace or class scope by qualified name
    (``vllm::VecTraits<true>::ARCH_MAX_VEC_SIZE`` -> ``32``), which launchers use in sizes, and
    object-like macros the build defines (``SGL_ARCH_BLACKWELL_OR_GREATER``)."""
    returns: dict[str, ReturnOnly | None] = field(default_factory=dict)
    """Every host function by qualified name (template arguments left out): its
    :class:`ReturnOnly`, or None where it does more than return or has several definitions
    (overloads, specialisations)."""
    procedures: dict[str, Procedure | None] = field(default_factory=dict)
    """Every host function, keyed as :attr:`returns` is: its :class:`Procedure` where it is no
    :class:`ReturnOnly`, else None, as where several definitions share the key."""
    other_launches: list[tuple[str, int, str]] = field(default_factory=list)
    """Host functions that launch through a call of :data:`UNREAD_LAUNCH_CALLS`: (function,
    line, the call), so that they are reported rather than missed."""


_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "struct", "typename", "class"}


def _static_member(member: Node) -> bool:
    """Whether a class member is no data member of each object (``static``, a function)."""
    return "static" in text(member).split("=", 1)[0].split() or any(
        c.type == "function_declarator" for c in member.children_by_field_name("declarator")
    )


def _struct_fields(member: Node) -> list[Param]:
    """The data members one field declaration declares (``uint32_t n, m;`` declares two). An
    array or bit-field member gets the type ``array`` or ``bit-field``, which no binding
    packs, so a struct holding one is refused with its name rather than laid out wrongly."""
    fields = []
    type_words = re.findall(r"[\w:]+", text(member.child_by_field_name("type")))
    for node in member.children_by_field_name("declarator"):
        decl = text(node)
        names = re.findall(r"[A-Za-z_]\w*", decl.split("[", 1)[0])
        kind = " ".join(w for w in type_words if w not in _QUALIFIERS)
        if "[" in decl:
            kind = "array"
        elif any(c.type == "bitfield_clause" for c in member.children):
            kind = "bit-field"
        fields.append(
            Param(
                text=text(member),
                name=names[-1] if names else decl,
                type=kind,
                pointer="*" in decl,
                reference=False,
                const=text(member).lstrip().startswith("const"),
            )
        )
    return fields


def _param(node: Node) -> Param:
    raw = text(node)
    declarator = node.child_by_field_name("declarator")
    name = ""
    probe = declarator
    while probe is not None:
        if probe.type in ("identifier", "field_identifier"):
            name = text(probe)
            break
        probe = probe.child_by_field_name("declarator") or next(
            (c for c in probe.named_children if c.type != "type_qualifier"), None
        )
    type_text = text(node.child_by_field_name("type"))
    words = [w for w in re.findall(r"[\w:]+", type_text) if w not in _QUALIFIERS]
    decl = text(declarator)
    return Param(
        text=raw,
        name=name,
        type=" ".join(words),
        pointer="*" in decl or "[" in decl,
        reference="&" in decl,
        const="const" in raw.split(name)[0] if name else "const" in raw,
    )


def _params(function_declarator: Node) -> tuple[Param, ...]:
    plist = function_declarator.child_by_field_name("parameters")
    if plist is None:
        return ()
    return tuple(
        _param(c)
        for c in plist.named_children
        if c.type in ("parameter_declaration", "optional_parameter_declaration")
    )


def _template_params(template: Node) -> tuple[TemplateParam, ...]:
    out = []
    plist = template.child_by_field_name("parameters")
    for child in plist.named_children if plist else []:
        raw = text(child)
        if child.type == "comment" or not re.search(r"\w", raw.split("=")[0]):
            continue  # a comment between the parameters (vLLM's cutlass conversions), no name
        if child.type in ("type_parameter_declaration", "optional_type_parameter_declaration"):
            names = re.findall(r"\w+", raw.split("=")[0])
            out.append(TemplateParam(names[-1], "type"))
            continue
        pointer = re.search(r"\(\s*\*\s*(\w+)\s*\)", raw)
        if pointer:
            out.append(TemplateParam(pointer[1], "function"))
            continue
        names = re.findall(r"\w+", raw.split("=")[0])
        _, equals, default = raw.partition("=")
        kind = "flag" if names[0] == "bool" else "value"
        out.append(TemplateParam(names[-1], kind, default.strip() if equals else None))
    return tuple(out)


def _enclosing_templates(node: Node) -> tuple[TemplateParam, ...]:
    """The template parameters of every template declaration around ``node`` (its own
    function template's and its classes'), outermost first."""
    found: list[TemplateParam] = []
    parent = node.parent
    while parent is not None:
        if parent.type == "template_declaration":
            found[:0] = _template_params(parent)
        parent = parent.parent
    return tuple(found)


def _asserted(definition: Node) -> tuple[str, ...]:
    """The conditions of the ``static_assert`` s that hold wherever the launcher is built: in
    its body outside any branch, and at the scope of each class around it (SGLang's
    ``RMSNormHalfKernel`` asserts ``kDim % 512 == 0 && sizeof(DType) == 2``). They are host
    checks of every launch in it: the framework builds the launcher only where they hold, and
    the kernel alone compiles where they do not (its float32 build faulted, misaligned, on the
    H100)."""
    scopes = [definition.child_by_field_name("body")]
    parent = definition.parent
    while parent is not None:
        if parent.type == "field_declaration_list":
            scopes.append(parent)
        parent = parent.parent
    found: list[str] = []
    for scope in scopes:
        for child in scope.named_children if scope is not None else []:
            if child.type == "static_assert_declaration":
                condition = child.child_by_field_name("condition")
                if condition is not None:
                    found.append(" ".join(text(condition).split()))
    return tuple(found)


def name_pattern(names: Iterable[str]) -> str:
    """A regular expression of any of ``names`` as a name of its own: a word not after ``.``,
    ``::`` or ``->`` (a member or a qualified name is another name)."""
    return r"(?<![\w.])(?<!::)(?<!->)(" + "|".join(map(re.escape, names)) + r")(?!\w)"


def bound_names(condition: str, bound: Mapping[str, str]) -> str:
    """``condition`` with each of ``bound`` 's names (:func:`name_pattern`) replaced at once by
    its value, parenthesised where it is more than one word."""
    if not bound:
        return condition

    def value(match: re.Match[str]) -> str:
        written = bound[match[1]]
        return written if re.fullmatch(r"[\w:]+", written) else f"({written})"

    return re.sub(name_pattern(bound), value, condition)


def _kernel_asserted(body: Node) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The conditions of the ``static_assert`` s at the top of a kernel's body (outside any
    branch: one under ``if constexpr`` holds only where its branch is built), each
    ``constexpr`` local declared before it read into it (SGLang's rope kernel asserts
    ``kRopeDim % kDimPerThread == 0 && kLaneCount <= kWorkThreads``, its locals computed from
    its template values by ``next_pow2``). They leave only the template parameters and what the
    kernel's scope names, so the launch can read them at its template arguments. An assert
    that reads a local not read in (two declared at once, one not ``constexpr``) is left out,
    with why (the second tuple): the launch's scope may give that name another value."""
    values: dict[str, str] = {}
    opaque: set[str] = set()
    found: list[str] = []
    unread: list[str] = []

    def inlined(written: str) -> str:
        for name, value in reversed(values.items()):  # later locals read earlier ones
            written = bound_names(written, {name: value})
        return " ".join(written.split())

    for child in body.named_children:
        if child.type == "static_assert_declaration":
            condition = child.child_by_field_name("condition")
            read = inlined(text(condition)) if condition is not None else ""
            opaque_read = re.search(name_pattern(opaque), read) if opaque and read else None
            if opaque_read is not None:
                unread.append(
                    f"static_assert({read}) reads the local {opaque_read[1]!r}, not read in"
                )
            elif read:
                found.append(read)
        elif child.type == "declaration":
            constexpr = any(
                c.type == "type_qualifier" and text(c) == "constexpr" for c in child.named_children
            )
            local = _one_local(child, ()) if constexpr else None
            if local is not None:
                values[local[0]] = local[1]
                opaque.discard(local[0])
                continue
            for declarator in child.children_by_field_name("declarator"):
                named = declarator.child_by_field_name("declarator") or declarator
                opaque |= {text(named)} if named.type == "identifier" else set()
    return tuple(found), tuple(unread)


def _own_template(definition: Node) -> tuple[TemplateParam, ...]:
    """A function template's own template parameters (none for a plain function)."""
    parent = definition.parent
    return _template_params(parent) if parent and parent.type == "template_declaration" else ()


def _function_declarator(definition: Node) -> Node | None:
    probe = definition.child_by_field_name("declarator")
    while probe is not None and probe.type != "function_declarator":
        probe = probe.child_by_field_name("declarator")
    return probe


def _namespaces(node: Node) -> list[str]:
    names = []
    parent = node.parent
    while parent is not None:
        if parent.type == "namespace_definition":
            names.append(text(parent.child_by_field_name("name")))
        parent = parent.parent
    return [n for n in reversed(names) if n]


def _is_kernel(definition: Node) -> bool:
    head = text(definition).split("(", 1)[0]
    return "__global__" in head.split()


def _launch_of(call: Node) -> Node | None:
    return next((c for c in call.children if c.type == "kernel_call_syntax"), None)


def _dispatch_chain(node: Node) -> tuple[tuple[str, tuple[str, ...]], ...]:
    chain = []
    parent = node.parent
    while parent is not None and parent.type != "function_definition":
        if parent.type == "call_expression":
            func = text(parent.child_by_field_name("function"))
            if "DISPATCH" in func:
                args = parent.child_by_field_name("arguments")
                chain.append((func, tuple(text(a) for a in (args.named_children if args else []))))
        parent = parent.parent
    return tuple(chain)


def _launch(call: Node) -> Launch:
    function = call.child_by_field_name("function")
    name_node = function
    targs: tuple[str, ...] = ()
    template = function
    if function is not None and function.type == "qualified_identifier":
        template = function.child_by_field_name("name")
        while template is not None and template.type == "qualified_identifier":
            template = template.child_by_field_name("name")
    if template is not None and template.type == "template_function":
        arguments = template.child_by_field_name("arguments")
        targs = tuple(text(a) for a in (arguments.named_children if arguments else []))
        scope = text(function)[: len(text(function)) - len(text(template))]
        name_node = None
        kernel = scope + text(template.child_by_field_name("name"))
    else:
        kernel = text(name_node)
    scoped, conditions = _scope(call)
    matched, checks = _matchers(call)
    conditions = (*conditions, *checks)
    config = [text(c) for c in (_launch_of(call) or call).named_children]
    config += ["0", "0"][: max(0, 4 - len(config))]
    args = call.child_by_field_name("arguments")
    return Launch(
        kernel=kernel,
        template_args=targs,
        grid=config[0],
        block=config[1],
        smem=config[2],
        stream=config[3] if len(config) > 3 else "0",
        args=_arguments(args),
        dispatch=_dispatch_chain(call),
        line=call.start_point[0] + 1,
        locals=scoped,
        conditions=conditions,
        checks=tuple(c for c, _ in checks),
        matched=matched,
        typed=_matcher_types(call),
        branches=_chains(call, scoped),
    )


def _walk(node: Node, types: tuple[str, ...]) -> list[Node]:
    found = []
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type in types:
            found.append(current)
        stack.extend(reversed(current.children))
    return found


def _joined(arguments: list[str], kind: str) -> str:
    """A constructor's arguments as a local's value: ``dim3 block(32, num_warps)`` is
    ``dim3(32, num_warps)``, so that both sizes are read (joined bare, the value read as a
    comma expression, was its last size alone); one argument stays bare (``dim3 grid(n)``
    is ``n``), as before."""
    if kind == "dim3" and len(arguments) > 1:
        return f"dim3({', '.join(arguments)})"
    return ", ".join(arguments)


DIM3_FIELDS = ("x", "y", "z")
"""A ``dim3``'s components, in its constructor's order; one not given is 1."""


def _dim3_fields(name: str, arguments: list[str], kind: str) -> dict[str, str]:
    """The components of a ``dim3`` local as fields (``const dim3 nthrs(256);`` gives
    ``nthrs.x`` = 256 and ``nthrs.y`` = ``nthrs.z`` = 1), which a size reads (FlashInfer's
    ``ceil_div(n, nthrs.x * 8)``), keyed as a field assigned before the launch is; {} for any
    other type, or more arguments than a ``dim3`` has."""
    if kind != "dim3" or not 0 < len(arguments) <= len(DIM3_FIELDS):
        return {}
    given = [*arguments, *["1"] * (len(DIM3_FIELDS) - len(arguments))]
    return {f"{name}.{axis}": value for axis, value in zip(DIM3_FIELDS, given, strict=True)}


def _declared(node: Node) -> dict[str, str]:
    """What one statement declares or assigns to a field: name -> initialiser text."""
    out: dict[str, str] = {}
    for decl in _walk(node, ("declaration",)):
        for child in decl.named_children:
            kind = text(decl.child_by_field_name("type"))
            if child.type == "function_declarator":  # `dim3 grid(n);` parses as a declaration
                params = child.child_by_field_name("parameters")
                name = text(child.child_by_field_name("declarator"))
                arguments = [text(a) for a in (params.named_children if params else [])]
                out[name] = _joined(arguments, kind)
                out.update(_dim3_fields(name, arguments, kind))
            if child.type != "init_declarator":
                continue
            # `const T* p = ...`: the pointer declarator's text is `* p`, space included;
            # `void* args[] = {...}` is keyed `args`, the name its use is written with
            name = text(child.child_by_field_name("declarator")).lstrip("*& ")
            name = re.sub(r"\s*\[[^\]]*\]$", "", name)
            value = child.child_by_field_name("value")
            if value is not None and value.type == "argument_list":
                arguments = [text(a) for a in value.named_children]
                out[name] = _joined(arguments, kind)
                out.update(_dim3_fields(name, arguments, kind))
            elif value is not None and value.type == "initializer_list":
                out[name] = ", ".join(text(a) for a in value.named_children)
                declarator = child.child_by_field_name("declarator")
                if declarator is not None and declarator.type == "array_declarator":
                    out[f"{ARRAY_ITEMS}{name}"] = ""
            elif value is not None:
                out[name] = text(value)
    for alias in _walk(node, ("alias_declaration",)):
        out[f"{TYPE_ALIAS}{text(alias.child_by_field_name('name'))}"] = text(
            alias.child_by_field_name("type")
        )
    for call in _walk(node, ("call_expression",)):
        args = _arguments(call.child_by_field_name("arguments"))
        for arg in args:
            target = re.fullmatch(r"&\s*(\w+)", arg.strip())
            if target is None or _callee(call) in (ARGS_ARRAY_LAUNCH, CONFIG_LAUNCH):
                continue
            # `cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev)` sets
            # the local through its address: its initialiser is not its value at the launch
            if len(args) > 1 and args[1].strip() == SM_COUNT_ATTRIBUTE:
                out[target[1]] = "multiProcessorCount"
            elif _callee(call) in OCCUPANCY_CALLS and arg is args[0]:
                # `cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem)`:
                # n holds the call's answer, read as the call without its out-argument
                out[target[1]] = f"{_callee(call)}({', '.join(a.strip() for a in args[1:])})"
            else:
                out[target[1]] = f"{SET_BY_CALL}{_callee(call) or 'a_call'}()"
    for assign in _walk(node, ("assignment_expression",)):
        left = assign.child_by_field_name("left")
        if left is not None and left.type == "field_expression":
            out[text(left)] = text(assign.child_by_field_name("right"))
    return {**out, **_reassigned(node)}


def _set_by_reference(call: Node) -> dict[str, str]:
    """:data:`SET_BY_REFERENCE` marks of the locals ``call`` passes by name where the function
    it calls takes a non-const reference (:func:`_reference_parameters`)."""
    positions = _reference_parameters(call)
    args = _arguments(call.child_by_field_name("arguments")) if positions else ()
    return {
        arg.strip(): f"{SET_BY_REFERENCE}{_callee(call)}()"
        for position, arg in enumerate(args)
        if position in positions and re.fullmatch(r"\w+", arg.strip())
    }


def _reference_parameters(call: Node) -> set[int]:
    """The argument positions at which the function ``call`` calls takes a non-const reference
    (``uint32_t& num_ctas``), over every definition of that name in the source (overloads and
    specialisations alike: a position any of them takes so is counted); empty for a function
    the source does not define (CUDA's runtime, whose out-arguments are addresses, read above)."""
    name = _callee(call)
    if not name:
        return set()
    root = call
    while root.parent is not None:
        root = root.parent
    return _non_const_references(root).get(name, set())


REFERENCE_TABLES_KEPT = 8
""":func:`_non_const_references` keeps the tables of this many parsed trees (the cache holds
each tree's root, so the tree stays alive and no node of another tree can take its place)."""


@lru_cache(maxsize=REFERENCE_TABLES_KEPT)
def _non_const_references(root: Node) -> dict[str, set[int]]:
    """Function name (template arguments of a specialisation stripped) -> the positions of its
    non-const reference parameters, over the function definitions of the tree ``root``."""
    found: dict[str, set[int]] = {}
    for definition in _walk(root, ("function_definition",)):
        declarator = definition.child_by_field_name("declarator")
        while declarator is not None and declarator.type != "function_declarator":
            declarator = declarator.child_by_field_name("declarator")
        if declarator is None:
            continue
        name = text(declarator.child_by_field_name("declarator")).split("<", 1)[0]
        name = name.rsplit("::", 1)[-1].strip()
        parameters = declarator.child_by_field_name("parameters")
        children = parameters.named_children if parameters else []
        listed = [p for p in children if p.type != "comment"]
        for position, parameter in enumerate(listed):
            if _non_const_reference(parameter):
                found.setdefault(name, set()).add(position)
    return found


def _non_const_reference(parameter: Node) -> bool:
    """Whether a parameter declaration is an lvalue reference (``T& x``, ``int*& p``,
    ``int (&a)[4]``) the function may write through: none of its own qualifiers is ``const``
    (``const T& x``, ``T const& x``; ``std::vector<const T*>& v`` is writable)."""
    if any(c.type == "type_qualifier" and text(c) == "const" for c in parameter.children):
        return False
    declarator = parameter.child_by_field_name("declarator")
    while declarator is not None:
        if declarator.type == "reference_declarator":
            return not text(declarator).startswith("&&")
        inner = declarator.child_by_field_name("declarator")
        if inner is None:  # `int (&a)[4]`: the reference sits in parentheses
            inner = next((c for c in declarator.named_children if "declarator" in c.type), None)
        declarator = inner
    return False


def _reassigned(node: Node) -> dict[str, str]:
    """:data:`REASSIGNED` marks of the locals ``node`` assigns to (``t = 64;``, ``n = min(n,
    2);``, ``++n``), in a statement or under an ``if`` or loop alike: the declaration's
    initialiser (or a query's answer) is then not the value at the launch, and which assignment
    runs is not read; and :data:`SET_BY_REFERENCE` values of the locals it passes to a function
    that takes them by non-const reference (:func:`_set_by_reference`)."""
    out: dict[str, str] = {}
    for call in _walk(node, ("call_expression",)):  # `if (c) { get_rows(rows, in); }`
        out.update(_set_by_reference(call))
    for assign in _walk(node, ("assignment_expression", "update_expression")):
        field_name = "argument" if assign.type == "update_expression" else "left"
        left = assign.child_by_field_name(field_name)
        if left is None or left.type != "identifier":
            continue
        line = str(assign.start_point[0] + 1)
        optional, direct = _under_optional(assign, node)
        if optional:  # vLLM's `int64_t weight_stride = 0; if (weight.has_value()) {...}`
            out.setdefault(f"{REASSIGNED_IF_GIVEN}{text(left)}", f"{line} under {optional}")
            right = assign.child_by_field_name("right")
            operator = assign.child_by_field_name("operator")
            plain = right is not None and operator is not None and text(operator) == "="
            if direct and plain and right is not None:
                out.setdefault(f"{GIVEN_VALUE}{text(left)}", " ".join(text(right).split()))
        else:
            out[f"{REASSIGNED}{text(left)}"] = line
    return out


def _under_optional(node: Node, top: Node) -> tuple[str, bool]:
    """The condition of the innermost ``if`` between ``node`` and ``top`` that tests an optional
    tensor (``has_value()``), where ``node`` is in its then-branch (it runs only if the optional
    is given: absent, the local keeps its initialiser), or '' (in its else-branch it runs when
    the optional is absent); and whether ``node`` is there under no further ``if`` (its value is
    then the local's whenever the optional is given: :data:`GIVEN_VALUE`)."""
    current: Node | None = node
    direct = True
    while current is not None and current != top:
        parent = current.parent
        if parent is not None and parent.type == "if_statement":
            condition = parent.child_by_field_name("condition")
            if condition is not None and current != condition:
                if "has_value" not in text(condition):
                    direct = False
                elif current != parent.child_by_field_name("consequence"):
                    return "", False
                else:
                    return " ".join(text(condition).split()), direct
        current = parent
    return "", False


LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")
"""Statements whose body runs again after a launch inside it."""


def _before(call: Node) -> Iterator[tuple[Node, bool]]:
    """The statements of the blocks around ``call`` that start before it, outermost block
    first, each with whether it holds the call (the dispatch macro whose lambda launches, the
    ``if`` the launch is in): what such a statement holds before the launch is read in the
    inner blocks, and the rest of it runs after the launch."""
    scopes: list[Node] = []
    node: Node | None = call
    while node is not None and node.type != "function_definition":
        if node.type == "compound_statement":
            scopes.append(node)
        node = node.parent
    for scope in reversed(scopes):
        for statement in scope.named_children:
            if statement.start_byte >= call.start_byte:
                break
            yield statement, statement.end_byte > call.start_byte


def _scope(call: Node) -> tuple[dict[str, str], tuple[tuple[str, bool], ...]]:
    """The locals visible at a launch (inner scopes win) and the ``if`` conditions around it."""
    conditions: list[tuple[str, bool]] = []
    node: Node | None = call
    while node is not None and node.type != "function_definition":
        parent = node.parent
        if parent is not None and parent.type == "if_statement":
            condition = parent.child_by_field_name("condition")
            consequence = parent.child_by_field_name("consequence")
            if condition is not None and node != condition:
                inside_then = (
                    consequence is not None
                    and node.start_byte >= consequence.start_byte
                    and node.end_byte <= consequence.end_byte
                )
                # the clause's own parentheses only: strip("()") also ate the closing one of
                # `(x <= (a ? b : c))`, and the condition could not be read (SGLang's rmsnorm)
                clause = text(condition).strip()
                if clause.startswith("(") and clause.endswith(")"):
                    clause = clause[1:-1]
                conditions.append((clause.strip(), inside_then))
        node = parent
    found: dict[str, str] = {}
    for statement, holds_call in _before(call):
        if holds_call:  # only a loop's assignments come round again to the launch
            if statement.type in LOOPS:
                _update_locals(found, _reassigned(statement))
        elif statement.type in ("declaration", "expression_statement", "alias_declaration"):
            declared, value = _declared(statement), _assigned_value(statement, found)
            value = {n: v for n, v in value.items() if not _read_by_others(n, found)}
            for name in value:  # its value after the statement, not a mark
                declared.pop(f"{REASSIGNED}{name}", None)
            _update_locals(found, {**declared, **value})
        else:  # an `if`, a loop, a block: its assignments reach the launch's locals
            values = _branch_values(statement) if statement.type == "if_statement" else {}
            values = {n: v for n, v in values.items() if not _read_by_others(n, found)}
            marks = _reassigned(statement)
            for name in values:  # set on every path: its value, not a mark
                marks.pop(f"{REASSIGNED}{name}", None)
            _update_locals(found, {**marks, **values})
    return found, tuple(reversed(conditions))


def _read_by_others(name: str, found: dict[str, str]) -> bool:
    """Whether another local's initialiser reads ``name``: locals are kept as written and read
    at the launch, so a later value of ``name`` would change theirs (``b = a; a = 5;`` read
    ``b`` as 5); such an assignment keeps its :data:`REASSIGNED` mark instead."""
    return any(other != name and name in _words(value) for other, value in found.items())


def _assigned_value(statement: Node, found: dict[str, str]) -> dict[str, str]:
    """The value a plain ``name = value;`` statement of the launch's own blocks gives a local
    whose value before it is known (FlashInfer's ``uint32_t bdx = (rope_dim + vec_size - 1) /
    vec_size; bdx = std::max(1u, bdx);``): the statement runs on every path to the launch, so
    the local holds ``value`` with its earlier value for its own name, and carries no
    :data:`REASSIGNED` mark. {} for anything else (a compound or nested assignment, a local
    already marked or set through a reference or an address), which keeps the mark."""
    inner = statement.named_children[0] if len(statement.named_children) == 1 else None
    if inner is None or inner.type != "assignment_expression":
        return {}
    plain = _plain_assignment(inner)
    if plain is None:
        return {}
    left, right = plain
    name = text(left)
    earlier = found.get(name)
    if (
        earlier is None
        or earlier.startswith((SET_BY_REFERENCE, SET_BY_CALL))
        or f"{REASSIGNED}{name}" in found
    ):
        return {}
    # the local itself, not a member of that name (`block.x` in `x = block.x + x`)
    own = rf"(?<![\w.])(?<!->)(?<!::){re.escape(name)}\b"
    value = re.sub(own, lambda _: f"({earlier})", " ".join(text(right).split()))
    return {name: value}


def _plain_assignment(inner: Node) -> tuple[Node, Node] | None:
    """(name, value) of ``name = value`` (an assignment expression) whose value assigns
    nothing itself; None for a compound or nested assignment or a target that is no name."""
    left, right = inner.child_by_field_name("left"), inner.child_by_field_name("right")
    if (
        left is None
        or left.type != "identifier"
        or right is None
        or text(inner.child_by_field_name("operator")) != "="
        or _walk(right, ("assignment_expression", "update_expression"))
    ):
        return None
    return left, right


def _branch_values(statement: Node) -> dict[str, str]:
    """The locals an ``if``/``else`` chain assigns on every path through it, each as the C++
    conditional of the chain's conditions (FlashInfer's ``uint32_t num_kv_heads; if
    (k.ndim() == 2) { num_kv_heads = 1; } else { num_kv_heads = k.size(1); }`` is
    ``(k.ndim() == 2) ? (1) : (k.size(1))``): after the chain the local holds exactly that, so
    a size reads it there at the drafted shapes. A branch gives a local's value only through one
    plain ``=`` among its own statements, or a chain of its own that gives one; a local assigned
    anywhere else in the branch, a branch without an ``else``, one that exits, a condition that
    reads a local the chain assigns, or one that tests an optional (read by
    :func:`_under_optional`) gives none, and the local keeps its :data:`REASSIGNED` mark."""
    condition = statement.child_by_field_name("condition")
    consequence = statement.child_by_field_name("consequence")
    alternative = statement.child_by_field_name("alternative")
    if condition is None or consequence is None or alternative is None:
        return {}
    clause = " ".join(text(condition).split())
    if clause.startswith("(") and clause.endswith(")"):
        clause = clause[1:-1].strip()
    if "has_value" in clause:
        return {}
    other = next((c for c in alternative.named_children if c.type != "comment"), None)
    then_values = _block_values(consequence)
    else_values = _block_values(other) if other is not None else {}
    if set(re.findall(r"\b\w+\b", clause)) & _assigned(statement):
        return {}
    return {
        name: f"({clause}) ? ({value}) : ({else_values[name]})"
        for name, value in then_values.items()
        if name in else_values
    }


def _block_values(branch: Node) -> dict[str, str]:
    """What one branch of a chain (:func:`_branch_values`) leaves each local it surely sets:
    where exactly one of its statements assigns the local, that statement's value if it is a
    plain ``name = value;`` or the value it gives if it is a complete chain; {} for a branch
    that exits."""
    statements = branch.named_children if branch.type == "compound_statement" else [branch]
    statements = [s for s in statements if s.type != "comment"]
    if _exits(statements):
        return {}
    setters: dict[str, list[int]] = {}
    for index, statement in enumerate(statements):
        for name in _assigned(statement):
            setters.setdefault(name, []).append(index)
    out: dict[str, str] = {}
    for name, (index, *others) in setters.items():
        statement = statements[index]
        value = None
        inner = statement.named_children[0] if statement.named_children else None
        if others:
            continue
        if statement.type == "if_statement":
            value = _branch_values(statement).get(name)
        elif (
            statement.type == "expression_statement"
            and inner is not None
            and inner.type == "assignment_expression"
            and text(inner.child_by_field_name("operator")) == "="
            and text(inner.child_by_field_name("left")) == name
            and len(_walk(statement, ("assignment_expression", "update_expression"))) == 1
        ):
            value = " ".join(text(inner.child_by_field_name("right")).split())
        # a local the branch sets is read at its value only once set (`b = a;` after `a = 1;`):
        # one set later in the branch was read at its earlier value, which the chain's is not
        earlier = {n for n, at in setters.items() if min(at) < index}
        if statement.type == "if_statement":
            earlier |= _assigned(statement)  # its own chain's order, checked there
        if value is not None and not (set(re.findall(r"\b\w+\b", value)) & set(setters)) - earlier:
            out[name] = value
    return out


def _assigned(node: Node) -> set[str]:
    """The names ``node`` assigns to or updates anywhere in it."""
    return {
        text(a.child_by_field_name("left" if a.type == "assignment_expression" else "argument"))
        for a in _walk(node, ("assignment_expression", "update_expression"))
    }


def _update_locals(found: dict[str, str], later: dict[str, str]) -> None:
    """``found.update(later)``, keeping as :data:`DECLARED_VALUE` the initialiser of a local
    that ``later`` marks as set through a reference (the mark replaces it)."""
    for name, value in later.items():
        earlier = found.get(name)
        marked = value.startswith(SET_BY_REFERENCE)
        if marked and earlier is not None and not earlier.startswith(SET_BY_REFERENCE):
            found.setdefault(f"{DECLARED_VALUE}{name}", earlier)
    found.update(later)


MATCHER_VERIFY = "verify"
"""The method of a tensor-shape matcher that binds its symbolic sizes to a tensor's (SGLang's
``TensorMatcher({N, D}).verify(x)``; a later matcher of a bound size checks it is equal)."""
MATCHER_STRIDES = "with_strides"
"""The method of a tensor-shape matcher that names the tensor's strides."""
MATCHER_DTYPE = "with_dtype"
"""The method of a tensor-shape matcher that names the element types the tensor may have."""
SET_VALUE = "set_value"
"""The method that fixes a symbolic size before a matcher reads it (``D.set_value(kDim)``)."""
CHECK_NAME = "check"
"""A call statement whose function's name has this word (any case: SGLang's ``RuntimeCheck``,
``CHECK_HOST``) is a host check: the launch is made only when its first argument is true."""


def _matcher(statement: Node) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(tensor, sizes, strides) for each tensor a tensor-shape matcher statement verifies: a
    call on one braced list of sizes followed by method calls, ``verify(x)`` among them; []
    for any other statement."""
    return [(tensor, sizes, strides) for tensor, sizes, strides, _ in _matcher_facts(statement)]


def _matcher_facts(statement: Node) -> list[tuple[str, tuple[str, ...], tuple[str, ...], str]]:
    """:func:`_matcher`'s (tensor, sizes, strides), each with the one element type the matcher
    requires (``.with_dtype<float>()``), or '' where it names none or several (``with_dtype<
    int32_t, int64_t>(id_type)``: the launch's choice says which)."""
    node = next((c for c in statement.named_children if c.type != "comment"), None)
    verified: list[str] = []
    strides: tuple[str, ...] = ()
    element = ""
    while node is not None and node.type == "call_expression":
        function = node.child_by_field_name("function")
        args = [
            a
            for a in (node.child_by_field_name("arguments") or function or node).named_children
            if a.type != "comment"
        ]
        if function is None or function.type != "field_expression":
            if len(args) != 1 or args[0].type != "initializer_list" or not verified:
                return []
            sizes = tuple(text(a) for a in args[0].named_children if a.type != "comment")
            return [(tensor, sizes, strides, element) for tensor in reversed(verified)]
        field = text(function.child_by_field_name("field"))
        method = field.split("<", 1)[0].strip()
        if method == MATCHER_VERIFY and len(args) == 1 and args[0].type == "identifier":
            verified.append(text(args[0]))
        elif method == MATCHER_STRIDES and len(args) == 1 and args[0].type == "initializer_list":
            strides = tuple(text(a) for a in args[0].named_children if a.type != "comment")
        elif method == MATCHER_DTYPE and "<" in field and not args:
            types = field.split("<", 1)[1].rsplit(">", 1)[0]
            element = "" if "," in types else " ".join(types.split())
        node = function.child_by_field_name("argument")
    return []


EXIT_WORDS = frozenset(
    {"error", "panic", "throw", "fail", "abort", "fatal", "exit", "trap", "unreachable"}
)
"""A call statement whose function's name has one of these words (FlashInfer's
``FLASHINFER_ERROR``, SGLang's ``Panic``, ``std::abort``) does not return to the launcher."""
RETURNING_WORDS = frozenset(
    {"get", "check", "string", "last", "peek", "log", "print", "report", "record", "if", "set"}
)
"""Words that mark a call named for an error as one that returns (``cudaGetLastError``,
``cudaGetErrorString``, ``LOG_ERROR``, ``report_error``, ``throw_if_error``): with one of these
the call is not an exit. Both lists read the name only; a name that says neither is no exit."""


def _name_words(name: str) -> set[str]:
    """The lower-case words of a C++ name, split at underscores and case changes
    (``cudaGetLastError`` -> cuda, get, last, error; ``FLASHINFER_ERROR`` -> flashinfer, error)."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return {w for w in spaced.lower().split("_") if w}


def _exits(statements: Sequence[Node]) -> bool:
    """Whether a branch of these statements never reaches what follows it: its last statement
    returns, throws, or calls a function named for failing (:data:`EXIT_WORDS`, none of
    :data:`RETURNING_WORDS`). Such an ``if`` before a launch states the launch's requirement
    ``!(condition)`` (a check written as a branch), on every path, like a host check."""
    named = [s for s in statements if s.type != "comment"]
    if not named:
        return False
    last = named[-1]
    if last.type in ("return_statement", "throw_statement"):
        return True
    if last.type != "expression_statement":
        return False
    expression = next((c for c in last.named_children if c.type != "comment"), None)
    if expression is None or expression.type != "call_expression":
        return False
    words = _name_words(_callee(expression))
    return bool(words & EXIT_WORDS) and not words & RETURNING_WORDS


def _statement_facts(
    statement: Node,
) -> tuple[list[tuple[str, tuple[str, ...], tuple[str, ...]]], list[str]]:
    """(matched tensors, conditions) one statement establishes whenever it completes: its
    tensor-shape matchers, its host checks' conditions and ``X.set_value(v)`` as
    ``X.unwrap() == (v)``; for an ``if`` with an ``else``, what both branches establish; for
    an ``if`` without one whose branch leaves the launcher (:func:`_exits`), ``!(c)``; for any
    other, each check of its branch under its condition, ``!(c) || (check)`` (vLLM's ``if
    (positions_ndim == 1) { STD_TORCH_CHECK(query.size(0) == positions.size(0)) }``: a fact
    wherever the condition holds)."""
    if statement.type == "if_statement" and statement.child_by_field_name("alternative") is None:
        condition = statement.child_by_field_name("condition")
        value = condition.child_by_field_name("value") if condition is not None else None
        branch = statement.child_by_field_name("consequence")
        if value is None or branch is None:
            return [], []
        inner = branch.named_children if branch.type == "compound_statement" else [branch]
        said = text(value)
        if _exits(inner):  # `if (head_dim < rotary_dim) { FLASHINFER_ERROR(...); }`
            return [], [f"!({said})"]
        return [], [f"!({said}) || ({c})" for one in inner for c in _statement_facts(one)[1]]
    if statement.type == "if_statement":
        branches = [
            statement.child_by_field_name("consequence"),
            statement.child_by_field_name("alternative"),
        ]
        facts = []
        for branch in branches:
            if branch is None or not branch.named_children:
                return [], []
            body = branch.named_children[-1] if branch.type == "else_clause" else branch
            inner = body.named_children if body.type == "compound_statement" else [body]
            matched: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []
            checks: list[str] = []
            for one in inner:
                found, checked = _statement_facts(one)
                matched += found
                checks += checked
            facts.append((matched, checks))
        (matched_a, checks_a), (matched_b, checks_b) = facts
        sized_b = {(t, sizes) for t, sizes, _ in matched_b}
        both = [
            (t, sizes, strides if (t, sizes, strides) in matched_b else ())
            for t, sizes, strides in matched_a
            if (t, sizes) in sized_b
        ]
        return both, [c for c in checks_a if c in checks_b]
    if statement.type != "expression_statement":
        return [], []
    matched = _matcher(statement)
    if matched:
        return matched, []
    expression = next((c for c in statement.named_children if c.type != "comment"), None)
    while expression is not None and expression.type == "binary_expression":
        expression = expression.child_by_field_name("left")  # `CHECK_HOST(c) << "why"`
    if expression is None or expression.type != "call_expression":
        return [], []
    args = _arguments(expression.child_by_field_name("arguments"))
    function = expression.child_by_field_name("function")
    if (
        function is not None
        and function.type == "field_expression"
        and len(args) == 1
        and text(function.child_by_field_name("field")) == SET_VALUE
    ):
        symbol = text(function.child_by_field_name("argument"))
        return [], [f"{symbol}.unwrap() == ({args[0]})"]
    if CHECK_NAME in _callee(expression).lower() and args:
        return [], [args[0]]
    return [], []


def _matchers(
    call: Node,
) -> tuple[tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...], tuple[tuple[str, bool], ...]]:
    """(the tensor-shape matchers, the host checks as ``(condition, True)``) of the statements
    before ``call`` in the scopes around it, which run on every path to the launch: a statement
    of an enclosing block before the launch, or what both branches of such an ``if ... else``
    establish. The first matcher of each tensor is kept; later ones check equal sizes."""
    matched: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {}
    checks: list[tuple[str, bool]] = []
    for statement, holds_call in _before(call):
        if holds_call:
            continue  # its checks before the launch are in the inner blocks
        found, checked = _statement_facts(statement)
        for fact in found:
            matched.setdefault(fact[0], fact)
        checks += [(c, True) for c in checked]
    return tuple(matched.values()), tuple(checks)


def _matcher_types(call: Node) -> tuple[tuple[str, str], ...]:
    """(tensor, element type) that the tensor-shape matchers among the statements before
    ``call`` in the scopes around it require (:func:`_matcher_facts`). Only statements that
    run on every path to the launch count: a matcher inside an ``if`` says nothing of the
    other branch."""
    found: dict[str, str] = {}
    for statement, holds_call in _before(call):
        if holds_call or statement.type != "expression_statement":
            continue
        for tensor, _, _, element in _matcher_facts(statement):
            if element:
                found.setdefault(tensor, element)
    return tuple(found.items())


MAX_CHAIN_PATHS = 16
"""Most paths one chain is read into (a branch's nested chains multiply them); a chain with
more is not read, and its locals keep their marks."""


def _chains(call: Node, found: dict[str, str]) -> tuple[Chain, ...]:
    """The ``if``/``else`` chains among the statements before ``call`` in the scopes around it
    (so on every path to it) that assign a local ``found`` (the launch's locals) still marks
    :data:`REASSIGNED` at a line inside the chain, each read into its paths
    (:func:`chain_paths`); a chain that cannot be read is left out (its marks stay), and so is
    a path that declares a name of the launch's locals or reads one assigned after the chain
    (its value there is not the one at the launch). A path that does not set such a local
    holds its initialiser (``int threads = 256; if (cols < 256) threads = 64;``: 256 where
    ``cols >= 256``) where no statement before the chain assigns it; else it keeps the mark."""
    chains: list[Chain] = []
    before = list(_before(call))
    for index, (statement, holds_call) in enumerate(before):
        if holds_call or statement.type != "if_statement":
            continue
        # a name a path reads, assigned again before the launch, is read at its later value
        later = {name for other, _ in before[index + 1 :] for name in _assigned(other)}
        first, last = statement.start_point[0] + 1, statement.end_point[0] + 1
        marked = {
            name
            for name in _assigned(statement)
            if found.get(f"{REASSIGNED}{name}", "").isdigit()
            and first <= int(found[f"{REASSIGNED}{name}"]) <= last
        }
        paths = chain_paths(statement) if marked else None
        # a path that does not set a marked local leaves it at its initialiser, where nothing
        # before the chain assigned it (a statement holding the launch is read in its blocks,
        # unless a loop's body comes round again)
        earlier = {
            name
            for other, holds in before[:index]
            if not holds or other.type in LOOPS
            for name in _assigned(other)
        }
        initial = tuple(
            (name, found[name])
            for name in sorted(marked - earlier)
            if name in found and not found[name].startswith((SET_BY_REFERENCE, SET_BY_CALL))
        )
        paths = [
            replace(p, values=(*(v for v in initial if v[0] not in dict(p.values)), *p.values))
            for p in paths or []
        ]
        # a branch's own local named as one of the launch's would stand for that one there
        kept = [
            p
            for p in paths
            if not set(p.declared) & set(found)
            and not later & {w for _, value in p.values for w in _words(value)}
        ]
        if kept:
            chains.append(Chain(tuple(kept), first, last))
    return tuple(chains)


def chain_paths(statement: Node) -> list[BranchPath] | None:
    """The paths through an ``if``/``else`` chain that reach its end, or None where it cannot
    be read. A branch is read statement by statement: a declaration gives its locals, a plain
    ``name = value;`` that does not read ``name`` that local's value, a host check a check, a
    nested chain its own paths (each joined to the branch's); a branch that exits
    (:func:`_exits`) is no path; any other statement (a loop, a compound assignment, a call
    that may set a local) makes the chain unread. A chain without an ``else`` has the path
    that skips it."""
    condition = statement.child_by_field_name("condition")
    consequence = statement.child_by_field_name("consequence")
    alternative = statement.child_by_field_name("alternative")
    value = condition.child_by_field_name("value") if condition is not None else None
    if value is None or consequence is None:
        return None
    clause = " ".join(text(value).split())
    then = _branch_paths(consequence)
    if alternative is None:
        other: list[BranchPath] | None = [BranchPath((), (), ())]
    else:
        body = next((c for c in alternative.named_children if c.type != "comment"), None)
        other = _branch_paths(body) if body is not None else None
    if then is None or other is None or len(then) + len(other) > MAX_CHAIN_PATHS:
        return None
    return [
        *(replace(p, conditions=((clause, True), *p.conditions)) for p in then),
        *(replace(p, conditions=((clause, False), *p.conditions)) for p in other),
    ]


def _branch_paths(branch: Node) -> list[BranchPath] | None:
    """The paths through one branch of a chain (:func:`chain_paths`), or None."""
    if branch.type == "if_statement":
        return chain_paths(branch)
    statements = branch.named_children if branch.type == "compound_statement" else [branch]
    statements = [s for s in statements if s.type != "comment"]
    if _exits(statements):
        return []
    paths = [BranchPath((), (), ())]
    for statement in statements:
        if statement.type == "if_statement":
            inner = chain_paths(statement)
            if inner is None or len(paths) * max(len(inner), 1) > MAX_CHAIN_PATHS:
                return None
            if any(_reassigns(p.values, q.values) for p in paths for q in inner):
                return None
            paths = [
                BranchPath(
                    p.conditions + q.conditions,
                    p.values + q.values,
                    p.checks + q.checks,
                    p.declared + q.declared,
                )
                for p in paths
                for q in inner
            ]
            continue
        step = _statement_step(statement)
        if step is None:
            return None
        values, checks = step
        if any(_reassigns(p.values, values) for p in paths):
            return None
        declared = tuple(n for n, _ in values) if statement.type == "declaration" else ()
        paths = [
            replace(
                p,
                values=p.values + values,
                checks=p.checks + checks,
                declared=p.declared + declared,
            )
            for p in paths
        ]
    return paths


def _reassigns(earlier: tuple[tuple[str, str], ...], later: tuple[tuple[str, str], ...]) -> bool:
    """Whether ``later`` sets a local an ``earlier`` value reads: values are read at the
    launch, so ``b = a; a = 5;`` would read ``b`` as 5 (review of 2299c7d)."""
    return any(name in _words(value) for _, value in earlier for name, _ in later)


def _statement_step(
    statement: Node,
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]] | None:
    """(locals set, host checks) of one statement of a chain's branch, or None where it does
    anything else a path cannot hold (:func:`chain_paths`): an assignment that reads its own
    local or assigns inside its value, or a call that may set a local through a reference."""
    calls = _walk(statement, ("call_expression",))
    addressed = (
        re.fullmatch(r"&\s*\w+", a.strip())
        for c in calls
        for a in _arguments(c.child_by_field_name("arguments"))
    )
    if any(_set_by_reference(c) for c in calls) or any(addressed):
        return None
    if statement.type == "declaration":
        declared = _declared(statement)
        if any(k.startswith((REASSIGNED, SET_BY_CALL)) for k in [*declared, *declared.values()]):
            return None
        return tuple(declared.items()), ()
    if statement.type != "expression_statement":
        return None
    inner = next((c for c in statement.named_children if c.type != "comment"), None)
    if inner is not None and inner.type == "assignment_expression":
        plain = _plain_assignment(inner)
        if plain is None or text(plain[0]) in _words(text(plain[1])):
            return None
        return ((text(plain[0]), " ".join(text(plain[1]).split())),), ()
    if _assigned(statement):
        return None
    _, checks = _statement_facts(statement)
    return (), tuple(checks)


def _macros(root: Node) -> dict[str, Macro]:
    out = {}
    for node in _walk(root, ("preproc_function_def",)):
        params = node.child_by_field_name("parameters")
        names = tuple(
            text(p) for p in (params.named_children if params else []) if text(p) != "..."
        )
        if params is not None and "..." in text(params):
            names += ("__VA_ARGS__",)
        body = text(node.child_by_field_name("value")).replace("\\\n", "\n")
        if not body.strip() and text(node.child_by_field_name("name")) in out:
            # `#ifdef FLASHINFER_ENABLE_BF16 ... #else #define CASE(...) #endif`: the case the
            # framework's build enables is kept, not the empty stand-in of the other branch
            continue
        out[text(node.child_by_field_name("name"))] = Macro(
            text(node.child_by_field_name("name")), names, body
        )
    return out


def _object_macros(
    root: Node, defines: Mapping[str, int], defined: Collection[str] = ()
) -> dict[str, str]:
    """Object-like macros (``#define NAME value``) by name, each the definition whose
    ``#if``/``#elif``/``#else``/``#ifdef`` branches the build takes, read in order as the
    preprocessor does: ``defines`` and the macros defined so far are defined, any other name
    is 0 (SGLang's ``#if !defined(USE_ROCM) #define SGL_ARCH_BLACKWELL_OR_GREATER
    ((SGL_CUDA_ARCH >= 1000) && ...) #else ... 0 #endif``). A definition under a condition
    that is not preprocessor arithmetic is left out. ``defined`` are defines with no number
    (``-DFOO=`` or ``-DFOO=bar``): defined for ``#ifdef``/``defined()``, 0 in arithmetic."""
    known: dict[str, str] = {name: "" for name in defined}
    known.update({name: str(value) for name, value in defines.items()})
    out: dict[str, str] = {}
    # each condition is decided once, where the first definition under it is reached: with the
    # macros defined before the `#if`, not those after it (an include guard's `#ifndef FOO_H`
    # decided after its own `#define FOO_H` dropped every macro of the header); None where it
    # is not preprocessor arithmetic
    decided: dict[tuple[int, bool], bool | None] = {}

    def taken(condition: Node, positive: bool) -> bool | None:
        key = (condition.id, positive)
        if key not in decided:
            try:
                decided[key] = _branch_taken(condition, positive, known)
            except ValueError:
                decided[key] = None
        return decided[key]

    for node in _walk(root, ("preproc_def",)):
        value = node.child_by_field_name("value")
        outcomes = [taken(c, p) for c, p in _branches(node)]
        if None not in outcomes and all(outcomes):
            name = text(node.child_by_field_name("name"))
            known[name] = out[name] = text(value).strip() if value is not None else ""
    return out


def _member_conditions_resolved(root: Node, source: str, known: Mapping[str, str]) -> str:
    """``source`` with each ``#if``/``#else`` inside a class body that the build decides kept
    as the branch it takes, the directives and the other branch blanked (SGLang's
    ``RMSNormHalfKernel``: ``#if SGL_ARCH_BLACKWELL_OR_GREATER static constexpr auto kernel =
    rmsnorm_cta_wide<...>; #else ... rmsnorm_cta_double<...>; #endif``, which the build
    decides from ``SGL_CUDA_ARCH`` and ``CUDA_VERSION``). Blanking keeps every line and column
    where it was, so launch sites keep their lines. A condition that is not preprocessor
    arithmetic, or an ``#elif`` chain, is left as written (the member is then refused)."""
    data = bytearray(source.encode())
    for node in _walk(root, ("preproc_if",)):
        if node.parent is None or node.parent.type != "field_declaration_list":
            continue
        condition = node.child_by_field_name("condition")
        alternative = node.child_by_field_name("alternative")
        if condition is None or (alternative is not None and alternative.type != "preproc_else"):
            continue
        try:
            taken = _branch_taken(condition, True, known)
        except ValueError:
            continue
        then_end = (
            alternative.start_byte if alternative is not None else node.children[-1].start_byte
        )
        if taken:
            keep = (condition.end_byte, then_end)
        elif alternative is not None:
            keep = (alternative.children[0].end_byte, alternative.end_byte)
        else:
            keep = (node.end_byte, node.end_byte)
        for at in range(node.start_byte, node.end_byte):
            if not keep[0] <= at < keep[1] and data[at] not in b"\r\n":
                data[at] = ord(" ")
    return data.decode()


def _branches(node: Node) -> list[tuple[Node, bool]]:
    """The preprocessor conditions around ``node`` and whether each must hold (the condition of
    the branch it is in) or fail (that of a branch before it); ``#ifdef X`` gives its name."""
    found: list[tuple[Node, bool]] = []
    child, parent = node, node.parent
    while parent is not None:
        if parent.type in ("preproc_if", "preproc_elif", "preproc_ifdef", "preproc_elifdef"):
            condition = parent.child_by_field_name("condition") or parent.child_by_field_name(
                "name"
            )
            alternative = parent.child_by_field_name("alternative")
            in_alternative = alternative is not None and child.id == alternative.id
            negated = text(parent.children[0]).startswith(("#ifndef", "#elifndef"))
            if condition is not None:
                found.append((condition, negated == in_alternative))
        child, parent = parent, parent.parent
    return found


def _branch_taken(condition: Node, positive: bool, known: Mapping[str, str]) -> bool:
    parent = condition.parent
    if parent is not None and parent.type in ("preproc_ifdef", "preproc_elifdef"):
        return (text(condition) in known) == positive  # the name of `#ifdef NAME`
    return (_preprocessor_value(condition, known, 0) != 0) == positive


def _preprocessor_value(node: Node, known: Mapping[str, str], depth: int) -> int:
    """An ``#if`` condition's value; raises ValueError for what is not preprocessor arithmetic."""
    kind = node.type
    if depth > MAX_MACRO_DEPTH:
        raise ValueError("macros refer to each other too deeply")
    if kind == "number_literal":
        return int(text(node).rstrip("uUlL"), 0)
    if kind == "preproc_defined":
        return int(text(node.named_children[0]) in known)
    if kind == "identifier":
        value = known.get(text(node), "0") or "0"
        tree = _parser().parse(f"#if {value}\n#endif\n".encode())
        inner = tree.root_node.named_children[0].child_by_field_name("condition")
        if inner is None or tree.root_node.has_error:
            raise ValueError(f"macro {text(node)} is not a number: {value!r}")
        return _preprocessor_value(inner, known, depth + 1)
    if kind == "parenthesized_expression":
        return _preprocessor_value(node.named_children[0], known, depth)
    if kind == "unary_expression":
        operator = text(node.child_by_field_name("operator"))
        operand = _preprocessor_value(node.child_by_field_name("argument"), known, depth)  # type: ignore[arg-type]
        if operator in _PREPROCESSOR_UNARY:
            return _PREPROCESSOR_UNARY[operator](operand)
    if kind == "binary_expression":
        operator = text(node.child_by_field_name("operator"))
        left = _preprocessor_value(node.child_by_field_name("left"), known, depth)  # type: ignore[arg-type]
        right = _preprocessor_value(node.child_by_field_name("right"), known, depth)  # type: ignore[arg-type]
        if operator in _PREPROCESSOR_BINARY:
            return _PREPROCESSOR_BINARY[operator](left, right)
    raise ValueError(f"not preprocessor arithmetic: {text(node)!r}")


_PREPROCESSOR_UNARY: dict[str, Callable[[int], int]] = {
    "!": lambda a: int(not a),
    "-": lambda a: -a,
    "+": lambda a: a,
}
_PREPROCESSOR_BINARY: dict[str, Callable[[int, int], int]] = {
    "&&": lambda a, b: int(bool(a) and bool(b)),
    "||": lambda a, b: int(bool(a) or bool(b)),
    "==": lambda a, b: int(a == b),
    "!=": lambda a, b: int(a != b),
    "<": lambda a, b: int(a < b),
    "<=": lambda a, b: int(a <= b),
    ">": lambda a, b: int(a > b),
    ">=": lambda a, b: int(a >= b),
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}
"""The preprocessor's operators on whole numbers that a framework's ``#if`` uses to pick a
definition (compute capability and version tests)."""


def _arguments(args: Node | None) -> tuple[str, ...]:
    """The argument texts of an argument list; comments (vLLM's ``/*weight_stride=*/0``) are
    nodes of the list too, and are not arguments."""
    return tuple(text(a) for a in (args.named_children if args else []) if a.type != "comment")


def _split_args(call: Node) -> list[str]:
    return list(_arguments(call.child_by_field_name("arguments")))


def _substitute(body: str, mapping: dict[str, str]) -> str:
    """``body`` with the names of ``mapping`` replaced by whole token."""
    return re.sub(r"\b\w+\b", lambda m: mapping.get(m[0], m[0]), body)


def bind_macro(macro: Macro, values: Sequence[str]) -> str:
    """A function-like macro's body for a call with ``values``: parameters replaced by whole
    token, ``__VA_ARGS__`` taking the remaining arguments."""
    mapping = dict(zip(macro.params, values, strict=False))
    if macro.params and macro.params[-1] == "__VA_ARGS__":
        mapping["__VA_ARGS__"] = ", ".join(values[len(macro.params) - 1 :])
    return _substitute(macro.body, mapping)


def in_function_body(node: Node) -> bool:
    """Whether ``node`` is inside a function's definition (a call there runs; one at namespace
    scope or in a macro's definition does not)."""
    parent = node.parent
    while parent is not None and parent.type not in ("function_definition", "translation_unit"):
        parent = parent.parent
    return parent is not None and parent.type == "function_definition"


def expand_launching_macros(source: str, macros: dict[str, Macro]) -> str:
    """``source`` with every call of a macro whose body launches a kernel replaced by the body
    (:func:`expand_macros`)."""
    return expand_macros(source, {n: m for n, m in macros.items() if "<<<" in m.body})


def expand_macros(source: str, macros: dict[str, Macro], one_line: bool = False) -> str:
    """``source`` with every call of one of ``macros`` replaced by its body.

    Parameters are substituted by whole token; ``__VA_ARGS__`` takes the remaining arguments.
    Only calls inside function bodies are expanded (definitions stay as written). ``one_line``
    joins each expansion's lines, as the preprocessor does, so that every line after it keeps
    its number (a caller's line is reported).
    """
    if not macros:
        return source
    data = source.encode()
    tree = _parser().parse(data)
    edits: list[tuple[int, int, str]] = []
    for call in _walk(tree.root_node, ("call_expression",)):
        name = text(call.child_by_field_name("function"))
        if name not in macros or not in_function_body(call):
            continue
        body = bind_macro(macros[name], _split_args(call))
        edits.append(
            (call.start_byte, call.end_byte, body.replace("\n", " ") if one_line else body)
        )
    for start, end, replacement in sorted(edits, reverse=True):
        data = data[:start] + replacement.encode() + data[end:]
    return data.decode(errors="replace")


def _scope_names(node: Node) -> list[str]:
    """Namespaces and classes (``VecTraits<true>``) around a node, outermost first."""
    names = []
    parent = node.parent
    while parent is not None:
        if parent.type in ("namespace_definition", "struct_specifier", "class_specifier"):
            names.append(re.sub(r"\s+", "", text(parent.child_by_field_name("name"))))
        parent = parent.parent
    return [n for n in reversed(names) if n]


def _constants(root: Node) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in _walk(root, ("field_declaration", "declaration")):
        if "constexpr" not in text(node).split("=", 1)[0]:
            continue
        if node.type == "field_declaration":
            declarator = node.child_by_field_name("declarator")
            value = node.child_by_field_name("default_value")
        else:
            init = next((c for c in node.named_children if c.type == "init_declarator"), None)
            declarator = init.child_by_field_name("declarator") if init else None
            value = init.child_by_field_name("value") if init else None
        if declarator is None or value is None or node.parent is None:
            continue
        if node.parent.type == "compound_statement":
            continue  # a function's local: the launch's own scope reads those
        name = "::".join([*_scope_names(node), text(declarator)])
        found[name] = text(value)
    return found


def parse_source(
    source: str, defines: Mapping[str, int] | None = None, defined: Collection[str] = ()
) -> Source:
    """Kernels, launchers, macros and structs of one translation unit (already flattened);
    ``defines`` are the macros the build defines and their values (``CUDA_VERSION``, the
    framework's ``-D`` flags), by which object-like macros are read (:func:`_object_macros`)."""
    root = _parser().parse(source.encode()).root_node
    macros = _macros(root)
    object_macros = _object_macros(root, defines or {}, defined)
    known = {
        **{name: "" for name in defined},
        **{name: str(value) for name, value in (defines or {}).items()},
        **object_macros,
    }
    source = _member_conditions_resolved(root, source, known)
    expanded = expand_launching_macros(source, macros)
    tree = _parser().parse(expanded.encode())
    out = Source(macros=macros)
    for spec in _walk(tree.root_node, ("struct_specifier", "class_specifier")):
        body = spec.child_by_field_name("body")
        name = text(spec.child_by_field_name("name"))
        if body is None or not name:
            continue
        fields = []
        for member in body.named_children:
            if member.type == "field_declaration" and not _static_member(member):
                fields.extend(_struct_fields(member))
        out.structs[name] = fields
    out.constants = {**object_macros, **_constants(tree.root_node)}
    writers = _writing_positions(tree.root_node)
    member_types = _struct_member_types(tree.root_node)
    # vectors and reach read this module's syntax helpers: imported here, not at the top
    from astra_graph.framework.reach import kernel_row_reaches
    from astra_graph.framework.vectors import (
        FunctionIndex,
        kernel_vector_accesses,
        kernel_vector_guards,
    )

    functions: FunctionIndex | None = None
    steady: Callable[[Node, int], bool] | None = None
    reach_facts: Facts = {}
    for definition in _walk(tree.root_node, ("function_definition",)):
        declarator = _function_declarator(definition)
        if declarator is None:
            continue
        name = text(declarator.child_by_field_name("declarator")).rsplit("::", 1)[-1]
        line = definition.start_point[0] + 1
        if not _is_kernel(definition):
            # a specialisation (`f<float>`) or an overload shares its primary's key: a name
            # with two definitions, or one that does more than return, is no ReturnOnly
            key = "::".join([*_scope_names(definition), name.split("<", 1)[0].strip()])
            seen = key in out.returns
            returned = _return_only(definition, declarator)
            out.returns[key] = None if seen else returned
            procedure = _procedure(definition, declarator) if returned is None else None
            out.procedures[key] = None if seen else procedure
        if _is_kernel(definition):
            template = definition.parent if definition.parent else None
            tparams = (
                _template_params(template)
                if template is not None and template.type == "template_declaration"
                else ()
            )
            qualified = "::".join([*_namespaces(definition), name])
            params = _params(declarator)
            body = definition.child_by_field_name("body")
            offsets = _row_offsets(body, params) if body is not None else ()
            extents = _extents(body, params) if body is not None else ()
            strided = _strided_extents(body, params) if body is not None else ()
            differenced = _differenced(body, params) if body is not None else ()
            casts = _pointer_casts(body) if body is not None else ()
            scattered = _scattered(body, params, out.structs, writers) if body is not None else ()
            gathered = _gathered(body, params, out.structs) if body is not None else ()
            uses = _offset_uses(body, params, differenced) if body is not None else ()
            functions = functions or FunctionIndex(tree.root_node)
            steady = steady or steady_calls(tree.root_node, functions)
            reads = _call_reads(functions)
            indexed, unindexed = (
                _indexed_extents(body, params, tparams, member_types, steady=steady, reads=reads)
                if body is not None
                else ((), ())
            )
            direct = (
                _direct_extents(body, params, tparams, member_types, differenced, steady, reads)
                if body is not None
                else None
            )
            vectors = kernel_vector_accesses(definition, functions)
            asserted, asserts_unread = _kernel_asserted(body) if body is not None else ((), ())
            out.kernels.append(
                Kernel(
                    name,
                    qualified,
                    tparams,
                    params,
                    line,
                    offsets,
                    extents,
                    strided,
                    differenced,
                    casts,
                    offset_uses=uses,
                    scattered=scattered,
                    gathered=gathered,
                    indexed=indexed,
                    vectors=vectors,
                    vector_guards=kernel_vector_guards(definition, functions),
                    asserted=asserted,
                    asserts_unread=asserts_unread,
                    row_reaches=kernel_row_reaches(definition, functions, reach_facts),
                    unindexed=unindexed,
                    direct=direct,
                    id_rows=_id_row_tables(body, params, writers) if body is not None else (),
                )
            )
            continue
        body = definition.child_by_field_name("body")
        if body is None:
            continue
        params = _params(declarator)
        launches: list[Launch] = []
        for call in _walk(body, ("call_expression",)):
            if _launch_of(call) is not None:
                launches.extend(lambda_instances(call, _launch(call)))
                continue
            api = _api_launch(call, {p.name for p in params})
            if api:
                launches.extend(v for one in api for v in lambda_instances(call, one))
            elif _callee(call) in UNREAD_LAUNCH_CALLS:
                out.other_launches.append((name, call.start_point[0] + 1, _callee(call)))
        if launches:
            asserted = _asserted(definition)
            out.launchers.append(
                Launcher(
                    name=name,
                    params=params,
                    launches=tuple(
                        replace(
                            launch,
                            conditions=launch.conditions + tuple((a, True) for a in asserted),
                            checks=launch.checks + asserted,
                        )
                        for launch in launches
                    ),
                    line=line,
                    template=_enclosing_templates(definition),
                    own_template=len(_own_template(definition)),
                )
            )
    return out


_POINTER_CAST = re.compile(r"^(?:static_cast|reinterpret_cast)\s*<(?P<type>[^<>]+)>$")


def _pointer_casts(body: Node) -> tuple[tuple[str, str], ...]:
    """(name, pointee type) for each pointer the kernel body casts, named directly (``ids``) or
    as a field (``params.ids``: ``ids``), to a pointer of one type only (``static_cast<const
    IdType*>``, ``(const int*)``), qualifiers dropped; a name cast to two types is left out."""
    found: dict[str, set[str]] = {}
    for node in _walk(body, ("call_expression", "cast_expression")):
        if node.type == "call_expression":
            function = node.child_by_field_name("function")
            form = _POINTER_CAST.match(text(function)) if function is not None else None
            args = node.child_by_field_name("arguments")
            operands = args.named_children if args is not None else []
            spelled = form["type"] if form is not None and len(operands) == 1 else ""
            operand = operands[0] if operands else None
        else:
            spelled = text(node.child_by_field_name("type"))
            operand = node.child_by_field_name("value")
        if not spelled.strip().endswith("*") or operand is None:
            continue
        operand = unparenthesised(operand)
        if operand.type == "field_expression":
            name = text(operand.child_by_field_name("field"))
        elif operand.type == "identifier":
            name = text(operand)
        else:
            continue
        words = [w for w in re.findall(r"[\w:]+", spelled) if w not in ("const", "volatile")]
        if len(words) == 1 and spelled.count("*") == 1:
            found.setdefault(name, set()).add(words[0])
    return tuple((name, next(iter(types))) for name, types in found.items() if len(types) == 1)


def _return_only(definition: Node, declarator: Node) -> ReturnOnly | None:
    """The function as a :class:`ReturnOnly`, or None when its body does more than return.

    Locals declared before the ``return``, one each (SGLang's ``static const auto kNumSM =
    host::runtime::get_sm_count(device.device_id); return kNumSM;``), are read into the
    returned expression. A ``static`` one keeps its first call's value, which is every call's
    only where its initialiser reads none of the parameters outside a multiprocessor count
    call (:data:`SM_COUNT_CALLS`: the import reads one GPU); any other makes it no ReturnOnly."""
    body = definition.child_by_field_name("body")
    if body is None:
        return None
    statements = [
        c
        for c in body.named_children
        if c.type not in ("comment", "static_assert_declaration")
        and not text(c).startswith("static_assert")
    ]
    if not statements or statements[-1].type != "return_statement":
        return None
    values = statements[-1].named_children
    if len(values) != 1:
        return None
    params = tuple(p.name for p in _params(declarator))
    returned = text(values[0])
    for statement in reversed(statements[:-1]):
        local = _one_local(statement, params)
        if local is None:
            return None
        name, value = local
        returned = re.sub(rf"(?<![\w.:>]){re.escape(name)}(?!\w)", f"({value})", returned)
    template = definition.parent
    names = (
        tuple(t.name for t in _template_params(template))
        if template is not None and template.type == "template_declaration"
        else ()
    )
    return ReturnOnly(names, params, returned, tuple(_scope_names(definition)))


def _procedure(definition: Node, declarator: Node) -> Procedure | None:
    """The function as a :class:`Procedure`, or None where it has no body."""
    body = definition.child_by_field_name("body")
    if body is None:
        return None
    plist = declarator.child_by_field_name("parameters")
    nodes = [
        c
        for c in (plist.named_children if plist is not None else [])
        if c.type in ("parameter_declaration", "optional_parameter_declaration")
    ]
    params = [_param(c) for c in nodes]
    template = definition.parent
    names = (
        tuple(t.name for t in _template_params(template))
        if template is not None and template.type == "template_declaration"
        else ()
    )
    defaults = tuple(
        text(c.child_by_field_name("default_value")) or None
        if c.type == "optional_parameter_declaration"
        else None
        for c in nodes
    )
    return Procedure(
        names,
        tuple(p.name for p in params),
        tuple("" if p.pointer or p.reference else p.type for p in params),
        defaults,
        text(body),
        tuple(_scope_names(definition)),
    )


def _one_local(statement: Node, params: tuple[str, ...]) -> tuple[str, str] | None:
    """(name, initialiser) of a declaration of one local by ``=`` (:func:`_return_only`), or
    None: anything else, or a ``static`` local whose first call's value need not be every
    call's."""
    if statement.type != "declaration" or len(statement.named_children) < 2:
        return None
    inits = [c for c in statement.named_children if c.type == "init_declarator"]
    if len(inits) != 1:
        return None
    declarator, value = (inits[0].child_by_field_name(f) for f in ("declarator", "value"))
    if declarator is None or declarator.type != "identifier" or value is None:
        return None
    static = any(
        c.type == "storage_class_specifier" and text(c) == "static"
        for c in statement.named_children
    )
    # what the initialiser reads outside its SM count calls (the one GPU's count either way)
    outside = text(value)
    for call in _walk(value, ("call_expression",)):
        if _callee(call).rsplit("::", 1)[-1] in SM_COUNT_CALLS:
            outside = outside.replace(text(call), " ")
    if static and _words(outside) & set(params):
        return None
    return text(declarator), text(value)


def _row_offsets(body: Node, params: tuple[Param, ...]) -> tuple[RowOffset, ...]:
    """Where a kernel's body offsets a pointer parameter by a row: one operand of a ``+`` whose
    other is the pointer (``input + row * 2 * d``), or the one index of a subscript of it
    (``input[row * d + idx]``), an index that is a local with one declaration in the body
    followed to its initialiser (``offset = row * d + idx; input[offset]``). Of the offset's
    summands exactly one is a row term (:func:`_row_term`), or it is not a row offset. Read on
    the syntax tree: comments, strings and nested parentheses are what they are, not text."""
    pointers = {p.name for p in params if p.pointer}
    initialisers: dict[str, list[Node]] = {}
    for init in _walk(body, ("init_declarator",)):
        declarator, value = (
            init.child_by_field_name("declarator"),
            init.child_by_field_name("value"),
        )
        if declarator is not None and declarator.type == "identifier" and value is not None:
            initialisers.setdefault(text(declarator), []).append(value)

    def row_of(offset: Node, followed: frozenset[str]) -> tuple[str, tuple[str, ...]] | None:
        offset = unparenthesised(offset)
        name = text(offset)
        if offset.type == "identifier" and len(initialisers.get(name, [])) == 1:
            if name in followed:
                return None
            return row_of(initialisers[name][0], followed | {name})
        terms = [t for t in map(_row_term, _operands(offset, "+")) if t is not None]
        return terms[0] if len(terms) == 1 else None

    found: list[RowOffset] = []
    for node in _walk(body, ("binary_expression", "subscript_expression")):
        if node.type == "subscript_expression":
            pointer, offset = node.child_by_field_name("argument"), _single_index(node)
        elif text(node.child_by_field_name("operator")) == "+":
            pointer, offset = node.child_by_field_name("left"), node.child_by_field_name("right")
            if pointer is None or text(pointer) not in pointers:
                pointer, offset = offset, pointer
        else:
            continue
        if pointer is None or offset is None or pointer.type != "identifier":
            continue
        term = row_of(offset, frozenset()) if text(pointer) in pointers else None
        if term is not None and (row := RowOffset(text(pointer), *term)) not in found:
            found.append(row)
    return tuple(found)


def _extents(body: Node, params: tuple[Param, ...]) -> tuple[Extent, ...]:
    """How far the body reads each pointer parameter, where its every use says it:
    - only read as ``p[index]``: one past the largest index where every index is a whole number
      (``scale[0]``), or a by-value parameter ``n`` where every index is guarded by
      ``index < n`` (:func:`_guard_bound`);
    - reached only at the very offsets another pointer parameter is, ``p + offset`` or
      ``p[index]``, and that one only at them (FlashInfer's ``v_merged + (pos * num_heads +
      head_idx) * head_dim + tx * vec_size`` beside ``v_a``'s, ``s_merged[pos * num_heads +
      head_idx]`` beside ``s_a``'s): the extent of the one that stands for them all, ``like``
      it (that one is like none, so no two are like each other).
    A comparison (``p != nullptr``) reads nothing and is no use.
    A pointer used any other way (written through a subscript, passed on, one index unguarded)
    has no extent: its reads are not all seen, so none is claimed. The fields of a by-value
    struct parameter the body reads only field by field (:func:`_fields_read`) are pointers
    and scalars as parameters are, named ``params.field`` (SGLang's ``params.expert_ids[token_id
    / params.expert_step]`` after ``if (token_id >= params.num_tokens) return;``). Read on the
    syntax tree."""
    fields = _fields_read(body, params)
    pointers = [p.name for p in params if p.pointer] + sorted(fields)
    mutated = _mutated_names(body)
    scalars = ({p.name for p in params if not p.pointer and not p.reference} | fields) - mutated
    initialisers = {
        name: [_compact(value) for value in values] for name, values in _local_values(body).items()
    }
    bounds: dict[str, set[str]] = {}
    accesses: dict[str, set[str]] = {}  # each use's offset and guards, or "" for any other use
    written: set[str] = set()
    for name in _walk(body, ("identifier", "field_expression")):
        pointer = _compact(name)
        if pointer not in pointers or _null_test(name):
            continue
        if _written_through(name):
            written.add(pointer)
        access = _pointer_offset(name)
        steady = access is not None and not _words(access) & mutated
        accesses.setdefault(pointer, set()).add(
            f"{access} under {_guards(name)}" if steady and access is not None else ""
        )
        if not (access or "").startswith("+"):
            bound = _read_bound(name, initialisers, scalars, mutated)
            bounds.setdefault(pointer, set()).add(bound or "")
    out: list[Extent] = []
    for pointer, found in bounds.items():
        if "" in found or any(a.startswith("+") for a in accesses[pointer]):
            continue
        if all(b.isdigit() for b in found):
            out.append(Extent(pointer, str(max(int(b) for b in found))))
        elif len(found) == 1:
            out.append(Extent(pointer, found.pop()))
    read = {e.pointer for e in out}
    for pointer, forms in accesses.items():
        if pointer in read or "" in forms:
            continue
        # pointers reached at the same offsets are alike; one of them stands for all, the first
        # the body does not write through (an input, which a binding checks more often than
        # the output it writes: FlashInfer's merge checks `v_a` and `s_a`, not `s_merged`)
        alike = [q for q in pointers if accesses.get(q) == forms]
        first = next((q for q in alike if q not in written), alike[0])
        if first != pointer:
            out.append(Extent(pointer, first, like=True))
    return tuple(out)


def _fields_read(body: Node, params: tuple[Param, ...]) -> set[str]:
    """``params.field`` for each field the body reaches of a by-value parameter that it uses
    only through ``.`` fields: such a field is read as a parameter of its own would be. One the
    body uses whole anywhere (handed to a call, its address taken, copied) may be read further
    out of sight, so none of its fields is given."""
    by_value = {p.name for p in params if not p.pointer and not p.reference}
    found: set[str] = set()
    whole: set[str] = set()
    for node in _walk(body, ("identifier",)):
        name = text(node)
        if name not in by_value:
            continue
        parent = node.parent
        operator = parent.child_by_field_name("operator") if parent is not None else None
        if (
            parent is not None
            and parent.type == "field_expression"
            and parent.child_by_field_name("argument") == node
            and operator is not None
            and text(operator) == "."
        ):
            found.add(_compact(parent))
        else:
            whole.add(name)
    return {f for f in found if f.split(".", 1)[0] not in whole}


def _differenced(body: Node, params: tuple[Param, ...]) -> tuple[str, ...]:
    """The pointer parameters (and struct fields, :func:`_fields_read`) two of whose elements
    the body subtracts, ``p[a] - p[b]``: FlashInfer's ``indptr[batch_idx + 1] -
    indptr[batch_idx]``, a CSR offset array whose differences are counts. Their values must be
    non-decreasing and end within the tensors they offset into, or a count wraps and the kernel
    reads far outside; an integer input drawn at random is neither (read on the syntax tree)."""
    pointers = {p.name for p in params if p.pointer} | _fields_read(body, params)
    found: list[str] = []
    for node in _walk(body, ("binary_expression",)):
        if text(node.child_by_field_name("operator")) != "-":
            continue
        sides = (node.child_by_field_name("left"), node.child_by_field_name("right"))
        bases = {_subscripted(side) for side in sides}
        pointer = bases.pop() if len(bases) == 1 else None
        if pointer in pointers and pointer not in found:
            found.append(pointer)
    return tuple(found)


def _scattered(
    body: Node,
    params: tuple[Param, ...],
    structs: dict[str, list[Param]] | None = None,
    writers: dict[str, frozenset[int]] | None = None,
) -> tuple[tuple[str, str], ...]:
    """(slot pointer, written pointer) for each store the body places by a pointer's element:
    a store (``p[off] = ...``, ``*(p + off) = ...``, or through a local pointer whose
    initialiser offsets ``p``: ``auto* k = slot > 0 ? key_cache + slot * key_stride : nullptr;``
    then ``k[i] = ...``) into a pointer parameter that is not ``const``, whose offset has a term
    that is, or is a product with a factor that is, an element ``s[i]`` or a local holding one
    (``const int64_t slot = locations[token];``, followed through locals up to
    :data:`MAX_BOUND_DEPTH`). These are slots: two elements alike make two threads write one
    row in no set order (SGLang's KV-cache store at 0.5.23 differed from itself at random slot
    mappings on the H100, 9119727), so a framework never passes such values and a check must
    not draw them (``init.distinct``). An element added alone to a row's base (``out[b * n +
    len - 1]``), a read, or an atomic's address (``atomicAdd(&counts[ids[i]], 1)``, where ids
    repeat by design) places no row.

    A pointer field of a struct parameter counts as a pointer parameter, named ``params.field``
    (:func:`_struct_pointers`), read directly or through a structured binding (SGLang's
    ``const auto& [q, k_cache, out_loc] = params;``); the stores are :func:`_stores`'."""
    names, aliases = _struct_pointers(body, params, structs or {})
    pointers = {p.name for p in params if p.pointer} | set(names)
    writable = {p.name for p in params if p.pointer and not p.const}
    writable |= {name for name, field in names.items() if not field.const}
    holders = _element_holders(body, pointers)
    found: list[tuple[str, str]] = []
    for base, offset in _stores(body, writers or {}):
        written = _compact(base)
        factor = _row_factor(offset, pointers, holders)
        if written in writable and factor is not None:
            pair = (aliases.get(factor[0], factor[0]), aliases.get(written, written))
            if pair not in found:
                found.append(pair)
    return tuple(found)


def _element_holders(body: Node, pointers: set[str]) -> dict[str, str]:
    """Each local name of ``body`` that holds an element of one of ``pointers`` (``const
    int64_t slot = locations[token];``), followed through locals up to
    :data:`MAX_BOUND_DEPTH`: the name -> that pointer."""
    values = _local_values(body)
    holders: dict[str, str] = {}
    for _ in range(MAX_BOUND_DEPTH):
        before = len(holders)
        for name, inits in values.items():
            source = next((_element_source(v, pointers, holders) for v in inits), None)
            if source is not None and name not in holders and name not in pointers:
                holders[name] = source
        if len(holders) == before:
            break
    return holders


def _gathered(
    body: Node, params: tuple[Param, ...], structs: dict[str, list[Param]] | None = None
) -> tuple[tuple[str, str, bool], ...]:
    """(id pointer, offset pointer, scaled) for each place the body offsets a pointer, read or
    written, by a pointer's element: ``p[e]``, ``p + e`` (a ``+`` chain with ``p`` one operand,
    the others the offset) or a byte move ``pointer::offset(p, e)``, where a term of the offset
    is, or is a product with a factor that is, an element ``ids[i]`` or a local holding one
    (:func:`_element_holders`): vLLM's and FlashInfer's ``cos_sin_cache + pos * rot_dim`` with
    ``pos = positions[token]``, a gather's ``table[ids[i] * d + j]``. ``scaled`` says the
    element is multiplied (a row index) rather than added alone (an element index). These
    elements are row ids of that pointer's tensor: drawn below another tensor's rows, the
    rows past those are never read, and a candidate wrong only there passes (review of
    98edc3a); :func:`~astra_graph.framework.draft._index_rows` draws them below the rows they
    index. Struct fields count as pointers (:func:`_struct_pointers`).

    Where an id pointer's elements may reach something these uses do not say, the tensor
    reached is not read, and a use (id pointer, "", True) says so (the draft then keeps the
    ids below every tensor's rows): an element offsetting what is no pointer parameter (a
    local pointer or array: ``base[ids[i] * d]`` with ``base = table + h * stride``), or an
    element or the pointer itself used any other way than in these offsets, a comparison
    (``ids[i] >= 0``) or a holder's initialiser (:func:`_accounted`: handed to a call
    ``scale_of(scales, ids[i])``, assigned ``e = ids[i]``, a holder declared twice or
    assigned)."""
    names, aliases = _struct_pointers(body, params, structs or {})
    pointers = {p.name for p in params if p.pointer} | set(names)
    mutated = _mutated_names(body)
    holders = _element_holders(body, pointers)
    local = _local_pointers(body)
    uses: list[tuple[Node, list[Node], bool]] = []  # (base, offset terms, a subscript's)
    for node in _walk(body, ("subscript_expression", "binary_expression", "call_expression")):
        if node.type == "subscript_expression":
            base, index = node.child_by_field_name("argument"), _single_index(node)
            if base is not None and index is not None:
                uses.append((base, [index], True))
        elif node.type == "call_expression":
            uses += [(base, [move], False) for base, move in _moved_pairs(node)]
        elif _is_sum(node) and not (node.parent is not None and _is_sum(node.parent)):
            operands = _operands(node, "+")  # the whole chain once, from its top
            for at, operand in enumerate(operands):
                uses.append((operand, operands[:at] + operands[at + 1 :], False))
    found: list[tuple[str, str, bool]] = []
    terms: list[Node] = []  # the offset terms the found uses read their ids in
    for base, offset, subscript in uses:
        pointer = _compact(_uncast(base))
        if pointer not in pointers and not subscript and pointer not in local:
            continue  # a sum of values, no address
        summands = [t for part in offset for t in _operands(part, "+")]
        for term in summands:
            factor = _row_factor(term, pointers - {pointer}, holders)
            if factor is None:
                continue
            terms.append(term)
            target = aliases.get(pointer, pointer) if pointer in pointers else ""
            if factor[1] and _steps_rows(term, summands, holders):
                target = ""
            use = (aliases.get(factor[0], factor[0]), target, factor[1])
            if use not in found:
                found.append(use)
    ids = {source for source, _, _ in found}
    for source in sorted(ids - _accounted(body, ids, pointers, holders, mutated, terms)):
        found.append((source, "", True))
    return tuple((aliases.get(i, i), t, scaled) for i, t, scaled in found)


def _id_row_tables(
    body: Node, params: tuple[Param, ...], writers: dict[str, frozenset[int]]
) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(table, ids, row length factors) for each pointer parameter ``table`` that the body reaches
    only at rows named by the elements of one other pointer parameter ``ids``: each of its uses is
    the base of a subscript that only reads (:func:`_only_read`) or of a ``+`` chain dereferenced or
    handed to a call as it is formed (never kept in a local pointer, to be offset again out of
    sight), whose offset's summands hold exactly one row term, ``id * L1 * L2 ...``, the id an
    element ``ids[i]`` or a local whose one initialiser is one, never assigned (through casts), the
    ``L`` names and decimal whole numbers alike at every use; no other summand reads an element of a
    pointer or a name of the length (``+ d`` steps past the id's row, :func:`_steps_rows`).
    FlashInfer's ``cos_sin_cache + pos * rope_dim + vec_idx`` with ``pos = pos_ids[idx]``. A table
    the body stores through (:func:`_written_names`: an assignment, a writing call of the source, a
    local pointer stored through) has none: its rows would be places, not reads. What is read past
    the row term (``+ vec_idx``, and a callee's reach past the address it is handed: a vector's
    width) is taken as within the row, as :func:`_gathered` takes it. Such a table's rows are any
    number the ids are drawn below: none of its sizes but the row length is the kernel's."""
    pointers = {p.name for p in params if p.pointer}
    mutated = _mutated_names(body)
    ids_of: dict[str, str] = {}  # strict holders: `const long pos = pos_ids[idx];`
    for local, values in _local_values(body).items():
        sources = {_subscripted(_uncast(v)) for v in values}
        source = sources.pop() if len(values) == 1 and len(sources) == 1 else None
        if source in pointers and local not in mutated and local not in pointers:
            ids_of[local] = str(source)
    written = _written_names(body, writers)

    def id_of(factor: Node) -> str | None:
        factor = _uncast(factor)
        base = _subscripted(factor)
        return base if base in pointers else ids_of.get(text(factor))

    def row_use(name: Node) -> tuple[str, tuple[str, ...]] | None:
        top = name
        while top.parent is not None and (
            top.parent.type in ("parenthesized_expression", "cast_expression")
            or _uncast(top.parent).id == name.id
        ):
            top = top.parent
        parent = top.parent
        if parent is None:
            return None
        if parent.type == "subscript_expression" and parent.child_by_field_name("argument") == top:
            index = _single_index(parent)
            if index is None or not _only_read(parent):
                return None
            summands = _operands(index, "+")
        elif _is_sum(parent):
            chain = parent
            while chain.parent is not None and (
                _is_sum(chain.parent) or chain.parent.type == "parenthesized_expression"
            ):
                chain = chain.parent
            user = chain.parent
            # the address read where it is formed: dereferenced, or handed to a call (a vector
            # load); one stored in a local pointer is offset again out of sight, and one in
            # arithmetic (`table + off - d`) is no address as summed
            if user is None or not (
                user.type == "argument_list"
                or (
                    user.type == "pointer_expression"
                    and text(user.child_by_field_name("operator")) == "*"
                )
            ):
                return None
            operands = _operands(chain, "+")
            if not any(o.id == unparenthesised(top).id for o in operands):
                return None
            summands = [o for o in operands if o.id != unparenthesised(top).id]
        else:
            return None
        rows = []
        for term in summands:
            factors = _operands(term, "*")
            named = [i for f in factors if (i := id_of(f)) is not None]
            if named:
                rows.append((term, factors, named))
            elif _element_source(term, pointers, ids_of) is not None:
                return None  # an element read beside the row: an element index, not a row
        if len(rows) != 1 or len(rows[0][2]) != 1 or len(rows[0][1]) < 2:
            return None
        term, factors, (row_id,) = rows[0]
        length = [f for f in factors if id_of(f) is None]
        plain = all(
            f.type == "identifier" or (f.type == "number_literal" and text(f).isdigit())
            for f in length
        )
        if not plain or row_id == text(name) or _steps_rows(term, summands, ids_of):
            return None
        return row_id, tuple(text(f) for f in length)

    uses: dict[str, set[tuple[str, tuple[str, ...]] | None]] = {}
    for use in _walk(body, ("identifier",)):
        word = text(use)
        if word in pointers and not _declaring(use):
            uses.setdefault(word, set()).add(row_use(use))
    out: list[tuple[str, str, tuple[str, ...]]] = []
    for table, found in sorted(uses.items()):
        (row,) = found if len(found) == 1 else (None,)
        if row is not None and table not in written:
            out.append((table, *row))
    return tuple(out)


def _steps_rows(term: Node, summands: list[Node], holders: dict[str, str]) -> bool:
    """Whether another summand of a row offset ``ids[i] * d + ...`` reads a name of the row's
    stride (``+ d``, ``+ (k + 1) * d``): it may step past the id's own row, so the id is no row
    of the tensor it offsets (``table[ids[i] * d + j + d]`` reads row id + 1). Another summand
    bounded below the stride in other names (``+ j``, ``+ sin_offset + vec_idx``) is not
    checked: the draft takes it as within the row."""
    inside = [(n.start_byte, n.end_byte) for n in _walk(term, ("subscript_expression",))]
    stride = {
        text(name)
        for name in _walk(term, ("identifier",))
        if text(name) not in holders
        and not any(start <= name.start_byte < end for start, end in inside)
    }
    return any(
        _identifiers(other) & stride
        for other in summands
        if (other.start_byte, other.end_byte) != (term.start_byte, term.end_byte)
    )


COMPARISONS = ("<", ">", "<=", ">=", "==", "!=")
"""The operators whose operand is only compared (an id tested, ``ids[i] >= 0``), no address."""


def _accounted(
    body: Node,
    ids: set[str],
    pointers: set[str],
    holders: dict[str, str],
    mutated: set[str],
    terms: list[Node],
) -> set[str]:
    """Those of ``ids`` every use of which is seen by :func:`_gathered`: each occurrence of the
    pointer is an element read ``ids[i]``, each such read and each use of a local holding one
    lies in one of the offset ``terms``, a comparison, or a holder's initialiser, and no holder
    is assigned or declared twice (``mutated``, :func:`_mutated_names`)."""
    spans = [(t.start_byte, t.end_byte) for t in terms]

    def seen(node: Node) -> bool:
        if any(start <= node.start_byte and node.end_byte <= end for start, end in spans):
            return True
        at = _value_top(node)
        parent = at.parent
        if parent is not None and parent.type == "binary_expression":
            return text(parent.child_by_field_name("operator")) in COMPARISONS
        declarator = parent.child_by_field_name("declarator") if parent is not None else None
        return (
            parent is not None
            and parent.type == "init_declarator"
            and parent.child_by_field_name("value") == at
            and declarator is not None
            and text(declarator) in holders
        )

    out = set(ids)
    for name in _walk(body, ("identifier",)):
        word = text(name)
        source = word if word in pointers else holders.get(word)
        if source not in out or _declaring(name):
            continue
        parent = name.parent
        if word in pointers:
            element = (
                parent is not None
                and parent.type == "subscript_expression"
                and parent.child_by_field_name("argument") == name
            )
            if not element or parent is None or not seen(parent):
                out.discard(source)  # handed on whole, moved, or its element used unseen
        elif word in mutated or not seen(name):
            out.discard(str(source))
    return out


def _value_top(node: Node) -> Node:
    """The widest expression ``node``'s value flows into unchanged or by arithmetic: through
    parentheses, casts (``(long)x``, ``static_cast<long>(x)``) and arithmetic operators, up to a
    comparison, an initialiser, a call's argument or a statement."""
    while node.parent is not None:
        parent = node.parent
        arithmetic = parent.type == "binary_expression" and text(
            parent.child_by_field_name("operator")
        ) in ("+", "-", "*", "/", "%")
        call = parent.parent if parent.type == "argument_list" else None
        function = call.child_by_field_name("function") if call is not None else None
        if parent.type in ("parenthesized_expression", "cast_expression") or arithmetic:
            node = parent
        elif (
            call is not None and function is not None and text(function).startswith("static_cast<")
        ):
            node = call
        else:
            break
    return node


def _declaring(name: Node) -> bool:
    """Whether identifier ``name`` is the name a declaration declares (``pos`` of ``long pos =
    ...``), not a use of it."""
    parent = name.parent
    return (
        parent is not None
        and parent.type in ("init_declarator", "declaration")
        and parent.child_by_field_name("declarator") == name
    )


def _bare_declarator(written: Node) -> Node | None:
    """The declarator a declaration's declarator field holds, past its initialiser: ``x`` of
    ``int x = 0``, ``*row`` of ``T* row = ...``, ``v[8]`` of ``float v[8];``."""
    return (
        written.child_by_field_name("declarator") if written.type == "init_declarator" else written
    )


def _local_pointers(body: Node) -> set[str]:
    """The names ``body`` declares as pointers or arrays (``T* row = ...``, ``float v[8];``)."""
    out: set[str] = set()
    for declaration in _walk(body, ("declaration",)):
        for written in declaration.children_by_field_name("declarator"):
            declared = _bare_declarator(written)
            if declared is None or declared.type not in ("pointer_declarator", "array_declarator"):
                continue
            while declared is not None and declared.type != "identifier":
                declared = declared.child_by_field_name("declarator")
            if declared is not None:
                out.add(text(declared))
    return out


def _is_sum(node: Node) -> bool:
    """Whether ``node`` is a binary ``+`` (through parentheses)."""
    node = unparenthesised(node)
    return node.type == "binary_expression" and text(node.child_by_field_name("operator")) == "+"


MAX_STRUCT_BINDING_DEPTH = 4
"""How many levels of structured bindings of nested struct fields :func:`_struct_pointers`
follows (SGLang's fused rope store binds a base struct inside its params: two)."""


def _struct_pointers(
    body: Node, params: tuple[Param, ...], structs: dict[str, list[Param]]
) -> tuple[dict[str, Param], dict[str, str]]:
    """(each pointer field of the struct parameters by every name the body reaches it by, with
    the field; each structured-binding name's ``params.field``). A field is reached as
    ``params.field``, or by a name a structured binding of the parameter declares (``const
    auto& [a, b] = params;``: C++ binds the fields in their declared order, so ``a`` is the
    first), and a binding of a struct field binds that struct's fields the same way
    (``[q, k] = base_params``: ``params.base_params.q_ptr``, ...)."""
    typed = {p.name: p.type for p in params if not p.pointer and p.type in structs}
    names: dict[str, Param] = {}
    aliases: dict[str, str] = {}
    for name, kind in typed.items():
        for member in structs[kind]:
            if member.pointer:
                names[f"{name}.{member.name}"] = member
    for _ in range(MAX_STRUCT_BINDING_DEPTH):
        grown = False
        for binding in _walk(body, ("structured_binding_declarator",)):
            declarator = binding.parent
            while declarator is not None and declarator.type != "init_declarator":
                declarator = declarator.parent
            value = declarator.child_by_field_name("value") if declarator else None
            if value is None:
                continue
            source = _compact(unparenthesised(value))
            qualified = aliases.get(source, source)
            if qualified not in typed:
                continue
            bound = [text(c) for c in binding.named_children if c.type == "identifier"]
            for local, member in zip(bound, structs[typed[qualified]], strict=False):
                if local in aliases:
                    continue
                grown = True
                field = f"{qualified}.{member.name}"
                aliases[local] = field
                if member.pointer:
                    names[local] = names[field] = member
                elif member.type in structs:
                    typed[field] = member.type
        if not grown:
            break
    return names, aliases


MAX_WRITER_DEPTH = 4
"""How many calls deep :func:`_writing_positions` follows a pointer handed on to be stored
through (SGLang's fused rope store: the kernel hands the cache row to a rotation helper, which
hands it to ``store_as``: two)."""


def _writing_positions(root: Node) -> dict[str, frozenset[int]]:
    """For each function the source defines, by its unqualified name, the positions of its
    parameters that are pointers to non-``const`` and that its body stores through
    (:func:`_written_names`: ``store_as(void* ptr, ...)`` assigning ``static_cast<T*>(ptr)[i]``
    gives {0}), followed through calls up to :data:`MAX_WRITER_DEPTH` deep. A pointer that is
    not ``const`` but only read (``dot(float* a, ...)``) is no writing position. Overloads
    count a position only where every overload of that name writes there (``load_as(const
    void*)`` beside a writing overload is a read), so a read never makes a pointer written."""
    functions: list[tuple[str, tuple[Param, ...], Node]] = []
    for definition in _walk(root, ("function_definition",)):
        declarator = _function_declarator(definition)
        body = definition.child_by_field_name("body")
        if declarator is None or body is None:
            continue
        name = text(declarator.child_by_field_name("declarator")).split("<", 1)[0]
        functions.append((name.rsplit("::", 1)[-1].strip(), _params(declarator), body))
    found: dict[str, frozenset[int]] = {}
    for _ in range(MAX_WRITER_DEPTH):
        grown: dict[str, frozenset[int]] = {}
        for name, params, body in functions:
            written = _written_names(body, found)
            positions = frozenset(
                i for i, p in enumerate(params) if p.pointer and not p.const and p.name in written
            )
            grown[name] = grown[name] & positions if name in grown else positions
        if grown == found:
            break
        found = grown
    return found


def _store_targets(body: Node, kinds: tuple[str, ...]) -> list[Node]:
    """The targets a body stores to by the expressions of ``kinds`` (``assignment_expression``,
    and ``update_expression`` for ``p[i]++``): each ``p[i]`` or ``*(p + i)``, unparenthesised."""
    found: list[Node] = []
    for node in _walk(body, kinds):
        target = node.child_by_field_name("left") or node.child_by_field_name("argument")
        target = unparenthesised(target) if target is not None else None
        if target is not None and target.type in ("subscript_expression", "pointer_expression"):
            found.append(target)
    return found


def _writer_arguments(body: Node, writers: dict[str, frozenset[int]]) -> list[Node]:
    """Each argument a body passes at a writing position of a function of the source
    (``writers``, :func:`_writing_positions`)."""
    found: list[Node] = []
    for call in _walk(body, ("call_expression",)):
        arguments = call.child_by_field_name("arguments")
        args = [a for a in (arguments.named_children if arguments else []) if a.type != "comment"]
        found += [args[p] for p in writers.get(_callee(call), frozenset()) if p < len(args)]
    return found


def _pointer_initialisers(body: Node) -> dict[str, list[Node]]:
    """Each local a body declares with an initialiser, a pointer (``T* row = ...``) or not, its
    initialisers in order."""
    found: dict[str, list[Node]] = {}
    for init in _walk(body, ("init_declarator",)):
        declarator = init.child_by_field_name("declarator")
        value = init.child_by_field_name("value")
        while declarator is not None and declarator.type == "pointer_declarator":
            declarator = declarator.child_by_field_name("declarator")
        if declarator is not None and declarator.type == "identifier" and value is not None:
            found.setdefault(text(declarator), []).append(value)
    return found


def _identifiers(node: Node | None) -> set[str]:
    """The names ``node`` reads (none for no node)."""
    return {text(i) for i in _walk(node, ("identifier",))} if node is not None else set()


def _written_names(body: Node, writers: dict[str, frozenset[int]]) -> set[str]:
    """The names a body stores through: those in an assignment's or increment's target
    (``p[i]``, ``*(p + i)``, ``static_cast<T*>(p)[i]``), those in an argument at a writing
    position of a call (``writers``), and, through locals, the names a stored-through local's
    initialiser reads (``T* row = out + i * d; row[j] = v``: ``out``)."""
    written: set[str] = set()
    for target in _store_targets(body, ("assignment_expression", "update_expression")):
        written |= _identifiers(target.child_by_field_name("argument"))
    for argument in _writer_arguments(body, writers):
        written |= _identifiers(argument)
    initialisers = _pointer_initialisers(body)
    for _ in range(MAX_BOUND_DEPTH):
        before = len(written)
        for name in [n for n in written if n in initialisers]:
            for value in initialisers[name]:
                written |= _identifiers(value)
        if len(written) == before:
            break
    return written


def _stores(body: Node, writers: dict[str, frozenset[int]]) -> list[tuple[Node, Node]]:
    """(base, offset) of each place the body stores to: the target of an assignment
    (``p[off]``; ``*(p + off)``), and each ``p + off``, ``&p[off]`` or byte move
    ``pointer::offset(p, a, b)`` (:data:`POINTER_OFFSET`, each move an offset) in the
    initialiser of a local pointer the body stores through (``T* row = out + slot * d; row[i]
    = ...``), or passes to a function of the source at a position where it takes a pointer to
    non-``const`` (``writers``, :func:`_writing_positions`: SGLang's ``store_as<V>(row, v)``).
    An increment (``counts[ids[i]]++``) places no row: a histogram's ids repeat by design."""
    found: list[tuple[Node, Node]] = []
    through = {text(a) for a in _writer_arguments(body, writers) if a.type == "identifier"}
    for target in _store_targets(body, ("assignment_expression",)):
        if target.type == "subscript_expression":
            base, index = target.child_by_field_name("argument"), _single_index(target)
            if base is not None and index is not None:
                found.append((base, index))
                through.add(_compact(base))
        else:
            address = target.child_by_field_name("argument")
            found += _offset_pairs(address) if address is not None else []
            through |= _identifiers(address)
    for name, values in _pointer_initialisers(body).items():
        if name not in through:
            continue
        for value in values:
            for node in _walk(
                value, ("binary_expression", "subscript_expression", "call_expression")
            ):
                if node.type == "subscript_expression":
                    base, index = node.child_by_field_name("argument"), _single_index(node)
                    if base is not None and index is not None:
                        found.append((base, index))
                elif node.type == "call_expression":
                    found += _moved_pairs(node)
                else:
                    found += _offset_pairs(node)
    return found


POINTER_OFFSET = re.compile(r"^(?:::)?(?:\w+::)*pointer::offset(?:<(?P<unit>[^<>]+)>)?$")
"""SGLang's ``pointer::offset<T = char>(ptr, offsets...)``: ``ptr`` moved by the offsets' sum in
units of ``T`` (host and device code alike)."""


def _moved_pairs(call: Node) -> list[tuple[Node, Node]]:
    """(the pointer, each move) of a :data:`POINTER_OFFSET` call: each move is a term of the
    offset; none for any other call."""
    function = call.child_by_field_name("function")
    arguments = call.child_by_field_name("arguments")
    args = [a for a in (arguments.named_children if arguments else []) if a.type != "comment"]
    if function is None or POINTER_OFFSET.match(_compact(function)) is None or len(args) < 2:
        return []
    return [(args[0], move) for move in args[1:]]


def _offset_pairs(node: Node) -> list[tuple[Node, Node]]:
    """Both (base, offset) readings of a sum ``a + b``; none for anything else."""
    node = unparenthesised(node)
    if node.type != "binary_expression" or text(node.child_by_field_name("operator")) != "+":
        return []
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    return [(left, right), (right, left)] if left is not None and right is not None else []


def _row_factor(node: Node, pointers: set[str], holders: dict[str, str]) -> tuple[str, bool] | None:
    """(the pointer whose element is a term of the offset ``node``, or a factor of one of its
    products (``slot * key_stride``; ``p[slot]``), through casts; whether it is a product's
    factor), or None where no term is."""
    for term in _operands(node, "+"):
        factors = _operands(term, "*")
        for factor in factors:
            factor = _uncast(factor)
            if factor.type == "subscript_expression" and _subscripted(factor) in pointers:
                return str(_subscripted(factor)), len(factors) > 1
            if factor.type == "identifier" and holders.get(text(factor)) in pointers:
                return holders[text(factor)], len(factors) > 1
    return None


def _uncast(node: Node) -> Node:
    """``x`` of ``(T)x`` or ``static_cast<T>(x)`` (through parentheses), else ``node``."""
    node = unparenthesised(node)
    if node.type == "cast_expression":
        value = node.child_by_field_name("value")
        return _uncast(value) if value is not None else node
    function = node.child_by_field_name("function") if node.type == "call_expression" else None
    arguments = node.child_by_field_name("arguments") if function is not None else None
    operands = arguments.named_children if arguments is not None else []
    if function is not None and text(function).startswith("static_cast<") and len(operands) == 1:
        return _uncast(operands[0])
    return node


def _element_source(node: Node, pointers: set[str], holders: dict[str, str]) -> str | None:
    """The pointer one of whose elements ``node`` reads (``p[i]``, or a local holding one), the
    first found; None where it reads none."""
    for part in _walk(node, ("subscript_expression", "identifier")):
        if part.type == "subscript_expression":
            base = _subscripted(part)
            argument = part.child_by_field_name("argument")
            uncast = _compact(_uncast(argument)) if argument is not None else None
            if base in pointers:
                return base
            if uncast in pointers:  # `static_cast<const IdType*>(out_loc)[token]`
                return uncast
        elif text(part) in holders:
            return holders[text(part)]
    return None


def _offset_uses(
    body: Node, params: tuple[Param, ...], differenced: tuple[str, ...]
) -> tuple[tuple[str, str, str], ...]:
    """Each ``t + e`` and ``t[e]`` of a pointer parameter ``t`` whose offset ``e`` reads an
    element of a :func:`_differenced` pointer ``p`` (FlashInfer's ``q + get_elem_offset_impl(
    indptr[batch_idx] + i * bdy + ty, ...)``): (``p``, ``t``, ``e`` without blanks). Where
    ``p``'s offsets point is read from these (:func:`~astra_graph.framework.launchers.
    offset_targets`)."""
    pointers = {p.name for p in params if p.pointer} - set(differenced)
    found: list[tuple[str, str, str]] = []
    for node in _walk(body, ("binary_expression", "subscript_expression")):
        if node.type == "subscript_expression":
            base, offset = node.child_by_field_name("argument"), _single_index(node)
        elif text(node.child_by_field_name("operator")) == "+":
            base, offset = node.child_by_field_name("left"), node.child_by_field_name("right")
        else:
            continue
        if base is None or offset is None or text(base) not in pointers:
            continue
        reads = {_subscripted(s) for s in _walk(offset, ("subscript_expression",))}
        for pointer in differenced:
            use = (pointer, text(base), _compact(offset))
            if pointer in reads and use not in found:
                found.append(use)
    return tuple(found)


def _subscripted(node: Node | None) -> str | None:
    """``p`` of a subscript ``p[i]`` (through parentheses), as written without blanks."""
    node = unparenthesised(node) if node is not None else None
    argument = node.child_by_field_name("argument") if node is not None else None
    if node is None or node.type != "subscript_expression" or argument is None:
        return None
    return _compact(argument)


MAX_BOUND_DEPTH = 8
"""How many initialisers and divisions :func:`_below_factors` follows from one index: vLLM's
merge reaches ``num_tokens`` through three (``token_idx``, ``token_head_idx``, ``global_idx``)."""


def _local_values(body: Node) -> dict[str, list[Node]]:
    """Each name the body declares with an initialiser (``int i = ...``), its initialisers in
    order (several where it is declared again)."""
    values: dict[str, list[Node]] = {}
    for init in _walk(body, ("init_declarator",)):
        declarator = init.child_by_field_name("declarator")
        value = init.child_by_field_name("value")
        if declarator is not None and declarator.type == "identifier" and value is not None:
            values.setdefault(text(declarator), []).append(value)
    return values


def _strided_extents(body: Node, params: tuple[Param, ...]) -> tuple[StridedExtent, ...]:
    """For each pointer parameter whose every use is a subscript ``p[a * s + b * t ...]`` (read
    or written), each term a product of a by-value parameter, the stride, and an index the body
    keeps below another by-value parameter (:func:`_below_factors`), the same strides at every
    use: the strides with the bound of each. A tensor asked only for its strides has exactly
    these axes (:func:`~astra_graph.framework.launchers.strided_axes`). A pointer used any
    other way, or an index whose bound is not seen, has none: nothing is claimed of it."""
    pointers = {p.name for p in params if p.pointer}
    mutated = _mutated_names(body) | _unsteady_names(body, params)
    scalars = {p.name for p in params if not p.pointer and not p.reference} - mutated
    values = _local_values(body)
    found: dict[str, set[tuple[tuple[str, str], ...]]] = {}
    other_use: set[str] = set(pointers & mutated)
    for name in _walk(body, ("identifier",)):
        pointer = text(name)
        if pointer not in pointers or pointer in other_use or _null_test(name):
            continue
        axes = _strided_index(name, values, scalars, mutated)
        if axes is None:
            other_use.add(pointer)
        else:
            found.setdefault(pointer, set()).add(axes)
    out = []
    for pointer, uses in found.items():
        strides = {tuple(s for s, _ in axes) for axes in uses}
        merged = {axis for axes in uses for axis in axes}
        if pointer in other_use:
            continue
        if len(strides) == 1 and len(merged) == len(next(iter(strides))):
            out.append(StridedExtent(pointer, tuple(sorted(merged))))
    return tuple(out)


def _strided_index(
    name: Node, values: dict[str, list[Node]], scalars: set[str], mutated: set[str]
) -> tuple[tuple[str, str], ...] | None:
    """For a use ``p[a * s + b * t]`` of a pointer: ((``s``, bound of ``a``), (``t``, bound of
    ``b``)), sorted, each stride ``s`` a by-value parameter and each bound a by-value parameter
    the index stays below; None for any other use, or two terms of one stride."""
    parent = name.parent
    if (
        parent is None
        or parent.type != "subscript_expression"
        or parent.child_by_field_name("argument") != name
        or not (_only_read(parent) or _element_written(parent))
    ):
        return None  # `&p[i]` reinterpreted as a wider vector, or handed to a call: not one element
    index = _single_index(parent)
    if index is None:
        return None
    axes: dict[str, str] = {}
    for term in _operands(index, "+"):
        factors = _operands(term, "*")
        if len(factors) != 2:
            return None
        candidates = []
        for stride, other in (factors, factors[::-1]):
            if stride.type == "identifier" and text(stride) in scalars:
                bound = _below_factors(other, values, mutated, 0)
                if bound is not None and len(bound) == 1 and bound[0] in scalars:
                    candidates.append((text(stride), bound[0]))
        if len(candidates) != 1 or candidates[0][0] in axes:
            return None
        axes[candidates[0][0]] = candidates[0][1]
    return tuple(sorted(axes.items()))


BLOCK_BOUNDS = {
    f"{index}.{axis}": f"{extent}.{axis}"
    for index, extent in (("blockIdx", "gridDim"), ("threadIdx", "blockDim"))
    for axis in "xyz"
}
"""CUDA's built-in indices, each with the launch extent it stays below."""
VECTOR_ACCESSES = ("load", "store", "cast_load", "cast_store")
"""The methods by which a vector type of the form ``V<T, N>`` (FlashInfer's ``vec_t<T, N>``,
the ``AlignedVector<T, N>`` of others) reads or writes its ``N`` elements at the address it is
handed: ``v.cast_store(p + off)`` reaches ``p[off]`` to ``p[off + N - 1]``."""
_VECTOR_TYPE = re.compile(r"^[\w:]+<(?P<element>[^<>,]+),(?P<count>[^<>,]+)>$")
_TEMPLATE_TYPE = re.compile(r"^(?P<name>[\w:]+)<(?P<args>.*)>$")


def _struct_member_types(root: Node) -> dict[str, tuple[tuple[str, ...], dict[str, str]]]:
    """Each struct or class template the unit defines once, by unqualified name: its template
    parameters' names and each plain data member's type as written without blanks
    (FlashInfer's ``state_t``: ((``vec_size``,), {``o``: ``vec_t<float,vec_size>``, ...})), where
    :func:`_vector_width` reads how many elements a member vector reaches."""
    out: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {}
    seen: set[str] = set()
    for spec in _walk(root, ("struct_specifier", "class_specifier")):
        body = spec.child_by_field_name("body")
        name = text(spec.child_by_field_name("name"))
        if body is None or not name:
            continue
        if name in seen:  # two definitions (a specialisation): which one a use takes is unread
            out.pop(name, None)
            continue
        seen.add(name)
        template = spec.parent
        if template is not None and template.type == "declaration":
            template = template.parent
        names = (
            tuple(t.name for t in _template_params(template))
            if template is not None and template.type == "template_declaration"
            else ()
        )
        members: dict[str, str] = {}
        for member in body.named_children:
            kind = member.child_by_field_name("type")
            if member.type != "field_declaration" or kind is None:
                continue
            for declarator in member.children_by_field_name("declarator"):
                if declarator.type == "field_identifier":
                    members[text(declarator)] = _compact(kind)
        out[name] = (names, members)
    return out


def _local_types(body: Node) -> dict[str, set[str]]:
    """Each name the body declares, with every type it is declared with (without blanks)."""
    out: dict[str, set[str]] = {}
    for declaration in _walk(body, ("declaration",)):
        kind = declaration.child_by_field_name("type")
        for written in declaration.children_by_field_name("declarator"):
            declared = (
                written.child_by_field_name("declarator")
                if written.type == "init_declarator"
                else written
            )
            if kind is not None and declared is not None and declared.type == "identifier":
                out.setdefault(text(declared), set()).add(_compact(kind))
    return out


def _vector_width(
    obj: Node,
    types: dict[str, set[str]],
    structs: Mapping[str, tuple[tuple[str, ...], dict[str, str]]],
) -> str | None:
    """``N`` of the ``V<T, N>`` that ``obj`` is declared as: a local (every declaration of its
    name the same count), or a member ``s.m`` of a local of a struct template the unit defines,
    the member's count with the local's template arguments put for the struct's parameters
    (FlashInfer's ``state_t<vec_size> st;`` ... ``st.o``); None where it is not read."""
    obj = unparenthesised(obj)
    if obj.type == "identifier":
        counts = {
            m["count"] if (m := _VECTOR_TYPE.match(t)) else None for t in types.get(text(obj), ())
        }
        return counts.pop() if len(counts) == 1 else None
    holder = obj.child_by_field_name("argument") if obj.type == "field_expression" else None
    member = obj.child_by_field_name("field") if holder is not None else None
    operator = obj.child_by_field_name("operator") if holder is not None else None
    if holder is None or member is None or text(operator) != "." or holder.type != "identifier":
        return None
    declared = types.get(text(holder), set())
    written = _TEMPLATE_TYPE.match(next(iter(declared))) if len(declared) == 1 else None
    if written is None or written["name"].rsplit("::", 1)[-1] not in structs:
        return None
    names, members = structs[written["name"].rsplit("::", 1)[-1]]
    args = split_top_level(written["args"])
    kind = members.get(text(member))
    if kind is None or len(args) != len(names):
        return None
    for name, arg in zip(names, args, strict=True):
        kind = re.sub(rf"\b{re.escape(name)}\b", arg.strip(), kind)
    match = _VECTOR_TYPE.match(re.sub(r"\s+", "", kind))
    return match["count"] if match else None


def _vector_access(name: Node) -> tuple[Node, list[Node]] | None:
    """For a pointer's use ``p + a + b`` that is the one argument of a vector access
    (``v.cast_store(p + a + b)``, :data:`VECTOR_ACCESSES`): the vector and the summands but
    ``p``; None for any other use."""
    top = _whole_sum(name)
    arguments = top.parent
    call = arguments.parent if arguments is not None else None
    function = call.child_by_field_name("function") if call is not None else None
    if (
        arguments is None
        or arguments.type != "argument_list"
        or [a for a in arguments.named_children if a.type != "comment"] != [top]
        or function is None
        or function.type != "field_expression"
        or text(function.child_by_field_name("field")) not in VECTOR_ACCESSES
    ):
        return None
    summands = _operands(top, "+")
    if not any(s.start_byte == name.start_byte and s.end_byte == name.end_byte for s in summands):
        return None  # the pointer inside a summand, not one
    rest = [s for s in summands if (s.start_byte, s.end_byte) != (name.start_byte, name.end_byte)]
    obj = function.child_by_field_name("argument")
    return (obj, rest) if obj is not None else None


def _call_reads(functions: FunctionIndex) -> CallReads:
    """:func:`~astra_graph.framework.guarded.call_read` over the unit's ``functions``."""
    from astra_graph.framework import guarded  # it reads this module's syntax helpers

    return lambda name: guarded.call_read(name, functions)


def _direct_extents(
    body: Node,
    params: tuple[Param, ...],
    tparams: tuple[TemplateParam, ...],
    structs: Mapping[str, tuple[tuple[str, ...], dict[str, str]]],
    differenced: tuple[str, ...],
    steady: Callable[[Node, int], bool] | None = None,
    reads: CallReads | None = None,
) -> DirectExtents | None:
    """The kernel's :class:`DirectExtents`, where it takes CSR offsets (``differenced``) or a
    count it may go without; None where it takes neither (a direct import reads
    :attr:`Kernel.indexed` then)."""
    from astra_graph.framework import segments  # it reads this module's syntax helpers

    nulls = segments.nullable_counts(body, params)
    if not nulls and not differenced:
        return None
    bounds: dict[str, str] = {}
    indexed, unindexed = _indexed_extents(
        body, params, tparams, structs, differenced, nulls, bounds, steady, reads
    )
    return DirectExtents(nulls, tuple(bounds.items()), indexed, unindexed)


def _indexed_extents(
    body: Node,
    params: tuple[Param, ...],
    tparams: tuple[TemplateParam, ...],
    structs: Mapping[str, tuple[tuple[str, ...], dict[str, str]]],
    offsets: tuple[str, ...] = (),
    nulls: tuple[str, ...] = (),
    bounds: dict[str, str] | None = None,
    steady: Callable[[Node, int], bool] | None = None,
    reads: CallReads | None = None,
) -> tuple[tuple[IndexedExtent, ...], tuple[tuple[str, str], ...]]:
    """For each pointer parameter the body reaches only at row-major indices, the shape those
    indices stay within (:class:`IndexedExtent`), and for each other pointer it reaches, why it
    has none (:attr:`Kernel.unindexed`). A use is ``p[index]`` (one element, read or
    written) or ``p + a + b`` handed to a vector access of ``N`` elements
    (:func:`_vector_access`, :func:`_vector_width`); its offset ``(i0 * S1 + i1) * S2 + i2``
    (each row term the first summand, a product whose first factor is the row) has the axes
    [bound of ``i0``, ``S1``, ``S2``], each inner index's reach kept within its axis (``i2 *
    N``, ``N`` the access's width: its bound times ``N``; ``i2`` alone: its bound plus ``N - 1``,
    so one element wide only). A bound is :func:`_below_factors`' (a guard, an initialiser, a
    built-in index's launch extent, :data:`BLOCK_BOUNDS`); a stride's factors are
    :func:`_product`'s (a local holding a product stands for its factors). Every factor must be
    a by-value parameter the body never assigns, a template parameter, a whole number or a
    launch extent: the launch can say what each is. Every use must give the same axes, or
    axes that one use's contain in order (:func:`_covering_axes`); a pointer used any other
    way (passed on, offset into a local, an index of unseen bound) has none: nothing is
    claimed of it.

    For a direct import (:class:`DirectExtents`): a row may also be placed by CSR ``offsets``
    (:func:`~astra_graph.framework.segments.offset_row`), each of which is then read alone into
    ``bounds`` (its segments' bound, :func:`~astra_graph.framework.segments.offsets_extents`),
    and the body is read as it runs with each of ``nulls`` null
    (:func:`~astra_graph.framework.segments.values_at_null`), those pointers not reached."""
    from astra_graph.framework import guarded, segments  # they read this module's helpers

    pointers = {p.name for p in params if p.pointer} - set(nulls)
    pointee = {p.name: p.type for p in params if p.pointer}
    body = scoped_body(body, params)
    mutated = _mutated_names(body) | _unsteady_names(body, params, steady)
    known = ({p.name for p in params if not p.pointer and not p.reference} - mutated) | {
        t.name for t in tparams
    }
    values = segments.values_at_null(_local_values(body), nulls)
    types = _local_types(body)

    def plain(factors: tuple[str, ...] | None) -> str | None:
        if factors is None or not all(
            f.isdigit() or f in known or f in BLOCK_BOUNDS.values() for f in factors
        ):
            return None
        return "*".join(factors)

    def reach(term: Node, width: str) -> str | None:
        factors = _operands(term, "*")
        if len(factors) == 2 and _compact(factors[1]) == width:
            bound = plain(_below_factors(factors[0], values, mutated, 0))
            return None if bound is None else f"{bound}*{width}" if width != "1" else bound
        if len(factors) == 1 and width == "1":
            return plain(_below_factors(term, values, mutated, 0))
        return None

    def row_major(
        terms: list[Node], width: str, held: tuple[Node, ...] = ()
    ) -> tuple[list[str], list[tuple[str, str]]] | None:
        placed = (
            segments.offset_row(terms[0], offsets, values, mutated, held)
            if offsets and width == "1" and len(terms) == 1
            else None
        )
        if placed is not None:  # a row CSR offsets place: `(O[s] + k)`, one index
            return [placed], []
        if len(terms) == 1 and len(_operands(terms[0], "+")) > 1:
            terms = _operands(terms[0], "+")
        if len(terms) == 1:
            lead = reach(terms[0], width)
            return None if lead is None else ([lead], [])
        if len(terms) != 2:
            return None
        factors = _operands(terms[0], "*")
        stride = plain(
            tuple(f for s in factors[1:] for f in (_product(s, values, mutated, 0) or ("?",)))
        )
        inner = row_major([factors[0]], "1", held) if len(factors) > 1 else None
        last = reach(terms[1], width)
        if stride is None or inner is None or last is None:
            return None
        axes, reaches = inner
        return [*axes, stride], reaches + ([(last, stride)] if last != stride else [])

    found: dict[str, set[tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]] = {}
    moved = "the body may move it (assigns it, takes its address or hands it to a call)"
    unread = dict.fromkeys(pointers & mutated, moved)
    if offsets:
        read, why = segments.offsets_extents(body, offsets, values, mutated, plain)
        unread.update(why)
        if bounds is not None:
            bounds.update(read)
    for name in _walk(body, ("identifier",)):
        pointer = text(name)
        if pointer not in pointers or pointer in unread or _null_test(name) or pointer in offsets:
            continue
        parent = name.parent
        shape = None
        reason = "not one element or vector access at a row-major index of bounded indices"
        called = reads(name) if reads is not None else None
        if (
            parent is not None
            and parent.type == "subscript_expression"
            and parent.child_by_field_name("argument") == name
            and (_only_read(parent) or _element_written(parent))
            and (index := _single_index(parent)) is not None
        ):
            shape = row_major([index], "1")
        elif (access := _vector_access(name)) is not None:
            width = _vector_width(access[0], types, structs)
            shape = row_major(access[1], width) if width is not None else None
        elif isinstance(called, str):
            reason = called
        elif called is not None:  # a guarded read of a callee's: its guard holds at the row
            width = guarded.read_width(called[0], pointee[pointer], values, mutated)
            held = tuple(_operands(called[2], "&&"))
            shape = row_major(called[1], width, held) if width is not None else None
        if shape is None:
            unread[pointer] = f"reached at `{_use_text(name)}`, {reason}"
        else:
            found.setdefault(pointer, set()).add((tuple(shape[0]), tuple(shape[1])))
    out: list[IndexedExtent] = []
    for pointer, uses in found.items():
        if pointer in unread:
            continue
        covering = _covering_axes({axes for axes, _ in uses})
        if covering is None:
            forms = " and ".join(sorted(f"[{', '.join(axes)}]" for axes, _ in uses))
            unread[pointer] = f"its uses give row-major shapes {forms}, neither within the other"
            continue
        reaches = sorted({r for _, rs in uses for r in rs})
        out.append(IndexedExtent(pointer, covering[0], tuple(reaches), covering[1]))
    return tuple(out), tuple(sorted(unread.items()))


MAX_USE_TEXT = 60
"""How many characters of a pointer's use a reason quotes (:func:`_use_text`)."""


def _use_text(name: Node) -> str:
    """The expression a pointer's use is (its subscript, the sum it is in, or the call that
    sum is handed to), blanks collapsed, cut to :data:`MAX_USE_TEXT` characters."""
    node = _whole_sum(name)
    parent = node.parent
    if parent is not None and parent.type in ("subscript_expression", "argument_list"):
        node = parent.parent if parent.type == "argument_list" and parent.parent else parent
    written = " ".join(text(node).split())
    return written if len(written) <= MAX_USE_TEXT else written[: MAX_USE_TEXT - 3] + "..."


def _covering_axes(
    shapes: set[tuple[str, ...]],
) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(the axes that hold every use, the axes a shorter use leaves out) for a pointer's uses'
    row-major shapes: the one shape, or the longest where every other is it with some axes left
    out, in order (each such use's index then stays below the longest's product as long as each
    left-out axis is at least 1, :attr:`IndexedExtent.left_out`); None where two shapes are
    not so nested (which one a tensor must have is not read)."""
    longest = max(shapes, key=len)
    left_out: list[str] = []
    for shape in sorted(shapes - {longest}):
        rest = _left_out_axes(shape, longest)
        if rest is None:
            return None
        left_out += [axis for axis in rest if axis not in left_out]
    return longest, tuple(left_out)


def _left_out_axes(short: tuple[str, ...], long: tuple[str, ...]) -> tuple[str, ...] | None:
    """The axes of ``long`` that ``short`` leaves out, where ``short`` is ``long`` with some
    axes left out, in order; None where it is not (or is ``long`` itself)."""
    matched = 0
    rest: list[str] = []
    for axis in long:
        if matched < len(short) and short[matched] == axis:
            matched += 1
        else:
            rest.append(axis)
    return tuple(rest) if matched == len(short) and rest else None


def _element_written(subscript: Node) -> bool:
    """Whether ``p[i]`` is the whole left side of a plain assignment (``p[i] = v``): one element
    written, as a read reaches one."""
    user = subscript.parent
    while user is not None and user.type == "parenthesized_expression":
        subscript, user = user, user.parent
    return (
        user is not None
        and user.type == "assignment_expression"
        and user.child_by_field_name("left") == subscript
    )


def _unsteady_names(
    body: Node, params: tuple[Param, ...], steady: Callable[[Node, int], bool] | None = None
) -> set[str]:
    """Names whose value at a use the bound analysis (:func:`_below_factors`) cannot take from
    their initialiser or a guard, beyond :func:`_mutated_names`: a name a loop's update clause
    steps, unless that loop declares it (its condition is then its bound); a parameter the body
    declares again, a lambda's parameter (another variable of the same name); a name whose
    address is taken (``&i``) or that is handed bare to a call (``bump(i)`` may take it by
    reference), unless ``steady`` (:func:`steady_calls`) says the callee takes that argument
    by value."""
    out: set[str] = set()
    for loop in _walk(body, ("for_statement",)):
        update = loop.child_by_field_name("update")
        initializer = loop.child_by_field_name("initializer")
        own = {
            text(d)
            for init in (_walk(initializer, ("init_declarator",)) if initializer else [])
            if (d := init.child_by_field_name("declarator")) is not None
        }
        for step in _walk(update, ("assignment_expression", "update_expression")) if update else []:
            target = step.child_by_field_name(
                "left" if step.type != "update_expression" else "argument"
            )
            if target is not None and target.type == "identifier" and text(target) not in own:
                out.add(text(target))
    names = {p.name for p in params}
    for init in _walk(body, ("init_declarator", "parameter_declaration")):
        declarator = init.child_by_field_name("declarator")
        redeclared = declarator is not None and declarator.type == "identifier"
        if redeclared and (init.type == "parameter_declaration" or text(declarator) in names):
            out.add(text(declarator))
    for node in _walk(body, ("unary_expression", "pointer_expression")):
        operand = _address_of(node)
        if operand is not None:
            out.add(text(operand))
    local = _declared_names(body)
    for call in _walk(body, ("call_expression",)):
        arguments = call.child_by_field_name("arguments")
        handed = [a for a in arguments.named_children if a.type != "comment"] if arguments else []
        callee, _ = _callee_name(call.child_by_field_name("function"))
        for position, argument in enumerate(handed):
            kept = steady is not None and callee not in local and steady(call, position)
            if argument.type == "identifier" and not kept:
                out.add(text(argument))
    return out


ARITHMETIC_WORDS = frozenset(
    {"bool", "char", "short", "int", "long", "signed", "unsigned", "float", "double", "half"}
    | {"size_t", "ptrdiff_t", "__half", "__nv_bfloat16", "nv_bfloat16"}
    | {f"{sign}int{bits}_t" for sign in ("", "u") for bits in (8, 16, 32, 64)}
)
"""The words of a parameter type that is a value whatever the program defines: a parameter of
such a type (no ``*``, ``&`` or ``[]``) is a copy of its argument."""


def steady_calls(root: Node, functions: FunctionIndex) -> Callable[[Node, int], bool]:
    """Whether a call (of the unit ``root``) leaves the caller's variable it is handed bare at a
    position unchanged: the callee (by unqualified name, a member
    function's too) is defined in the unit and no macro, and every definition of that name has
    a parameter at that position taken by value: of an arithmetic type
    (:data:`ARITHMETIC_WORDS`), or of a type parameter of its own template that the call leaves
    to deduction (a deduced type is never a reference). A copy cannot change the caller's
    variable (FlashInfer's ``ceil_div(const T1 x, const T2 y)``); anything else may."""
    macros = {
        text(name)
        for node in _walk(root, ("preproc_def", "preproc_function_def"))
        if (name := node.child_by_field_name("name")) is not None
    }

    def steady(call: Node, position: int) -> bool:
        name, explicit = _callee_name(call.child_by_field_name("function"))
        found = functions.by_name.get(name, []) if name and name not in macros else []
        return bool(found) and all(_by_value(f.node, f.template, position, explicit) for f in found)

    return steady


def _by_value(definition: Node, template: tuple[str, ...], position: int, explicit: bool) -> bool:
    """Whether the function ``definition`` takes its parameter at ``position`` by value
    (:func:`steady_calls`); ``explicit``: the call names template arguments."""
    declarator = _function_declarator(definition)
    params = _params(declarator) if declarator is not None else ()
    if position >= len(params) or params[position].pointer or params[position].reference:
        return False
    words = params[position].type.split()
    deduced = not explicit and len(words) == 1 and words[0] in template
    return deduced or (bool(words) and all(w in ARITHMETIC_WORDS for w in words))


def _callee_name(function: Node | None) -> tuple[str, bool]:
    """(the unqualified name a call's function is, whether it names template arguments):
    ``cp_async::pred_load<128>`` gives (``pred_load``, True), ``st.merge`` (``merge``, False);
    ('', ...) for a callee of any other form (a call's result, a cast)."""
    explicit = False
    node = function
    while node is not None:
        if node.type in ("identifier", "field_identifier"):
            return text(node), explicit
        if node.type in ("template_function", "template_method"):
            explicit = True
            node = node.child_by_field_name("name")
        elif node.type == "qualified_identifier":
            node = node.child_by_field_name("name")
        elif node.type == "field_expression":
            node = node.child_by_field_name("field")
        else:
            break
    return "", explicit


def _declared_names(body: Node) -> set[str]:
    """The names the body declares (locals, a lambda's): a call of one is no function of the
    unit's, whatever its name."""
    out: set[str] = set()
    for init in _walk(body, ("init_declarator", "declaration", "parameter_declaration")):
        declarator = init.child_by_field_name("declarator")
        if declarator is not None and declarator.type == "identifier":
            out.add(text(declarator))
    return out


def _address_of(node: Node) -> Node | None:
    """The name whose address ``node`` takes (``i`` of ``&i``: a write through it may change
    ``i``), else None."""
    operand = node.child_by_field_name("argument")
    operator = node.child_by_field_name("operator")
    if operand is not None and operand.type == "identifier" and text(operator or node) == "&":
        return operand
    return None


def _below_factors(
    node: Node, values: dict[str, list[Node]], mutated: set[str], depth: int
) -> tuple[str, ...] | None:
    """Names and whole numbers whose product an index stays below where ``node`` is, the index
    taken as non-negative (a negative one reads before the tensor, whatever its shape):
    ``x % n`` is below ``n``; ``x / d`` below what ``x`` is below with the factor ``d`` taken
    out; a built-in index (``blockIdx.x``) below its launch extent (``gridDim.x``,
    :data:`BLOCK_BOUNDS`); a name below the product of a guard (an enclosing ``if``'s or
    loop's ``x < E``, or an earlier ``if (x >= E) return;`` of an enclosing block), else below
    what its one initialiser is below. A local name in the product stands for the factors of
    its one initialiser, where that is a product. None where no bound is seen; ``mutated``
    names never have one."""
    node = unparenthesised(node)
    if depth > MAX_BOUND_DEPTH:
        return None
    if node.type == "binary_expression":
        operator = text(node.child_by_field_name("operator"))
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if left is None or right is None:
            return None
        if operator == "%":
            return _product(right, values, mutated, depth + 1)
        if operator == "/":
            inner = _below_factors(left, values, mutated, depth + 1)
            divisor = _compact(right)
            if inner is None or divisor not in inner:
                return None
            rest = list(inner)
            rest.remove(divisor)
            return tuple(rest) or ("1",)
        return None
    if node.type == "field_expression" and _compact(node) in BLOCK_BOUNDS:
        return (BLOCK_BOUNDS[_compact(node)],)
    if node.type != "identifier" or text(node) in mutated:
        return None
    guard = _guard_product(node, values, mutated, depth)
    if guard is not None:
        return guard
    initial = values.get(text(node), [])
    if len(initial) == 1:
        return _below_factors(initial[0], values, mutated, depth + 1)
    return None


def _product(
    node: Node, values: dict[str, list[Node]], mutated: set[str], depth: int
) -> tuple[str, ...] | None:
    """The factors of a product of names and whole numbers, a local name with one initialiser
    that is such a product standing for its factors; None for any other expression."""
    out: list[str] = []
    for factor in _operands(node, "*"):
        if factor.type == "number_literal" and text(factor).isdigit():
            out.append(text(factor))
            continue
        if factor.type != "identifier" or text(factor) in mutated:
            return None
        initial = values.get(text(factor), [])
        expanded = (
            _product(initial[0], values, mutated, depth + 1)
            if len(initial) == 1 and depth <= MAX_BOUND_DEPTH
            else None
        )
        # one name stands for itself, unless it is the branch a null count takes
        # (segments.values_at_null: `n = p ? *p : max_n` is `n = max_n` there)
        taken = len(initial) == 1 and _is_branch(initial[0])
        whole = expanded is not None and (len(expanded) > 1 or taken)
        out.extend(expanded if expanded is not None and whole else [text(factor)])
    return tuple(out)


def _is_branch(node: Node) -> bool:
    """Whether ``node`` is a branch of a conditional expression (an initialiser it stands for
    is one: :func:`~astra_graph.framework.segments.values_at_null`)."""
    parent = node.parent
    return parent is not None and parent.type == "conditional_expression"


def _guard_product(
    node: Node, values: dict[str, list[Node]], mutated: set[str], depth: int
) -> tuple[str, ...] | None:
    """The factors of ``E`` in a guard that keeps the name ``node`` below ``E`` where it is:
    ``x < E`` (or ``E > x``) of an enclosing ``if``'s then-branch or loop, or ``x >= E`` (or ``E
    <= x``) of an ``if`` whose only statement is ``return``, earlier in an enclosing block, one
    of its ``||`` terms."""
    name = text(node)
    for taken, term in _enclosing_conditions(node):
        bound = _compared(term, name, "<") if taken else None
        if bound is not None:
            return _product(bound, values, mutated, depth + 1)
    for term in _exits_before(node):
        bound = _compared(term, name, ">=")
        if bound is not None:
            return _product(bound, values, mutated, depth + 1)
    return None


def _exits_before(node: Node) -> list[Node]:
    """The terms of the early returns (:func:`_early_exit_terms`) earlier than ``node`` in each
    block that encloses it, innermost first: each is false where ``node`` is."""
    return [term for statement in _statements_before(node) for term in _early_exit_terms(statement)]


def _statements_before(node: Node) -> list[Node]:
    """The statements earlier than ``node`` in each block of its function that encloses it,
    innermost block first, each block's in order."""
    found: list[Node] = []
    child, current = node, node.parent
    while current is not None and current.type != "function_definition":
        if current.type == "compound_statement":
            for statement in current.named_children:
                if statement.start_byte >= child.start_byte:
                    break
                found.append(statement)
        child, current = current, current.parent
    return found


def _early_exit_terms(statement: Node) -> list[Node]:
    """The ``||`` terms of an ``if`` without ``else`` whose branch is only ``return;``: after it,
    each of them is false. Only that form: a branch that does work before it leaves bounds its
    names too, but the nearest bound found is the one taken, and uses whose bounds differ claim
    nothing (vLLM's merge copies the suffix for tokens past the prefix and returns: its
    ``suffix_lse`` would be below ``num_tokens`` inside that branch and below
    ``prefix_num_tokens`` after it, and get no axes)."""
    if statement.type != "if_statement" or statement.child_by_field_name("alternative"):
        return []
    branch = statement.child_by_field_name("consequence")
    condition = statement.child_by_field_name("condition")
    while branch is not None and branch.type == "compound_statement":
        inner = [c for c in branch.named_children if c.type != "comment"]
        branch = inner[0] if len(inner) == 1 else None
    if branch is None or branch.type != "return_statement" or condition is None:
        return []
    if branch.named_child_count:
        return []
    return _operands(_condition_value(condition), "||")


def _compared(term: Node, name: str, operator: str) -> Node | None:
    """``E`` of ``name <op> E`` (or ``E <mirrored op> name``) for ``<`` or ``>=``."""
    term = unparenthesised(term)
    if term.type != "binary_expression":
        return None
    written = text(term.child_by_field_name("operator"))
    left, right = term.child_by_field_name("left"), term.child_by_field_name("right")
    if left is None or right is None:
        return None
    mirrored = {"<": ">", ">=": "<="}[operator]
    if written == operator and _compact(left) == name:
        return right
    if written == mirrored and _compact(right) == name:
        return left
    return None


def _whole_sum(node: Node) -> Node:
    """The widest ``+`` sum (through parentheses) that ``node`` is a summand of, or ``node``:
    what a pointer use ``p + a + b`` hands on as one address."""
    while node.parent is not None and (
        node.parent.type == "parenthesized_expression"
        or (
            node.parent.type == "binary_expression"
            and text(node.parent.child_by_field_name("operator")) == "+"
        )
    ):
        node = node.parent
    return node


def _written_through(name: Node) -> bool:
    """Whether a pointer's use is written through: ``p[i] = ...`` or ``*(p + i) = ...`` (an
    assignment's left side, or ``++``/``--`` of it). A pointer handed to a call (``v.store(p +
    i)``) is not seen as written."""
    node = _whole_sum(name)
    parent = node.parent
    if parent is not None and (
        (parent.type == "subscript_expression" and parent.child_by_field_name("argument") == node)
        or (
            parent.type == "pointer_expression"
            and text(parent.child_by_field_name("operator")) == "*"
        )
    ):
        node, parent = parent, parent.parent
    return parent is not None and (
        parent.type == "update_expression"
        or (parent.type == "assignment_expression" and parent.child_by_field_name("left") == node)
    )


def _null_test(name: Node) -> bool:
    """Whether a pointer's use is a comparison (``p != nullptr``), which reads no element."""
    parent = name.parent
    return (
        parent is not None
        and parent.type == "binary_expression"
        and text(parent.child_by_field_name("operator")) in ("==", "!=")
    )


def _dereferenced(name: Node) -> bool:
    """Whether a pointer's use is ``*p`` (the element at its offset 0)."""
    parent = name.parent
    return (
        parent is not None
        and parent.type == "pointer_expression"
        and text(parent.child_by_field_name("operator")) == "*"
        and parent.child_by_field_name("argument") == name
    )


def _pointer_offset(name: Node) -> str | None:
    """The offset at which a pointer's use reaches it: ``+a+b`` for ``p + a + b`` (its summands
    as written, sorted), ``[i]`` for ``p[i]``, ``[0]`` for ``*p``; None for any other use."""
    parent = name.parent
    if _dereferenced(name):
        return "[0]"
    if (
        parent is not None
        and parent.type == "subscript_expression"
        and parent.child_by_field_name("argument") == name
    ):
        index = _single_index(parent)
        return f"[{_compact(index)}]" if index is not None else None
    top = name
    while (
        top.parent is not None
        and top.parent.type == "binary_expression"
        and text(top.parent.child_by_field_name("operator")) == "+"
    ):
        top = top.parent
    if top is name:
        return None
    summands = [n for n in _operands(top, "+") if n != name]
    if len(summands) == len(_operands(top, "+")):  # the pointer is inside a summand, not one
        return None
    return "+" + "+".join(sorted(_compact(n) for n in summands))


READ_CONTEXTS = ("binary_expression", "unary_expression", "return_statement")
"""Where a subscript ``p[i]`` only reads an element: an operand, a returned value; besides the
value of a declaration of no reference and an assignment's right side (:func:`_only_read`)."""


def _value_cast(node: Node) -> bool:
    """Whether ``node`` is the operand of a cast to a type with no ``&`` in it: a C-style cast
    or a ``static_cast`` whose one argument it is."""
    parent = node.parent
    while parent is not None and parent.type == "parenthesized_expression":
        node, parent = parent, parent.parent
    if parent is not None and parent.type == "cast_expression":
        kind = parent.child_by_field_name("type")
        return parent.child_by_field_name("value") == node and "&" not in text(kind or parent)
    call = parent.parent if parent is not None and parent.type == "argument_list" else None
    function = call.child_by_field_name("function") if call is not None else None
    if function is None or function.type != "template_function" or parent is None:
        return False
    arguments = [a for a in parent.named_children if a.type != "comment"]
    name = function.child_by_field_name("name")
    target = function.child_by_field_name("arguments")
    return (
        name is not None
        and text(name) == "static_cast"
        and arguments == [node]
        and "&" not in text(target or function)
    )


def _only_read(subscript: Node) -> bool:
    """Whether ``p[i]`` is in a place that only reads it: besides :data:`READ_CONTEXTS`, the
    operand of a cast to a type of no reference (``static_cast<uint32_t>(p[i])``,
    ``(int)p[i]``), whose value is a copy. Any other (an assignment's left side, a member
    written, ``float& r = p[i]``, a call's or a macro's argument, a cast to a reference) may
    write through it. A conditional's branch (``c ? p[i] : 0.f``) is read where the
    conditional is (it is an lvalue only where it is written), its condition always."""
    if _value_cast(subscript):
        return True
    user = subscript.parent
    while user is not None and user.type == "parenthesized_expression":
        subscript, user = user, user.parent
    if user is None:
        return False
    if user.type == "conditional_expression":
        return user.child_by_field_name("condition") == subscript or _only_read(user)
    if user.type in READ_CONTEXTS:
        return user.type != "unary_expression" or text(user.child_by_field_name("operator")) != "&"
    if user.type == "assignment_expression":
        return user.child_by_field_name("right") == subscript
    if user.type == "init_declarator":
        declarator = user.child_by_field_name("declarator")
        return declarator is not None and declarator.type == "identifier"
    return False


def _read_bound(
    name: Node, initialisers: dict[str, list[str]], scalars: set[str], mutated: set[str]
) -> str | None:
    """For a pointer's use ``p[index]`` that only reads (:func:`_only_read`): the whole number
    one past a constant index, or the by-value parameter that guards the index; None for any
    other use, or where the index, what it was initialised from or the bound is assigned
    anywhere in the body (``mutated``, :func:`_mutated_names`). An index ``x / d``, ``d`` a
    by-value parameter or a whole number, is below what ``x`` is below: a quotient by ``d >= 1``
    is at most ``x`` (one by zero is no index at all, whatever the extent: the domain, not the
    extent, must exclude it)."""
    parent = name.parent
    if parent is not None and _dereferenced(name):
        return "1" if _only_read(parent) else None  # `*p` is `p[0]`
    if (
        parent is None
        or parent.type != "subscript_expression"
        or parent.child_by_field_name("argument") != name
        or not _only_read(parent)
    ):
        return None
    index = _single_index(parent)
    if index is None:
        return None
    value = unparenthesised(index)
    if value.type == "number_literal" and text(value).isdigit():
        return str(int(text(value)) + 1)
    while (quotient := _divided(value, scalars)) is not None:
        value = quotient
    forms = {_compact(value), *initialisers.get(text(value), [])[:1]}
    if value.type == "identifier" and len(initialisers.get(text(value), [])) > 1:
        forms = {_compact(value)}  # declared twice: its value here is not known
    if any(_words(form) & mutated for form in forms):
        return None
    return _guard_bound(parent, forms, scalars)


def _divided(node: Node, scalars: set[str]) -> Node | None:
    """``x`` of ``x / d`` where ``d`` is a by-value parameter or a positive whole number, else
    None."""
    node = unparenthesised(node)
    if node.type != "binary_expression" or text(node.child_by_field_name("operator")) != "/":
        return None
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    if left is None or right is None:
        return None
    divisor = _compact(right)
    if divisor in scalars or (divisor.isdigit() and int(divisor) > 0):
        return unparenthesised(left)
    return None


def _mutated_names(body: Node) -> set[str]:
    """The names a body assigns after their declaration (``i = ...``, ``i += ...``, ``++i``, a
    field ``p.n = ...`` as ``p.n``) and
    those it declares more than once (a shadowing ``int idx``); a ``for`` loop's own update
    clause aside (its condition bounds the variable it steps)."""
    out: set[str] = set()
    steps = _update_spans(_walk(body, ("for_statement",)))
    for node in _walk(body, ("assignment_expression", "update_expression")):
        if _within(node, steps):
            continue
        field_name = "left" if node.type == "assignment_expression" else "argument"
        target = node.child_by_field_name(field_name)
        if target is not None and target.type in ("identifier", "field_expression"):
            out.add(_compact(target))  # a struct's field as `params.n` (:func:`_fields_read`)
    declared: dict[str, int] = {}
    for init in _walk(body, ("init_declarator", "declaration")):
        declarator = init.child_by_field_name("declarator")
        if declarator is not None and declarator.type == "identifier":
            declared[text(declarator)] = declared.get(text(declarator), 0) + 1
    return out | {name for name, count in declared.items() if count > 1}


SCOPES = (
    "compound_statement",
    "for_statement",
    "for_range_loop",
    "while_statement",
    "if_statement",
    "switch_statement",
    "lambda_expression",
    "catch_clause",
)
"""The constructs a declaration in them is local to (a ``for``'s own initialiser is the loop's,
a lambda's parameters the lambda's)."""
DECLARING = (
    "init_declarator",
    "declaration",
    "parameter_declaration",
    "optional_parameter_declaration",
)
"""The nodes whose ``declarator`` names a variable."""
INNER_DECLARATORS = ("pointer_declarator", "reference_declarator", "array_declarator")
"""The declarators around a declared name (``T* p``, ``T& r``, ``T a[N]``)."""


def scoped_body(body: Node, params: tuple[Param, ...]) -> Node:
    """``body`` with each variable it declares again (a name declared twice, a parameter's name
    declared in an inner block) renamed apart, with the uses that refer to it: a use refers to
    the innermost declaration before it of an enclosing scope (:data:`SCOPES`). FlashInfer's
    ``for (uint32_t i = 0; i < vec_size; ++i)`` inside a ``for (uint32_t i = cta_id; ...)``
    loop is another ``i`` only inside its loop, and two sibling loops' ``iter`` are two
    variables; read by name, either would be a name of two values (:func:`_mutated_names`).
    The body itself where no name is declared twice or where the renamed text does not parse
    as the body did."""
    renames: list[tuple[int, int, str]] = []
    taken = {text(n) for n in _walk(body, ("identifier",))} | {p.name for p in params}
    seen = {p.name for p in params}
    scopes: list[dict[str, str]] = [{p.name: p.name for p in params}]

    def fresh(name: str) -> str:
        count = 2
        while f"{name}_{count}" in taken:
            count += 1
        taken.add(f"{name}_{count}")
        return f"{name}_{count}"

    def declared(node: Node) -> bool:
        parent = node.parent
        while parent is not None and parent.type in INNER_DECLARATORS:
            if parent.child_by_field_name("declarator") != node:
                return False
            node, parent = parent, parent.parent
        return (
            parent is not None
            and parent.type in DECLARING
            and node in parent.children_by_field_name("declarator")
        )

    def visit(node: Node) -> None:
        if node.type == "identifier":
            if declared(node):
                name = text(node)
                own = name if name not in seen else fresh(name)
                seen.add(name)
                scopes[-1][name] = own
            else:
                own = next((s[text(node)] for s in reversed(scopes) if text(node) in s), text(node))
            if own != text(node):
                renames.append((node.start_byte, node.end_byte, own))
            return
        opened = node.type in SCOPES
        if opened:
            scopes.append({})
        for child in node.children:
            visit(child)
        if opened:
            scopes.pop()

    visit(body)
    if not renames:
        return body
    source = body.text or b""
    for start, end, name in sorted(renames, reverse=True):
        offset = body.start_byte
        source = source[: start - offset] + name.encode() + source[end - offset :]
    tree = _parser().parse(b"void __f() " + source)
    function = tree.root_node.named_children[0] if tree.root_node.named_children else None
    renamed = function.child_by_field_name("body") if function is not None else None
    return renamed if renamed is not None and renamed.has_error == body.has_error else body


def _update_spans(loops: list[Node]) -> list[tuple[int, int]]:
    """The byte spans of the ``for`` loops' update clauses: a step there is bounded by its loop's
    condition, not a change of the name (a node is made anew on each visit, so it is found in
    one by place, :func:`_within`)."""
    return [
        (update.start_byte, update.end_byte)
        for loop in loops
        if (update := loop.child_by_field_name("update")) is not None
    ]


def _within(node: Node, spans: list[tuple[int, int]]) -> bool:
    """Whether ``node`` lies inside one of the byte ``spans``."""
    return any(start <= node.start_byte and node.end_byte <= end for start, end in spans)


def _words(expression: str) -> set[str]:
    """The names an expression's text uses (not members: ``threadIdx.x`` uses ``threadIdx``)."""
    return set(re.findall(r"(?<![\w.>])[A-Za-z_]\w*", expression))


def _guards(node: Node) -> str:
    """The conditions on the path to ``node`` (:func:`_enclosing_conditions`), each as written
    without blanks with the branch taken, innermost first; a test of a pointer against null
    (``s_merged != nullptr``) is no guard of where it is reached. Then each earlier statement
    of an enclosing block that may leave it (a ``return``, ``break``, ``continue`` or ``goto``
    in it), by where it is: a use after an early return is reached under its condition's
    negation, one before it is not, so the two are not alike."""
    conditions = [
        f"{'then' if taken else 'else'}:{_compact(term)}"
        for taken, term in _enclosing_conditions(node)
        if not _null_test_term(term)
    ]
    exits = [f"after:{statement.start_byte}" for statement in _leaving_before(node)]
    return ";".join(conditions + exits)


LEAVING = ("return_statement", "break_statement", "continue_statement", "goto_statement")
"""The statements after which the rest of a block may not run."""


def _leaving_before(node: Node) -> list[Node]:
    """The statements earlier than ``node`` in each block that encloses it that hold one of
    :data:`LEAVING`, innermost block first."""
    return [
        statement
        for statement in _statements_before(node)
        if statement.type in LEAVING or _walk(statement, LEAVING)
    ]


def _null_test_term(term: Node) -> bool:
    """``p != nullptr`` (or ``NULL``, either way round)."""
    term = unparenthesised(term)
    if term.type != "binary_expression":
        return False
    sides = {text(term.child_by_field_name("left")), text(term.child_by_field_name("right"))}
    return bool(sides & {"nullptr", "NULL"})


def _guard_bound(node: Node, forms: set[str], scalars: set[str]) -> str | None:
    """The by-value parameter ``n`` of a guard ``index < n`` (or ``n > index``) on the path to
    ``node``: a conjunct of an enclosing ``if``'s condition, taken in its then-branch, or of a
    ``for`` loop's condition; else ``index >= n`` (or ``n <= index``) of an earlier ``if`` that
    only returns (:func:`_exits_before`); ``forms`` are the index as written and its one
    initialiser."""
    for taken, term in _enclosing_conditions(node):
        bound = _below(term, forms, scalars) if taken else None
        if bound is not None:
            return bound
    for term in _exits_before(node):
        bound = _below(term, forms, scalars, ">=")
        if bound is not None:
            return bound
    return None


def _enclosing_conditions(node: Node) -> list[tuple[bool, Node]]:
    """The conjuncts of each ``if`` and ``for`` condition around ``node``, innermost first, each
    with whether ``node`` is in the branch the condition holds in (an ``if``'s then-branch, a
    loop's body)."""
    found: list[tuple[bool, Node]] = []
    child, current = node, node.parent
    while current is not None and current.type != "function_definition":
        condition = current.child_by_field_name("condition")
        if condition is not None and current.type in ("if_statement", "for_statement"):
            taken = child in (
                current.child_by_field_name("consequence"),
                current.child_by_field_name("body"),
            )
            found += [(taken, t) for t in _operands(_condition_value(condition), "&&")]
        child, current = current, current.parent
    return found


def _condition_value(condition: Node) -> Node:
    """An ``if``'s condition clause without its parentheses."""
    if condition.type == "condition_clause":
        value = condition.child_by_field_name("value")
        if value is not None:
            return unparenthesised(value)
    return unparenthesised(condition)


def _below(term: Node, forms: set[str], scalars: set[str], operator: str = "<") -> str | None:
    """``n`` where ``term`` is ``index < n`` or ``n > index`` (``operator`` ``>=``: ``index >=
    n`` or ``n <= index``) with ``index`` one of ``forms`` and ``n`` a by-value parameter."""
    for form in forms:
        bound = _compared(term, form, operator)
        if bound is not None and _compact(bound) in scalars:
            return _compact(bound)
    return None


def _compact(node: Node) -> str:
    """An expression's text without blanks or outer parentheses, to compare two spellings."""
    return re.sub(r"\s+", "", text(unparenthesised(node)))


def _single_index(subscript: Node) -> Node | None:
    """The one index of ``p[i]``, comments aside; None for another number of indices."""
    indices = subscript.child_by_field_name("indices")
    index = [i for i in (indices.named_children if indices else []) if i.type != "comment"]
    return index[0] if len(index) == 1 else None


def _row_term(term: Node) -> tuple[str, tuple[str, ...]] | None:
    """A product whose first factor is a name, the row index, and whose other factors are
    names and decimal whole numbers, the row's length (``row * 2 * d``, ``row * (2 * d)``):
    the row index and the length's factors, or None."""
    factors = _operands(term, "*")
    if len(factors) < 2 or factors[0].type != "identifier":  # a row and a length at least
        return None
    length = tuple(text(f) for f in factors[1:])
    plain = all(
        f.type == "identifier" or (f.type == "number_literal" and text(f).isdigit())
        for f in factors[1:]
    )
    return (text(factors[0]), length) if plain else None


def _operands(node: Node, operator: str) -> list[Node]:
    """The operands of a chain of one binary operator (``a + (b + c)`` -> a, b, c), through
    parentheses; ``node`` alone when it is no such chain."""
    node = unparenthesised(node)
    if node.type != "binary_expression" or text(node.child_by_field_name("operator")) != operator:
        return [node]
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    return [*_operands(left, operator), *_operands(right, operator)] if left and right else [node]


def unparenthesised(node: Node) -> Node:
    """``node`` without the parentheses around it."""
    while node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    return node


def _template_lambda(call: Node, launch: Launch) -> tuple[Node, list[str]] | None:
    """The innermost generic lambda with a template parameter list around ``call`` whose
    parameters the launch's template arguments name (vLLM's ``[&]<bool BATCHED_EXPERTS>() {...}``),
    and those parameters' names; None when there is none."""
    words = set(re.findall(r"\b\w+\b", " ".join(launch.template_args)))
    node = call.parent
    while node is not None and node.type != "function_definition":
        plist = next((c for c in node.children if c.type == "template_parameter_list"), None)
        if node.type == "lambda_expression" and plist is not None:
            names = [_declared_name(p) for p in plist.named_children]
            if words & set(names):
                return node, names
        node = node.parent
    return None


def _declared_name(parameter: Node) -> str:
    """The name a template parameter declares (its last identifier), or ''."""
    found = _walk(parameter, ("identifier", "type_identifier"))
    return text(found[-1]) if found else ""


def lambda_instances(call: Node, launch: Launch) -> list[Launch]:
    """The launch once per instantiation of the generic lambda it sits in: a template argument
    that is the lambda's own template parameter has a value only at the lambda's calls
    (``launch.template operator()<true>()``), so each call gives one launch, its template
    arguments bound to that call's and the ``if`` conditions around the call added to the
    launch's. A launch outside such a lambda is returned as it is; one whose lambda is not a
    local called so is kept with its :attr:`Launch.unread` reason."""
    found = _template_lambda(call, launch)
    if found is None:
        return [launch]
    lambda_node, names = found
    holder = lambda_node.parent
    variable = text(holder.child_by_field_name("declarator")) if holder is not None else ""
    function = holder
    while function is not None and function.type != "function_definition":
        function = function.parent
    if holder is None or holder.type != "init_declarator" or function is None:
        why = f"template parameters {names} of a lambda that is not a local variable"
        return [replace(launch, unread=why)]
    variants = []
    for use in _walk(function, ("call_expression",)):
        callee = use.child_by_field_name("function")
        if callee is None or callee.type != "field_expression" or "operator" not in text(callee):
            continue
        if text(callee.child_by_field_name("argument")) != variable:
            continue
        targs = _walk(callee, ("template_argument_list",))
        values = [text(a) for a in (targs[0].named_children if targs else [])]
        binding = dict(zip(names, values, strict=False))
        _, outer = _scope(use)
        said = ", ".join(f"{k} = {v}" for k, v in binding.items())
        variants.append(
            replace(
                launch,
                # the parameter names a type or value wherever the launch spells it: the
                # kernel's template arguments, a cast of a pointer argument (SGLang's
                # `static_cast<const Index*>(locations.data_ptr())`), a size, a local
                template_args=tuple(_substitute(a, binding) for a in launch.template_args),
                args=tuple(_substitute(a, binding) for a in launch.args),
                grid=_substitute(launch.grid, binding),
                block=_substitute(launch.block, binding),
                smem=_substitute(launch.smem, binding),
                locals={k: _substitute(v, binding) for k, v in launch.locals.items()},
                conditions=outer + launch.conditions,
                notes=(
                    *launch.notes,
                    f"{said}: the lambda {variable} called at line {use.start_point[0] + 1}",
                ),
            )
        )
    if not variants:
        why = f"lambda {variable}'s template parameters {names} are bound by no call read"
        return [replace(launch, unread=why)]
    return variants


def _callee(call: Node) -> str:
    """The unqualified name a call calls (``host::LaunchKernel`` -> ``LaunchKernel``), without
    template arguments; '' when the function is itself an expression (a call, a member)."""
    function = call.child_by_field_name("function")
    if function is None or function.type not in (
        "identifier",
        "qualified_identifier",
        "template_function",
    ):
        return ""
    return text(function).split("<", 1)[0].rsplit("::", 1)[-1].strip()


def _helper_of(call: Node) -> Node | None:
    """The ``LaunchKernel(grid, block, device)`` object ``call`` applies, through setters such
    as ``.enable_pdl(on)`` that return it; None when ``call`` applies no launch helper."""
    probe = call.child_by_field_name("function")
    while probe is not None and probe.type == "call_expression":
        if _callee(probe) == HELPER_LAUNCH:
            return probe
        setter = probe.child_by_field_name("function")
        if setter is None or setter.type != "field_expression":
            return None
        probe = setter.child_by_field_name("argument")
    return None


def _kernel_named(expression: str, found: dict[str, str]) -> tuple[str, tuple[str, ...]]:
    """The kernel and template arguments a launch call's kernel expression names: a cast and an
    ``&`` are dropped and a local is followed (``auto kernel = K<V, T>;``). Raises ValueError
    saying why when the kernel is chosen at run time."""
    seen: set[str] = set()
    expression = expression.strip()
    while True:
        expression = _VOID_CAST.sub("", expression).lstrip("&").strip()
        if expression in found and expression not in seen:
            seen.add(expression)
            expression = found[expression].strip()
            continue
        break
    compact = " ".join(expression.split())
    if "?" in compact:
        raise ValueError(f"the kernel is chosen at run time ({compact})")
    name, _, rest = compact.partition("<")
    if rest and not rest.endswith(">"):
        raise ValueError(f"the kernel is what a call returns at run time ({compact})")
    if "(" in name or not re.fullmatch(r"[\w:]+", name.strip()):
        raise ValueError(f"the kernel is what {compact!r} returns at run time")
    return name.strip(), tuple(split_top_level(rest[:-1])) if rest else ()


def _class_member(node: Node, name: str) -> str | None:
    """The value of member ``name`` of the class a member function is defined in (SGLang's
    ``static constexpr auto kernel = rmsnorm_cta<kDim, kUsePDL, DType>;``), or None. Raises
    ValueError when it is declared under a preprocessor condition left in the source (one the
    build decides is resolved before: :func:`_member_conditions_resolved`)."""
    body = _owner_body(node)
    for member in _walk(body, ("field_declaration",)) if body is not None else []:
        value = member.child_by_field_name("default_value")
        if value is None or text(member.child_by_field_name("declarator")) != name:
            continue
        inside = member.parent
        while inside is not None and inside != body:
            if inside.type.startswith("preproc_"):
                raise ValueError(
                    f"its class declares {name!r} under a preprocessor condition "
                    f"({text(inside).splitlines()[0].strip()}), which is not evaluated"
                )
            inside = inside.parent
        return text(value)
    return None


def _addresses(array: str, found: dict[str, str]) -> tuple[str, ...]:
    """The variables a ``void* args[] = {&a, (void*)&b}`` local points at, in order; raises
    ValueError when ``array`` is not such a local."""
    if array not in found:
        raise ValueError(f"its argument array {array!r} is not a local list of addresses")
    out = []
    for element in split_top_level(found[array]):
        bare = _VOID_CAST.sub("", element).strip()
        if not bare.startswith("&"):
            raise ValueError(f"{array}[] element {element!r} is not the address of a variable")
        out.append(bare[1:].strip())
    return tuple(out)


def _api_launch(call: Node, function_params: set[str]) -> list[Launch] | None:
    """``call`` read as :class:`Launch` es when it is a launch call (:data:`ARGS_ARRAY_LAUNCH`,
    :data:`CONFIG_LAUNCH`, :data:`HELPER_LAUNCH` applied), one per kernel a run-time choice may
    pick (:func:`kernel_choices`); None for any other call and for a launch helper's own call,
    whose kernel is a parameter of its function."""
    callee = _callee(call)
    helper = _helper_of(call)
    if callee not in (ARGS_ARRAY_LAUNCH, CONFIG_LAUNCH) and helper is None:
        return None
    args = list(_arguments(call.child_by_field_name("arguments")))
    kernel_index = 0 if callee != CONFIG_LAUNCH else 1
    if len(args) <= kernel_index:
        return None  # a declaration-like use, not a launch
    kernel_expression = _VOID_CAST.sub("", args[kernel_index]).lstrip("&").strip()
    found, conditions = _scope(call)
    matched, checks = _matchers(call)
    conditions = (*conditions, *checks)
    if kernel_expression in function_params and kernel_expression not in found:
        return None
    api = HELPER_LAUNCH if helper is not None else callee
    geometry = {"grid": "", "block": "", "smem": "0", "stream": "0"}
    kernel_args: tuple[str, ...] = ()
    unread = ""
    notes: list[str] = []
    try:
        if helper is not None:
            config = list(_arguments(helper.child_by_field_name("arguments")))
            if len(config) < HELPER_MIN_ARGS:
                raise ValueError(
                    f"{HELPER_LAUNCH}() has {len(config)} arguments, not grid, block and device"
                )
            geometry.update(zip(("grid", "block", "stream", "smem"), config, strict=False))
            setters = text(call.child_by_field_name("function"))[len(text(helper)) :]
            if setters.strip():
                notes.append(f"{HELPER_LAUNCH}(){' '.join(setters.split())}: {ATTRIBUTES_NOTE}")
            kernel_args = tuple(args[1:])
        elif callee == ARGS_ARRAY_LAUNCH:
            if len(args) < ARGS_ARRAY_MIN_ARGS:
                raise ValueError(
                    f"{callee}() has {len(args)} arguments, fewer than kernel, grid, block and args"
                )
            geometry.update(
                zip(("grid", "block", "smem", "stream"), args[1:3] + args[4:6], strict=False)
            )
            kernel_args = _addresses(args[3], found)
        else:
            config_name = args[0].lstrip("&").strip()
            for key, member in CONFIG_FIELDS.items():
                value = found.get(f"{config_name}.{member}")
                if value is None:
                    raise ValueError(f"{config_name}.{member} is not assigned before the launch")
                geometry[key] = value
            geometry["stream"] = found.get(f"{config_name}.stream", "0")
            if f"{config_name}.attrs" in found:
                notes.append(f"{config_name}.attrs: {ATTRIBUTES_NOTE}")
            kernel_args = tuple(args[2:])
        choices = kernel_choices(call, kernel_expression, found)
    except ValueError as exc:
        choices, unread = [(kernel_expression, (), "")], f"{api}(): {exc}"
    return [
        Launch(
            kernel=kernel,
            template_args=template_args,
            grid=geometry["grid"],
            block=geometry["block"],
            smem=geometry["smem"],
            stream=geometry["stream"],
            args=kernel_args,
            dispatch=_dispatch_chain(call),
            line=call.start_point[0] + 1,
            locals=found,
            conditions=conditions,
            checks=tuple(c for c, _ in checks),
            api=api,
            unread=unread,
            notes=tuple(notes),
            choice=choice,
            matched=matched,
            typed=_matcher_types(call),
            written=kernel_expression,
        )
        for kernel, template_args, choice in choices
    ]


MAX_CHOICE_DEPTH = 8
"""How many locals, class members and selector functions a kernel expression is followed
through before the choice is refused (a member naming itself would loop)."""
_SELECTOR_CALL = re.compile(
    r"^(?P<name>[A-Za-z_][\w:]*?)\s*(?:<(?P<targs>.*)>)?\s*\((?P<args>.*)\)$"
)
_TEMPLATE_KEYWORD = re.compile(r"^[\w:]+::template\s+")
_NULL_KERNEL = ("nullptr", "NULL", "0")


def kernel_choices(
    call: Node, expression: str, found: dict[str, str]
) -> list[tuple[str, tuple[str, ...], str]]:
    """(kernel, template arguments, choice) for each kernel a launch call's kernel expression
    may be. A kernel chosen on the host is one launch per choice: a conditional
    ``is_int32 ? K<int32_t> : K<int64_t>`` (the condition true, then false) and a selector
    function of the launcher's class or file whose ``return`` statements name kernels
    (``select_kernel<true>(type)``: each return under its ``if`` conditions). Locals, class
    members and member variable templates (``activation_kernel<kAct, kFlag>``) are followed,
    their template parameters bound to the arguments given (or their defaults). Raises
    ValueError saying why when a kernel cannot be named this way."""
    return [
        (*_kernel_named(resolved, found), choice)
        for resolved, choice in _alternatives(call, expression, found, 0)
    ]


def _alternatives(
    call: Node, expression: str, found: dict[str, str], depth: int
) -> list[tuple[str, str]]:
    """(kernel expression, the choice that takes it) for each kernel ``expression`` may be."""
    if depth > MAX_CHOICE_DEPTH:
        raise ValueError(f"the kernel expression {expression!r} is followed too deeply")
    expression = _VOID_CAST.sub("", expression.strip()).lstrip("&").strip()
    if expression in found:
        return _alternatives(call, found[expression], found, depth + 1)
    compact = _TEMPLATE_KEYWORD.sub("", " ".join(expression.split()))
    ternary = _ternary(compact)
    if ternary is not None:
        condition, then, otherwise = ternary
        return [
            (kernel, _both(f"{condition} {taken}", inner))
            for branch, taken in ((then, "true"), (otherwise, "false"))
            for kernel, inner in _alternatives(call, branch, found, depth + 1)
        ]
    selector = _SELECTOR_CALL.match(compact)
    if selector is not None:
        returns = _selector_returns(call, selector["name"], selector["targs"] or "")
        if returns is None:
            raise ValueError(f"the kernel is what {compact!r} returns at run time")
        label = f"{selector['name'].rsplit('::', 1)[-1]}({selector['args']})"
        return [
            (kernel, _both(f"{label}: {condition}" if condition else label, inner))
            for value, condition in returns
            for kernel, inner in _alternatives(call, value, found, depth + 1)
        ]
    name, _, rest = compact.partition("<")
    member = _member_value(call, name.strip(), rest[:-1] if rest.endswith(">") else "")
    if member is not None and member != compact:
        return _alternatives(call, member, found, depth + 1)
    return [(compact, "")]


def _both(outer: str, inner: str) -> str:
    return f"{outer}; {inner}" if inner else outer


EXPRESSION_PREFIX = "auto __e = "
"""What :func:`expression_node` parses before its expression: a node's byte offsets in the
expression are its own less this prefix's length."""


def expression_node(source: str, *, allow_errors: bool = False) -> Node | None:
    """The syntax node of a C++ expression (parsed as ``auto __e = source;``), or None where it
    does not parse (with ``allow_errors``, a tree with error nodes still gives its value)."""
    tree = _parser().parse(f"{EXPRESSION_PREFIX}{source};".encode())
    decl = tree.root_node.named_children[0] if tree.root_node.named_children else None
    init = decl.child_by_field_name("declarator") if decl is not None else None
    value = init.child_by_field_name("value") if init is not None else None
    return None if tree.root_node.has_error and not allow_errors else value


def function_body_node(body: str) -> Node | None:
    """The syntax node of a function body (``{ ... }`` or statements without the braces),
    parsed as that of ``void f()``, or None where it does not parse."""
    braced = body if body.lstrip().startswith("{") else f"{{{body}}}"
    tree = _parser().parse(f"void __f() {braced}".encode())
    if tree.root_node.has_error or not tree.root_node.named_children:
        return None
    return tree.root_node.named_children[0].child_by_field_name("body")


def _ternary(compact: str) -> tuple[str, str, str] | None:
    """(condition, then, else) of a top-level ``c ? a : b``, or None."""
    if "?" not in compact:  # most arguments: no parse of their own
        return None
    value = expression_node(compact, allow_errors=True)
    if value is None or value.type != "conditional_expression":
        return None
    parts = [value.child_by_field_name(f) for f in ("condition", "consequence", "alternative")]
    if any(p is None for p in parts):
        return None
    return text(parts[0]), text(parts[1]), text(parts[2])


def _owner_body(node: Node) -> Node | None:
    """The body of the class a node is in, or None."""
    owner = node.parent
    while owner is not None and owner.type not in ("struct_specifier", "class_specifier"):
        owner = owner.parent
    return owner.child_by_field_name("body") if owner is not None else None


def _template_defaults(template: Node | None) -> list[tuple[str, str | None]]:
    """(name, default or None) of each parameter of a template declaration."""
    plist = template.child_by_field_name("parameters") if template is not None else None
    out: list[tuple[str, str | None]] = []
    for child in plist.named_children if plist is not None else []:
        head, equals, default = text(child).partition("=")
        names = re.findall(r"\w+", head)
        if names:
            out.append((names[-1], default.strip() if equals else None))
    return out


def _bind_template(params: list[tuple[str, str | None]], targs: str, value: str) -> str:
    """``value`` with each template parameter replaced by its argument or its default."""
    given = split_top_level(targs) if targs.strip() else []
    bound: dict[str, str] = {}
    for index, (name, default) in enumerate(params):
        argument = given[index] if index < len(given) else default
        if argument is None:
            raise ValueError(f"template parameter {name} has no argument and no default")
        for earlier, replacement in bound.items():  # a default may name an earlier parameter
            argument = re.sub(rf"\b{re.escape(earlier)}\b", replacement, argument)
        bound[name] = argument
    for name, replacement in bound.items():
        value = re.sub(rf"\b{re.escape(name)}\b", replacement, value)
    return value


def _member_value(call: Node, name: str, targs: str) -> str | None:
    """The value of the launcher's class member ``name`` (``static constexpr auto kernel =
    K<...>``), or of its member variable template instantiated with ``targs``; None when the
    class has no such member."""
    if not targs:
        return _class_member(call, name)
    body = _owner_body(call)
    for template in _walk(body, ("template_declaration",)) if body is not None else []:
        decl = next((c for c in template.named_children if c.type == "declaration"), None)
        init = decl.child_by_field_name("declarator") if decl is not None else None
        if init is None or init.type != "init_declarator":
            continue
        value = init.child_by_field_name("value")
        if value is None or text(init.child_by_field_name("declarator")) != name:
            continue
        return _bind_template(_template_defaults(template), targs, text(value))
    return None


def _selector_returns(call: Node, name: str, targs: str) -> list[tuple[str, str]] | None:
    """(returned kernel expression, the ``if`` conditions it is returned under) for each
    non-null ``return`` of the function ``name`` in the launcher's class (or anywhere in the
    file), its template parameters bound to ``targs``; None when there is no such function."""
    short = name.rsplit("::", 1)[-1]
    scope = _owner_body(call) or call
    while scope.parent is not None and _owner_body(call) is None:
        scope = scope.parent
    for function in _walk(scope, ("function_definition",)):
        declarator = _function_declarator(function)
        inner = declarator.child_by_field_name("declarator") if declarator is not None else None
        if inner is None or text(inner).rsplit("::", 1)[-1] != short:
            continue
        parent = function.parent
        template = parent if parent is not None and parent.type == "template_declaration" else None
        out = []
        for statement in _walk(function, ("return_statement",)):
            value = statement.named_children[0] if statement.named_children else None
            if value is None or text(value).strip() in _NULL_KERNEL:
                continue
            _, conditions = _scope(statement)
            condition = " && ".join(c if yes else f"!({c})" for c, yes in conditions)
            out.append(
                (_bind_template(_template_defaults(template), targs, text(value)), condition)
            )
        return out or None
    return None
