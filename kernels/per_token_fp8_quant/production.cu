// per_token_fp8_quant, production-grade: one block per token, as vLLM's and SGLang's per-token
// kernels, with 16-byte vectors on both sides: a thread owns units of 16 elements (two 16-byte
// loads of x, one 16-byte store of 16 E4M3 bytes). The first VECS units a thread loads stay in
// registers between the |x| maximum (warp shuffles, then one cross-warp step) and the
// quantizing write, so a row of up to block * VECS units is read once; the rest of a longer row
// is read again (from L2, where the first pass just put it). The conversion is the sm_89+
// two-at-a-time cvt.rn.satfinite.e4m3x2.f32 (round to nearest-even, saturating), and x / scale
// is a true fp32 division (the quotient rounded once before the conversion).
// astra: description = one block per token, 16-byte loads and stores, row kept in registers
// astra: entry = per_token_fp8_quant_vec<T, VECS>
// astra: grid = tokens
// astra: block = min(round_up(ceil_div(hidden // 16, VECS), 32), MAX_BLOCK)
// astra: tunable VECS = 1, 2, 4
// astra: tunable MAX_BLOCK = 1024, 256, 512
// astra: requires = hidden % 16 == 0
#include <cuda_fp8.h>

// E4M3's largest finite value, and the scale's floor for an all-zero row (the contract's notes)
#define FP8_MAX 448.0f
#define MIN_SCALE (1.0f / (FP8_MAX * 512.0f))

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

// 16 elements of x: two 16-byte vectors
struct Unit {
    uint4 lo, hi;
};

template <typename T>
__device__ __forceinline__ float unit_amax(const Unit& u) {
    const T* a = reinterpret_cast<const T*>(&u.lo);
    const T* b = reinterpret_cast<const T*>(&u.hi);
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        m = fmaxf(m, fmaxf(fabsf(to_f32(a[j])), fabsf(to_f32(b[j]))));
    }
    return m;
}

template <typename T>
__device__ __forceinline__ uint4 quantize(const Unit& u, float s) {
    const T* a = reinterpret_cast<const T*>(&u.lo);
    const T* b = reinterpret_cast<const T*>(&u.hi);
    uint4 q;
    unsigned short* pairs = reinterpret_cast<unsigned short*>(&q);  // 8 pairs of E4M3 bytes
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        pairs[j] = __nv_cvt_float2_to_fp8x2(
            make_float2(to_f32(a[2 * j]) / s, to_f32(a[2 * j + 1]) / s), __NV_SATFINITE, __NV_E4M3);
        pairs[4 + j] = __nv_cvt_float2_to_fp8x2(
            make_float2(to_f32(b[2 * j]) / s, to_f32(b[2 * j + 1]) / s), __NV_SATFINITE, __NV_E4M3);
    }
    return q;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    return v;
}

// The block's maximum of v, returned to every thread; blockDim.x is a multiple of 32.
__device__ __forceinline__ float block_max(float v) {
    __shared__ float warp_maxima[32];
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    v = warp_max(v);
    if (lane == 0) {
        warp_maxima[warp] = v;
    }
    __syncthreads();
    v = lane < blockDim.x / 32 ? warp_maxima[lane] : 0.0f;
    return warp_max(v);
}

template <typename T, int kVecs>
__global__ void per_token_fp8_quant_vec(__nv_fp8_e4m3* __restrict__ out, const T* __restrict__ x,
                                        float* __restrict__ scale, int hidden) {
    const int n = hidden / 16;  // units per row
    const size_t base = (size_t)blockIdx.x * hidden;
    const uint4* x_vec = reinterpret_cast<const uint4*>(x + base);
    uint4* out_vec = reinterpret_cast<uint4*>(out + base);
    const int stride = blockDim.x;
    const int spill = threadIdx.x + kVecs * stride;  // first unit not kept in registers

    Unit kept[kVecs];
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {  // all loads issued before the first use
        const int i = threadIdx.x + k * stride;
        if (i < n) {
            kept[k].lo = __ldg(x_vec + 2 * i);
            kept[k].hi = __ldg(x_vec + 2 * i + 1);
        }
    }
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
        if (threadIdx.x + k * stride < n) {
            amax = fmaxf(amax, unit_amax<T>(kept[k]));
        }
    }
    for (int i = spill; i < n; i += stride) {
        amax = fmaxf(amax, unit_amax<T>(Unit{__ldg(x_vec + 2 * i), __ldg(x_vec + 2 * i + 1)}));
    }

    const float s = fmaxf(block_max(amax) / FP8_MAX, MIN_SCALE);
    if (threadIdx.x == 0) {
        scale[blockIdx.x] = s;
    }

#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
        const int i = threadIdx.x + k * stride;
        if (i < n) {
            out_vec[i] = quantize<T>(kept[k], s);
        }
    }
    for (int i = spill; i < n; i += stride) {
        out_vec[i] = quantize<T>(Unit{__ldg(x_vec + 2 * i), __ldg(x_vec + 2 * i + 1)}, s);
    }
}
