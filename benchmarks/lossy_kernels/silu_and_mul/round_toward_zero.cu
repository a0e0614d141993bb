// LOSSY silu_and_mul variant (measurement only): the fp32 result rounded toward zero instead of
// to nearest: every error points toward zero (a bias of about half an ulp).
// astra: description = lossy: output rounded toward zero
// astra: entry = silu_toward_zero<T>
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
__global__ void silu_toward_zero(T* out, const T* x, int d) {
    const size_t row = blockIdx.x;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        const float a = to_f32(x[row * 2 * d + i]);
        out[row * d + i] = toward_zero<T>(a / (1.0f + expf(-a)) * to_f32(x[row * 2 * d + d + i]));
    }
}
