"""float64 reference for rms_norm; ``xp`` is numpy or cupy.

``params`` holds the contract's scalar values (``hidden``, ``eps``); the input is not modified.

The contract computes the row's sum of squares in fp32. Float64 differs from that only where
the fp32 sum overflows (bf16 rows with elements beyond ~1.8e19; fp16 squares stay far below the
fp32 limit): there the sum is inf, rsqrt(inf) = 0 makes the row's finite elements 0 (an
infinite one NaN). The sum's terms are all non-negative, so it overflows in fp32 in whatever
order a kernel adds them exactly when the float64 sum reaches the fp32 limit (up to rounding at
the limit itself). The reference reproduces that overflow so that it states the contract's
result for every input of the type.
"""

FLOAT32_OVERFLOW = 3.4028235677973366e38
"""Values at or above this (the largest float32 plus half an ulp) round to inf in float32."""


def rms_norm(xp, inputs, params):
    x = inputs["input"]
    square_sum = xp.sum(x * x, axis=-1, keepdims=True)
    overflow = square_sum >= FLOAT32_OVERFLOW
    mean_square = xp.where(overflow, xp.inf, square_sum / x.shape[-1])
    return {"out": x / xp.sqrt(mean_square + params["eps"]) * inputs["weight"]}
