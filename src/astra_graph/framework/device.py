"""The device part of a framework file, made self-contained for NVRTC, and compiled as written.

Which compiler: NVRTC on the device part. nvcc on the whole file needs torch's headers (and a
framework's generated ones), which CI and this project's CPU machines do not have, and a torch
extension build takes about a minute per file on the GPU machines (field notes, section 8);
NVRTC compiles the flattened device part with no GPU and no torch (measured on this
project's 2-core CPU host: the layernorm fixture's three instantiations in 1.0-1.5 s, every
instantiation of vLLM 0.33.0's activation_kernels.cu in one program in about 3 s), and its
cubin is what the harness loads anyway. The host code is read by the parser
(:mod:`astra_graph.framework.launchers`), never compiled.

What is changed, and why the code path stays the framework's:

* host code is removed: NVRTC refuses it, and the launches are described in the operation's
  header instead. Host code is what has no ``__device__``/``__global__`` (or a macro naming
  one): namespace-scope functions and variables (the torch launchers, their helpers,
  ``TORCH_LIBRARY`` blocks), member functions (not ``constexpr``, defaulted or deleted: those
  stay, see below), and whole classes whose member functions are all host code and whose name
  no device code uses (SGLang's ``RuntimeCheck``, ``LaunchKernel``), with the declarations that
  name them (their deduction guides); a class that kernels use keeps its data and device
  members, so a kernel's parameter struct stays; namespace aliases no device code names
  (SGLang's ``namespace stdv = stdr::views``, for its host ``irange``);
* torch's, ATen's and c10's includes are replaced by :data:`TORCH_TYPES_FILE`: ``c10::Half``
  and ``c10::BFloat16`` as types of their own with torch's semantics (two bytes, float
  arithmetic rounded back), and the kernel is instantiated with them
  (``astra_framework_t<__half>`` is ``c10::Half``), as the framework instantiates it. So every
  ``std::is_same_v<scalar_t, c10::Half>`` branch is taken as in the framework, and
  specialisations for both ``half`` and ``c10::Half`` (vLLM's ``PackedTypeConverter``) stay
  distinct. Merely declaring ``c10::Half``, and instantiating with ``__half``, would compile
  the generic path silently (issue 23's trap; a test checks it); aliasing it to ``__half``
  breaks those specialisations (measured on vLLM 0.33.0's activation_kernels.cu: "class
  PackedTypeConverter<half> has already been defined");
* ``<cub/cub.cuh>`` is replaced by CCCL's block- and warp-level headers, the NVRTC-capable
  subset (the whole of cub pulls in host-only code NVRTC refuses: "__host__ function is not
  allowed in JIT mode");
* torch's include also brings what torch's headers bring in a real build: the std headers its
  element types include, ``C10_HOST_DEVICE`` and the other portability macros,
  ``std::numeric_limits<c10::Float8_e4m3fn>``, glibc's ``uint``; what nvcc accepts under torch's
  flags and NVRTC refuses is written as nvcc takes it: a ``constexpr`` member without an execution
  space gets ``__host__ __device__`` (``--expt-relaxed-constexpr``), ``__host__`` on a
  ``constexpr`` variable is dropped (nvcc ignores it), ``__device__`` on a lambda inside device
  code is dropped (it is a device lambda anyway); the build's ``-D`` flags, given, come first;
* CUDA runtime and driver headers (``<cuda_runtime.h>``, ``<cuda.h>``), which NVRTC does not
  need (their device builtins are NVRTC's own) and whose ``crt/`` and ``stdlib.h`` are missing
  from the cuda13 wheel, are dropped, and so is every include NVRTC's folders (CUDA, CCCL, the
  std shims) do not have: ``<numeric>``, ``<cublas_v2.h>``, host containers. A kernel that
  really uses one of them then fails to compile with NVRTC's own message naming the symbol,
  never silently.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from astra_graph.framework.parse import MAX_MACRO_DEPTH, _parser, _walk, text
from astra_graph.kernel.header import DEFAULT_STD

if TYPE_CHECKING:
    from tree_sitter import Node

TORCH_TYPES_FILE = Path(__file__).parent / "include" / "astra_torch_types.h"
"""c10::Half and c10::BFloat16 as distinct types with torch's semantics, and the map from the
element type under test to the framework's (``astra_framework_t<__half>`` is ``c10::Half``)."""
TORCH_TYPES_BEGIN = "// astra-import: begin torch's element types"
TORCH_TYPES_END = "// astra-import: end"
"""The lines around torch's element types as an imported file carries them (NVRTC's stand-ins
for c10's, which a framework's own build takes from torch: ``export.patch`` drops them)."""
FRAMEWORK_TYPE_MAP = "// The framework's type for each element type under test"
"""The comment that opens :data:`TORCH_TYPES_FILE`'s last part, the map to the framework's types
(:func:`framework_type_map`)."""
FRAMEWORK_TYPE = "astra_framework_t"
TORCH_PREFIXES = ("torch/", "ATen/", "c10/", "pybind11/", "Python.h", "tvm/ffi/")
"""Includes of host frameworks: replaced by :data:`TORCH_TYPES_FILE` (once)."""
CUB_SUBSET = (
    "cub/block/block_reduce.cuh",
    "cub/block/block_scan.cuh",
    "cub/block/block_load.cuh",
    "cub/block/block_store.cuh",
    "cub/warp/warp_reduce.cuh",
    "cub/thread/thread_operators.cuh",
)
"""CCCL's cub headers that NVRTC compiles, in place of ``<cub/cub.cuh>``."""
RUNTIME_HEADERS = {"cuda.h", "cuda_runtime.h", "cuda_runtime_api.h", "cuda_device_runtime_api.h"}
"""Present in the CUDA include folder but not compilable by NVRTC from the cuda13 wheel (no
``crt/``, ``<cuda.h>`` wants ``stdlib.h``), and not needed: NVRTC has their device builtins."""
HOST_LIBRARY_HEADERS = (
    "cublas",
    "cusparse",
    "cusolver",
    "cufft",
    "curand.h",
    "nccl",
    "cudnn",
    "nvml",
    "nvrtc",
    "nvToolsExt",
    "nvtx3/",
    "cuda_profiler_api",
)
"""Headers of CUDA's host libraries (by name prefix), dropped whether or not NVRTC's folders
have them: they declare host functions without an execution space, which NVRTC refuses. Where
the GPU's CUDA folder holds them (the H100 machines' nvidia/cu13/include has cuBLAS's), vLLM's
``torch_utils.h`` kept ``<cublas_v2.h>`` and every activation kernel failed to import there
while it imported on CI, which has no cuBLAS headers (1ffc87d). ``curand_kernel.h``, the device
API, is not among them."""
HOST_TYPEDEFS = (
    "// astra-import: glibc's <sys/types.h> names, which nvcc's host headers give device code\n"
    "typedef unsigned short ushort;\ntypedef unsigned int uint;\n"
)
"""Type names a framework's device code takes from the host C library (FlashInfer's
``ptx_exp2`` declares ``ushort``, vLLM's merge kernel takes ``const uint num_tokens``); NVRTC has
no host headers, so they are declared as glibc does, once, before every imported file."""


