"""float64 reference for merge_attn_states_lse; ``xp`` is numpy or cupy.

Base-2 log-sum-exp weights. A side whose LSE is -inf has weight 0; when both are -inf the
merged value is 0 and the merged LSE -inf. No operation here sees ``-inf - -inf``, so no NaN
and no floating-point warning is produced.

``v_merged:bound`` (harness.compare) is how far an fp32 evaluation of the formula can land from
the float64 value, element by element (all finite inputs; 0 elsewhere):

* each weight carries a relative error: :data:`WEIGHT_ERROR` (exp2 in fp32: ex2.approx errs by
  ~2^-22, and the normalisation rounds) plus :data:`EXPONENT_ERROR` per unit of the LSEs'
  magnitude (a kernel may scale s and m by ln 2 before subtracting, where the rounding of each
  product grows with |s|). Its effect is relative to the terms ``w * |v|``, not to the result,
  so a small result of large cancelling terms is held to the terms' accuracy;
* fp32 may flush a weight below 2^-126 to zero (FlashInfer's ex2.approx.ftz): up to
  :data:`FLUSH` * |v| / (w_a + w_b) per side, material only where |v| is near the type's largest;
* where the terms together reach fp32's largest value, one evaluation order overflows to inf
  and another (weights normalised first) does not: the element is open (bound inf).
"""

WEIGHT_ERROR = 2.0**-20
"""Relative error of a weight evaluated in fp32, with margin (ex2.approx: 2^-22.5 relative)."""
EXPONENT_ERROR = 2.0**-21
"""Relative error of a weight per unit of |s - m| + |m|: the fp32 rounding of s * ln 2 or of
s - m, carried into 2^(s - m)."""
FLUSH = 2.0**-126
"""The smallest normal float32: a weight below it may be flushed to zero."""
FLOAT32_OVERFLOW = 3.4028235677973366e38
"""Values at or above this round to inf in float32."""


def merge_attn_states_lse(xp, inputs, params):
    s_a, s_b = inputs["s_a"], inputs["s_b"]
    v_a, v_b = inputs["v_a"], inputs["v_b"]
    m = xp.maximum(s_a, s_b)
    both_empty = xp.isneginf(m)
    m_finite = xp.where(both_empty, 0.0, m)
    w_a = xp.exp2(s_a - m_finite)
    w_b = xp.exp2(s_b - m_finite)
    total = xp.where(both_empty, 1.0, w_a + w_b)
    v = (w_a[..., None] * v_a + w_b[..., None] * v_b) / total[..., None]
    s = xp.where(both_empty, -xp.inf, xp.log2(total) + m_finite)
    return {"v_merged": v, "s_merged": s, "v_merged:bound": _bound(xp, s_a, s_b, v_a, v_b)}


def _bound(xp, s_a, s_b, v_a, v_b):
    """The error bound of the module docstring (0 where an input is not finite)."""
    m = xp.maximum(s_a, s_b)
    finite = xp.isfinite(m)
    m = xp.where(finite, m, 0.0)
    terms, spread, flush = 0.0, 0.0, 0.0
    for s, v in ((s_a, v_a), (s_b, v_b)):
        live = xp.isfinite(s)
        w = xp.where(live, xp.exp2(xp.where(live, s, m) - m), 0.0)
        relative = WEIGHT_ERROR + EXPONENT_ERROR * (xp.abs(xp.where(live, s, m) - m) + xp.abs(m))
        term = w[..., None] * xp.abs(v)
        terms = terms + term
        spread = spread + relative[..., None] * term
        flush = flush + FLUSH * xp.abs(v)
    total = xp.where(finite, xp.exp2(s_a - m) + xp.exp2(s_b - m), 1.0)[..., None]
    bound = (spread + flush) / total
    bound = xp.where(terms >= FLOAT32_OVERFLOW, xp.inf, bound)
    usable = finite[..., None] & xp.isfinite(v_a) & xp.isfinite(v_b)
    return xp.where(usable, bound, 0.0)
