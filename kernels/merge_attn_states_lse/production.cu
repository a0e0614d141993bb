// merge_attn_states_lse, production-grade: at least as fast as FlashInfer's MergeState (which
// SGLang ships) at every shape. The rows (token, head) are contiguous in memory; a block of
// (ceil(head_dim / (8 * VECS)), rows) threads merges `rows` consecutive rows, each thread VECS
// consecutive 16-byte vectors (8 elements each) of one row.
// The grid (ROWS = 0, the default) is a pure function of the sizes, chosen from measurements on
// the H100 (2026-11-25, benchmarks/results/2026-11-25-h100/: merge_sweep.json, anchors-*.md):
// - above DECODE_TOKENS = 256 tokens, FlashInfer's grid, one block per token (rows = heads):
//   there it tied or beat FlashInfer's own kernel (1.00-1.06x at 512-8192 tokens);
// - up to 256 tokens (decode), blocks of DECODE_BLOCK_THREADS = 128 threads (8 rows at
//   head_dim 128): the sweep of fixed row counts found 8 or 16 rows (128-256 threads) fastest at
//   every decode shape up to 256 tokens, 1-7% ahead of one block per token (16x64x128: 2.28-2.30
//   vs 2.45 us), since more, smaller blocks spread a small launch's loads over more SMs.
// A token wider than 1024 threads (64 heads at head_dim 256) is split over blocks instead of
// failing, any head_dim that is a multiple of 8 works, and ROWS > 0 (a fixed row count per
// block) and VECS (elements per thread) are tunables the tuner can pick per shape bucket.
// At decode the kernel is pure latency, so the path from launch to the last store is kept as
// short as FlashInfer's (counted in the SASS for sm_90): the row index is 32-bit (rows < 2^31,
// a requirement below) and becomes a 64-bit element offset in one wide multiply-add; every
// thread issues its loads (its vectors and the two LSEs) before any arithmetic; the weights use
// the hardware ex2, rcp and lg2 approximations with denormals flushed, without the range fix-ups
// and the polynomial log2f that the accurate library calls compile to (their tail, ~30
// dependent instructions before the store of s_merged, was the gap to FlashInfer at 1 token).
// Accuracy: the sum of the weights lies in [1, 2], where rcp.approx and lg2.approx are within a
// few fp32 ulps (lg2: absolute error ~2^-22), far inside the fp16/bf16 tolerance of v_merged and
// the 1e-5 absolute tolerance of s_merged; a weight below 2^-126 flushed to 0 changes v_merged by
// less than 2^-126 relative. An empty side (LSE -inf) gets weight exactly 0 and the other exactly
// 1 (ex2(0) = 1 and rcp(1) = 1 are exact), and s_merged is then the other side's LSE copied, not
// recomputed, so it passes through bit-exact; both empty: the weights' sum is 0, both scales 0,
// v = 0 and s = lg2(0) + (-inf) = -inf, as FlashInfer computes it.
// The weights are computed by every lane of a row: the lanes of one warp run that arithmetic in
// the same instructions, so sharing it through shared memory would only add a barrier. Every
// lane of a row also stores the merged LSE (the same value to the same address: one transaction
// per warp and row): with one lane storing it behind a branch, the kernel was 1-2.4% slower than
// FlashInfer's MergeStateKernel at 7-256 tokens (H100, 2026-11-26, 20 shapes x dtypes; the
// store by every lane moved the geomean from 1.004x to 1.022x and the worst shape from 0.976x to
// 0.995x: benchmarks/results/2026-11-26-h100/merge-store-variants-a61af77.json).
// Loads carry the L1::no_allocate streaming hint only with STREAM = 1, in launches of up to
// LARGE_LAUNCH_THREADS threads: on 2026-11-24 it shortened mid-size launches by ~2%, but the
// 2026-11-25 sweep found it 2-4% slower at the decode shapes with one block per token (1x32x128
// 1.97 vs 1.92 us, 16x64x128 2.56 vs 2.45) and within the noise elsewhere, so it is off by default.
// astra: description = a block per token above 256 tokens, 128-thread blocks at decode (or ROWS rows per block), VECS 16-byte vectors per thread, loads first, hardware ex2/rcp/lg2, the merged LSE stored by every lane of its row
// astra: entry = merge_attn_states_lse_vec<T, VECS, STREAM>
// astra: grid = ceil_div(tokens * heads, max(1, min(ROWS + (ROWS == 0) * ((tokens > 256) * heads + (tokens <= 256) * max(1, 128 // ceil_div(head_dim // 8, VECS))), 1024 // ceil_div(head_dim // 8, VECS))))
// astra: block = (ceil_div(head_dim // 8, VECS), max(1, min(ROWS + (ROWS == 0) * ((tokens > 256) * heads + (tokens <= 256) * max(1, 128 // ceil_div(head_dim // 8, VECS))), 1024 // ceil_div(head_dim // 8, VECS))))
// astra: tunable ROWS = 0, 1, 2, 4, 8, 16
// astra: tunable VECS = 1, 2
// astra: tunable STREAM = 0, 1
// astra: requires = head_dim % 8 == 0
// astra: requires = tokens * heads < 2 ** 31