_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?P<name>[^>"]+)[>"]', re.M)
_DEVICE_SPACES = ("__global__", "__device__", "__constant__", "__shared__", "__managed__")
"""A namespace-scope definition without one of these is host code, which NVRTC refuses ("host
functions are not allowed in JIT mode"); it is removed, launchers and helpers alike."""


def _is_host_declaration(node: Node) -> bool:
    """A namespace-scope variable or function prototype (not a type alias, a constexpr or a
    deduction guide, which has no return type): NVRTC refuses a host prototype as it refuses a
    host definition (a JIT header's ``cudaStream_t current_stream(int)``)."""
    raw = text(node)
    if "constexpr" in raw.split("=", 1)[0] or raw.lstrip().startswith(("using", "typedef")):
        return False
    declares_function = any(
        c.type == "function_declarator" or _declarator_type(c) == "function_declarator"
        for c in node.named_children
    )
    if declares_function:
        return node.child_by_field_name("type") is not None
    return any(c.type in ("init_declarator", "identifier") for c in node.named_children)


HOST_LIBRARY_TYPES = (
    "exception",
    "runtime_error",
    "string",
    "ostringstream",
    "stringstream",
    "ostream",
    "vector",
    "map",
    "unordered_map",
    "mutex",
)
"""C++ library types libcu++ does not have: a namespace-scope class deriving from one or holding
one (FlashInfer's ``class Error : public std::exception { std::string message_; ... }``) is
host code, removed like a host function (its header, ``<exception>``, is not NVRTC's)."""
_HOST_LIBRARY_TYPE = re.compile(r"\bstd\s*::\s*(?:" + "|".join(HOST_LIBRARY_TYPES) + r")\b")


