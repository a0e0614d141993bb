// Helpers shared by the framework-style normalisation kernels (written for astra-graph's guide).
#pragma once

#include <type_traits>

namespace byok {

__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename scalar_t>
__device__ __forceinline__ scalar_t from_float(float v) {
  if constexpr (std::is_same_v<scalar_t, __half>) {
    return __float2half_rn(v);
  } else {
    return __float2bfloat16_rn(v);
  }
}

}  // namespace byok
