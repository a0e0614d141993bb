// FlashInfer's MergeStateKernel (flashinfer-python 0.7.2.post1,
// include/flashinfer/attention/cascade.cuh), included unmodified and launched as FlashInfer's
// MergeState launches it: one block per token, block = (head_dim / vec, heads), vec =
// max(16 / sizeof(T), head_dim / 32) (VEC = 8 for fp16/bf16 at head_dim 64-256; FlashInfer
// dispatches head_dim 64-512 only, and fails beyond 1024 threads a token), compiled with
// -use_fast_math as FlashInfer's JIT compiles it (FAST_MATH = 1).
// Why the macros: NVRTC compiles device code only, and the release's headers also hold host
// code NVRTC refuses (utils.cuh: <atomic>, <iostream>, std::ostringstream, cudaGetDevice;
// cuda.h: <stdlib.h>). So utils.cuh and cuda.h are skipped by their include guards (the kernel
// uses neither), the host launchers in cascade.cuh are declared as never-instantiated device
// templates (their cudaError_t return type becomes `__device__ int`, their launch macros empty),
// math.cuh's `ushort` is given its CUDA-toolkit meaning, and the header's __global__ kernels are
// included as inline device functions so that this file's __global__ entry (the contract's
// parameters) runs MergeStateKernel's body as written. Written for astra-graph issue 25; copied
// next to the release's include folder by benchmarks/anchors.py, never committed with it.
// astra: operation = merge_attn_states_lse
// astra: description = FlashInfer 0.7.2.post1 MergeStateKernel from its release header
// astra: entry = anchor_merge_state<T, VEC>
// astra: grid = tokens
// astra: block = (head_dim // VEC, heads)
// astra: tunable VEC = 8
// astra: tunable FAST_MATH = 1
// astra: requires = head_dim == 64 or head_dim == 128 or head_dim == 256
// astra: requires = VEC == max(16 // elem_bytes, head_dim // 32)
// astra: requires = heads * (head_dim // VEC) <= 1024

typedef unsigned short ushort;
#define FLASHINFER_UTILS_CUH_
#define __cuda_cuda_h__
#define FLASHINFER_INLINE inline __attribute__((always_inline)) __device__
#define FLASHINFER_CUDA_CALL(...) (void)0
#define DISPATCH_HEAD_DIM(head_dim, HEAD_DIM, ...) (void)0
#define cudaError_t __device__ int
#undef __global__
#define __global__ __device__ __forceinline__
#include "flashinfer/attention/cascade.cuh"
#undef __global__
#define __global__ __attribute__((global))
#undef cudaError_t

template <typename T, int kVec>
__global__ void anchor_merge_state(const T* v_a, const float* s_a, const T* v_b,
                                   const float* s_b, T* v_merged, float* s_merged, int tokens,
                                   int heads, int head_dim) {
    flashinfer::MergeStateKernel<kVec, T, T>(const_cast<T*>(v_a), const_cast<float*>(s_a),
                                             const_cast<T*>(v_b), const_cast<float*>(s_b),
                                             v_merged, s_merged, heads, head_dim);
}
