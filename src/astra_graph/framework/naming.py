"""How the framework names an imported operation: the ``framework.toml`` an import drafts.

``astra export`` needs, beside the contract, the framework's own name and argument order for
the op and where its launcher lives (``astra_graph.export.framework``, docs/EXPORT.md). For a
launcher taking torch tensors the import knows both: the op's arguments are the launcher's
parameters in its order (a tensor the kernel writes is ``Tensor!``, one it only reads
``Tensor``, a ``double``/``float`` parameter ``float``), and ``[source]`` is the file, the
launcher and the kernel as read. The namespace is the one the file registers the launcher
under (``TORCH_LIBRARY_FRAGMENT(_C, m) { m.def("name(...)") }``) where it does; a file that
registers nothing (vLLM's kernels are registered in ``torch_bindings.cpp``) gets
:data:`DEFAULT_NAMESPACE`, said so in the file. ``[[patch]]`` targets (a framework's Python
wrappers) are not in a CUDA file and are left to the user.

Where a launcher parameter has no counterpart in the contract (an optional tensor, a bool, an
integer the kernel takes as a dim), no ``framework.toml`` is written and the import says why:
export then names the missing file, instead of exporting an op with another signature.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from astra_graph.framework.flatten import CHECKOUT_INCLUDE_FOLDERS
from astra_graph.framework.launchers import Analysis
from astra_graph.framework.parse import Param
from astra_graph.kernel.contract import FRAMEWORK_FILE

DEFAULT_NAMESPACE = "_C"
"""The op namespace drafted for a file that registers no op itself: vLLM's (its
``torch_bindings.cpp`` registers the kernels of ``csrc/`` into ``_C``)."""
TENSOR_TYPES = ("torch::Tensor", "at::Tensor", "Tensor")
"""A launcher parameter of one of these types (by value or reference) is a tensor argument."""
FLOAT_TYPES = ("double", "float")
"""Launcher parameter types written ``float`` in a torch schema (torch passes a double)."""
_REGISTRATION = re.compile(
    r"\bTORCH_LIBRARY(?:_FRAGMENT)?\s*\(\s*(?P<namespace>[A-Za-z_]\w*)\s*,\s*"
    r"(?P<module>[A-Za-z_]\w*)\s*\)\s*\{"
)


def registered_namespace(text: str, name: str) -> str | None:
    """The namespace a ``TORCH_LIBRARY``/``TORCH_LIBRARY_FRAGMENT`` block of ``text`` defines
    the op ``name`` in (``m.def("name(...)")``), or None when the text registers no such op."""
    for match in _REGISTRATION.finditer(text):
        depth, end = 1, match.end()
        while end < len(text) and depth:
            depth += (text[end] == "{") - (text[end] == "}")
            end += 1
        body = text[match.end() : end]
        if re.search(rf'\b{match["module"]}\s*\.\s*def\s*\(\s*"{re.escape(name)}\s*\(', body):
            return match["namespace"]
    return None


def default_root(source: Path) -> Path:
    """The framework checkout a file belongs to, when no ``--root`` says: the folder above the
    nearest ancestor named like a checkout's source folder (``csrc``, ``include``, ``python``),
    else the file's own folder."""
    resolved = source.resolve()
    for folder in resolved.parents:
        if folder.name in CHECKOUT_INCLUDE_FOLDERS:
            return folder.parent
    return resolved.parent


def defining_file(function: str, files: Sequence[Path]) -> Path | None:
    """The first of ``files`` (a flattened file's sources, the file itself first) that defines
    the host function ``function`` (its name, parameters, then a body), or None."""
    definition = re.compile(
        rf"^[ \t]*(?:[\w:<>&*]+[ \t]+)+{re.escape(function)}[ \t]*\([^;{{}}]*\)\s*\{{",
        re.MULTILINE,
    )
    for file in files:
        if definition.search(source_text(file)):
            return file
    return None


def source_text(file: Path) -> str:
    """A framework file's text, read once per version of it (:func:`_source_text`)."""
    status = file.stat()
    return _source_text(file, status.st_mtime_ns, status.st_size)


@lru_cache(maxsize=256)
def _source_text(file: Path, mtime_ns: int, size: int) -> str:
    """A framework file's text, read once per version (every launch site of a file asks for
    the files its flattening read; ``mtime_ns`` and ``size`` key a changed file anew)."""
    return file.read_text(encoding="utf-8", errors="replace")


