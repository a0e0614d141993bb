"""What the candidate's buffers hold before a checked run: poisoned outputs and guard bands.

Poison (outputs, before the first checked run) is random per element and per check, so a
kernel can neither recognise it nor leave it in place unnoticed: :func:`nan_poison` gives quiet
NaNs whose payloads are random but never a canonical NaN's (float8_e4m3fn has one NaN per sign
and no payload: its poison is that NaN with a random sign, which a saturating conversion never
produces from a number; a kernel that writes NaN there reads as not writing, so a contract with
such an output keeps NaN out of its domain: ``non_finite = []`` on the inputs a NaN would come
from, as per_token_fp8_quant's ``x``). Arithmetic only
ever produces canonical NaNs, so an element whose bits still equal its poison's was not
written. Integer outputs get random bits. (The later runs start from a plausible stale result
instead: see ``harness.verify``.)

Guard bands: every argument of a checked run lives in one allocation, the :class:`Arena`, laid
out ``[guard][arg 0][guard][arg 1] ... [arg n-1][guard]``. Each guard holds random bits drawn
afresh for every run (so a write that copies neighbouring bytes changes them, and no fill can
be recognised), and is :func:`guard_bytes` wide: at least :data:`MIN_GUARD_BYTES`, and as wide
as the larger neighbouring argument up to :data:`MAX_GUARD_BYTES`. An overrun of up to a whole
argument's length (an index computed with another argument's stride, a doubled row length)
therefore lands in a guard, never in another argument, and is named for what it is: an
out-of-bounds write, with how far past the end (or before the start) of which argument.
:meth:`Arena.relocated` builds a second arena for the same arguments at other addresses: the
arguments in another order, each at a random offset that is a multiple of the contract's
``align`` only (the alignment the contract guarantees, not the allocator's 256 bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from astra_graph.harness.cases import host_generator
from astra_graph.harness.compare import bits
from astra_graph.kernel.contract import TensorArg
from astra_graph.kernel.dtypes import FP8_E4M3_NAN, DType

MIN_GUARD_BYTES = 1 << 20
"""1 MiB: far beyond the 4 KiB an overrun of a few vectors or rows reaches, and cheap to fill."""
MAX_GUARD_BYTES = 16 << 20
"""Guards grow with the arguments (an overrun scales with the row and the buffer) up to 16 MiB,
which keeps a check's extra memory and its per-run fill below ~100 MiB for every contract."""
ALLOCATOR_ALIGN = 256
"""Arguments of the standard arena start at multiples of this (as cudaMalloc's do)."""
_EXPONENT_BITS = {2: (10, 5), 4: (23, 8), 8: (52, 11)}
"""(mantissa bits, exponent bits) by byte width, for fp16/fp32/fp64; bf16 is handled by name."""


