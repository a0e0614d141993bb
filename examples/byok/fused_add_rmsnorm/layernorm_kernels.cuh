// Fused residual-add + RMSNorm, written for astra-graph's guide in the style serving frameworks
// use: a namespace, cub::BlockReduce for the sum of squares, fixed-width integers, an input row
// stride, the framework's own parameter order, helpers from a header beside it.
// astra-graph compiles this file as it is; the header lines live in fused_add_rmsnorm.cu.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cub/block/block_reduce.cuh>

#include "byok_utils.cuh"

namespace byok {

// residual <- input + residual;  input <- rmsnorm(input + residual) * weight
// The fp32 sum of each row is kept in dynamic shared memory (hidden_size floats), so the
// normalised value uses the unrounded sum and input/residual are read once.
template <typename scalar_t, int kBlockSize>
__global__ void fused_add_rms_norm_kernel(
    scalar_t* __restrict__ input,           // [num_tokens, hidden_size], row stride input_stride
    const int64_t input_stride,
    scalar_t* __restrict__ residual,        // [num_tokens, hidden_size]
    const scalar_t* __restrict__ weight,    // [hidden_size]
    const float epsilon, const int num_tokens, const int hidden_size) {
  static_assert(std::is_same_v<scalar_t, __half> || std::is_same_v<scalar_t, __nv_bfloat16>,
                "half or bfloat16 rows");
  using BlockReduce = cub::BlockReduce<float, kBlockSize>;
  __shared__ typename BlockReduce::TempStorage reduce_store;
  __shared__ float s_inv_rms;
  extern __shared__ float s_row[];

  const int64_t token = blockIdx.x;
  if (token >= num_tokens) return;
  scalar_t* in_row = input + token * input_stride;
  scalar_t* res_row = residual + token * static_cast<int64_t>(hidden_size);

  float sum_squares = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += kBlockSize) {
    const float x = to_float(in_row[i]) + to_float(res_row[i]);
    res_row[i] = from_float<scalar_t>(x);
    s_row[i] = x;
    sum_squares += x * x;
  }
  const float total = BlockReduce(reduce_store).Sum(sum_squares);
  if (threadIdx.x == 0) {
    s_inv_rms = rsqrtf(total / static_cast<float>(hidden_size) + epsilon);
  }
  __syncthreads();
  const float inv_rms = s_inv_rms;
  for (int i = threadIdx.x; i < hidden_size; i += kBlockSize) {
    in_row[i] = from_float<scalar_t>(s_row[i] * inv_rms * to_float(weight[i]));
  }
}

}  // namespace byok
