"""float64 reference for silu_and_mul; ``xp`` is numpy or cupy."""


def silu_and_mul(xp, inputs, params):
    x = inputs["x"]
    d = x.shape[1] // 2
    a, b = x[:, :d], x[:, d:]
    with xp.errstate(over="ignore"):
        silu = a / (1.0 + xp.exp(-a))
    return {"out": silu * b}