#define LARGE_LAUNCH_THREADS 4194304  // above this many threads, loads drop the streaming hint

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// hardware approximations, denormals flushed (the header says why they are accurate enough)
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float rcp(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float lg2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// read-only data streamed once; `hint` is uniform across the launch
__device__ __forceinline__ uint4 load_stream(const uint4* p, bool hint) {
    if (!hint) {
        return __ldg(p);
    }
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

template <typename T, int kVecs, int kStream>
__global__ void merge_attn_states_lse_vec(const T* __restrict__ v_a, const float* __restrict__ s_a,
                                          const T* __restrict__ v_b, const float* __restrict__ s_b,
                                          T* __restrict__ v_merged, float* __restrict__ s_merged,
                                          int tokens, int heads, int head_dim) {
    constexpr int kVec = 16 / sizeof(T);
    // token * heads + head; the header requires tokens * heads < 2^31
    const unsigned row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= (unsigned)(tokens * heads)) {
        return;
    }
    const unsigned first = threadIdx.x * (kVecs * kVec);  // this thread's first column
    const size_t base = (size_t)row * (unsigned)head_dim + first;  // one wide multiply-add
    bool hint = false;
    if (kStream != 0) {
        hint = (size_t)gridDim.x * blockDim.x * blockDim.y <= LARGE_LAUNCH_THREADS;
    }

    uint4 a_raw[kVecs];
    uint4 b_raw[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
        // a row whose vector count is not a multiple of kVecs leaves its last thread short;
        // with one vector a thread, the block's width is the row's: no check is compiled
        if (kVecs == 1 || first + j * kVec < (unsigned)head_dim) {
            a_raw[j] = load_stream(reinterpret_cast<const uint4*>(v_a + base + j * kVec), hint);
            b_raw[j] = load_stream(reinterpret_cast<const uint4*>(v_b + base + j * kVec), hint);
        }
    }
    const float sa = __ldg(s_a + row);
    const float sb = __ldg(s_b + row);

    // both sides empty: sa - m is (-inf) - (-inf) = NaN, which fmaxf turns into -inf, weight 0
    const float m = fmaxf(sa, sb);
    const float wa = ex2(fmaxf(sa - m, neg_inf()));
    const float wb = ex2(fmaxf(sb - m, neg_inf()));
    const float sum = wa + wb;  // in [1, 2], or 0 when both sides are empty
    const float inv = sum > 0.0f ? rcp(sum) : 0.0f;
    // a NaN or +inf LSE has no weight: the contract's max propagates NaN and +inf - +inf is
    // NaN, so the reference's v and s are NaN there; the fmaxf guard above would weigh it 0
    const bool undefined = (sa != sa) | (sb != sb) | (m == __int_as_float(0x7f800000));
    const float ka = undefined ? __int_as_float(0x7fffffff) : wa * inv;
    const float kb = wb * inv;

#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
        if (kVecs == 1 || first + j * kVec < (unsigned)head_dim) {
            const T* a = reinterpret_cast<const T*>(&a_raw[j]);
            const T* b = reinterpret_cast<const T*>(&b_raw[j]);
            uint4 o_raw;
            T* o = reinterpret_cast<T*>(&o_raw);
#pragma unroll
            for (int k = 0; k < kVec; ++k) {
                o[k] = from_f32<T>(fmaf(ka, to_f32(a[k]), kb * to_f32(b[k])));
            }
            *reinterpret_cast<uint4*>(v_merged + base + j * kVec) = o_raw;
        }
    }
    // one side empty (the other's weight exactly 1): that side's LSE, bit-exact; selects
    // rather than branches, so the store waits on nothing but lg2 (every lane stores it: above)
    const float merged = lg2(sum) + m;
    const float one_side = wb == 0.0f ? sa : sb;
    const float defined = (wa == 0.0f || wb == 0.0f) ? one_side : merged;
    s_merged[row] = undefined ? __int_as_float(0x7fffffff) : defined;
}
