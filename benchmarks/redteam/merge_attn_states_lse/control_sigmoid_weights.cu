// Red-team merge_attn_states_lse: CORRECT control: flat grid-stride loop over 8-element vectors, weights in sigmoid form 1/(1 + 2^(s_b - s_a)) with explicit empty sides, LSE = max + log2(1 + 2^-|s_a - s_b|)
// class: control
// op: merge_attn_states_lse
// expect: correct
// astra: operation = merge_attn_states_lse
// astra: description = flat grid-stride loop over vectors, sigmoid-form weights
// astra: entry = merge_sigmoid<T>
// astra: grid = min(ceil_div(tokens * heads * (head_dim // 8), 256), 16384)
// astra: block = 256
// astra: requires = head_dim % 8 == 0


__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <typename T> struct is_bf16 { static constexpr bool value = false; };
template <> struct is_bf16<__nv_bfloat16> { static constexpr bool value = true; };

#define LARGE_LAUNCH_THREADS 4194304
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

template <typename T>
__global__ void merge_sigmoid(const T* v_a, const float* s_a, const T* v_b, const float* s_b,
                              T* v_merged, float* s_merged, int tokens, int heads, int head_dim) {
    const int per_row = head_dim / 8;
    const long long total = (long long)tokens * heads * per_row;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total;
         k += (long long)gridDim.x * blockDim.x) {
        const long long row = k / per_row;
        const int part = (int)(k - row * per_row);
        const float sa = s_a[row];
        const float sb = s_b[row];
        float ka, kb, s;
        if (sa == neg_inf() && sb == neg_inf()) {
            ka = 0.0f; kb = 0.0f; s = neg_inf();
        } else if (sb == neg_inf()) {
            ka = 1.0f; kb = 0.0f; s = sa;
        } else if (sa == neg_inf()) {
            ka = 0.0f; kb = 1.0f; s = sb;
        } else {
            const float diff = sb - sa;
            ka = 1.0f / (1.0f + exp2f(diff));
            kb = 1.0f / (1.0f + exp2f(-diff));
            s = fmaxf(sa, sb) + log2f(1.0f + exp2f(-fabsf(diff)));
        }
        const long long at = row * head_dim + part * 8;
        const uint4 a_raw = *reinterpret_cast<const uint4*>(v_a + at);
        const uint4 b_raw = *reinterpret_cast<const uint4*>(v_b + at);
        const T* a = reinterpret_cast<const T*>(&a_raw);
        const T* b = reinterpret_cast<const T*>(&b_raw);
        uint4 o_raw;
        T* o = reinterpret_cast<T*>(&o_raw);
#pragma unroll
        for (int j = 0; j < 8; ++j) o[j] = from_f32<T>(ka * to_f32(a[j]) + kb * to_f32(b[j]));
        *reinterpret_cast<uint4*>(v_merged + at) = o_raw;
        if (part == 0) s_merged[row] = s;
    }
}
