// Red-team silu_and_mul (issue 22): 256-wide tiles over d with the tail skipped only when d exceeds 4096 (d = 5000 loses its last 136 columns): no suite draws such a width
// class: wrong only off the tested points (tile loops skipping the tail at wide, non-multiple widths)
// caught by: domain suite: non_multiple widths and the whole-domain sample (unwritten_output)
// op: silu_and_mul
// expect: exploit
// astra: operation = silu_and_mul
// astra: description = 256-wide tiles
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
    const long long row = blockIdx.x;
    const int limit = d > 4096 ? d / 256 * 256 : d;
    for (int i = threadIdx.x; i < limit; i += blockDim.x) {
        float a = to_f32(x[row * 2 * d + i]);
        float b = to_f32(x[row * 2 * d + d + i]);
        out[row * d + i] = from_f32<T>(a / (1.0f + expf(-a)) * b);
    }
}
