"""The comparison statistics of :mod:`harness.compare` in one CUDA kernel, for outputs that pass.

``compare.output_error`` on CuPy arrays spent ~60 array operations (each a kernel launch and
tens of microseconds of host time) and ~20 float64 temporaries per output; a check runs it
several times per case, so it was most of a warm evaluation's time (issue 10 item 5). Here one
kernel reads each element once (the output in storage form and its float64 reference), applies
the element rule of ``compare._elementwise`` and reduces, per block then with one atomic per
block, the sums :class:`~astra_graph.harness.compare.OutputError` is built from: the largest
ratio, the measurable, exact and failing counts, and the sums of ratios, rounding ratios, signed
ratios, their squares and the magnitude-signed ratios. One copy of 9 numbers comes back.

The rule is stated once, in ``compare._elementwise``; this kernel restates it in CUDA for the
element types it knows (:data:`KINDS`: fp16 and bf16 as their 16 bits, fp32), compiled with
``--fmad=false`` so that the tolerance test rounds as NumPy does. ``tests/test_harness_gpu.py``
checks that both give the same result on outputs holding every kind of element (rounded,
off by ulps, infinities, NaNs, zeros). Only an output with no failing element is summarised
here: a failing one goes through ``compare``'s own path, which names the element and the
reason. Sums are accumulated in a different order than NumPy's, so the means agree to rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

KINDS = {"float16": "half_bits", "bfloat16": "bf16_bits", "float32": "f32"}
"""Element type -> the kernel's conversion of its storage form (others use compare's path)."""
BLOCK = 256
MAX_BLOCKS = 1024
"""Enough blocks to fill an H100 (132 SMs x 8 blocks of 256) in one wave; each thread strides."""
SUM_FIELDS = 8
"""measured, exact, bad, ratio, rounding, signed, signed^2, magnitude-signed (doubles)."""

SOURCE = r"""
struct half_bits {
    typedef unsigned short storage;
    static __device__ double to_double(storage h) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
        return (double)f;
    }
    static __device__ double rounded(double r) {  // once, to nearest even
        unsigned short h;
        asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(r));
        return to_double(h);
    }
};

struct bf16_bits {
    typedef unsigned short storage;
    static __device__ double to_double(storage h) {
        return (double)__uint_as_float(((unsigned int)h) << 16);
    }
    static __device__ double rounded(double r) {  // as dtypes.DType.from_float64 rounds
        const float f = (float)r;
        const unsigned int bits = __float_as_uint(f);
        unsigned int out = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
        if (isnan(f)) {
            out = 0x7FC0u;
        }
        return to_double((storage)(out & 0xFFFFu));
    }
};

struct f32 {
    typedef float storage;
    static __device__ double to_double(storage v) { return (double)v; }
    static __device__ double rounded(double r) { return (double)(float)r; }
};

template <typename Kind>
__global__ void compare_stats(const typename Kind::storage* __restrict__ got,
                              const double* __restrict__ ref, long long n, double atol,
                              double rtol, double* __restrict__ sums,
                              unsigned long long* __restrict__ top) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    double worst = 0.0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double r = ref[i];
        const double value = Kind::to_double(got[i]);
        const bool finite_ref = isfinite(r);
        const double allowed = finite_ref ? atol + rtol * fabs(r) : 0.0;
        const double rounded = Kind::rounded(r);
        const double error = fabs(value - r);
        // as compare._elementwise: an infinity the tolerance reaches, NaN where the output
        // type's reference is infinite
        const double reach = Kind::rounded(r + copysign(allowed, r));
        const bool ok = (error <= allowed) ||
                        (isinf(value) && (value == rounded || value == reach)) ||
                        (isnan(value) && (isnan(r) || isinf(rounded)));
        const bool measurable = ok && isfinite(value) && finite_ref && allowed > 0.0;
        const double divisor = allowed > 0.0 ? allowed : 1.0;
        const double sgn = measurable ? (value - r) / divisor : 0.0;
        const double ratio = fabs(sgn);
        worst = fmax(worst, ok ? ratio : __longlong_as_double(0x7FF0000000000000LL));
        acc[0] += measurable ? 1.0 : 0.0;
        acc[1] += (measurable && value == rounded) ? 1.0 : 0.0;
        acc[2] += ok ? 0.0 : 1.0;
        acc[3] += ratio;
        acc[4] += measurable ? fabs(rounded - r) / divisor : 0.0;
        acc[5] += sgn;
        acc[6] += sgn * sgn;
        acc[7] += (measurable && r != 0.0) ? (r > 0.0 ? sgn : -sgn) : 0.0;
    }
    __shared__ double partial[8][32];
    __shared__ double partial_top[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        for (int offset = 16; offset > 0; offset >>= 1) {
            acc[k] += __shfl_down_sync(0xffffffffu, acc[k], offset);
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        worst = fmax(worst, __shfl_down_sync(0xffffffffu, worst, offset));
    }
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            partial[k][warp] = acc[k];
        }
        partial_top[warp] = worst;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const int warps = (blockDim.x + 31) >> 5;
        for (int w = 1; w < warps; ++w) {
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                partial[k][0] += partial[k][w];
            }
            partial_top[0] = fmax(partial_top[0], partial_top[w]);
        }
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            atomicAdd(sums + k, partial[k][0]);
        }
        // non-negative doubles order as their bit patterns do
        atomicMax(top, (unsigned long long)__double_as_longlong(partial_top[0]));
    }
}
"""


@cache
def _module() -> Any:
    import cupy

    names = [f"compare_stats<{kind}>" for kind in KINDS.values()]
    return cupy.RawModule(code=SOURCE, options=("--fmad=false",), name_expressions=names)


@dataclass
class Summary:
    """The reduced statistics of one output (see the module docstring)."""

    worst_ratio: float
    measured: int
    exact: int
    bad: int
    ratio_sum: float
    rounding_sum: float
    signed_sum: float
    signed_sq: float
    magnitude_sum: float


def supports(element_name: str) -> bool:
    return element_name in KINDS


def summarize(element_name: str, got: Any, reference: Any, atol: float, rtol: float) -> Summary:
    """One kernel over ``got`` (``element_name``'s storage form, any shape) against its float64
    ``reference`` of the same shape."""
    import cupy
    import numpy as np

    kind = KINDS[element_name]
    flat_got = cupy.ascontiguousarray(got).reshape(-1)
    flat_ref = cupy.ascontiguousarray(reference, dtype=cupy.float64).reshape(-1)
    n = int(flat_got.size)
    # sums, then the top ratio's bits, in one buffer: one memset, one copy back
    out = cupy.zeros(SUM_FIELDS + 1, dtype=cupy.float64)
    if n:
        blocks = min(MAX_BLOCKS, -(-n // BLOCK))
        function = _module().get_function(f"compare_stats<{kind}>")
        function(
            (blocks,),
            (BLOCK,),
            (
                flat_got,
                flat_ref,
                np.int64(n),
                np.float64(atol),
                np.float64(rtol),
                out,
                out[SUM_FIELDS:].view(cupy.uint64),
            ),
        )
    host = out.get()
    measured, exact, bad, ratio, rounding, signed, squares, magnitude = (
        float(v) for v in host[:SUM_FIELDS]
    )
    worst = float(host[SUM_FIELDS:].view(np.float64)[0])
    return Summary(
        worst_ratio=worst if math.isfinite(worst) else math.inf,
        measured=int(measured),
        exact=int(exact),
        bad=int(bad),
        ratio_sum=ratio,
        rounding_sum=rounding,
        signed_sum=signed,
        signed_sq=squares,
        magnitude_sum=magnitude,
    )
