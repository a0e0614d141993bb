"""Memory a kernel's module keeps between launches, and the rule that no launch leaves state.

A kernel may declare variables at module scope (``__device__ unsigned count;``, a ``static
__device__`` inside a function, an initialised table). They live in the module's global memory
for as long as the module is loaded, so one launch can leave something there for the next. That
is how a kernel counts launches per buffer set, remembers the previous launch's inputs or
pointers, notices the bench's output fill, or caches outputs to replay them later. The second
red team's eight kernels of those kinds (``benchmarks/redteam``: launch counters, clone copies,
the bench's poison, a per-buffer replay cache) were all accepted by the check before this rule:
their trigger never fires in the check's own launches, yet a serving engine that replays one
CUDA graph on the same buffers thousands of times would meet it, with wrong results.

Legitimate uses exist (a grid-wide semaphore that the last block resets, a constant table), so
the rule is not "no module variables" but: **after every checked launch, every byte of the
module's writable variables is what it was when the module was loaded.** A variable that
carried information from one launch to the next differs from its initial bytes after some
launch; one that always comes back to its initial value carries none. Device-side ``malloc``
is refused outright: its heap outlives a launch and cannot be read back to check.

The variables come from the cubin's ELF symbol table (objects in the ``.nv.global`` and
``.nv.global.init`` sections, where the compiler places every writable module-scope variable):
the compiler's own record, however the source's macros spell them. ``__constant__`` data lives
in ``.nv.constant*`` sections, which kernels cannot write, and is not read.

What this does not see (known, not yet closed): bytes of those sections outside every symbol
(alignment gaps, one past an array), which only an out-of-bounds write reaches and
compute-sanitizer does not flag inside the module's own allocation; and state set and restored
within one shape's timed launches, since timing reads the variables once after them (the check
reads them after every launch, so such a kernel must also tell timing from checking).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

WRITABLE_SECTIONS = (".nv.global", ".nv.global.init")
"""Sections that hold a module's writable variables (uninitialised and initialised)."""
DEVICE_HEAP_FUNCTIONS = ("malloc", "__nv_aligned_device_malloc")
"""Device-side allocation: undefined symbols the driver links to a heap that outlives a launch
(``free`` alone allocates nothing)."""

_ELF_MAGIC = b"\x7fELF"
_ELF64 = 2
_SHT_SYMTAB = 2
_STT_OBJECT = 1
_SHN_UNDEF = 0


class ModuleReadError(ValueError):
    """The cubin is not a 64-bit little-endian ELF file this reader understands."""


@dataclass(frozen=True)
class ModuleVariable:
    """One writable module-scope variable: its symbol name and size in bytes."""

    name: str
    size: int


@dataclass(frozen=True)
class ModuleMemory:
    """What a cubin keeps across launches: its writable variables and its heap calls."""

    variables: tuple[ModuleVariable, ...]
    heap_calls: tuple[str, ...]


def module_memory(cubin: bytes) -> ModuleMemory:
    """The writable variables and device-heap calls recorded in ``cubin`` (an ELF file);
    raises ModuleReadError (one line) for bytes that are not one."""
    if cubin[:4] != _ELF_MAGIC or cubin[4] != _ELF64 or cubin[5] != 1:
        raise ModuleReadError("not a 64-bit little-endian ELF cubin")
    try:
        return _read_symbols(cubin)
    except (struct.error, IndexError, ValueError) as exc:  # offsets past the end: truncated
        raise ModuleReadError(f"a malformed ELF cubin: {exc}") from None


def _read_symbols(cubin: bytes) -> ModuleMemory:
    """:func:`module_memory` past the header check."""
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)
    ]
    names_at = sections[shstrndx][4]

    def name(table_offset: int, offset: int) -> str:
        end = cubin.index(b"\0", table_offset + offset)
        return cubin[table_offset + offset : end].decode("utf-8", "replace")

    section_names = [name(names_at, s[0]) for s in sections]
    variables: list[ModuleVariable] = []
    heap_calls: set[str] = set()
    for section in sections:
        if section[1] != _SHT_SYMTAB:
            continue
        offset, size, strings_index, entry_size = section[4], section[5], section[6], section[9]
        strings_at = sections[strings_index][4]
        for at in range(offset, offset + size, entry_size):
            st_name, st_info, _, st_shndx, _, st_size = struct.unpack_from("<IBBHQQ", cubin, at)
            symbol = name(strings_at, st_name)
            if st_shndx == _SHN_UNDEF:
                if symbol in DEVICE_HEAP_FUNCTIONS:
                    heap_calls.add(symbol)
                continue
            in_section = section_names[st_shndx] if st_shndx < len(sections) else ""
            if st_info & 0xF == _STT_OBJECT and in_section in WRITABLE_SECTIONS and st_size:
                variables.append(ModuleVariable(symbol, st_size))
    return ModuleMemory(tuple(sorted(set(variables), key=lambda v: v.name)), tuple(heap_calls))


class ModuleState:
    """A loaded module's writable variables, their bytes at load time, and the check that a
    launch left them as they were (module docstring). Runs where CuPy and a GPU are."""

    def __init__(self, module: Any, memory: ModuleMemory) -> None:
        self._pointers = {v.name: module.get_global(v.name) for v in memory.variables}
        self._sizes = {v.name: v.size for v in memory.variables}
        self._initial = {n: self._read(n) for n in self._pointers}

    def _read(self, name: str) -> bytes:
        import numpy as np

        host = np.empty(self._sizes[name], dtype=np.uint8)
        self._pointers[name].copy_to_host(host.ctypes.data, self._sizes[name])
        return host.tobytes()

    def carried(self) -> str | None:
        """After a finished launch: which variable kept something from it, or None."""
        for variable, initial in self._initial.items():
            now = self._read(variable)
            if now != initial:
                first = next(i for i, (a, b) in enumerate(zip(now, initial, strict=True)) if a != b)
                return (
                    f"module variable {variable!r} ({self._sizes[variable]} bytes) differs from "
                    f"its value at load after a launch (first at byte {first}): the kernel "
                    "keeps state from one launch for the next"
                )
        return None


def heap_refusal(memory: ModuleMemory) -> str | None:
    """Why a module that allocates on the device heap is refused, or None."""
    if not memory.heap_calls:
        return None
    return (
        f"the kernel calls device-side {memory.heap_calls[0]}(): its heap outlives a launch and "
        "cannot be read back, so what a launch leaves there for the next cannot be checked"
    )
