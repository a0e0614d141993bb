// silu_and_mul, production-grade: FlashInfer's act_and_mul (which SGLang ships) refined for
// decode sizes, where a call is bound by launch and memory latency, not bandwidth.
// - Each thread owns VECS 16-byte vectors (8 halves each) of one row and issues all of its
//   loads of both halves of x before the first use; blocks cover BLOCK * VECS vectors of a row
//   instead of one block per token, so a few rows still spread over many SMs (at 16 x 4096 one
//   block per token used 16 of the H100's 132 SMs).
// - The grid is (chunks of a row, rows) up to 65535 rows, so a block finds its row and chunk
//   without an integer division (a runtime division cost ~0.09 us of 2.1 us at 16 x 4096 on
//   the H100); beyond gridDim.y's limit of 65535 the grid is flat (row = block / chunks).
// - Loads carry the L1::no_allocate streaming hint up to STREAM_HINT_MAX_BLOCKS blocks: it
//   shortened a one-wave launch by ~2% on the H100 but cost ~1.5% of bandwidth on launches of
//   many waves (8192 x 12288: 207.9 us with it, 203.2 us without), which load through the
//   plain read-only path.
// - silu is a * rcp(1 + ex2(-a * log2(e))) with the hardware ex2 and rcp approximations,
//   denormals flushed, as FlashInfer's fast-math build computes it: a few fp32 ulps, far inside
//   the fp16/bf16 tolerance; 1 + exp(-a) = inf for a < -88 gives rcp = 0 and -0. The library's
//   __expf and __fdividef without fast math add a denormal range fix-up to every exponential
//   (compare, halve, square: 3 more instructions per element on the critical path) and a range
//   check to every divide; an exponential below 2^-126 flushed to 0 changes 1 + exp(-a) by less
//   than an ulp, so the fix-up buys nothing here.
// - At the tiniest shapes (3 x 24, 5 x 1032: 1.75-1.90 us, a few percent behind FlashInfer's
//   1.70-1.85 us on the H100, 2026-11-25) a call is pure latency, so the path to the first load
//   is kept as short as FlashInfer's in the SASS for sm_90: unsigned sizes (the vector count and
//   chunk count are shifts, not signed divisions, since BLOCK * VECS is a power of two) and a
//   32-bit row times the row width in one wide multiply.
// - A thread with no vector in its row returns before any load, as gelu_tanh_and_mul's does
//   (there it closed a 4% gap to FlashInfer at bf16 decode): against the previous production on
//   every suite, both dtypes, no shape slower, bf16 2 x 8200 and 32 x 5120 2% faster (H100,
//   2026-11-27). gelu_and_mul keeps its form: the same change made its fp16 decode shapes
//   10-15% slower.
// astra: description = (row chunks, rows) grid, VECS 16-byte vectors per thread, loads first
// astra: entry = silu_and_mul_vec<T, VECS>
// astra: grid = (ceil_div(d // 8, BLOCK * VECS) * (1 + (tokens > 65535) * (tokens - 1)), tokens - (tokens > 65535) * (tokens - 1))
// astra: block = BLOCK
// astra: tunable BLOCK = 128, 64, 256, 512
// astra: tunable VECS = 1, 2, 4
// astra: requires = d % 8 == 0
// astra: requires = tokens * ceil_div(d // 8, BLOCK * VECS) < 2 ** 31

#define STREAM_HINT_MAX_BLOCKS 32768
#define LOG2E 1.4426950408889634f  // exp(x) = 2^(x * log2(e))

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

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
__device__ __forceinline__ uint4 silu_mul_vec(const uint4& a_raw, const uint4& b_raw) {
    constexpr int kVec = 16 / sizeof(T);
    const T* a = reinterpret_cast<const T*>(&a_raw);
    const T* b = reinterpret_cast<const T*>(&b_raw);
    uint4 o_raw;
    T* o = reinterpret_cast<T*>(&o_raw);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
        const float fa = to_f32(a[j]);
        o[j] = from_f32<T>(fa * rcp(1.0f + ex2(fa * -LOG2E)) * to_f32(b[j]));
    }
    return o_raw;
}

template <typename T, int kVecs>
__global__ void silu_and_mul_vec(T* __restrict__ out, const T* __restrict__ x, int d) {
    constexpr int kVec = 16 / sizeof(T);
    constexpr int kChunk = BLOCK * kVecs;  // BLOCK: the tunable, a compile-time constant
    const unsigned n = (unsigned)d / kVec;  // vectors per half row
    static_assert((kChunk & (kChunk - 1)) == 0, "BLOCK * VECS is a power of two: a shift");
    const unsigned chunks = (n + kChunk - 1) / kChunk;
    unsigned row;
    unsigned chunk;
    if (gridDim.x == chunks) {  // (chunks, rows) grid
        row = blockIdx.y;
        chunk = blockIdx.x;
    } else {  // flat grid, beyond 65535 rows
        row = blockIdx.x / chunks;
        chunk = blockIdx.x - row * chunks;
    }
    const bool hint = gridDim.x * gridDim.y <= STREAM_HINT_MAX_BLOCKS;
    const uint4* a_vec = reinterpret_cast<const uint4*>(x) + (size_t)row * (2 * n);
    const uint4* b_vec = a_vec + n;
    uint4* out_vec = reinterpret_cast<uint4*>(out) + (size_t)row * n;
    const unsigned first = chunk * kChunk + threadIdx.x;
    if (first >= n) {  // no vector of this thread is in the row: return before any load
        return;
    }
    uint4 a_raw[kVecs], b_raw[kVecs];
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
        const unsigned i = first + k * BLOCK;
        if (i < n) {
            a_raw[k] = load_stream(a_vec + i, hint);
            b_raw[k] = load_stream(b_vec + i, hint);
        }
    }
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
        const unsigned i = first + k * BLOCK;
        if (i < n) {
            out_vec[i] = silu_mul_vec<T>(a_raw[k], b_raw[k]);
        }
    }
}