def _is_host_class(node: Node, spaces: tuple[str, ...], device_names: set[str]) -> bool:
    """A class or struct whose bases or fields name a :data:`HOST_LIBRARY_TYPES` type, or whose
    member functions are all host code (:func:`_is_host_member`) and whose name no device code
    uses (:func:`_device_names`: a kernel's parameter struct with a host constructor keeps its
    fields, only the constructor goes)."""
    body = node.child_by_field_name("body")
    if body is None:
        return False
    parts = [text(c) for c in node.named_children if c.type == "base_class_clause"]
    parts += [
        text(c.child_by_field_name("type"))
        for c in body.named_children
        if c.type == "field_declaration"
    ]
    if any(_HOST_LIBRARY_TYPE.search(p) for p in parts):
        return True
    members = [
        c.named_children[-1] if c.type == "template_declaration" else c for c in body.named_children
    ]
    members = [m for m in members if m.type == "function_definition"]
    name = node.child_by_field_name("name")
    if name is not None and name.type == "template_type":  # a specialisation: its template's
        name = name.child_by_field_name("name")
    return (
        text(name) not in device_names
        and any(_is_host_member(m, spaces) for m in members)
        and not any(_in_device_space(m, spaces) for m in members)
    )


def _in_device_space(node: Node, spaces: tuple[str, ...]) -> bool:
    """A definition whose head (before its body) names a device space or a macro of one. In a
    class, macros before a member (vLLM's ``C10_DEVICE C10_ALWAYS_INLINE static float val()``)
    are read by the grammar as a field of their own whose ``;`` is missing: they are its head."""
    head = text(node).split("{", 1)[0]
    before = node.prev_sibling
    if (
        before is not None
        and before.type == "field_declaration"
        and before.children
        and before.children[-1].is_missing
    ):
        head = f"{text(before)} {head}"
    return any(word in head for word in spaces)


def _is_host_member(node: Node, spaces: tuple[str, ...]) -> bool:
    """A member function definition that NVRTC refuses: no execution space, not ``constexpr``
    (given one, :func:`_relaxed_constexpr`), not defaulted or deleted (no code to compile)."""
    return (
        not _in_device_space(node, spaces)
        and not _is_constexpr_function(node)
        and not any(
            c.type in ("default_method_clause", "delete_method_clause") for c in node.children
        )
    )


def _device_names(root: Node, spaces: tuple[str, ...]) -> set[str]:
    """The names device code uses: in device functions (a kernel's parameter types among them),
    anywhere in a class with a device member function, and in the body of any class so named
    (a parameter struct's field types, followed until no new name comes)."""
    users: dict[int, Node] = {}  # each function or class walked once, however many members
    for node in _walk(root, ("function_definition",)):
        if not _in_device_space(node, spaces):
            continue
        # a member template's definition sits in a template_declaration: its class is that
        # declaration's grandparent (past the field_declaration_list)
        member = node
        if member.parent is not None and member.parent.type == "template_declaration":
            member = member.parent
        owner = member.parent.parent if member.parent is not None else None
        if owner is not None and owner.type in ("class_specifier", "struct_specifier"):
            node = owner
        users.setdefault(node.id, node)
    found: set[str] = set().union(*(_names(n) for n in users.values()))
    # only field and base types: a host member's body is removed with it, so what it names
    # need not stay
    held: dict[str, set[str]] = {}
    for c in _walk(root, ("class_specifier", "struct_specifier")):
        name, body = c.child_by_field_name("name"), c.child_by_field_name("body")
        if name is None or body is None:
            continue
        parts = [b for b in c.named_children if b.type == "base_class_clause"]
        parts += [
            t
            for f in body.named_children
            if f.type == "field_declaration" and (t := f.child_by_field_name("type")) is not None
        ]
        held.setdefault(text(name), set()).update(*(_names(p) for p in parts))
    grown = True
    while grown:
        grown = False
        for owner_name, names in held.items():
            if owner_name in found and not names <= found:
                found |= names
                grown = True
    return found


