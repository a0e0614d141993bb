// Activation-and-multiply kernels, written for astra-graph's guide (docs/BRING_YOUR_OWN_KERNEL.md)
// in the style serving frameworks use: a namespace, a functor template argument that picks the
// activation, a flag for which half is activated, a load macro, 64-bit row offsets.
// astra-graph compiles this file as it is; the header lines live in act_and_mul.cu.
#pragma once

#include <cstdint>

#ifndef BYOK_LDG
#define BYOK_LDG(arg) __ldg(arg)
#endif

namespace byok {

__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename scalar_t>
__device__ __forceinline__ scalar_t from_float(float v);
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename scalar_t>
struct SiluFunctor {
  __device__ __forceinline__ float operator()(float x) const { return x / (1.0f + expf(-x)); }
};

template <typename scalar_t>
struct GeluTanhFunctor {
  __device__ __forceinline__ float operator()(float x) const {
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
  }
};

// out[token, i] = act(input[token, i]) * input[token, d + i]   (act_first)
// out[token, i] = input[token, i] * act(input[token, d + i])   (otherwise)
template <typename scalar_t, typename ActFn, bool act_first>
__global__ void act_and_mul_kernel(scalar_t* __restrict__ out,          // [num_tokens, d]
                                   const scalar_t* __restrict__ input,  // [num_tokens, 2 * d]
                                   const int d) {
  const int64_t token_idx = blockIdx.x;
  const ActFn act{};
  for (int64_t idx = threadIdx.x; idx < d; idx += blockDim.x) {
    const float x = to_float(BYOK_LDG(&input[token_idx * 2 * d + idx]));
    const float y = to_float(BYOK_LDG(&input[token_idx * 2 * d + d + idx]));
    const float r = act_first ? act(x) * y : x * act(y);
    out[token_idx * d + idx] = from_float<scalar_t>(r);
  }
}

}  // namespace byok
