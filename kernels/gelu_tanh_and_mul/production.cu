// gelu_tanh_and_mul, production-grade (tanh-approximated GELU): FlashInfer's act_and_mul refined for
// decode sizes, where a call is bound by launch and memory latency, not bandwidth.
// - Each thread owns VECS 16-byte vectors (8 halves each) of one row and issues all of its
//   loads of both halves of x before the first use; blocks cover BLOCK * VECS vectors of a row
//   instead of one block per token, so a few rows still spread over many SMs (at 16 x 4096 one
//   block per token used 16 of the H100's 132 SMs).
// - The grid is (chunks of a row, rows) up to 65535 rows, so a block finds its row and chunk
//   without an integer division (a runtime division cost ~0.09 us of 2.1 us at 16 x 4096 on
//   the H100); beyond gridDim.y's limit of 65535 the grid is flat (row = block / chunks).
// - Loads carry the L1::no_allocate streaming hint up to STREAM_HINT_MAX_BLOCKS blocks (measured
//   with silu_and_mul, the same traffic): it shortened a one-wave launch by ~2% on the H100
//   but cost ~1.5% of bandwidth on launches of many waves (8192 x 12288: 207.9 us with it,
//   203.2 us without), which load through the plain read-only path.
// - The activation is the tanh-approximated GELU in fp32, in a form without cancellation in the
//   negative tail, from one ex2 and one rcp (see gelu below): 12 instructions per element, 197
//   in the whole kernel for sm_90 (VECS = 1, fp16), where expf and the IEEE division took 338
//   up to the exit plus the division's slow path (1 x 8 on the H100: 2.05 us against vLLM
//   0.33.0's 1.84 us). The product is rounded once, at the store.
// - At the tiniest shapes a call is pure latency, so the path to the first load is
//   silu_and_mul's, as short as FlashInfer's in the SASS for sm_90: unsigned sizes (the vector
//   and chunk counts are shifts, not signed divisions, since BLOCK * VECS is a power of two) and a
//   32-bit row times the row width in one wide multiply (53 instructions before the first load
//   instead of 62 with signed sizes and a 64-bit row).
// - A thread with no vector in its row returns before any load. Otherwise, in bf16, the
//   conversions of the loaded halves ran inside the guarded region, so the warp reconverged only
//   once its loads had landed: 1.70 us against FlashInfer's 1.65 at 1 x 8, 1.74 against 1.67 at
//   3 x 24; with the early return 1.65 and 1.68, fp16 unchanged, no shape slower (H100, bench
//   against the previous production on every suite, 2026-11-27).
// - The same kernel as silu_and_mul's production kernel except for the activation: the
//   layout (x = [a | b] per row, 16-byte aligned halves) and the traffic are the same.
// astra: description = (row chunks, rows) grid, VECS 16-byte vectors per thread, loads first
// astra: entry = gelu_tanh_and_mul_vec<T, VECS>
// astra: grid = (ceil_div(d // 8, BLOCK * VECS) * (1 + (tokens > 65535) * (tokens - 1)), tokens - (tokens > 65535) * (tokens - 1))
// astra: block = BLOCK
// astra: tunable BLOCK = 128, 64, 256, 512
// astra: tunable VECS = 1, 2, 4
// astra: requires = d % 8 == 0
// astra: requires = tokens * ceil_div(d // 8, BLOCK * VECS) < 2 ** 31

#define STREAM_HINT_MAX_BLOCKS 32768

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// hardware approximations, denormals flushed: ex2 within 2 fp32 ulps, rcp within 1 (gelu below
// says why the flushing never reaches a result)
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