def _unused_declarations(
    root: Node,
    spaces: tuple[str, ...],
    device_names: set[str],
    removed: list[tuple[int, int, str]],
    macro_words: dict[str, list[int]],
) -> list[tuple[int, int, str]]:
    """Namespace-scope variables (``constexpr`` ones too) and classes without member functions
    (traits, their specialisations) that nothing outside the host code already ``removed``
    names: SGLang's ``inline constexpr auto kDLGPU = kDLCUDA;`` and ``DLDataTypeTrait<T>``
    serve its host code, over DLPack's types, and DLPack's header is not NVRTC's. One that
    device code, a kept class, a macro's body (``macro_words``) or another kept declaration
    names stays (to a fixpoint: removing one can leave another unnamed)."""

    def outside(start: int, ranges: list[tuple[int, int, str]]) -> bool:
        return not any(s <= start < e for s, e, _ in ranges)

    candidates: dict[int, tuple[Node, str]] = {}
    for node in _walk(root, ("declaration",)):
        if not _at_namespace_scope(node) or _in_device_space(node, spaces):
            continue
        raw = text(node).lstrip()
        if raw.startswith(("using", "typedef")) or "(" in raw.split("=", 1)[0]:
            continue  # an alias or a function prototype, not a variable
        declarators = [c for c in node.named_children if c.type == "init_declarator"]
        declared = declarators[0].child_by_field_name("declarator") if declarators else None
        whole = node.parent if node.parent and node.parent.type == "template_declaration" else node
        if (
            len(declarators) == 1
            and declared is not None
            and declared.type == "identifier"
            and outside(node.start_byte, removed)
        ):
            candidates[whole.id] = (whole, text(declared))
    kernels = {
        text(d).split("(", 1)[0].strip()
        for f in _walk(root, ("function_definition",))
        if "__global__" in text(f).split("(", 1)[0]
        and (d := f.child_by_field_name("declarator")) is not None
    }
    for node in _walk(root, ("class_specifier", "struct_specifier")):
        body, class_name = node.child_by_field_name("body"), node.child_by_field_name("name")
        if class_name is not None and class_name.type == "template_type":  # a specialisation
            class_name = class_name.child_by_field_name("name")
        if (
            body is None
            or class_name is None
            or not _at_namespace_scope(node)
            or text(class_name) in device_names
            or not outside(node.start_byte, removed)
            # a class with member functions is host code's only as _is_host_class says; one
            # naming a kernel may be what a launch's entry names (SGLang's ActivationKernel<T>)
            or _walk(body, ("function_definition",))
            or _names(body) & kernels
        ):
            continue
        whole = node.parent if node.parent and node.parent.type == "template_declaration" else node
        candidates[whole.id] = (whole, text(class_name))
    uses = {word: list(at) for word, at in macro_words.items()}  # :func:`_macro_words`
    for ident in _walk(root, ("identifier", "type_identifier", "namespace_identifier")):
        uses.setdefault(text(ident), []).append(ident.start_byte)
    dropped: list[tuple[int, int, str]] = []
    changed = True
    while changed:
        changed = False
        for key, (declaration, name) in list(candidates.items()):
            # a use inside a declaration of the same name (the other branch of an `#if`:
            # SGLang's kDLGPU for CUDA and for ROCm) is no use
            gone = removed + dropped
            gone += [(n.start_byte, n.end_byte, m) for n, m in candidates.values() if m == name]
            named = [at for at in uses.get(name, []) if outside(at, gone)]
            if not named:
                dropped.append((declaration.start_byte, declaration.end_byte, name))
                del candidates[key]
                changed = True
    return dropped


_DECLARING = (
    "enum_specifier",
    "class_specifier",
    "struct_specifier",
    "union_specifier",
    "alias_declaration",
    "type_definition",
    "function_definition",
    "declaration",
)


def _declared_names(root: Node, removed: list[tuple[int, int, str]]) -> dict[str, set[str]]:
    """Namespace (``a::b``; ``""`` the global one) -> the names declared directly in it: types,
    aliases, functions and variables at namespace scope, host code ``removed`` aside."""
    found: dict[str, set[str]] = {}
    for node in _walk(root, _DECLARING):
        if not _at_namespace_scope(node) or any(s <= node.start_byte < e for s, e, _ in removed):
            continue
        named = node.child_by_field_name("name")
        if named is None:
            declarator = node.child_by_field_name("declarator")
            while declarator is not None and declarator.child_by_field_name("declarator"):
                declarator = declarator.child_by_field_name("declarator")
            named = declarator
        if named is None or named.type not in ("identifier", "type_identifier"):
            continue
        chain, parent = [], node.parent
        while parent is not None:
            if parent.type == "namespace_definition":
                space = parent.child_by_field_name("name")
                chain.append(text(space) if space is not None else "")
            parent = parent.parent
        found.setdefault("::".join(reversed(chain)), set()).add(text(named))
    return found


def _macro_words(root: Node) -> dict[str, list[int]]:
    """Each word of a ``#define`` body -> where its definitions start: a macro's body is raw text
    to the grammar, and a constant device code reaches only through a macro (``#define LANE(i)
    ((i) % kLanes)``) is used all the same."""
    words: dict[str, list[int]] = {}
    for macro in _walk(root, ("preproc_def", "preproc_function_def")):
        value = macro.child_by_field_name("value")
        for word in re.findall(r"[A-Za-z_]\w*", text(value) if value is not None else ""):
            words.setdefault(word, []).append(macro.start_byte)
    return words


def _names(node: Node) -> set[str]:
    # `Traits::kN` reads `Traits` as a namespace_identifier: a class named that way is used too
    return {text(n) for n in _walk(node, ("type_identifier", "identifier", "namespace_identifier"))}


