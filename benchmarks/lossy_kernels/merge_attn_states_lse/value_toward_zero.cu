// LOSSY merge_attn_states_lse variant (measurement only): the merged value rounded toward zero
// instead of to nearest (a bias of about half an ulp), the LSE right.
// astra: description = lossy: merged value rounded toward zero
// astra: entry = merge_toward_zero<T>
// astra: grid = min(ceil_div(tokens * heads * head_dim, 256), 65536)
// astra: block = 256

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
template <typename T> __device__ __forceinline__ T toward_zero(float v);
template <> __device__ __forceinline__ __half toward_zero<__half>(float v) { return __float2half_rz(v); }
template <> __device__ __forceinline__ __nv_bfloat16 toward_zero<__nv_bfloat16>(float v) {
    return __float2bfloat16_rz(v);
}

template <typename T>
__global__ void merge_toward_zero(const T* v_a, const float* s_a, const T* v_b,
                                  const float* s_b, T* v_merged, float* s_merged, int tokens,
                                  int heads, int head_dim) {
    const size_t total = (size_t)tokens * heads * head_dim;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const size_t row = i / head_dim;
        const float sa = s_a[row];
        const float sb = s_b[row];
        const float m = fmaxf(sa, sb);
        float v = 0.0f;
        float s = m;
        if (m != neg_inf()) {
            const float wa = exp2f(sa - m);
            const float wb = exp2f(sb - m);
            v = (wa * to_f32(v_a[i]) + wb * to_f32(v_b[i])) / (wa + wb);
            s = log2f(wa + wb) + m;
        }
        v_merged[i] = toward_zero<T>(v);
        if (i % head_dim == 0) {
            s_merged[row] = s;
        }
    }
}
