// FlashInfer's act_and_mul_kernel (flashinfer-python 0.7.2.post1,
// include/flashinfer/activation.cuh), included unmodified and launched as FlashInfer's JIT
// launcher (flashinfer/jit/activation.py of the 0.7.2.post1 wheel) launches it: one block per
// token, vec = 16 / sizeof(T) when d is a multiple of it, block = min(d / vec, 256) (the
// launcher's cap, the kernel's __launch_bounds__), compiled with -use_fast_math (FAST_MATH = 1;
// gen_jit_spec's default). FlashInfer's gelu_tanh is defined by that launcher
// (gelu_def_tanh_cu_str), not by a header: here it is written from its definition, val * 0.5f *
// (1.0f + math::tanh(0.7978845608028654f * (val + 0.044715f * val^3))), where math::tanh is the
// release's own (include/flashinfer/math.cuh: PTX tanh.approx.f32), reached through the header
// included here. act_and_mul.cuh beside this file includes the header with its kernels as inline
// device functions; the kernel runs inside this file's __global__ entry, with the same launch
// bound.
// astra: operation = gelu_tanh_and_mul
// astra: description = FlashInfer 0.7.2.post1 act_and_mul_kernel (gelu_tanh), release header
// astra: entry = anchor_gelu_tanh_and_mul<T>
// astra: grid = tokens
// astra: block = min(d // 8, 256)
// astra: tunable FAST_MATH = 1
// astra: requires = d % 8 == 0

#include "astra_anchor_act_and_mul.cuh"  // activation.cuh as device functions

__device__ __forceinline__ float gelu_tanh(const float& val) {
    const float cdf = 0.5f * (1.0f + flashinfer::math::tanh((0.7978845608028654f *
                                                             (val + 0.044715f * val * val * val))));
    return val * cdf;
}

template <typename T>
__global__ __launch_bounds__(256) void anchor_gelu_tanh_and_mul(T* out, const T* x, int d) {
    flashinfer::activation::act_and_mul_kernel<T, gelu_tanh, 16 / sizeof(T)>(out, x, d);
}
