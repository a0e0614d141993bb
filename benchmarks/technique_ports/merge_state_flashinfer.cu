// merge_attn_states_lse with FlashInfer's MergeState launch and arithmetic (flashinfer-python
// 0.7.2.post1, include/flashinfer/attention/cascade.cuh), as the yardstick the production kernel
// is timed against (issues 14 and 25; benchmarks/merge_sweep.py). Written here from those facts;
// not FlashInfer's code. Faithful in what decides its speed:
// - launch: one block per token, block = (head_dim / vec, heads), vec = max(16 / sizeof(T),
//   head_dim / 32) elements, so a thread loads one 16-byte vector per input for head_dim up to
//   256 and two (32 bytes) at 512; only head_dim 64, 128, 256 and 512 (FlashInfer dispatches no
//   other), and only heads * head_dim / vec <= 1024 threads (FlashInfer's launch fails beyond);
// - order: the LSEs are read and the weights computed first, then the vectors are loaded;
// - arithmetic: hardware exp2 and log2 (ex2/lg2.approx.ftz), the division as -use_fast_math
//   compiles it (approximate), as FlashInfer's JIT does (FAST_MATH = 1), the (-inf) - (-inf) NaN dropped
//   by max(., -inf), weights 0 when their sum is 0 (both sides empty: v = 0, s = -inf);
// - every thread of a head stores the merged LSE (the same value to the same address).
// astra: operation = merge_attn_states_lse
// astra: description = FlashInfer MergeState launch: one block per token, head_dim/vec x heads threads
// astra: entry = merge_state_flashinfer<T>
// astra: grid = tokens
// astra: block = (head_dim // max(16 // elem_bytes, head_dim // 32), heads)
// astra: tunable FAST_MATH = 1
// astra: requires = head_dim == 64 or head_dim == 128 or head_dim == 256 or head_dim == 512
// astra: requires = heads * (head_dim // max(16 // elem_bytes, head_dim // 32)) <= 1024

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float approx_exp2(float x) {
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float approx_log2(float x) {
    float y;
    asm volatile("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

template <typename T>
__global__ void merge_state_flashinfer(const T* __restrict__ v_a, const float* __restrict__ s_a,
                                       const T* __restrict__ v_b, const float* __restrict__ s_b,
                                       T* __restrict__ v_merged, float* __restrict__ s_merged,
                                       int tokens, int heads, int head_dim) {
    constexpr int kVec = 16 / sizeof(T);
    const float inf = __int_as_float(0x7f800000);
    const size_t row = (size_t)blockIdx.x * heads + threadIdx.y;
    float sa = s_a[row];
    float sb = s_b[row];
    const float m = fmaxf(sa, sb);
    sa = approx_exp2(fmaxf(sa - m, -inf));
    sb = approx_exp2(fmaxf(sb - m, -inf));
    const float sum = sa + sb;
    const float ka = sum > 0.0f ? sa / sum : 0.0f;
    const float kb = sum > 0.0f ? sb / sum : 0.0f;
    // the vector width FlashInfer derives from head_dim: 16 / sizeof(T) or head_dim / 32
    const int per_thread = head_dim / blockDim.x;
    const size_t offset = row * head_dim + (size_t)threadIdx.x * per_thread;
    for (int v = 0; v < per_thread; v += kVec) {
        const uint4 a_raw = *reinterpret_cast<const uint4*>(v_a + offset + v);
        const uint4 b_raw = *reinterpret_cast<const uint4*>(v_b + offset + v);
        const T* a = reinterpret_cast<const T*>(&a_raw);
        const T* b = reinterpret_cast<const T*>(&b_raw);
        uint4 o_raw;
        T* o = reinterpret_cast<T*>(&o_raw);
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
            o[k] = from_f32<T>(ka * to_f32(a[k]) + kb * to_f32(b[k]));
        }
        *reinterpret_cast<uint4*>(v_merged + offset + v) = o_raw;
    }
    s_merged[row] = approx_log2(sum) + m;
}
