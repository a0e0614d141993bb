"""float64 reference for merge_attn_states_lse; ``xp`` is numpy or cupy.

Base-2 log-sum-exp weights. A side whose LSE is -inf has weight 0; when both are -inf the
merged value is 0 and the merged LSE -inf. No operation here sees ``-inf - -inf``, so no NaN
and no floating-point warning is produced.
"""


def merge_attn_states_lse(xp, inputs, params):
    s_a, s_b = inputs["s_a"], inputs["s_b"]
    m = xp.maximum(s_a, s_b)
    both_empty = xp.isneginf(m)
    m_finite = xp.where(both_empty, 0.0, m)
    w_a = xp.exp2(s_a - m_finite)
    w_b = xp.exp2(s_b - m_finite)
    total = xp.where(both_empty, 1.0, w_a + w_b)
    v = (w_a[..., None] * inputs["v_a"] + w_b[..., None] * inputs["v_b"]) / total[..., None]
    s = xp.where(both_empty, -xp.inf, xp.log2(total) + m_finite)
    return {"v_merged": v, "s_merged": s}
