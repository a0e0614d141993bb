// merge_attn_states_lse, naive: a flat grid-stride loop over the elements, VEC consecutive
// elements per thread (one element, a scalar load, by default), fixed-size blocks; every thread
// re-reads both LSEs and recomputes the weights. The kind of starting point the Astra paper began
// from, with its knobs exposed so that tuning alone can change what limits it: VEC is the width
// of each thread's load (1, 2, 4 or 8 elements: 2 to 16 bytes; head_dim is a multiple of 8, so
// VEC elements never straddle a row), and with it how many elements, and LSE reads, a thread
// handles; BLOCK is the threads per block (the grid stops growing at 65536 blocks, then strides).
// VEC's widest value comes first after the default: a sweep cut short by its time budget has
// then tried the setting most likely to change the limit (16-byte accesses).
// astra: description = the kind of starting point the Astra paper began from
// astra: entry = merge_attn_states_lse_naive<T, VEC>
// astra: grid = min(ceil_div(tokens * heads * head_dim, BLOCK * VEC), 65536)
// astra: block = BLOCK
// astra: tunable BLOCK = 256, 128, 512, 1024
// astra: tunable VEC = 1, 8, 4, 2
// astra: requires = head_dim % VEC == 0

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// kWidth elements loaded and stored as one access of kWidth * sizeof(T) bytes (the header
// passes VEC as a macro, hence another name)
template <typename T, int kWidth>
struct alignas(sizeof(T) * kWidth) Pack {
    T x[kWidth];
};

template <typename T, int kWidth>
__global__ void merge_attn_states_lse_naive(const T* v_a, const float* s_a, const T* v_b,
                                            const float* s_b, T* v_merged, float* s_merged,
                                            int tokens, int heads, int head_dim) {
    const long long total = (long long)tokens * heads * head_dim;
    const long long stride = (long long)gridDim.x * blockDim.x * kWidth;
    for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * kWidth; i < total;
         i += stride) {
        const long long row = i / head_dim;  // token * heads + head
        const float sa = s_a[row];
        const float sb = s_b[row];
        // NaN propagates as the contract's max does (fmaxf alone would drop it)
        const float m = (sa != sa || sb != sb) ? __int_as_float(0x7fffffff) : fmaxf(sa, sb);
        const Pack<T, kWidth> a = *reinterpret_cast<const Pack<T, kWidth>*>(v_a + i);
        const Pack<T, kWidth> b = *reinterpret_cast<const Pack<T, kWidth>*>(v_b + i);
        Pack<T, kWidth> out;
        float s = m;  // -inf when both sides are empty
        for (int k = 0; k < kWidth; ++k) {
            float v = 0.0f;
            if (m != neg_inf()) {
                const float wa = exp2f(sa - m);
                const float wb = exp2f(sb - m);
                v = (wa * to_f32(a.x[k]) + wb * to_f32(b.x[k])) / (wa + wb);
                s = log2f(wa + wb) + m;
            }
            out.x[k] = from_f32<T>(v);
        }
        *reinterpret_cast<Pack<T, kWidth>*>(v_merged + i) = out;
        if (i % head_dim == 0) {
            s_merged[row] = s;
        }
    }
}
