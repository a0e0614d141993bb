// LOSSY silu_and_mul variant (measurement only): the sigmoid rounded to T before the products
// (a low-precision activation table would do the same): three roundings.
// astra: description = lossy: sigmoid rounded to T, then a * sigmoid * b
// astra: entry = silu_half_sigmoid<T>
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
__global__ void silu_half_sigmoid(T* out, const T* x, int d) {
    const size_t row = blockIdx.x;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        const float a = to_f32(x[row * 2 * d + i]);
        const float sigmoid = to_f32(from_f32<T>(1.0f / (1.0f + expf(-a))));
        out[row * d + i] = from_f32<T>(a * sigmoid * to_f32(x[row * 2 * d + d + i]));
    }
}