@dataclass(frozen=True)
class TorchFacing:
    """The host function torch calls: the launcher itself, or for a raw-pointer header launcher
    its caller in the framework's csrc (:mod:`~astra_graph.framework.callers`)."""

    name: str
    params: tuple[Param, ...]
    file: Path


def _schema_arg(param: Param, analysis: Analysis) -> str:
    """One schema argument for a launcher parameter; raises ValueError naming it when the
    contract has no counterpart the export's schema can express."""
    if param.type in TENSOR_TYPES and not param.pointer:
        use = analysis.tensors.get(param.name)
        if use is None:
            raise ValueError(f"tensor parameter {param.name!r} is no tensor the kernel is given")
        return f"{'Tensor' if use.const else 'Tensor!'} {param.name}"
    if param.name in analysis.scalars:
        if param.type in FLOAT_TYPES:
            return f"float {param.name}"
        raise ValueError(
            f"parameter {param.name!r} ({param.type}): the export's schema takes tensors, "
            "float and int"
        )
    if param.pointer and param.name in analysis.tensors:
        # a raw-pointer launcher imported directly (importer._imported_directly): a torch op
        # takes tensors, and no caller of the framework's turns them into this pointer
        raise ValueError(
            f"parameter {param.name!r} ({' '.join(param.text.split())}) is a raw pointer, "
            "which torch's op schema cannot take, and no caller passes it a tensor"
        )
    raise ValueError(
        f"parameter {param.name!r} ({param.text.strip()}) is no tensor or scalar of the contract"
    )


def framework_text(
    analysis: Analysis,
    facing: TorchFacing,
    root: Path,
    include_folders: Sequence[Path],
) -> str:
    """The drafted ``framework.toml``; raises ValueError with the reason it cannot be written."""
    args = [_schema_arg(p, analysis) for p in facing.params]
    named = {p.name for p in facing.params}
    unnamed = [s for s in analysis.scalars if s not in named]
    unnamed += [c for c in analysis.constants if c not in named]
    if unnamed:
        raise ValueError(
            f"scalar {unnamed[0]!r} is no parameter of {facing.name}, so the op cannot pass it"
        )
    namespace = registered_namespace(source_text(facing.file), facing.name)
    where = (
        f"the one {facing.file.name} registers it in"
        if namespace
        else f"drafted as vLLM's: {facing.file.name} registers no op (set the framework's)"
    )
    file = os.path.relpath(facing.file.resolve(), root.resolve())
    # the folders nvcc searches for the file's headers (--check, --verify): the import's, else
    # the file's own
    searched = list(include_folders) or [facing.file.parent]
    folders = [os.path.relpath(f.resolve(), root.resolve()) for f in searched]
    schema = f"{namespace or DEFAULT_NAMESPACE}::{facing.name}({', '.join(args)}) -> ()"
    include_dirs = ", ".join(json.dumps(f) for f in dict.fromkeys(folders))
    lines = [
        f"# Drafted by `astra import {facing.file.name}` (docs/EXPORT.md): how the framework",
        f"# names and calls this op. The op's arguments are {facing.name}'s parameters;",
        f"# its namespace is {where}.",
        "[op]",
        f"schema = {json.dumps(schema)}",
        "",
        "# the framework's Python wrappers patch() replaces, if any ([[patch]], docs/EXPORT.md)",
        "",
        "[source]",
        f"file = {json.dumps(file)}",
        f"launcher = {json.dumps(facing.name)}",
        f"kernel = {json.dumps(analysis.kernel.name)}",
        f"include_dirs = [{include_dirs}]",
        "",
    ]
    return "\n".join(lines)


def write_framework(
    folder: Path,
    analysis: Analysis,
    facing: TorchFacing,
    root: Path,
    include_folders: Sequence[Path],
) -> str:
    """Write ``folder/framework.toml``; returns '' or, where none is written, the note why."""
    try:
        text = framework_text(analysis, facing, root, include_folders)
    except ValueError as exc:
        (folder / FRAMEWORK_FILE).unlink(missing_ok=True)  # a stale one would name another op
        return f"{FRAMEWORK_FILE} not written (astra export needs it): {exc}"
    (folder / FRAMEWORK_FILE).write_text(text)
    return ""
