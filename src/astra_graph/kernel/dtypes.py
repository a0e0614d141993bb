"""Element types a contract may name, and how each is stored, converted and spelt in CUDA C++.

bfloat16 has no NumPy or CuPy dtype, so it is stored as its raw 16 bits (``uint16``) and
converted with round-to-nearest-even; every function takes the array module (``numpy`` or
``cupy``) as ``xp`` so the same code runs on the host and on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


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
        if not self.floating:
            return xp.rint(values).astype(self.storage)
        return values.astype(self.storage)


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float16", "__half", 2, np.dtype(np.float16), True),
        DType("bfloat16", "__nv_bfloat16", 2, np.dtype(np.uint16), True),
        DType("float32", "float", 4, np.dtype(np.float32), True),
        DType("float64", "double", 8, np.dtype(np.float64), True),
        DType("int32", "int", 4, np.dtype(np.int32), False),
        DType("int64", "long long", 8, np.dtype(np.int64), False),
    )
}

TYPE_PARAMETER = "T"
"""The dtype name an argument uses to say "the contract's element type, whichever is tested"."""