def random_bits(xp: Any, rng: Any, itemsize: int, count: int) -> Any:
    """``count`` uniformly random unsigned integers of ``itemsize`` bytes."""
    halves = max(1, itemsize // 2) * count
    draws = rng.random(halves, dtype=np.float32)
    words = (draws * np.float32(65536.0)).astype(xp.uint16)
    if itemsize == 1:
        return words.astype(xp.uint8)
    return words.view(xp.dtype(f"uint{itemsize * 8}"))


def _layout(element: DType) -> tuple[int, int]:
    if element.name == "bfloat16":
        return 7, 8
    return _EXPONENT_BITS[element.itemsize]


def nan_poison(xp: Any, rng: Any, element: DType, shape: tuple[int, ...]) -> Any:
    """Storage-dtype array of quiet NaNs with random payloads (random bits for integers)."""
    count = int(np.prod(shape))
    raw = random_bits(xp, rng, element.itemsize, count)
    if element.name == "float8_e4m3fn":  # one NaN per sign (no payload): random signs only
        signed_nan = (raw & xp.uint8(0x80)) | xp.uint8(FP8_E4M3_NAN)
        return signed_nan.view(element.storage).reshape(shape)
    if element.floating:
        mantissa, exponent = _layout(element)
        width = element.itemsize * 8
        kind = raw.dtype.type
        exponent_mask = kind(((1 << exponent) - 1) << mantissa)
        quiet = kind(1 << (mantissa - 1))
        keep = kind(((1 << (mantissa - 1)) - 1) | (1 << (width - 1)))  # payload and sign
        # payload bit 0 set and bit 1 clear: never the all-zero or all-ones payloads of the
        # canonical NaNs that NumPy and the GPU produce
        raw = (raw & keep & kind(~2 & ((1 << width) - 1))) | exponent_mask | quiet | kind(1)
    return raw.view(element.storage).reshape(shape)


def still_holds(xp: Any, array: Any, poison: Any) -> Any:
    """Boolean mask of the elements whose bits still equal the poison's."""
    return bits(xp, array) == bits(xp, poison)


def _address(array: Any) -> int:
    """Device or host address of an array's first byte."""
    if hasattr(array, "data") and hasattr(array.data, "ptr"):
        return int(array.data.ptr)
    return int(array.ctypes.data)


def guard_bytes(neighbour_bytes: int) -> int:
    """Width of a guard next to arguments of at most ``neighbour_bytes`` bytes."""
    width = min(max(MIN_GUARD_BYTES, neighbour_bytes), MAX_GUARD_BYTES)
    return -(-width // ALLOCATOR_ALIGN) * ALLOCATOR_ALIGN


@dataclass
class _Slot:
    name: str
    start: int
    """Byte offset of the argument in the arena."""
    nbytes: int


class Arena:
    """One allocation holding every argument of a run between random guard bands."""

    def __init__(
        self,
        xp: Any,
        rng: Any,
        arrays: dict[str, Any],
        order: list[str],
        offsets: dict[str, int] | None = None,
    ) -> None:
        """Place copies of ``arrays`` in ``order``; ``offsets`` adds bytes before each one."""
        self.xp, self.rng = xp, rng
        sizes = [int(arrays[name].nbytes) for name in order]
        slots, position = [], 0
        for i, name in enumerate(order):
            before = sizes[i - 1] if i else 0
            position += guard_bytes(max(before, sizes[i])) + (offsets or {}).get(name, 0)
            slots.append(_Slot(name, position, sizes[i]))
            position += -(-sizes[i] // ALLOCATOR_ALIGN) * ALLOCATOR_ALIGN
        position += guard_bytes(sizes[-1] if sizes else 0)
        raw = xp.empty(position + ALLOCATOR_ALIGN, dtype=xp.uint8)
        skew = -_address(raw) % ALLOCATOR_ALIGN  # NumPy aligns less than cudaMalloc does
        self.memory = raw[skew : skew + position]
        self.slots = slots
        self.views: dict[str, Any] = {}
        for slot in slots:
            source = arrays[slot.name]
            view = self.memory[slot.start : slot.start + slot.nbytes].view(source.dtype)
            view = view.reshape(source.shape)
            view[...] = source
            self.views[slot.name] = view
        self.guards = self._guards()
        self.expected: list[Any] = []
        self._all_expected: Any = None
        self.refill()

    def _guards(self) -> list[tuple[int, int]]:
        """(start, stop) byte ranges of the guard bands: everything that is not an argument."""
        ranges, position = [], 0
        for slot in self.slots:
            ranges.append((position, slot.start))
            position = slot.start + slot.nbytes
        ranges.append((position, int(self.memory.size)))
        return [(a, b) for a, b in ranges if b > a]

    @property
    def guard_total(self) -> int:
        return sum(b - a for a, b in self.guards)

    def refill(self) -> None:
        """Fresh random bits in every guard band (before each run); one draw for all bands."""
        fill = random_bits(self.xp, self.rng, 2, -(-self.guard_total // 2)).view(self.xp.uint8)
        self._all_expected = fill[: self.guard_total]
        self.expected = []
        offset = 0
        for start, stop in self.guards:
            part = fill[offset : offset + stop - start]
            self.memory[start:stop] = part
            self.expected.append(part)
            offset += stop - start

    def _observed(self) -> Any:
        """Every guard band's bytes, concatenated (one comparison checks them all)."""
        return self.xp.concatenate([self.memory[start:stop] for start, stop in self.guards])

    def damage(self) -> tuple[str, str] | None:
        """(argument, where) of the first written guard byte, or None when all are intact."""
        if not bool((self._observed() != self._all_expected).any()):
            return None
        for (start, stop), fill in zip(self.guards, self.expected, strict=True):
            differs = self.memory[start:stop] != fill
            if not bool(differs.any()):
                continue
            offsets = self.xp.nonzero(differs)[0]
            first, last = start + int(offsets[0]), start + int(offsets[-1])
            before = [s for s in self.slots if s.start + s.nbytes <= first]
            after = [s for s in self.slots if s.start >= last + 1]
            past = first - (before[-1].start + before[-1].nbytes) if before else None
            ahead = after[0].start - first if after else None
            if past is not None:
                reach = last + 1 - (before[-1].start + before[-1].nbytes)
                text = f"bytes {past} to {reach} past its end"
                if ahead is None or past <= ahead:
                    return before[-1].name, text
                return after[0].name, f"up to {ahead} bytes before its start; {text} of " + repr(
                    before[-1].name
                )
            assert ahead is not None
            return after[0].name, f"up to {ahead} bytes before its start"
        return None

    def relocated(self, arrays: dict[str, Any], contract_args: list[TensorArg]) -> Arena:
        """A new arena for ``arrays`` at other addresses: reversed order, random offsets that are
        multiples of each argument's guaranteed alignment (and rarely of 256)."""
        order = [slot.name for slot in reversed(self.slots)]
        align = {a.name: a.align for a in contract_args}
        offsets = {}
        host = host_generator(self.rng)
        for name in order:
            steps = max(1, ALLOCATOR_ALIGN // align[name])
            offsets[name] = align[name] * (1 + int(host.integers(0, max(steps - 1, 1))))
        return Arena(self.xp, self.rng, arrays, order, offsets)
