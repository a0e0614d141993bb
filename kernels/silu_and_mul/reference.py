"""float64 reference for silu_and_mul; ``xp`` is numpy or cupy.

The contract computes in fp32, where exp(-a) overflows to inf for a below about -88.7, so
silu(a) is -0 there ("large negative a gives -0"). Float64 would give a tiny negative value
instead, which differs from fp32 only when it meets an infinite b (-0 * inf is NaN, tiny * inf
is -inf): the reference states the fp32 result for every input of the type.
"""

import contextlib

FLOAT32_EXP_OVERFLOW = 88.72283905206835
"""exp(x) exceeds the largest float32 for x above this (log of 3.4028235e38)."""


def silu_and_mul(xp, inputs, params):
    x = inputs["x"]
    d = x.shape[1] // 2
    a, b = x[:, :d], x[:, d:]
    # exp(-a) overflows to inf for a < -709 (silu -> -0): NumPy warns, CuPy has no errstate
    quiet = (
        xp.errstate(over="ignore", invalid="ignore")
        if hasattr(xp, "errstate")
        else (contextlib.nullcontext())
    )
    with quiet:
        denominator = xp.where(-a > FLOAT32_EXP_OVERFLOW, xp.inf, 1.0 + xp.exp(-a))
        silu = a / denominator
    return {"out": silu * b}