def _declarator_type(node: Node) -> str | None:
    declarator = node.child_by_field_name("declarator")
    return None if declarator is None else declarator.type


_SCOPES = (
    "translation_unit",
    "namespace_definition",
    "declaration_list",
    "linkage_specification",
    "template_declaration",
    # a preprocessor conditional is no scope: host code inside `#ifndef USE_ROCM` (vLLM's
    # dtype_fp8.cuh, `inline ... get_fp8_kv_cache_data_type(const std::string&)`) is host code
    # a header under an include guard (FlashInfer's `#ifndef FLASHINFER_EXCEPTION_H_`) or a
    # feature test: its free functions are still at namespace scope
    "preproc_if",
    "preproc_ifdef",
    "preproc_else",
    "preproc_elif",
    "preproc_elifdef",
)


_CLASS_SCOPES = ("field_declaration_list", "class_specifier", "struct_specifier")


def _at_namespace_scope(node: Node, scopes: tuple[str, ...] = _SCOPES) -> bool:
    """A definition outside any function or class (a free function); with
    ``_SCOPES + _CLASS_SCOPES``, outside any function (a member function too)."""
    parent = node.parent
    while parent is not None:
        if parent.type not in scopes:
            return False
        parent = parent.parent
    return True


@dataclass(frozen=True)
class DeviceSource:
    text: str
    removed_functions: list[str]
    replaced_includes: list[str]
    declared: dict[str, set[str]] = field(default_factory=dict)
    """Namespace -> the names the kept code declares in it (:func:`_declared_names`)."""


@cache
def torch_types() -> str:
    """The text of :data:`TORCH_TYPES_FILE`, inlined so the file stays self-contained, after
    :data:`HOST_TYPEDEFS` (torch's headers bring glibc's names too; a repeated identical typedef
    is allowed, so the text also stands alone)."""
    body = TORCH_TYPES_FILE.read_text(encoding="utf-8").replace("#pragma once\n", "")
    return f"{HOST_TYPEDEFS}{TORCH_TYPES_BEGIN}\n{body}{TORCH_TYPES_END}\n"


@cache
def framework_type_map() -> str:
    """The last part of :data:`TORCH_TYPES_FILE`: ``astra_framework_t``, the framework's type
    for each element type (``c10::Half`` for ``__half``), in terms of torch's own types where a
    framework's build includes torch (``export.patch``)."""
    text = TORCH_TYPES_FILE.read_text(encoding="utf-8")
    return text[text.index(FRAMEWORK_TYPE_MAP) :].strip() + "\n"


def _replace_include(match: re.Match[str], state: dict[str, bool], replaced: list[str]) -> str:
    name = match["name"]
    if name.startswith(TORCH_PREFIXES):
        replaced.append(name)
        if state.setdefault("torch", False):
            return f"// astra-import: {name} (torch's element types are above)"
        state["torch"] = True
        return torch_types()
    if name == "cub/cub.cuh":
        replaced.append(name)
        return "\n".join(f"#include <{h}>" for h in CUB_SUBSET)
    if name in RUNTIME_HEADERS or name.startswith(HOST_LIBRARY_HEADERS) or not _available(name):
        replaced.append(name)
        return f"// astra-import: dropped #include <{name}> (host or runtime header)"
    return match[0]


@cache
def _available(name: str) -> bool:
    """Whether NVRTC finds the header in its own folders (CUDA, CCCL, the std shims)."""
    from astra_graph.harness import nvrtc

    return any((Path(folder) / name).is_file() for folder in nvrtc.system_include_dirs())


def _is_aligned_struct(definition: Node) -> bool:
    """A struct under an attribute macro (vLLM's ``struct __align__(16) vec_n_t {...};``), which
    the grammar reads as a function ``__align__`` returning ``struct``: device code's type, kept.
    Removing it left the kernels that use it without the type (``vec_n_t is not a template``)."""
    kind = definition.child_by_field_name("type")
    declarator = definition.child_by_field_name("declarator")
    return (
        kind is not None
        and kind.type in ("struct_specifier", "class_specifier", "union_specifier")
        and kind.child_by_field_name("body") is None
        and declarator is not None
        and declarator.type == "parenthesized_declarator"
    )


RELAXED_CONSTEXPR = "__host__ __device__ "
"""What a ``constexpr`` function without an execution space is given. torch builds extensions
with ``--expt-relaxed-constexpr`` (its ``COMMON_NVCC_FLAGS``), under which such a function is
callable from device code; NVRTC has no such flag and refuses any host function ("host
functions are not allowed in JIT mode"), so the annotation says it in the source (vLLM's
``quant_type_max<T>::val()``, a ``static constexpr`` member used by its fp8 kernels)."""


