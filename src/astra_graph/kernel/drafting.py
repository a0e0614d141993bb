"""Drafting a new operation around a kernel as written (``astra new``): the texts of its
``contract.toml``, ``reference.py`` and ``production.cu``, and what is left to decide.

From the entry kernel's signature: tensors from pointers (``const`` ones as inputs, the others
``inout`` to confirm), dims from integer parameters (a ``stride`` is bound to the last dim), the
element type from the first type template parameter, float parameters as scalars with a
default; value template parameters become tunables. ``production.cu`` is header lines that
include the kernel's file unchanged. The draft parses; ``astra validate`` fails until the
reference is written. Nothing here writes a file or knows a command-line flag: the command
(:mod:`astra_graph.commands.new`) does both.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from astra_graph.kernel.signature import TYPE_ALIASES, KernelParam, kernel_signature

DRAFT_DIM_VALUE = 1024
"""Every dim of the drafted suites (to be replaced by the real shapes)."""


class DraftError(ValueError):
    """The kernel cannot be drafted; the message is one line naming the file."""


@dataclass(frozen=True)
class Draft:
    """The drafted files' texts and what is left to decide, in order."""

    contract: str
    reference: str
    production: str
    todo: list[str]


@dataclass
class _Params:
    """The kernel's parameters sorted into what the contract makes of them."""

    tensors: list[KernelParam] = field(default_factory=list)
    dims: list[str] = field(default_factory=list)
    widths: dict[str, str] = field(default_factory=dict)
    floats: list[KernelParam] = field(default_factory=list)
    bindings: list[str] = field(default_factory=list)


def template_kinds(source: str, kernel: str) -> list[tuple[str, str]]:
    """(name, 'type' | 'value' | 'flag' | 'function') for each template parameter."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    match = re.search(
        rf"template\s*<(?P<params>[^{{;]*?)>\s*(?:__global__|[^;{{]*__global__)[^;{{]*\b{re.escape(kernel)}\s*\(",
        text,
    )
    kinds = []
    for item in re.split(r",(?![^()<>]*[)>])", match["params"]) if match else []:
        item = item.strip()
        pointer = re.search(r"\(\s*\*\s*(\w+)\s*\)", item)
        if pointer:
            kinds.append((pointer[1], "function"))
        elif item.startswith("bool"):
            kinds.append((re.findall(r"\w+", item.split("=")[0])[-1], "flag"))
        elif item.startswith(("typename", "class")):
            kinds.append((item.split()[-1].split("=")[0], "type"))
        elif item:
            kinds.append((re.findall(r"\w+", item.split("=")[0])[-1], "value"))
    return kinds


def draft_operation(
    op: str, source_path: Path, source: str, qualified: str, folder: Path, command: str
) -> Draft:
    """The draft of operation ``op`` (to be written in ``folder``) around the ``__global__``
    function ``qualified`` of ``source`` (read from ``source_path``); ``command`` is quoted in
    the contract's first line. DraftError when the file has no such function."""
    kernel = qualified.rsplit("::", 1)[-1]
    found = kernel_signature(source, kernel)
    if found is None:
        raise DraftError(f"{source_path}: no __global__ function {kernel!r} found")
    todo: list[str] = []
    params = _sort_params(found[1], todo)
    kinds = template_kinds(source, kernel)
    element = next((name for name, kind in kinds if kind == "type"), None)
    targs = _template_arguments(kinds, element, source, todo)
    entry = f"{qualified}<{', '.join(targs)}>" if targs else qualified
    tunables = [t for t, (_, kind) in zip(targs, kinds, strict=True) if kind == "value"]
    include_dir = os.path.relpath(source_path.resolve().parent, folder.resolve())
    contract = _contract_text(op, params, element, include_dir, command, todo)
    header = [
        f"// {op}: {source_path.name} as written, brought in by `astra new`.",
        f"// astra: entry = {entry}",
        f"// astra: params = {', '.join(params.bindings)}",
        f"// astra: grid = {params.dims[0]}",
        f"// astra: block = {next((t for t in tunables if _is_block(t)), 256)}",
        *(f"// astra: tunable {t} = 256" for t in tunables),
        f'#include "{source_path.name}"',
    ]
    todo.insert(0, "reference.py: write the float64 reference")
    todo.append("production.cu: grid and block (drafted: one block of 256 per first dim)")
    return Draft(
        contract=contract,
        reference=_reference_text(op, params.tensors),
        production="\n".join(header) + "\n",
        todo=list(dict.fromkeys(todo)),
    )


def _sort_params(params: list[KernelParam], todo: list[str]) -> _Params:
    """Tensors, dims (integers; a stride is bound to the last dim), float scalars, bindings."""
    found = _Params()
    int_names = [
        p.name
        for p in params
        if not p.pointer
        and TYPE_ALIASES.get(p.base_type.split("::")[-1]) in ("int32", "int64")
        and "stride" not in p.name
    ]
    for param in params:
        name = param.name or f"arg{len(found.bindings)}"
        known = TYPE_ALIASES.get(param.base_type.split("::")[-1])
        if param.pointer:
            found.tensors.append(param)
            found.bindings.append(name)
        elif known in ("int32", "int64") and "stride" in name:
            found.bindings.append(f"{name}: {known} = {int_names[-1] if int_names else 1}")
            todo.append(f"params: {name} is a stride, drafted as the last dim; check it")
        elif known in ("int32", "int64"):
            found.dims.append(name)
            found.widths[name] = known
            found.bindings.append(name)
        elif known in ("float32", "float64"):
            found.floats.append(param)
            found.bindings.append(name)
        else:
            found.bindings.append(name)
            todo.append(f"params: {name} ({param.text!r}) has a type the draft cannot map")
    if not found.dims:
        found.dims = ["n"]
        todo.append("dims: the kernel takes no integer; name the dims the shapes use")
    return found


