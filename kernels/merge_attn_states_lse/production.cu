// merge_attn_states_lse, production-grade: as FlashInfer's MergeState, which SGLang ships.
// Block = (head_dim/8, HEADS): each thread merges one 16-byte vector (8 elements) of one head;
// the weights are computed once per thread from the two LSEs, the math is fp32, rounded once.
// astra: description = block (head_dim/8, heads per block), one 16-byte load per input per thread
// astra: entry = merge_attn_states_lse_vec<T>
// astra: grid = (tokens, ceil_div(heads, HEADS))
// astra: block = (head_dim // 8, HEADS)
// astra: tunable HEADS = 4, 1, 2, 8
// astra: requires = head_dim % 8 == 0
// astra: requires = head_dim // 8 * HEADS <= 1024

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

template <typename T>
__global__ void merge_attn_states_lse_vec(const T* __restrict__ v_a, const float* __restrict__ s_a,
                                          const T* __restrict__ v_b, const float* __restrict__ s_b,
                                          T* __restrict__ v_merged, float* __restrict__ s_merged,
                                          int tokens, int heads, int head_dim) {
    constexpr int kVec = 16 / sizeof(T);
    const int head = blockIdx.y * blockDim.y + threadIdx.y;
    if (head >= heads) {
        return;
    }
    const size_t row = (size_t)blockIdx.x * heads + head;  // token * heads + head
    const float sa = __ldg(s_a + row);
    const float sb = __ldg(s_b + row);
    const float m = fmaxf(sa, sb);
    const bool empty = m == neg_inf();
    // an empty side has weight exactly 0 and the other exactly 1, so it passes through bit-exact
    const float wa = empty ? 0.0f : exp2f(sa - m);
    const float wb = empty ? 0.0f : exp2f(sb - m);
    const float sum = wa + wb;
    const float inv = empty ? 0.0f : 1.0f / sum;

    const size_t offset = row * head_dim + (size_t)threadIdx.x * kVec;
    const uint4 a_raw = __ldg(reinterpret_cast<const uint4*>(v_a + offset));
    const uint4 b_raw = __ldg(reinterpret_cast<const uint4*>(v_b + offset));
    const T* a = reinterpret_cast<const T*>(&a_raw);
    const T* b = reinterpret_cast<const T*>(&b_raw);
    uint4 o_raw;
    T* o = reinterpret_cast<T*>(&o_raw);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
        o[j] = from_f32<T>((wa * to_f32(a[j]) + wb * to_f32(b[j])) * inv);
    }
    *reinterpret_cast<uint4*>(v_merged + offset) = o_raw;
    if (threadIdx.x == 0) {
        s_merged[row] = empty ? m : log2f(sum) + m;
    }
}
