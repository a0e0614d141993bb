"""Element types a contract may name, and how each is stored, converted and spelt in CUDA C++.

bfloat16 has no NumPy or CuPy dtype, so it is stored as its raw 16 bits (``uint16``) and
converted with round-to-nearest-even; every function takes the array module (``numpy`` or
``cupy``) as ``xp`` so the same code runs on the host and on the GPU.

``float8_e4m3fn`` (OCP FP8 E4M3, CUDA's ``__nv_fp8_e4m3``: 4 exponent bits of bias 7, 3
mantissa bits, no infinity, one NaN per sign, largest finite 448) has no NumPy dtype either: it
is stored as its raw byte (``uint8``), read through a 256-entry table and rounded to nearest-even
with saturation to +-448, as CUDA's conversion with ``__NV_SATFINITE`` does (the conversion
``__nv_fp8_e4m3(float)`` uses); NaN becomes 0x7F.

The integer types (``int32``, ``int64``, ``uint8``, ``int8``) and ``bool`` (one byte, 0 or 1,
as C++'s and torch's) are stored as themselves: a draw is rounded to the nearest whole number,
and a bool is whether that is non-zero. Their names are torch's (``torch.uint8``), which the
exported op reads back from its tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

FP8_E4M3_MAX = 448.0
"""Largest finite float8_e4m3fn value, 1.75 * 2^8 (the bit pattern 0x7E)."""
FP8_E4M3_NAN = 0x7F
"""float8_e4m3fn's NaN with the sign bit clear (exponent and mantissa all ones)."""


def _fp8_e4m3_table() -> np.ndarray:
    """float64 value of each of the 256 float8_e4m3fn bit patterns."""
    code = np.arange(256)
    sign = np.where(code >> 7, -1.0, 1.0)
    exponent, mantissa = (code >> 3) & 0xF, code & 0x7
    magnitude = np.where(
        exponent == 0,
        mantissa / 8.0 * 2.0**-6,  # subnormals: 2^-9 steps
        (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7.0),
    )
    values = sign * magnitude
    values[(exponent == 0xF) & (mantissa == 0x7)] = np.nan
    return values


FP8_E4M3_VALUES = _fp8_e4m3_table()


def _fp8_e4m3_round(xp: Any, values: Any) -> Any:
    """float64 -> float8_e4m3fn bits (uint8): nearest, ties to even, saturating at +-448."""
    finite = xp.asarray(FP8_E4M3_VALUES[:0x7F])  # 0 .. 448 ascending, the codes 0x00 .. 0x7E
    magnitude = xp.minimum(xp.abs(xp.nan_to_num(values, nan=0.0)), FP8_E4M3_MAX)
    upper = xp.clip(xp.searchsorted(finite, magnitude, side="left"), 1, 0x7E)
    below, above = magnitude - finite[upper - 1], finite[upper] - magnitude
    # the upper neighbour when nearer, or on a tie when its code (so its mantissa) is even
    code = xp.where((above < below) | ((above == below) & (upper % 2 == 0)), upper, upper - 1)
    code = code.astype(xp.uint8) | xp.where(xp.signbit(values), 0x80, 0).astype(xp.uint8)
    return xp.where(xp.isnan(values), xp.uint8(FP8_E4M3_NAN), code).astype(xp.uint8)


@dataclass(frozen=True)
class DType:
    name: str
    ctype: str
    itemsize: int
    storage: np.dtype
    floating: bool

    def to_float64(self, xp: Any, array: Any) -> Any:
        """The exact values of ``array`` (in storage form) as float64."""
        if self.name == "bfloat16":
            bits = array.astype(xp.uint32) << 16
            return bits.view(xp.float32).astype(xp.float64)
        if self.name == "float8_e4m3fn":
            return xp.asarray(FP8_E4M3_VALUES)[array.astype(xp.intp)]
        return array.astype(xp.float64)

    def from_float64(self, xp: Any, values: Any) -> Any:
        """Round float64 values once to this type, in storage form."""
        if self.name == "bfloat16":
            # float64 -> float32 -> bf16 rounds twice, which differs from one rounding in a few
            # draws per million (values next to a bf16 tie): a reference differing by one ulp.
            f32 = values.astype(xp.float32)
            bits = f32.view(xp.uint32)
            nan = xp.isnan(f32)
            rounded = (bits + xp.uint32(0x7FFF) + ((bits >> 16) & xp.uint32(1))) >> 16
            return xp.where(nan, xp.uint32(0x7FC0), rounded).astype(xp.uint16)
        if self.name == "float8_e4m3fn":
            return _fp8_e4m3_round(xp, values)
        if not self.floating:
            # through int64: a draw outside a narrow type's range wraps as C's conversion of
            # the wider integer does (a float's cast to uint8 past it is undefined in NumPy)
            whole = xp.rint(values).astype(xp.int64)
            return whole != 0 if self.name == "bool" else whole.astype(self.storage)
        return values.astype(self.storage)


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float16", "__half", 2, np.dtype(np.float16), True),
        DType("bfloat16", "__nv_bfloat16", 2, np.dtype(np.uint16), True),
        DType("float32", "float", 4, np.dtype(np.float32), True),
        DType("float64", "double", 8, np.dtype(np.float64), True),
        DType("float8_e4m3fn", "__nv_fp8_e4m3", 1, np.dtype(np.uint8), True),
        DType("int32", "int", 4, np.dtype(np.int32), False),
        DType("int64", "long long", 8, np.dtype(np.int64), False),
        DType("uint8", "uint8_t", 1, np.dtype(np.uint8), False),
        DType("int8", "int8_t", 1, np.dtype(np.int8), False),
        DType("bool", "bool", 1, np.dtype(np.bool_), False),
    )
}

TYPE_PARAMETER = "T"
"""The dtype name an argument uses to say "the contract's element type, whichever is tested"."""