TUNABLE_SUFFIX = "_VALUE"
"""Added to a drafted tunable whose name is taken in the source: a tunable is a ``-D`` macro,
and one named after the template parameter it feeds (``BLOCK`` for ``template <int BLOCK>``)
would replace the parameter in the included file."""


def tunable_name(parameter: str, source: str) -> str:
    """The tunable drafted for a value template parameter: the user's own name in macro case
    (``BLOCK`` stays ``BLOCK``, ``blockSize`` is ``BLOCK_SIZE``, ``kBlock`` is ``BLOCK``), with
    :data:`TUNABLE_SUFFIX` when the source already uses that name for something else."""
    bare = parameter[1:] if re.fullmatch(r"k[A-Z]\w*", parameter) else parameter
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", bare).upper()
    if re.search(rf"\b{re.escape(name)}\b", source):
        name += TUNABLE_SUFFIX
    return name


def _is_block(tunable: str) -> bool:
    """A tunable that reads as the block size (its name says BLOCK or THREADS)."""
    return "BLOCK" in tunable or "THREADS" in tunable


def _template_arguments(
    kinds: list[tuple[str, str]], element: str | None, source: str, todo: list[str]
) -> list[str]:
    """The entry's template arguments: T for the element type, a tunable per value parameter."""
    targs = []
    for name, kind in kinds:
        if name == element:
            targs.append("T")
        elif kind == "value":
            tunable = tunable_name(name, source)
            targs.append(tunable)
            todo.append(f"header: tunable {tunable} (template parameter {name}): give its values")
        else:
            targs.append(name)
            todo.append(f"header.entry: template argument {name} ({kind}): name the one to use")
    return targs


def _contract_text(
    op: str, params: _Params, element: str | None, include_dir: str, command: str, todo: list[str]
) -> str:
    dims, tensors = params.dims, params.tensors
    shape = ", ".join(f'"{d}"' for d in dims)
    lines = [
        f"# Drafted by `{command}`: check it.",
        f'name = "{op}"',
        'summary = "TODO: what the kernel computes"',
        'dtypes = ["float16", "bfloat16"]',
        f'reference = "reference.py:{op}"',
        'bytes_moved = "' + " + ".join(f"{' * '.join(dims)} * elem_bytes" for _ in tensors) + '"'
        if tensors
        else 'bytes_moved = "0"',
        f"include_dirs = [{json.dumps(include_dir)}]",
        "",
    ]
    for d in dims:
        lines += [f"[dims.{d}]", "min = 1", 'description = "TODO"', ""]
    for t in tensors:
        dtype = "T" if t.base_type == element else (TYPE_ALIASES.get(t.base_type) or "T")
        role = "input" if t.const else "inout"
        if not t.const:
            todo.append(f"args.{t.name}: written, drafted as 'inout'; say 'output' if never read")
        lines += [
            "[[args]]",
            f'name = "{t.name}"',
            f'dtype = "{dtype}"',
            f"shape = [{shape}]  # TODO: the real shape",
            f'role = "{role}"',
            "",
        ]
    todo.append("args: give each tensor its real shape (drafted as every dim)")
    for d in dims:
        width = params.widths.get(d, "int32")
        lines += ["[[scalars]]", f'name = "{d}"', f'dtype = "{width}"', f'value = "{d}"', ""]
    for f in params.floats:
        ftype = TYPE_ALIASES.get(f.base_type, "float32")
        lines += ["[[scalars]]", f'name = "{f.name}"', f'dtype = "{ftype}"', "default = 1e-6", ""]
        todo.append(f"scalars.{f.name}: a parameter with default 1e-6; give the real default")
    lines += [
        "[tolerance.float16]",
        "atol = 1e-5",
        "rtol = 1e-3",
        "",
        "[tolerance.bfloat16]",
        "atol = 1e-5",
        "rtol = 8e-3",
        "",
        "[suites]",
        "tuning = [{ " + ", ".join(f"{d} = {DRAFT_DIM_VALUE}" for d in dims) + " }]",
        "heldout = [{ " + ", ".join(f"{d} = {DRAFT_DIM_VALUE - 1}" for d in dims) + " }]",
        "",
    ]
    todo.append("suites: the shapes that matter (drafted: one of each)")
    todo.append("tolerance, bytes_moved, summary: check the drafted values")
    return "\n".join(lines)


def _reference_text(op: str, tensors: list[KernelParam]) -> str:
    outputs = ", ".join(f'"{t.name}": ...' for t in tensors if not t.const)
    inputs = ", ".join(t.name for t in tensors)
    return (
        f'"""Reference for {op}: float64, NumPy or CuPy (``xp``). Fill it in."""\n\n\n'
        f"def {op}(xp, inputs, params):\n"
        f'    """inputs: {inputs} (float64 arrays); params: scalars by name.\n\n'
        f'    Return every written tensor: {{{outputs}}}.\n    """\n'
        f'    raise NotImplementedError("write the reference of {op}")\n'
    )
