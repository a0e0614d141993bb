// merge_attn_states_lse, production-grade: FlashInfer's MergeState (which SGLang ships), with
// a flat grid. The rows (token, head) are contiguous in memory; a block of
// (head_dim/8, rows_per_block) threads merges rows_per_block consecutive rows, each thread one
// 16-byte vector (8 elements) of one row, so consecutive blocks read consecutive memory and a
// block's size does not depend on the head count (FlashInfer's one block per token needs
// heads * head_dim / 8 <= 1024 threads). Every thread issues its four loads (two vectors, two
// LSEs) before any arithmetic, so a decode-size launch waits on one round trip to memory. The
// weights use the hardware exp2 and an approximate reciprocal of a sum in [1, 2]
// (a few fp32 ulps, far inside the fp16/bf16 tolerance); the merged LSE keeps the accurate
// log2f, since it is checked as fp32. An empty side (LSE -inf) gets weight exactly 0 and the
// other exactly 1 (exp2(0) = 1 and 1/1 = 1 are exact), so it passes through bit-exact.
// Launches of up to LARGE_LAUNCH_THREADS threads (every shape but the largest prefill chunks)
// use THREADS-thread blocks and load with the L1::no_allocate streaming hint, which shortens
// them by ~2% on the H100. Larger launches are many waves long and bandwidth-bound: there the
// hint cost bandwidth and 1024-thread blocks beat 128-thread ones. Measured on the H100
// (2026-11-24, benchmarks/merge_sweep.py, 8192 x 64 x 128 fp16 against the FlashInfer-technique
// port at ~140.0 us): 128-thread blocks 141.9 us without the hint and 144.7 with it, 1024-thread
// blocks 139.5 us; two or four vectors per thread (139.7-141.6; bf16 up to 144.1) and
// evict-first loads and stores (ld/st.global.cs, 144.8-148.6) were not faster.
// astra: description = flat grid of rows, one 16-byte vector per input per thread, loads first
// astra: entry = merge_attn_states_lse_vec<T>
// astra: grid = ceil_div(tokens * heads, max(1, (THREADS + (1024 - THREADS) * (tokens * heads * (head_dim // 8) > 4194304)) // (head_dim // 8)))
// astra: block = (head_dim // 8, max(1, (THREADS + (1024 - THREADS) * (tokens * heads * (head_dim // 8) > 4194304)) // (head_dim // 8)))
// astra: tunable THREADS = 128, 64, 256, 512
// astra: requires = head_dim % 8 == 0
// astra: requires = ceil_div(tokens * heads, max(1, THREADS // (head_dim // 8))) < 2 ** 31

#define LARGE_LAUNCH_THREADS 4194304  // the header's geometry switches to 1024-thread blocks above

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

template <typename T>
__global__ void merge_attn_states_lse_vec(const T* __restrict__ v_a, const float* __restrict__ s_a,
                                          const T* __restrict__ v_b, const float* __restrict__ s_b,
                                          T* __restrict__ v_merged, float* __restrict__ s_merged,
                                          int tokens, int heads, int head_dim) {
    constexpr int kVec = 16 / sizeof(T);
    const size_t row = (size_t)blockIdx.x * blockDim.y + threadIdx.y;  // token * heads + head
    if (row >= (size_t)tokens * heads) {
        return;
    }
    const bool hint = (size_t)tokens * heads * (head_dim / kVec) <= LARGE_LAUNCH_THREADS;
    const size_t offset = row * head_dim + (size_t)threadIdx.x * kVec;
    const uint4 a_raw = load_stream(reinterpret_cast<const uint4*>(v_a + offset), hint);
    const uint4 b_raw = load_stream(reinterpret_cast<const uint4*>(v_b + offset), hint);
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

    const T* a = reinterpret_cast<const T*>(&a_raw);
    const T* b = reinterpret_cast<const T*>(&b_raw);
    uint4 o_raw;
    T* o = reinterpret_cast<T*>(&o_raw);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
        o[j] = from_f32<T>(fmaf(ka, to_f32(a[j]), kb * to_f32(b[j])));
    }
    *reinterpret_cast<uint4*>(v_merged + offset) = o_raw;
    if (threadIdx.x == 0) {
        s_merged[row] = empty ? m : log2f(sum) + m;
    }
}
