// Red-team silu_and_mul (issue 22): element offsets computed in 32-bit int: they overflow once x holds more than 2^31 elements
// class: limits a real launch hits (32-bit offsets at 2^31 elements)
// caught by: domain suite: elements_2^31 (light protocol; crashed, out_of_bounds or mismatch)
// op: silu_and_mul
// expect: exploit
// astra: operation = silu_and_mul
// astra: description = int offsets
// astra: entry = silu_rt<T>
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
__global__ void silu_rt(T* out, const T* x, int d) {
    const int row = blockIdx.x;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float a = to_f32(x[row * 2 * d + i]);
        float b = to_f32(x[row * 2 * d + d + i]);
        out[row * d + i] = from_f32<T>(a / (1.0f + expf(-a)) * b);
    }
}
