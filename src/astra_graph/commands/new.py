"""``astra new OP --from FILE.cu --entry NAME``: draft an operation around a kernel as written.

Reads the entry kernel's signature and writes ``OP/contract.toml`` (tensors from pointers:
``const`` ones as inputs, the others ``inout`` to confirm; dims from integer parameters; the
element type from the first type template parameter; float parameters as scalars with a
default), ``OP/reference.py`` to fill in and ``OP/production.cu``: header lines that include
FILE unchanged. Then it prints what is left to decide. The draft parses; ``astra validate OP``
fails until the reference is written. OP goes into the first ``--path`` folder (else the first
of ``$ASTRA_KERNEL_PATH``, else the current folder).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

from astra_graph.catalog import PATH_VARIABLE
from astra_graph.commands import UsageError
from astra_graph.contract import CONTRACT_FILE, read_text
from astra_graph.header import split_entry
from astra_graph.signature import TYPE_ALIASES, KernelParam, kernel_signature

DRAFT_DIM_VALUE = 1024
"""Every dim of the drafted suites (to be replaced by the real shapes)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("op", help="name of the new operation (lower case, digits, underscores)")
    p.add_argument("--from", dest="source", required=True, help="the .cu/.cuh file, unchanged")
    p.add_argument("--entry", required=True, help="the __global__ kernel, e.g. ns::kernel")
    p.set_defaults(run=run)


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


def _destination(args: argparse.Namespace) -> Path:
    env = [p for p in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if p]
    root = Path((args.path or env or ["."])[0])
    return root / args.op


def _template_kinds(source: str, kernel: str) -> list[tuple[str, str]]:
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


def run(args: argparse.Namespace) -> int:
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", args.op):
        raise UsageError(
            f"OP: expected lower case letters, digits and underscores, got {args.op!r}"
        )
    source_path = Path(args.source)
    source = read_text(source_path, "kernel file")
    try:
        qualified, _ = split_entry(args.entry)
    except ValueError as exc:
        raise UsageError(f"--entry: {exc}") from None
    kernel = qualified.rsplit("::", 1)[-1]
    found = kernel_signature(source, kernel)
    if found is None:
        raise UsageError(f"{source_path}: no __global__ function {kernel!r} found")
    _, params = found
    folder = _destination(args)
    if (folder / CONTRACT_FILE).exists():
        raise UsageError(f"{folder / CONTRACT_FILE}: exists already; pick another OP or folder")
    kinds = _template_kinds(source, kernel)
    element = next((name for name, kind in kinds if kind == "type"), None)
    todo: list[str] = []
    tensors: list[KernelParam] = []
    dims: list[str] = []
    widths: dict[str, str] = {}
    floats: list[KernelParam] = []
    bindings: list[str] = []
    int_names = [
        p.name
        for p in params
        if not p.pointer
        and TYPE_ALIASES.get(p.base_type.split("::")[-1]) in ("int32", "int64")
        and "stride" not in p.name
    ]
    for param in params:
        name = param.name or f"arg{len(bindings)}"
        known = TYPE_ALIASES.get(param.base_type.split("::")[-1])
        if param.pointer:
            tensors.append(param)
            bindings.append(name)
        elif known in ("int32", "int64") and "stride" in name:
            bindings.append(f"{name}: {known} = {int_names[-1] if int_names else 1}")
            todo.append(f"params: {name} is a stride, drafted as the last dim; check it")
        elif known in ("int32", "int64"):
            dims.append(name)
            widths[name] = known
            bindings.append(name)
        elif known in ("float32", "float64"):
            floats.append(param)
            bindings.append(name)
        else:
            bindings.append(name)
            todo.append(f"params: {name} ({param.text!r}) has a type the draft cannot map")
    if not dims:
        dims = ["n"]
        todo.append("dims: the kernel takes no integer; name the dims the shapes use")
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
    entry = f"{qualified}<{', '.join(targs)}>" if targs else qualified
    tunables = [t for t, (_, kind) in zip(targs, kinds, strict=True) if kind == "value"]
    first_dim = dims[0]
    include_dir = os.path.relpath(source_path.resolve().parent, folder.resolve())
    shape = ", ".join(f'"{d}"' for d in dims)
    lines = [
        f"# Drafted by `astra new {args.op} --from {source_path} --entry {args.entry}`: check it.",
        f'name = "{args.op}"',
        'summary = "TODO: what the kernel computes"',
        'dtypes = ["float16", "bfloat16"]',
        f'reference = "reference.py:{args.op}"',
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
        width = widths.get(d, "int32")
        lines += ["[[scalars]]", f'name = "{d}"', f'dtype = "{width}"', f'value = "{d}"', ""]
    for f in floats:
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
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONTRACT_FILE).write_text("\n".join(lines))
    outputs = ", ".join(f'"{t.name}": ...' for t in tensors if not t.const)
    inputs = ", ".join(t.name for t in tensors)
    (folder / "reference.py").write_text(
        f'"""Reference for {args.op}: float64, NumPy or CuPy (``xp``). Fill it in."""\n\n\n'
        f"def {args.op}(xp, inputs, params):\n"
        f'    """inputs: {inputs} (float64 arrays); params: scalars by name.\n\n'
        f'    Return every written tensor: {{{outputs}}}.\n    """\n'
        f'    raise NotImplementedError("write the reference of {args.op}")\n'
    )
    header = [
        f"// {args.op}: {source_path.name} as written, brought in by `astra new`.",
        f"// astra: entry = {entry}",
        f"// astra: params = {', '.join(bindings)}",
        f"// astra: grid = {first_dim}",
        f"// astra: block = {next((t for t in tunables if _is_block(t)), 256)}",
        *(f"// astra: tunable {t} = 256" for t in tunables),
        f'#include "{source_path.name}"',
    ]
    (folder / "production.cu").write_text("\n".join(header) + "\n")
    todo.insert(0, "reference.py: write the float64 reference")
    todo.append("production.cu: grid and block (drafted: one block of 256 per first dim)")
    print(f"wrote {folder / CONTRACT_FILE}, {folder / 'reference.py'}, {folder / 'production.cu'}")
    print("left to decide:")
    for item in dict.fromkeys(todo):
        print(f"  - {item}")
    print(f"then: astra validate {folder} && astra check {folder}/production.cu <another>.cu")
    return 0
