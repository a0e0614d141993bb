// merge_attn_states_lse written with FlashInfer's MergeState technique, as the yardstick the
// production kernel is timed against (issue 14; benchmarks/merge_sweep.py): one block per token,
// block = (head_dim / 8, heads), each thread one 16-byte vector of each side; the LSEs are read
// and the weights computed first (exp2 and log2 of the hardware, -use_fast_math as FlashInfer
// compiles), then the vectors are loaded, merged in fp32 and stored. Both sides empty (-inf)
// give v = 0 and s = -inf, as newer FlashInfer does. Only shapes with heads * head_dim / 8 <=
// 1024 threads per block, as FlashInfer. Written here from those facts; not FlashInfer's code.
// astra: operation = merge_attn_states_lse
// astra: description = FlashInfer MergeState technique: one block per token, one vector per thread
// astra: entry = merge_state_flashinfer<T>
// astra: grid = tokens
// astra: block = (head_dim // 8, heads)
// astra: tunable FAST_MATH = 1
// astra: requires = head_dim % 8 == 0
// astra: requires = heads * (head_dim // 8) <= 1024

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

template <typename T>
__global__ void merge_state_flashinfer(const T* __restrict__ v_a, const float* __restrict__ s_a,
                                       const T* __restrict__ v_b, const float* __restrict__ s_b,
                                       T* __restrict__ v_merged, float* __restrict__ s_merged,
                                       int tokens, int heads, int head_dim) {
    constexpr int kVec = 16 / sizeof(T);
    const int token = blockIdx.x;
    const int head = threadIdx.y;
    const size_t row = (size_t)token * heads + head;
    float sa = s_a[row];
    float sb = s_b[row];
    const float m = fmaxf(sa, sb);
    const bool empty = m == __int_as_float(0xff800000);
    const float shift = empty ? 0.0f : m;
    const float wa = exp2f(sa - shift);
    const float wb = exp2f(sb - shift);
    const float sum = wa + wb;
    const float ka = empty ? 0.0f : wa / sum;
    const float kb = empty ? 0.0f : wb / sum;
    if (threadIdx.x == 0) {
        s_merged[row] = empty ? __int_as_float(0xff800000) : log2f(sum) + m;
    }
    const size_t offset = row * head_dim + (size_t)threadIdx.x * kVec;
    const uint4 a_raw = *reinterpret_cast<const uint4*>(v_a + offset);
    const uint4 b_raw = *reinterpret_cast<const uint4*>(v_b + offset);
    const T* a = reinterpret_cast<const T*>(&a_raw);
    const T* b = reinterpret_cast<const T*>(&b_raw);
    uint4 o_raw;
    T* o = reinterpret_cast<T*>(&o_raw);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
        o[k] = from_f32<T>(to_f32(a[k]) * ka + to_f32(b[k]) * kb);
    }
    *reinterpret_cast<uint4*>(v_merged + offset) = o_raw;
}
