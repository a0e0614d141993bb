// FlashInfer's activation.cuh (flashinfer-python 0.7.2.post1), included unmodified, its
// __global__ kernels as inline device functions, for the act_and_mul adapters beside this file
// (silu_and_mul.cu, gelu_and_mul.cu, gelu_tanh_and_mul.cu), each of which runs
// act_and_mul_kernel inside a __global__ entry of its own with the kernel's launch bound. The
// macros skip the host code NVRTC refuses, as merge_attn_states_lse.cu beside this file says.
// Staged next to the release's include folder as astra_anchor_act_and_mul.cuh by
// benchmarks/anchors.py, with the adapters; never committed with the release.
#pragma once
typedef unsigned short ushort;
#define FLASHINFER_UTILS_CUH_
#define __cuda_cuda_h__
#define FLASHINFER_INLINE inline __attribute__((always_inline)) __device__
#undef __global__
#define __global__ __device__ __forceinline__
#undef __launch_bounds__
#define __launch_bounds__(...)  // a device function takes none: the entry below carries it
#include "flashinfer/activation.cuh"
#undef __global__
#define __global__ __attribute__((global))
#undef __launch_bounds__
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
