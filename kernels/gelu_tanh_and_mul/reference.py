"""float64 reference for gelu_tanh_and_mul (the tanh approximation of GELU, PyTorch
``approximate="tanh"``, the formula itself in float64); ``xp`` is numpy or cupy.

``a ** 3`` stays finite for every value a half or bfloat16 input can hold below ~1e102, and
tanh saturates to +-1 without a warning, so no floating-point warning is produced.
"""

import math

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
KAPPA = 0.044715
"""The cubic coefficient of the tanh approximation (Hendrycks and Gimpel; PyTorch, vLLM)."""


def gelu_tanh_and_mul(xp, inputs, params):
    x = inputs["x"]
    d = x.shape[1] // 2
    a, b = x[:, :d], x[:, d:]
    gelu = 0.5 * a * (1.0 + xp.tanh(SQRT_2_OVER_PI * (a + KAPPA * a * a * a)))
    return {"out": gelu * b}
