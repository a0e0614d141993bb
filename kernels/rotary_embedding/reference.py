"""float64 reference for rotary_embedding; ``xp`` is numpy or cupy.

``params`` holds the contract's scalar values (``head_size``, ``num_heads``, ``num_kv_heads``,
``is_neox``). Both in-place arguments are returned rotated. Positions arrive as float64 (the
harness converts every input), whole numbers below the cache's row count.

``query:bound`` and ``key:bound`` (harness.compare) are how far an fp32 evaluation of each
rotated element can land from the float64 value (all inputs finite; 0 elsewhere): the rounding
of the two products and their sum, :data:`ROUNDING` * (|x c| + |y s|), so a small result of large
cancelling products is held to the products' accuracy; a product with a subnormal factor (below
:data:`FLUSH`) may be flushed to zero by fast math: up to that product; and inf where one
product reaches fp32's largest value: there an fp32 evaluation gives inf or NaN, or, through a
fused multiply-add, the finite float64 value, and the contract does not choose. A result past
fp32's range with finite products needs no bound: its reference rounds to inf as the kernel's.
"""

ROUNDING = 2.0**-22
"""Two products and one sum rounded in fp32 (2^-24 each), with margin."""
FLUSH = 2.0**-126
"""The smallest normal float32: a subnormal factor below it may be flushed to zero."""
FLOAT32_OVERFLOW = 3.4028235677973366e38
"""Values at or above this round to inf in float32."""


def _rotate(xp, heads, cos, sin, head_size, neox, bound=False):
    """Rotate ``heads`` [tokens, n * head_size] by per-token ``cos``/``sin`` [tokens, half];
    with ``bound``, the error bound of the module docstring instead."""
    tokens = heads.shape[0]
    half = head_size // 2
    h = heads.reshape(tokens, -1, head_size)
    if neox:
        x, y = h[..., :half], h[..., half:]
    else:
        x, y = h[..., 0::2], h[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    if bound:
        first = _pair_bound(xp, x, c, y, s)
        second = _pair_bound(xp, y, c, x, s)
    else:
        first, second = x * c - y * s, y * c + x * s
    out = xp.empty_like(h)
    if neox:
        out[..., :half], out[..., half:] = first, second
    else:
        out[..., 0::2], out[..., 1::2] = first, second
    return out.reshape(heads.shape)


def _pair_bound(xp, x, c, y, s):
    """The bound of ``x * c -+ y * s`` (module docstring)."""
    first, second = xp.abs(x * c), xp.abs(y * s)
    bound = ROUNDING * (first + second)
    for product, factors in ((first, (x, c)), (second, (y, s))):
        tiny = (xp.abs(factors[0]) < FLUSH) | (xp.abs(factors[1]) < FLUSH)
        bound = bound + xp.where(tiny, product, 0.0)
    bound = xp.where(xp.maximum(first, second) >= FLOAT32_OVERFLOW, xp.inf, bound)
    finite = xp.isfinite(x) & xp.isfinite(y) & xp.isfinite(c) & xp.isfinite(s)
    return xp.where(finite, bound, 0.0)


def rotary_embedding(xp, inputs, params):
    head_size = int(params["head_size"])
    neox = bool(params["is_neox"])
    rows = inputs["cos_sin_cache"][inputs["positions"].astype(xp.int64)]
    cos, sin = rows[:, : head_size // 2], rows[:, head_size // 2 :]
    outputs = {}
    for name in ("query", "key"):
        outputs[name] = _rotate(xp, inputs[name], cos, sin, head_size, neox)
        outputs[f"{name}:bound"] = _rotate(xp, inputs[name], cos, sin, head_size, neox, True)
    return outputs
