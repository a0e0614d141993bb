"""float64 reference for gelu_and_mul (exact GELU); ``xp`` is numpy or cupy.

NumPy has no ``erf``: on the host each element goes through :func:`math.erf` (correctly rounded
to within an ulp, slow but only run on the small shapes of ``astra validate`` and the tests);
CuPy's ``cupyx.scipy.special.erf`` is the float64 library function on the device.
"""

import math


def _erf(xp, values):
    if xp.__name__ == "cupy":
        from cupyx.scipy.special import erf

        return erf(values)
    return xp.frompyfunc(math.erf, 1, 1)(values).astype(xp.float64)


def gelu_and_mul(xp, inputs, params):
    x = inputs["x"]
    d = x.shape[1] // 2
    a, b = x[:, :d], x[:, d:]
    gelu = 0.5 * a * (1.0 + _erf(xp, a / math.sqrt(2.0)))
    return {"out": gelu * b}
