"""float64 reference for rotary_embedding; ``xp`` is numpy or cupy.

``params`` holds the contract's scalar values (``head_size``, ``num_heads``, ``num_kv_heads``,
``is_neox``). Both in-place arguments are returned rotated. Positions arrive as float64 (the
harness converts every input), whole numbers below the cache's row count.
"""


def _rotate(xp, heads, cos, sin, head_size, neox):
    """Rotate ``heads`` [tokens, n * head_size] by per-token ``cos``/``sin`` [tokens, half]."""
    tokens = heads.shape[0]
    half = head_size // 2
    h = heads.reshape(tokens, -1, head_size)
    if neox:
        x, y = h[..., :half], h[..., half:]
    else:
        x, y = h[..., 0::2], h[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    out = xp.empty_like(h)
    if neox:
        out[..., :half] = x * c - y * s
        out[..., half:] = y * c + x * s
    else:
        out[..., 0::2] = x * c - y * s
        out[..., 1::2] = y * c + x * s
    return out.reshape(heads.shape)


def rotary_embedding(xp, inputs, params):
    head_size = int(params["head_size"])
    neox = bool(params["is_neox"])
    rows = inputs["cos_sin_cache"][inputs["positions"].astype(xp.int64)]
    cos, sin = rows[:, : head_size // 2], rows[:, head_size // 2 :]
    return {
        "query": _rotate(xp, inputs["query"], cos, sin, head_size, neox),
        "key": _rotate(xp, inputs["key"], cos, sin, head_size, neox),
    }
