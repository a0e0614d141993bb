"""float64 reference for per_token_fp8_quant; ``xp`` is numpy or cupy.

Returns ``out`` as the unrounded quotient x / scale (the harness rounds it to float8_e4m3fn and
compares within the contract's tolerance) and ``scale`` in float64. |x| / scale is at most 448
by construction, so the saturation of the conversion only ever catches rounding.
"""

FP8_E4M3_MAX = 448.0
"""Largest finite float8_e4m3fn value: the row's largest magnitude maps to it."""
MIN_SCALE = 1.0 / (FP8_E4M3_MAX * 512.0)
"""Floor of the scale, so an all-zero row does not divide by zero (vLLM's min_scaling_factor)."""


def per_token_fp8_quant(xp, inputs, params):
    x = inputs["x"]
    amax = xp.max(xp.abs(x), axis=-1)
    scale = xp.maximum(amax / FP8_E4M3_MAX, MIN_SCALE)
    return {"out": x / scale[:, None], "scale": scale}
