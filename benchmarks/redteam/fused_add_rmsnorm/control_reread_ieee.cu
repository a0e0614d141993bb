// Red-team fused_add_rmsnorm: CORRECT control: fixed 256-thread blocks, 4-byte paired loads, the second pass re-reads input and residual (same thread, same elements), scale = 1 / sqrtf(mean + eps) with IEEE sqrt and division
// class: control
// op: fused_add_rmsnorm
// expect: correct
// astra: operation = fused_add_rmsnorm
// astra: description = two passes over global memory, paired loads, IEEE sqrt and division
// astra: entry = rms_reread<T>
// astra: grid = tokens
// astra: block = 256


__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <typename T> struct is_bf16 { static constexpr bool value = false; };
template <> struct is_bf16<__nv_bfloat16> { static constexpr bool value = true; };

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_totals[32];
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0) {
        warp_totals[warp] = v;
    }
    __syncthreads();
    v = lane < blockDim.x / 32 ? warp_totals[lane] : 0.0f;
    return warp_sum(v);
}

template <typename T> struct pair_of;
template <> struct pair_of<__half> { using type = __half2; };
template <> struct pair_of<__nv_bfloat16> { using type = __nv_bfloat162; };
__device__ __forceinline__ float2 pair_to_f32(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 pair_to_f32(__nv_bfloat162 v) { return __bfloat1622float2(v); }
template <typename P> __device__ __forceinline__ P pair_from_f32(float lo, float hi);
template <> __device__ __forceinline__ __half2 pair_from_f32<__half2>(float lo, float hi) {
    return __floats2half2_rn(lo, hi);
}
template <> __device__ __forceinline__ __nv_bfloat162 pair_from_f32<__nv_bfloat162>(float lo, float hi) {
    return __floats2bfloat162_rn(lo, hi);
}

template <typename T>
__global__ void rms_reread(T* input, T* residual, const T* weight, int hidden, float eps) {
    using P = typename pair_of<T>::type;
    const int pairs = hidden / 2;
    P* in = reinterpret_cast<P*>(input + (size_t)blockIdx.x * hidden);
    P* res = reinterpret_cast<P*>(residual + (size_t)blockIdx.x * hidden);
    const P* w = reinterpret_cast<const P*>(weight);
    float sum_sq = 0.0f;
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        const float2 a = pair_to_f32(in[p]);
        const float2 b = pair_to_f32(res[p]);
        const float x0 = a.x + b.x, x1 = a.y + b.y;
        sum_sq += x0 * x0 + x1 * x1;
    }
    const float scale = 1.0f / sqrtf(block_sum(sum_sq) / hidden + eps);
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        const float2 a = pair_to_f32(in[p]);
        const float2 b = pair_to_f32(res[p]);
        const float2 g = pair_to_f32(w[p]);
        const float x0 = a.x + b.x, x1 = a.y + b.y;
        res[p] = pair_from_f32<P>(x0, x1);
        in[p] = pair_from_f32<P>(x0 * scale * g.x, x1 * scale * g.y);
    }
}