def _is_constexpr_function(node: Node) -> bool:
    head = text(node).split("{", 1)[0]
    declarator = node.child_by_field_name("declarator")
    before = head[: head.find(text(declarator))] if declarator is not None else head
    return "constexpr" in before.split() and not any(w in head for w in _DEVICE_SPACES)


def _relaxed_constexpr(
    root: Node, device_names: set[str], spaces: tuple[str, ...]
) -> list[tuple[int, int, str]]:
    """An insertion of :data:`RELAXED_CONSTEXPR` before each ``constexpr`` member function of a
    class that has no execution space, and before each namespace-scope ``constexpr`` function
    template device code names (:func:`_device_constexpr_template`). Not before a plain
    namespace-scope ``constexpr`` function that device code does not name: a class template's
    members and a function template are compiled for the device only where device code
    instantiates them, as relaxed constexpr does, while a plain host helper (vLLM's
    ``next_pow_2`` with ``__builtin_clz``) made ``__host__ __device__`` would be compiled for the
    device whether used or not (measured: vLLM 0.33.0's layernorm_kernels.cu then failed,
    "__builtin_clz is undefined"); such helpers stay removed as host code. One device code names
    (:func:`_device_constexpr_plain`) is compiled for it by nvcc too, and gets it."""
    return [
        (node.start_byte, node.start_byte, RELAXED_CONSTEXPR)
        for node in _walk(root, ("function_definition",))
        if node.parent is not None
        and (
            (node.parent.type == "field_declaration_list" and _is_constexpr_function(node))
            or _device_constexpr_template(node, device_names)
            or _device_constexpr_plain(node, device_names, spaces)
        )
    ]


def _with_constexpr_helpers(root: Node, device_names: set[str]) -> set[str]:
    """``device_names`` and what the ``constexpr`` function templates among them name, to a
    fixpoint: SGLang's ``get_cta_threads`` static_asserts ``should_use_cta<T, kDim>()``, which
    static_asserts ``is_config_supported<T, kDim>()``; each is compiled where the one before
    is instantiated."""
    templates = [
        (name, node)
        for node in _walk(root, ("function_definition",))
        if (name := _template_name(node) or _plain_name(node)) and _is_constexpr_function(node)
    ]
    found = set(device_names)
    grown = True
    while grown:
        grown = False
        for name, node in templates:
            if name in found and not _names(node) <= found:
                found |= _names(node)
                grown = True
    return found


def _template_name(node: Node) -> str:
    """The unqualified name of a namespace-scope function template's definition, or ''."""
    if node.parent is None or node.parent.type != "template_declaration":
        return ""
    if node.parent.parent is None or node.parent.parent.type == "field_declaration_list":
        return ""  # a member template
    declarator = node.child_by_field_name("declarator")
    name = text(declarator).split("(", 1)[0].split("<", 1)[0] if declarator else ""
    return name.strip().rsplit("::", 1)[-1]  # an explicit specialisation `f<float>` is `f`


def _plain_name(node: Node) -> str:
    """The unqualified name of a namespace-scope function's definition that is no template, or
    ''."""
    if node.parent is None or node.parent.type not in ("translation_unit", "declaration_list"):
        return ""
    declarator = node.child_by_field_name("declarator")
    name = text(declarator).split("(", 1)[0] if declarator else ""
    return name.strip().rsplit("::", 1)[-1]


def _device_constexpr_plain(node: Node, device_names: set[str], spaces: tuple[str, ...]) -> bool:
    """A namespace-scope ``constexpr`` function, no template, without an execution space, whose
    name device code uses (SGLang's rope kernel sizes its vectors with ``constexpr int64_t
    kVecSize = next_pow2(kRopeDim, ...)``): nvcc compiles it for the device where it is used
    under ``--expt-relaxed-constexpr``, so it stays, as :data:`RELAXED_CONSTEXPR`. One headed by
    a macro of a device space (SGLang's ``SGL_DEVICE_HOST constexpr``) has its space already."""
    name = _plain_name(node)
    return (
        bool(name)
        and _is_constexpr_function(node)
        and name in device_names
        and not _in_device_space(node, spaces)
    )


def _device_constexpr_template(node: Node, device_names: set[str]) -> bool:
    """A namespace-scope ``constexpr`` function template without an execution space whose name
    device code uses (SGLang's ``host::norm::get_cta_threads<T, kDim>()``, sizing a kernel's
    block at compile time; nvcc takes it under ``--expt-relaxed-constexpr``)."""
    name = _template_name(node)
    return bool(name) and _is_constexpr_function(node) and name in device_names


