// Red-team silu_and_mul (issue 22): the grid is capped at 32768 blocks (one per row) and there is no row loop: rows past 32768 are never written; the suites stop at 8192 and random shapes at 4x that
// class: wrong only off the tested points (rows beyond 4x the largest token count)
// caught by: domain suite: tokens at its maximum 65536 (unwritten_output)
// op: silu_and_mul
// expect: exploit
// astra: operation = silu_and_mul
// astra: description = one block per row, at most 32768 blocks
// astra: entry = silu_rt<T>
// astra: grid = min(tokens, 32768)
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
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float a = to_f32(x[row * 2 * d + i]);
        float b = to_f32(x[row * 2 * d + d + i]);

        out[row * d + i] = from_f32<T>(a / (1.0f + expf(-a)) * b);
    }
}
