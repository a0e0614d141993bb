// gelu_and_mul, production-grade (exact GELU): FlashInfer's act_and_mul refined for
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
// - The activation is the exact GELU in fp32, without cancellation in the negative tail, from
//   one ex2, one rcp and a rational (see gelu below): 25 instructions per element, 302 in the
//   whole kernel for sm_90 (VECS = 1, fp16), where erfcf's ~48 (491 in all) made it compute-bound
//   at large shapes and slower at the tiniest (H100, device time, L2 flushed: 8192 x 16384
//   291 us against vLLM 0.33.0's erff form at the memory roof, 270 us; 1 x 8 2.14 us against
//   1.84 us, and silu_and_mul's production, this kernel with a cheap activation, 1.63 us). The
//   product is rounded once, at the store.
// - At the tiniest shapes a call is pure latency, so the path to the first load is
//   silu_and_mul's, as short as FlashInfer's in the SASS for sm_90: unsigned sizes (the vector
//   and chunk counts are shifts, not signed divisions, since BLOCK * VECS is a power of two) and a
//   32-bit row times the row width in one wide multiply (53 instructions before the first load
//   instead of 62 with signed sizes and a 64-bit row).
// - The same kernel as silu_and_mul's production kernel except for the activation: the
//   layout (x = [a | b] per row, 16-byte aligned halves) and the traffic are the same.
// astra: description = (row chunks, rows) grid, VECS 16-byte vectors per thread, loads first
// astra: entry = gelu_and_mul_vec<T, VECS>
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
// says where their inputs and outputs lie, so that the flushing never reaches a result)
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

// The exact GELU, gelu(a) = a * Phi(a) (Phi the normal CDF), computed as a * Q(|a|) for a < 0
// and a * (1 - Q(|a|)) for a >= 0, where Q(t) = erfc(t / sqrt(2)) / 2 is the upper tail, with a
// few fp32 ulps of RELATIVE error wherever a * Q is nonzero in fp32 (|a| < 14.37): no
// cancellation in the negative tail (vLLM's 0.5 * a * (1 + erff(a / sqrt(2))) is 4% off at
// a = -5 even with erf correctly rounded), in 25 instructions per element without a branch
// (2 MUFU), where erfcf took ~48 (3 MUFU) and was the limit at large shapes.
//   Q(t) = exp(-t^2 / 2) * R(t) with R = N / D, degree 4 over degree 5 (GELU_N*, GELU_D*): the
// degrees give R's 1/t decay, so one formula covers [0, 14.4] without a table or a select.
//   exp(-t^2 / 2) = 2^-y, y = t^2 log2(e) / 2: y's rounding would cost |y| 2^-24 relative (~60
// ulps at a = -14), so it is recovered exactly: t is an fp16/bf16 value (at most 11 significant
// bits), so t^2 is exact; yh = fl(t^2 * HI); s = SHIFT - yh is the ex2 argument and ys = SHIFT - s
// is exact (Sterbenz for yh < SHIFT/2, else s itself is exact), so y - ys = fma(t^2, HI, -ys) +
// t^2 * LO with |y - ys| < 2^-16, applied as 2^-(y - ys) ~ 1 - (y - ys) ln2 in w.
//   ex2.approx.ftz flushes results below 2^-126, which exp(-t^2 / 2) reaches at t > 13.2 while
// gelu(-t) is still a normal or subnormal fp32, and such a gelu times a bf16 b near 3.4e38 is far
// above atol: the ex2 argument is raised by GELU_EXP_SHIFT and w carries 2^-GELU_EXP_SHIFT into
// the last product of q, which rounds once into the subnormals (fp32 math here is not ftz).
//   |a| is clamped to GELU_CLAMP, where q rounds to exactly 0: a <= -GELU_CLAMP gives -0 (-inf:
// NaN, -inf * 0, as the float64 reference has it), a >= GELU_CLAMP gives a (+inf: inf), NaN stays
// NaN (fminf returns the clamp, and NaN * 1 is NaN), and nothing before the last product
// overflows.
//   Every fp16 and bf16 a, emulated step by step on the host with ex2 (2 ulps) and rcp (1 ulp) at
// their error bounds (tests/test_gelu_activation_accuracy.py): relative error at most 6.4e-7
// (9 ulps; 3.4e-7 with exact ex2 and rcp), absolute 9.5e-44 where q is subnormal (atol / b_max
// allows 2.9e-42 for bf16); every input within the tolerance for every b. The erfcf form it
// replaces, with erfcf correctly rounded, reached 1.2e-5 (188 ulps at a = -12.8, the rounding of
// its argument -a * 0.70710678f times erfc's 2x^2 sensitivity). Each step is an explicit _rn
// intrinsic, so the compiler cannot contract it differently from what the test emulates.
#define GELU_CLAMP 14.5f              // Q(14.5) ~ 6e-48 < 2^-150: q = 0 here and beyond
#define GELU_EXP_SHIFT 32.0f          // 2^(32 - y) >= 2^-119.7 > 2^-126 up to the clamp
#define GELU_EXP_UNSHIFT 0x1p-32f     // 2^-GELU_EXP_SHIFT
#define HALF_LOG2E_HI 0x1.715476p-1f  // log2(e) / 2 rounded to fp32 (0.7213475)
#define HALF_LOG2E_LO 0x1.4ae0c0p-27f // log2(e) / 2 - HALF_LOG2E_HI (9.63e-9)
#define LN2_UNSHIFTED 0x1.62e430p-33f // ln(2) * GELU_EXP_UNSHIFT
// R(t) = N(t) / D(t) ~ Q(t) exp(t^2 / 2): minimax relative error 5.8e-9 on [0, 14.4] (Lawson's
// iteration on the linearised error), 2.0e-8 with the coefficients rounded to fp32 as here
#define GELU_N0 0x1p-1f
#define GELU_N1 0x1.c09a92p-2f
#define GELU_N2 0x1.76f42ap-3f
#define GELU_N3 0x1.4c7254p-5f
#define GELU_N4 0x1.0d4410p-8f
#define GELU_D0 0x1p+0f
#define GELU_D1 0x1.ac8f7ap+0f
#define GELU_D2 0x1.33add2p+0f
#define GELU_D3 0x1.e0538ap-2f
#define GELU_D4 0x1.a0afccp-4f
#define GELU_D5 0x1.517882p-7f