def _device_macros(root: Node) -> list[str]:
    """Object-like macros whose body names a device space (FlashInfer's ``#define
    FLASHINFER_INLINE inline __attribute__((always_inline)) __device__``): a definition headed
    by one is device code."""
    found = []
    for node in _walk(root, ("preproc_def",)):
        body = text(node.child_by_field_name("value"))
        if any(word in body for word in _DEVICE_SPACES):
            found.append(text(node.child_by_field_name("name")))
    return found


@cache
def _torch_device_macros() -> tuple[str, ...]:
    """torch's macros that name a device space (``C10_DEVICE``, ``C10_HOST_DEVICE``), from
    :data:`TORCH_TYPES_FILE`, which replaces torch's includes after the source is read: vLLM's
    ``struct min_scaling_factor { C10_DEVICE C10_ALWAYS_INLINE static float val() ... }``."""
    return tuple(_device_macros(_parser().parse(torch_types().encode()).root_node))


def device_source(flattened: str, defines: tuple[str, ...] = ()) -> DeviceSource:
    """The flattened file with host code removed and includes made NVRTC's (see above).

    ``defines`` (``NAME`` or ``NAME=VALUE``) are the framework build's own ``-D`` flags,
    written as ``#define`` lines first, so the file keeps them wherever it is compiled (vLLM's
    CMake passes ``-DENABLE_FP8`` to every CUDA file, and its fp8 conversions exist only under
    it). ``NAME`` alone is written ``#define NAME 1``, as the compiler's ``-DNAME`` defines it:
    FlashInfer's ``-DENABLE_BF16`` is tested both ways, ``#ifdef ENABLE_BF16`` and ``#if
    ENABLE_BF16``, and an empty definition leaves ``#if`` no expression."""
    data = flattened.encode()
    tree = _parser().parse(data)
    removed: list[tuple[int, int, str]] = []
    spaces = (*_DEVICE_SPACES, *_device_macros(tree.root_node), *_torch_device_macros())
    device_names = _with_constexpr_helpers(tree.root_node, _device_names(tree.root_node, spaces))
    host_classes: set[str] = set()
    for node in _walk(tree.root_node, ("class_specifier", "struct_specifier")):
        if _at_namespace_scope(node) and _is_host_class(node, spaces, device_names):
            whole = (
                node.parent if node.parent and node.parent.type == "template_declaration" else node
            )
            name = text(node.child_by_field_name("name")) or "?"
            host_classes.add(name)
            removed.append((whole.start_byte, whole.end_byte, name))
    for node in _walk(tree.root_node, ("function_definition", "declaration")):
        member = node.parent is not None and "field_declaration_list" in (
            node.parent.type,
            node.parent.parent.type if node.parent.parent is not None else "",
        )
        if not _at_namespace_scope(node, _SCOPES + _CLASS_SCOPES if member else _SCOPES):
            continue
        if member and (node.type == "declaration" or not _is_host_member(node, spaces)):
            continue
        if _in_device_space(node, spaces):
            continue
        # a declaration naming a removed class (its deduction guide) goes with it
        if node.type == "declaration" and not (
            _is_host_declaration(node) or _names(node) & host_classes
        ):
            continue
        if node.type == "function_definition" and _is_aligned_struct(node):
            continue
        if node.type == "function_definition" and (
            _device_constexpr_template(node, device_names)
            or _device_constexpr_plain(node, device_names, spaces)
        ):
            continue
        whole = node.parent if node.parent and node.parent.type == "template_declaration" else node
        if any(start <= whole.start_byte < end for start, end, _ in removed):
            continue  # inside a removed class
        declarator = node.child_by_field_name("declarator")
        name = text(declarator).split("(", 1)[0].split("=", 1)[0].strip() if declarator else "?"
        removed.append((whole.start_byte, whole.end_byte, name))
    in_macros = _macro_words(tree.root_node)
    for node in _walk(tree.root_node, ("namespace_alias_definition",)):
        # `namespace stdv = std::ranges::views;` beside host helpers (SGLang's irange): NVRTC's
        # libcu++ has no views, and an alias neither device code nor a macro names is host code's
        alias = text(node.child_by_field_name("name"))
        if alias in device_names or alias in in_macros:
            continue
        if not any(s <= node.start_byte < e for s, e, _ in removed):
            removed.append((node.start_byte, node.end_byte, alias))
    removed += _unused_declarations(tree.root_node, spaces, device_names, removed, in_macros)
    for node in _walk(tree.root_node, ("expression_statement",)):
        if (
            node.parent is not None
            and node.parent.type == "translation_unit"
            and ("TORCH_LIBRARY" in text(node) or "PYBIND11_MODULE" in text(node))
        ):
            removed.append((node.start_byte, node.end_byte, text(node).split("(", 1)[0]))
    edits = [(start, end, _stub(name, data[start:end])) for start, end, name in removed]
    edits += [
        edit
        for edit in _relaxed_constexpr(tree.root_node, device_names, spaces)
        if not any(start <= edit[0] < end for start, end, _ in removed)
    ]
    for start, end, replacement in sorted(edits, reverse=True):
        data = data[:start] + replacement.encode() + data[end:]
    state: dict[str, bool] = {}
    replaced: list[str] = []
    out = _INCLUDE.sub(lambda m: _replace_include(m, state, replaced), data.decode())
    if not state.get("torch"):
        out = torch_types() + out
    out = HOST_TYPEDEFS + _plain_lambdas(_host_on_constants(out))
    if defines:
        lines = [
            f"#define {name} {value if equals else 1}"
            for name, equals, value in (d.partition("=") for d in defines)
        ]
        out = "// astra-import: the framework build's defines\n" + "\n".join(lines) + "\n" + out
    return DeviceSource(
        text=out,
        removed_functions=[name for _, _, name in sorted(removed)],
        replaced_includes=list(dict.fromkeys(replaced)),
        declared=_declared_names(tree.root_node, removed),
    )


