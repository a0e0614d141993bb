// FlashInfer's act_and_mul_kernel (flashinfer-python 0.7.2.post1,
// include/flashinfer/activation.cuh), included unmodified and launched as FlashInfer's JIT
// launcher (flashinfer/jit/activation.py) launches it: one block per token, vec = 16 / sizeof(T)
// when d is a multiple of it, block = min(d / vec, 256) (the kernel's __launch_bounds__),
// compiled with -use_fast_math (FAST_MATH = 1). FlashInfer's silu is defined by that launcher,
// not by a header: here it is written from its definition, x / (1 + __expf(-x)). act_and_mul.cuh
// beside this file includes the header with its kernels as inline device functions; the kernel
// runs inside this file's __global__ entry, with the same launch bound.
// astra: operation = silu_and_mul
// astra: description = FlashInfer 0.7.2.post1 act_and_mul_kernel (silu) from its release header
// astra: entry = anchor_silu_and_mul<T>
// astra: grid = tokens
// astra: block = min(d // 8, 256)
// astra: tunable FAST_MATH = 1
// astra: requires = d % 8 == 0

#include "astra_anchor_act_and_mul.cuh"  // activation.cuh as device functions

__device__ __forceinline__ float silu(const float& val) { return val / (1.0f + __expf(-val)); }

template <typename T>
__global__ __launch_bounds__(256) void anchor_silu_and_mul(T* out, const T* x, int d) {
    flashinfer::activation::act_and_mul_kernel<T, silu, 16 / sizeof(T)>(out, x, d);
}
