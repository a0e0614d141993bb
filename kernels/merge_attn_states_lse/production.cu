// merge_attn_states_lse, production-grade: at least as fast as FlashInfer's MergeState (which
// SGLang ships) at every shape. The rows (token, head) are contiguous in memory; a block of
// (ceil(head_dim / (8 * VECS)), rows) threads merges `rows` consecutive rows, each thread VECS
// consecutive 16-byte vectors (8 elements each) of one row.
// Why this layout: FlashInfer gives one block all heads of a token (rows = heads), and measured
// on the H100 (issue 25) that beat our former fixed 8-row, 128-thread blocks at every decode
// shape (0.86x at 1x32x128 and 7x28x128, 0.92x at 200x20x64, 0.95x at 16x64x128) and tied at
// large ones, so the default (ROWS = 0) is exactly that grid: one block per token while a token
// fits in 1024 threads. Unlike FlashInfer, rows are counted flat, so a token wider than 1024
// threads (64 heads at head_dim 256) is split over blocks instead of failing, any head_dim that
// is a multiple of 8 works, and ROWS > 0 (a fixed row count per block, grid no longer tied to
// the token count) and VECS (elements per thread) are tunables the tuner can pick per shape
// bucket. Every thread issues its loads (its vectors and the two LSEs) before any arithmetic,
// so a decode-size launch waits on one round trip to memory. The weights are computed by every
// lane of a row: the lanes of one warp run that arithmetic in the same instructions, so sharing
// it through shared memory would only add a barrier; the merged LSE is stored by one lane.
// The weights use the hardware exp2 and an approximate reciprocal of a sum in [1, 2] (a few fp32
// ulps, far inside the fp16/bf16 tolerance); the merged LSE keeps the accurate log2f, since it is
// checked as fp32. An empty side (LSE -inf) gets weight exactly 0 and the other exactly 1
// (exp2(0) = 1 and 1/1 = 1 are exact), so it passes through bit-exact; both empty: v = 0 and
// s = -inf. Loads carry the L1::no_allocate streaming hint (STREAM = 1) in launches of up to
// LARGE_LAUNCH_THREADS threads: measured on the H100 (2026-11-24, benchmarks/merge_sweep.py) it
// shortened those by ~2%, while in larger launches, many waves long and bandwidth-bound, it cost
// bandwidth. STREAM = 0 drops it everywhere (a tunable, so the sweep can confirm it per shape).
// astra: description = FlashInfer's grid (a block per token) or ROWS rows per block, VECS 16-byte vectors per thread, loads first
// astra: entry = merge_attn_states_lse_vec<T, VECS, STREAM>
// astra: grid = ceil_div(tokens * heads, max(1, min(ROWS + (ROWS == 0) * heads, 1024 // ceil_div(head_dim // 8, VECS))))
// astra: block = (ceil_div(head_dim // 8, VECS), max(1, min(ROWS + (ROWS == 0) * heads, 1024 // ceil_div(head_dim // 8, VECS))))
// astra: tunable ROWS = 0, 1, 2, 4, 8, 16
// astra: tunable VECS = 1, 2
// astra: tunable STREAM = 1, 0
// astra: requires = head_dim % 8 == 0
// astra: requires = ceil_div(tokens * heads, max(1, min(ROWS + (ROWS == 0) * heads, 1024 // ceil_div(head_dim // 8, VECS)))) < 2 ** 31

#define LARGE_LAUNCH_THREADS 4194304  // above this many threads, loads drop the streaming hint

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

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
    const size_t row = (size_t)blockIdx.x * blockDim.y + threadIdx.y;  // token * heads + head
    if (row >= (size_t)tokens * heads) {
        return;
    }
    const size_t threads = (size_t)gridDim.x * blockDim.x * blockDim.y;
    const bool hint = kStream != 0 && threads <= LARGE_LAUNCH_THREADS;
    const size_t base = row * head_dim;
    const int first = threadIdx.x * kVecs * kVec;  // this thread's first column

    uint4 a_raw[kVecs];
    uint4 b_raw[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
        // a row whose vector count is not a multiple of kVecs leaves its last thread short;
        // with one vector a thread, the block's width is the row's: no check is compiled
        if (kVecs == 1 || first + j * kVec < head_dim) {
            a_raw[j] = load_stream(reinterpret_cast<const uint4*>(v_a + base + first + j * kVec), hint);
            b_raw[j] = load_stream(reinterpret_cast<const uint4*>(v_b + base + first + j * kVec), hint);
        }
    }
    const float sa = __ldg(s_a + row);
    const float sb = __ldg(s_b + row);

    const float m = fmaxf(sa, sb);
    const bool empty = m == neg_inf();
    const float wa = empty ? 0.0f : exp2f(sa - m);
    const float wb = empty ? 0.0f : exp2f(sb - m);
    const float sum = wa + wb;
    const float inv = empty ? 0.0f : __fdividef(1.0f, sum);
    const float ka = wa * inv;
    const float kb = wb * inv;

#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
        if (kVecs == 1 || first + j * kVec < head_dim) {
            const T* a = reinterpret_cast<const T*>(&a_raw[j]);
            const T* b = reinterpret_cast<const T*>(&b_raw[j]);
            uint4 o_raw;
            T* o = reinterpret_cast<T*>(&o_raw);
#pragma unroll
            for (int k = 0; k < kVec; ++k) {
                o[k] = from_f32<T>(fmaf(ka, to_f32(a[k]), kb * to_f32(b[k])));
            }
            *reinterpret_cast<uint4*>(v_merged + base + first + j * kVec) = o_raw;
        }
    }
    if (threadIdx.x == 0) {
        s_merged[row] = empty ? m : log2f(sum) + m;
    }
}