__device__ __forceinline__ float gelu(float a) {
    const float t = fminf(fabsf(a), GELU_CLAMP);  // NaN: fminf gives the clamp, q = 0
    const float t2 = __fmul_rn(t, t);             // exact for fp16/bf16 t
    const float yh = __fmul_rn(t2, HALF_LOG2E_HI);
    const float s = __fsub_rn(GELU_EXP_SHIFT, yh);
    const float ys = __fsub_rn(GELU_EXP_SHIFT, s);  // exact: the y that s stands for
    // y - ys: the product's residual (exact fma) minus the subtraction's, plus the low constant
    const float yl = __fmaf_rn(t2, HALF_LOG2E_LO, __fmaf_rn(t2, HALF_LOG2E_HI, -ys));
    const float w = __fmaf_rn(yl, -LN2_UNSHIFTED, GELU_EXP_UNSHIFT);  // 2^-shift * 2^-yl
    float n = GELU_N4;  // N(t) and D(t) by Horner: positive terms, no cancellation
    n = __fmaf_rn(n, t, GELU_N3);
    n = __fmaf_rn(n, t, GELU_N2);
    n = __fmaf_rn(n, t, GELU_N1);
    n = __fmaf_rn(n, t, GELU_N0);
    float d = GELU_D5;
    d = __fmaf_rn(d, t, GELU_D4);
    d = __fmaf_rn(d, t, GELU_D3);
    d = __fmaf_rn(d, t, GELU_D2);
    d = __fmaf_rn(d, t, GELU_D1);
    d = __fmaf_rn(d, t, GELU_D0);
    const float q = __fmul_rn(__fmul_rn(__fmul_rn(ex2(s), n), rcp(d)), w);  // Q(t)
    // Phi = q for a < 0, 1 - q for a >= 0 (-0 too): |h - q| with h = 0 or 1, exact for h = 0
    const float h = a >= 0.0f ? 1.0f : 0.0f;
    return __fmul_rn(a, fabsf(__fsub_rn(h, q)));
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
__global__ void gelu_and_mul_vec(T* __restrict__ out, const T* __restrict__ x, int d) {
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
