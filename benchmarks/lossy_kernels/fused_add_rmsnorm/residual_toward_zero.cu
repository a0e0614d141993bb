// LOSSY fused_add_rmsnorm variant (measurement only): the residual written rounded toward zero
// (the normalised output is right): a systematic bias in one output.
// astra: description = lossy: residual rounded toward zero
// astra: entry = rmsnorm_residual_rz<T>
// astra: grid = tokens
// astra: block = 256

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <typename T> __device__ __forceinline__ T toward_zero(float v);
template <> __device__ __forceinline__ __half toward_zero<__half>(float v) { return __float2half_rz(v); }
template <> __device__ __forceinline__ __nv_bfloat16 toward_zero<__nv_bfloat16>(float v) {
    return __float2bfloat16_rz(v);
}

template <typename T>
__global__ void rmsnorm_residual_rz(T* input, T* residual, const T* weight, int hidden,
                                    float eps) {
    __shared__ float partial[256];
    const size_t base = (size_t)blockIdx.x * hidden;
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float x = to_f32(input[base + i]) + to_f32(residual[base + i]);
        sum_sq += x * x;
    }
    partial[threadIdx.x] = sum_sq;
    __syncthreads();
    for (int width = 128; width > 0; width /= 2) {
        if (threadIdx.x < width) {
            partial[threadIdx.x] += partial[threadIdx.x + width];
        }
        __syncthreads();
    }
    const float scale = rsqrtf(partial[0] / hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float x = to_f32(input[base + i]) + to_f32(residual[base + i]);
        residual[base + i] = toward_zero<T>(x);
        input[base + i] = from_f32<T>(x * scale * to_f32(weight[i]));
    }
}