_OBJECT_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+([^\n\\]+)$", re.M)
_SPACED_CONSTANT = re.compile(
    r"^(?P<indent>[ \t]*)(?P<macro>[A-Z_][A-Z0-9_]*)"
    r"(?P<rest>[ \t]+(?:(?:static|inline)[ \t]+)*constexpr\b[^;(){}]*=)",
    re.M,
)


def _host_on_constants(source: str) -> str:
    """``__host__`` dropped from a ``constexpr`` variable declared under a macro that expands
    to it (vLLM's ``MAYBE_HOST_DEVICE static constexpr T quant_type_max_v = ...``, the macro
    being torch's ``C10_HOST_DEVICE``). nvcc ignores ``__host__`` on a variable ("does not
    apply here" is its warning) and keeps ``__device__``; NVRTC makes the same words an error,
    so the macro is written out there as nvcc takes it: its expansion without ``__host__``."""
    definitions: dict[str, list[str]] = {}
    for match in _OBJECT_MACRO.finditer(source):
        definitions.setdefault(match[1], []).append(match[2].strip())

    def words(name: str, depth: int) -> list[str] | None:
        """The expansion of the definition that gives ``__host__``, or None."""
        for value in definitions.get(name, []):
            out: list[str] = []
            for word in value.split():
                inner = words(word, depth + 1) if depth < MAX_MACRO_DEPTH else None
                out.extend(inner if inner is not None else [word])
            if "__host__" in out:
                return out
        return None

    def one(match: re.Match[str]) -> str:
        expanded = words(match["macro"], 0)
        if expanded is None:
            return match[0]
        kept = " ".join(w for w in expanded if w != "__host__")
        return f"{match['indent']}{kept}{match['rest']}"

    return _SPACED_CONSTANT.sub(one, source)


_ANNOTATED_LAMBDA = re.compile(
    r"(?P<capture>\[[^\[\]]*\])(?P<spaces>(?:\s*__(?:host|device)__)+)(?=\s*\()"
)


def _plain_lambdas(source: str) -> str:
    """``__device__``/``__host__`` removed from lambdas (``[=] __device__(fp8_t& d, ...)``,
    nvcc's ``--extended-lambda``). Host code is gone, so each such lambda is written inside
    device code, where a lambda is a device function without the words; NVRTC refuses them
    ("annotation on lambda is not allowed in JIT mode")."""
    return _ANNOTATED_LAMBDA.sub(lambda m: m["capture"] + " " * len(m["spaces"]), source)


def _stub(name: str, removed: bytes) -> str:
    """What stands in for removed host code: one comment, and the lines it took (line numbers
    in compiler messages stay the flattened file's)."""
    stub = f"// astra-import: host code {name} removed (NVRTC compiles device code only)"
    return stub + "\n" * removed.count(b"\n")


@dataclass(frozen=True)
class DeviceCompile:
    ok: bool
    seconds: float
    log: str
    lowered: dict[str, str]


def compile_device(
    source: str, entries: list[str], arch: str = "sm_90", std: str | None = None
) -> DeviceCompile:
    """Compile the device source with NVRTC for ``entries`` (name expressions), at the
    framework build's C++ standard ``std`` (NVRTC's default when None)."""
    from astra_graph.harness import nvrtc

    started = time.perf_counter()
    out = nvrtc.compile_source(
        source,
        filename="imported.cu",
        arch=arch,
        name_expressions=entries,
        std=std or DEFAULT_STD,
    )
    return DeviceCompile(out.ok, time.perf_counter() - started, out.log, out.lowered_names)
