"""float64 reference for fused_add_rmsnorm; ``xp`` is numpy or cupy.

``params`` holds the contract's scalar values (``hidden``, ``eps``). Both in-place arguments are
returned: ``residual`` (the sum) as well as ``input`` (the normalised row).
"""


def fused_add_rmsnorm(xp, inputs, params):
    x = inputs["input"] + inputs["residual"]
    mean_square = xp.mean(x * x, axis=-1, keepdims=True)
    normed = x / xp.sqrt(mean_square + params["eps"]) * inputs["weight"]
    return {"input": normed, "residual": x}
