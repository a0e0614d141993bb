"""float64 reference for gelu_tanh_and_mul (the tanh approximation of GELU, PyTorch
``approximate="tanh"``); ``xp`` is numpy or cupy.

gelu_tanh(a) = a/2 * (1 + tanh(u)), u = sqrt(2/pi) * (a + 0.044715 a^3), evaluated as the equal
a / (1 + exp(-2u)) (1 + tanh(u) = 2 / (1 + exp(-2u))), the contract's form: in float64
1 + tanh(u) is exactly 0 for u below about -19, while the true value (and the contract's fp32
form) is a * exp(2u), tiny but nonzero down to the fp32 overflow of exp(-2u); a large b (up to
bf16's 3.4e38) makes that difference visible. Where exp(-2u) overflows fp32 (-2u above
~88.72, a below about -10.05) the contract's result is a / inf = -0, which the reference
reproduces. ``a ** 3`` stays finite in float64 for every half or bfloat16 value.
"""

import contextlib
import math

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
KAPPA = 0.044715
"""The cubic coefficient of the tanh approximation (Hendrycks and Gimpel; PyTorch, vLLM)."""
FLOAT32_EXP_OVERFLOW = 88.72283905206835
"""exp(x) exceeds the largest float32 for x above this (log of 3.4028235e38)."""


def gelu_tanh_and_mul(xp, inputs, params):
    x = inputs["x"]
    d = x.shape[1] // 2
    a, b = x[:, :d], x[:, d:]
    # exp overflows float64 too for very negative a (NumPy warns; CuPy has no errstate), and
    # -inf / inf is NaN, as in fp32
    quiet = (
        xp.errstate(over="ignore", invalid="ignore")
        if hasattr(xp, "errstate")
        else contextlib.nullcontext()
    )
    with quiet:
        minus_2u = -2.0 * SQRT_2_OVER_PI * (a + KAPPA * a * a * a)
        denominator = xp.where(minus_2u > FLOAT32_EXP_OVERFLOW, xp.inf, 1.0 + xp.exp(minus_2u))
        gelu = a / denominator
    return {"out": gelu * b}
