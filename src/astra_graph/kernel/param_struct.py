"""A by-value struct kernel parameter: its fields' byte layout as the C++ ABI lays it out.

Frameworks pass a kernel one aggregate of pointers and scalars (SGLang's
``rmsnorm_cta(const RMSNormParams __grid_constant__ params)``, FlashInfer's ``paged_kv_t``).
The driver copies a by-value parameter's bytes as they are, so the harness must build exactly the
bytes the compiler expects: each field at its natural alignment (a pointer and a 64-bit integer
on 8 bytes, a 32-bit integer or float on 4, a bool on 1), the struct aligned to its widest field
and its size rounded up to that alignment (the Itanium C++ ABI, which NVCC and NVRTC follow for
the x86-64 and aarch64 hosts CUDA supports; ``__grid_constant__`` changes where the kernel reads
the parameter, not its layout). NumPy's ``np.dtype(..., align=True)`` follows the same rule,
which a test checks.

Only flat aggregates of the contract's field kinds are laid out: an array field, a bit-field
or a field of another type is refused where the struct is read (the framework importer and the
signature check), never packed approximately. A nested struct member is packed as its fields in
its place only where that is the same bytes (:func:`flat_layout_holds`): C++ aligns the nested
struct to its widest field and rounds its size up to that, so a field before it may leave a gap
a flat list would not, and a field after it never sits in its tail padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

POINTER = "pointer"
"""The field kind of a device pointer (a tensor or a null pointer): 8 bytes on 64-bit hosts."""
FIELD_BYTES: dict[str, int] = {
    POINTER: 8,
    "int64": 8,
    "float64": 8,
    "int32": 4,
    "float32": 4,
    "bool": 1,
}
"""Bytes (and natural alignment) of each field kind a struct binding may hold."""


@dataclass(frozen=True)
class StructLayout:
    """Where each field lies: ``offsets[i]`` for the i-th field, the struct's ``size`` (tail
    padding included) and ``align``."""

    kinds: tuple[str, ...]
    offsets: tuple[int, ...]
    size: int
    align: int


def layout(kinds: tuple[str, ...] | list[str]) -> StructLayout:
    """The C++ layout of a struct whose fields have ``kinds`` (:data:`FIELD_BYTES` keys), in
    declaration order; raises ValueError for another kind or an empty struct."""
    if not kinds:
        raise ValueError("a struct parameter needs at least one field")
    offsets: list[int] = []
    offset = 0
    align = 1
    for kind in kinds:
        size = FIELD_BYTES.get(kind)
        if size is None:
            raise ValueError(f"field kind {kind!r}: expected one of {sorted(FIELD_BYTES)}")
        offset = -(-offset // size) * size  # up to the field's natural alignment
        offsets.append(offset)
        offset += size
        align = max(align, size)
    return StructLayout(tuple(kinds), tuple(offsets), -(-offset // align) * align, align)


Nested = Sequence["str | Nested"]
"""The field kinds of a struct in declaration order, a nested struct member as its own list."""


def leaves(members: Nested) -> list[str]:
    """The field kinds of ``members`` with each nested struct's in its place."""
    return [k for m in members for k in ([m] if isinstance(m, str) else leaves(m))]


def _placed(members: Nested) -> tuple[list[int], int, int]:
    """(each leaf's offset, the size, the alignment) of a struct as C++ lays it out."""
    offsets: list[int] = []
    offset = 0
    align = 1
    for member in members:
        if isinstance(member, str):
            if member not in FIELD_BYTES:
                raise ValueError(f"field kind {member!r}: expected one of {sorted(FIELD_BYTES)}")
            inner, size, part = [0], FIELD_BYTES[member], FIELD_BYTES[member]
        else:
            inner, size, part = _placed(member)
        offset = -(-offset // part) * part
        offsets += [offset + o for o in inner]
        offset += size
        align = max(align, part)
    return offsets, -(-offset // align) * align, align


def flat_layout_holds(members: Nested) -> bool:
    """Whether a struct with nested struct members lays every leaf field at the offset, and has
    the size, of a flat struct of its leaves (:func:`layout`), and nests no empty struct (one
    byte in C++, none in a flat list); raises ValueError for a kind that is not a field
    kind."""
    offsets, size, _ = _placed(members)
    flat = layout(leaves(members))
    return offsets == list(flat.offsets) and size == flat.size and not _has_empty(members)


def _has_empty(members: Nested) -> bool:
    """Whether a nested struct has no fields: C++ gives it one byte a flat list lacks."""
    return any(not isinstance(m, str) and (not m or _has_empty(m)) for m in members)
