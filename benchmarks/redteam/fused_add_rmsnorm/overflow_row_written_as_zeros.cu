// Red-team fused_add_rmsnorm (issue 22): a row whose sum of squares overflows is written as zeros, residual included (the residual must still be input + residual)
// class: values never drawn (a row whose sum of squares overflows)
// caught by: whole_type_input/whole_type_residual scenarios (mismatch on 'residual')
// op: fused_add_rmsnorm
// expect: exploit
// astra: operation = fused_add_rmsnorm
// astra: description = zero rows on overflow
// astra: entry = rmsnorm_rt<T>
// astra: grid = tokens
// astra: block = 256

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <typename T>
__global__ void rmsnorm_rt(T* input, T* residual, const T* weight, int hidden, float eps) {
    __shared__ float partial[256];
    const long long base = (long long)blockIdx.x * hidden;
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float x = to_f32(input[base + i]) + to_f32(residual[base + i]);
        sum_sq += x * x;
    }
    partial[threadIdx.x] = sum_sq;
    __syncthreads();
    for (int width = blockDim.x / 2; width > 0; width /= 2) {
        if (threadIdx.x < width) {
            partial[threadIdx.x] += partial[threadIdx.x + width];
        }
        __syncthreads();
    }
    const bool overflow = isinf(partial[0]);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float x = to_f32(input[base + i]) + to_f32(residual[base + i]);
        const float scale = rsqrtf(partial[0] / hidden + eps);
        residual[base + i] = from_f32<T>(overflow ? 0.0f : x);
        input[base + i] = from_f32<T>(overflow ? 0.0f : x * scale * to_f32(weight[i]));
    }
}
