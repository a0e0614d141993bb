"""One self-contained file from a framework source: its framework includes inlined, in place.

``#include "x.h"`` is searched in the including file's folder, then in the framework's include
folders (``--include DIR``, or those found under a checkout root); ``#include <x.h>`` only in
the framework's include folders. A header found there is inlined where it is included, once
(what ``#pragma once`` and include guards do in the framework's build); one found nowhere (CUDA,
the C++ library, torch) is kept as an ``#include`` line for the compiler. The flattened text is
what the agents read and write back, and it compiles outside the framework's tree.

Include lines are preprocessor lines, read line by line as the preprocessor reads them (no C++
is parsed here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_INCLUDE = re.compile(r'^\s*#\s*include\s*(?P<open>[<"])(?P<name>[^>"]+)[>"]')
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\b")
MARK = "// astra-import: "
"""Prefix of the comment lines that say where an inlined header begins and ends."""
CHECKOUT_INCLUDE_FOLDERS = ("csrc", "include", "python")
"""Folders of a checkout root searched for headers when no ``--include`` is given (vLLM's
``csrc/``, FlashInfer's ``include/``, SGLang's ``python/``)."""


@dataclass
class Flattened:
    text: str
    files: list[Path] = field(default_factory=list)
    """Every file read, the source first: what the compile cache keys on."""
    kept: list[str] = field(default_factory=list)
    """Includes left for the compiler (not found in the framework's folders)."""


def include_folders(source: Path, includes: list[Path], root: Path | None = None) -> list[Path]:
    """The folders searched: ``--include`` ones, then a checkout root's usual ones."""
    folders = [p.resolve() for p in includes]
    if root is not None:
        folders += [(root / name).resolve() for name in CHECKOUT_INCLUDE_FOLDERS]
        folders.append(root.resolve())
    return [f for f in dict.fromkeys(folders) if f.is_dir()]


def _find(name: str, quoted: bool, here: Path, folders: list[Path]) -> Path | None:
    candidates = ([here] if quoted else []) + folders
    for folder in candidates:
        path = folder / name
        if path.is_file():
            return path.resolve()
    return None


def flatten(path: Path, folders: list[Path]) -> Flattened:
    """``path`` with every framework include inlined; raises OSError for an unreadable file."""
    out = Flattened(text="")
    seen: set[Path] = set()

    def visit(file: Path) -> list[str]:
        seen.add(file)
        out.files.append(file)
        lines: list[str] = []
        for line in file.read_text(encoding="utf-8").splitlines():
            if _PRAGMA_ONCE.match(line):
                continue
            match = _INCLUDE.match(line)
            if not match:
                lines.append(line)
                continue
            found = _find(match["name"], match["open"] == '"', file.parent, folders)
            if found is None:
                out.kept.append(match["name"])
                lines.append(line)
            elif found in seen:
                lines.append(f"{MARK}{match['name']} (inlined above)")
            else:
                lines.append(f"{MARK}begin {match['name']}")
                lines.extend(visit(found))
                lines.append(f"{MARK}end {match['name']}")
        return lines

    out.text = "\n".join(visit(path.resolve())) + "\n"
    out.kept = list(dict.fromkeys(out.kept))
    return out
