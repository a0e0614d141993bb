// LOSSY silu_and_mul variant (measurement only, never a correct kernel): silu(a) rounded to T,
// then multiplied by b and rounded again (PyTorch eager's F.silu(a) * b): two roundings.
// astra: description = lossy: silu rounded to T, then the product rounded again
// astra: entry = silu_double_rounding<T>
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
__global__ void silu_double_rounding(T* out, const T* x, int d) {
    const size_t row = blockIdx.x;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        const float a = to_f32(x[row * 2 * d + i]);
        const T silu = from_f32<T>(a / (1.0f + expf(-a)));
        out[row * d + i] = from_f32<T>(to_f32(silu) * to_f32(x[row * 2 * d + d + i]));
    }
}