// The tanh approximation, a/2 * (1 + tanh(u)) with u = sqrt(2/pi) * (a + 0.044715 a^3), written
// as a / (1 + exp(-2u)) (1 + tanh(u) = 2 / (1 + exp(-2u))): the same function without the
// cancellation of 1 + tanhf(u) for negative u (vLLM's and FlashInfer's form), whose fp32 error
// grows past the fp16 tolerance in the tail (with tanh correctly rounded to fp32: 0.05% at
// a = -4, 30% at a = -5). exp(-2u) = 2^x, x = a (K1 + K2 a^2), by ex2 and the quotient by rcp:
// 12 instructions per element without a branch, where expf and the IEEE division (its range
// check, and a call to its slow path) took ~30 and left 7.3 KB of code.
//   Accuracy: in the tail the result's relative error is ln(2) times x's absolute error, with
// |x| up to 128, so x's roundings count: a^2 is exact (an fp16/bf16 a has at most 11 significant
// bits), and the product's rounding error xlo is recovered exactly by an fma and applied as
// 2^xlo ~ 1 + xlo ln2 to exp(-2u). Every fp16 and bf16 a, emulated step by step on the host with
// ex2 (2 ulps) and rcp (1 ulp) at their error bounds (tests/test_gelu_activation_accuracy.py):
// relative error at most 4.9e-6 (66 ulps, at a = -10 where x = 126), every input within the
// tolerance for every b; the expf form it replaces, with expf correctly rounded, reached 1.0e-5
// (fp16; 5.8e-6 for bf16), and without xlo this form reaches 7.5e-6.
//   Range: the exponent is computed from a clamped to +-TANH_CLAMP, where exp(-2u) is already 0
// or inf in fp32, so no intermediate is inf or NaN; the quotient takes a itself: a below about
// -10.06 gives 1 + exp(-2u) = inf and -0 (-inf: NaN, -inf * 0, as the reference has it), a large
// a gives a (+inf: inf), NaN stays NaN. 1 + exp(-2u) in (2^126, 2^128] has a subnormal reciprocal
// that rcp.approx.ftz would flush to 0 (times a bf16 b near 3.4e38 that is far above atol): the
// denominator is scaled by TANH_SCALE in the same fmas and a * TANH_SCALE (exact) takes it back
// in the last product, which rounds once. Each step is an explicit _rn intrinsic, so the
// compiler cannot contract it differently from what the test emulates.
#define TANH_CLAMP 16.0f           // x(-16) = 458 >= 128: exp(-2u) = inf; x(16) = -458: 0
#define TANH_K1 -0x1.26aec2p+1f    // -2 sqrt(2/pi) log2(e) (-2.3022082)
#define TANH_K2 -0x1.a5a7d0p-4f    // TANH_K1 * 0.044715 (-0.10294324)
#define TANH_SCALE 0x1p-8f         // 2^-8 * 2^128 = 2^120: its reciprocal is normal
#define LN2_SCALED 0x1.62e430p-9f  // ln(2) * TANH_SCALE

__device__ __forceinline__ float gelu(float a) {
    const float ac = fminf(fmaxf(a, -TANH_CLAMP), TANH_CLAMP);  // NaN: -TANH_CLAMP (a stays NaN)
    const float a2 = __fmul_rn(ac, ac);                          // exact for fp16/bf16 a
    const float k = __fmaf_rn(a2, TANH_K2, TANH_K1);
    const float x = __fmul_rn(ac, k);                            // -2u * log2(e), rounded
    const float xlo = __fmaf_rn(ac, k, -x);                      // its rounding error, exact
    const float c = __fmaf_rn(xlo, LN2_SCALED, TANH_SCALE);      // TANH_SCALE * 2^xlo
    const float den = __fmaf_rn(ex2(x), c, TANH_SCALE);          // TANH_SCALE * (1 + exp(-2u))
    return __fmul_rn(__fmul_rn(a, TANH_SCALE), rcp(den));
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
__device__ __forceinline__ uint4 act_mul_vec(const uint4& a_raw, const uint4& b_raw) {
    constexpr int kVec = 16 / sizeof(T);
    const T* a = reinterpret_cast<const T*>(&a_raw);
    const T* b = reinterpret_cast<const T*>(&b_raw);
    uint4 o_raw;
    T* o = reinterpret_cast<T*>(&o_raw);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
        const float fa = to_f32(a[j]);
        o[j] = from_f32<T>(gelu(fa) * to_f32(b[j]));
    }
    return o_raw;
}

template <typename T, int kVecs>
__global__ void gelu_tanh_and_mul_vec(T* __restrict__ out, const T* __restrict__ x, int d) {
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
    if (first >= n) {  // no vector of this thread is in the row (see the header: early exit)
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
            out_vec[i] = act_mul_vec<T>(a_raw[k], b_raw[k]);
        }
    }
}
