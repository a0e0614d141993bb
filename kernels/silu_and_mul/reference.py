"""float64 reference for silu_and_mul; ``xp`` is numpy or cupy.

The contract computes in fp32, where exp(-a) overflows to inf for a below about -88.7, so
silu(a) is -0 there ("large negative a gives -0"). Float64 gives a tiny negative value instead;
times a large b the two part (bf16's b up to 3.4e38 makes a*exp(a)*b as large as ~25 at
a = -90; an infinite b makes it -inf where fp32 gives -0 * inf = NaN). The reference states the
fp32 result, and the error bound ``out:bound`` (harness.compare) lets a kernel that computes
more precisely land anywhere between the two: |silu64(a) * b| there, inf where that product is
infinite or NaN.
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
        saturated = -a > FLOAT32_EXP_OVERFLOW
        silu64 = a / (1.0 + xp.exp(-a))
        silu = xp.where(saturated, a / xp.inf, silu64)
        dropped = xp.abs(silu64 * b)
        bound = xp.where(saturated, xp.where(xp.isfinite(dropped), dropped, xp.inf), 0.0)
    return {"out": silu * b, "out:bound": bound}
