"""float64 reference for merge_attn_states_lse; ``xp`` is numpy or cupy.

Base-2 log-sum-exp weights. A side whose LSE is -inf has weight 0; when both are -inf the
merged value is 0 and the merged LSE -inf. No operation of the value's formula sees
``-inf - -inf``, so finite values give no NaN and no floating-point warning.

``v_merged:bound`` (harness.compare) is how far an fp32 evaluation of the formula can land from
the float64 value, element by element (all inputs finite; 0 elsewhere):

* the arithmetic's own rounding, :data:`ROUNDING` of the terms ``q_a |v_a| + q_b |v_b|``
  (q = w / (w_a + w_b)), not of the result: a small result of large cancelling terms is held to
  the terms' accuracy;
* each weight's relative error e (:data:`WEIGHT_ERROR`, exp2 in fp32: ex2.approx errs by
  ~2^-22.5, plus :data:`EXPONENT_ERROR` per unit of |s - m| + |m|: a kernel may scale s and m
  by ln 2 before subtracting). It moves the normalised weights by q_a q_b (e_a + e_b), so the
  result by that times |v_a - v_b|: nothing where one side's weight is 0 (the result is the
  other side's v exactly, whatever its weight's error);
* a weight below 2^-126 (:data:`FLUSH`) may be flushed to zero (FlashInfer's ex2.approx.ftz):
  up to q |v| of that side;
* where the contract's weighted sum w_a v_a + w_b v_b itself reaches fp32's largest value, one
  evaluation order overflows to inf and another (weights normalised first) does not: the
  element is open (bound inf).
"""

ROUNDING = 2.0**-22
"""Two products, a sum and a division rounded in fp32 (2^-24 each), with margin."""
WEIGHT_ERROR = 2.0**-20
"""Relative error of a weight evaluated in fp32, with margin (ex2.approx: 2^-22.5 relative)."""
EXPONENT_ERROR = 2.0**-21
"""Relative error of a weight per unit of |s - m| + |m|: the fp32 rounding of s * ln 2 or of
s - m, carried into 2^(s - m)."""
FLUSH = 2.0**-126
"""The smallest normal float32: a weight below it may be flushed to zero."""
FLOAT32_OVERFLOW = 3.4028235677973366e38
"""Values at or above this round to inf in float32."""
OVERFLOW_MARGIN = 1.0 - 2.0**-20
"""A weighted sum this close to :data:`FLOAT32_OVERFLOW` may round over it in fp32."""


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
    finite = xp.isfinite(s_a) & xp.isfinite(s_b)
    m = xp.where(finite, m, 0.0)
    s_a, s_b = xp.where(finite, s_a, m), xp.where(finite, s_b, m)
    w_a, w_b = xp.exp2(s_a - m), xp.exp2(s_b - m)
    total = w_a + w_b
    q_a, q_b = (w_a / total)[..., None], (w_b / total)[..., None]
    e_a = WEIGHT_ERROR + EXPONENT_ERROR * (xp.abs(s_a - m) + xp.abs(m))
    e_b = WEIGHT_ERROR + EXPONENT_ERROR * (xp.abs(s_b - m) + xp.abs(m))
    bound = ROUNDING * (q_a * xp.abs(v_a) + q_b * xp.abs(v_b))
    bound = bound + q_a * q_b * (e_a + e_b)[..., None] * xp.abs(v_a - v_b)
    for w, q, v in ((w_a, q_a, v_a), (w_b, q_b, v_b)):
        bound = bound + xp.where((w < FLUSH)[..., None], q * xp.abs(v), 0.0)
    weighted = w_a[..., None] * v_a + w_b[..., None] * v_b
    bound = xp.where(xp.abs(weighted) >= OVERFLOW_MARGIN * FLOAT32_OVERFLOW, xp.inf, bound)
    usable = finite[..., None] & xp.isfinite(v_a) & xp.isfinite(v_b)
    return xp.where(usable, bound, 0.0)
