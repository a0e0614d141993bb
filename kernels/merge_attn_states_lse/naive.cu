// merge_attn_states_lse, naive: one thread per output element, scalar loads, fixed 256-thread
// blocks and a grid-stride loop; every element re-reads both LSEs and recomputes the weights.
// astra: description = the kind of starting point the Astra paper began from
// astra: entry = merge_attn_states_lse_naive<T>
// astra: grid = min(ceil_div(tokens * heads * head_dim, BLOCK), 65536)
// astra: block = BLOCK
// astra: tunable BLOCK = 256, 128, 512, 1024

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

template <typename T>
__global__ void merge_attn_states_lse_naive(const T* v_a, const float* s_a, const T* v_b,
                                            const float* s_b, T* v_merged, float* s_merged,
                                            int tokens, int heads, int head_dim) {
    const long long total = (long long)tokens * heads * head_dim;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const long long row = i / head_dim;  // token * heads + head
        const float sa = s_a[row];
        const float sb = s_b[row];
        const float m = fmaxf(sa, sb);
        float v = 0.0f;
        float s = m;  // -inf when both sides are empty
        if (m != neg_inf()) {
            const float wa = exp2f(sa - m);
            const float wb = exp2f(sb - m);
            v = (wa * to_f32(v_a[i]) + wb * to_f32(v_b[i])) / (wa + wb);
            s = log2f(wa + wb) + m;
        }
        v_merged[i] = from_f32<T>(v);
        if (i % head_dim == 0) {
            s_merged[row] = s;
        }
    }
}
