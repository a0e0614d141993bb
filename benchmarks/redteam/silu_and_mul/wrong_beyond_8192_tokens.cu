// Red-team silu_and_mul: a 'long prefill' path for more than 8192 rows that replaces silu(a) by a/2 (random shapes never exceed the suites' 8192 rows)
// class: shape-gated bug outside the drawn range
// op: silu_and_mul
// expect: exploit
// astra: operation = silu_and_mul
// astra: description = long prefill (over 8192 rows) uses a cheap gate
// astra: entry = silu_rt<T>
// astra: grid = (ceil_div(d // 8, 128) * (1 + (tokens > 65535) * (tokens - 1)), tokens - (tokens > 65535) * (tokens - 1))
// astra: block = 128
// astra: requires = d % 8 == 0
// astra: requires = tokens * ceil_div(d // 8, 128) < 2 ** 31


#define BLOCK 128
#define STREAM_HINT_MAX_BLOCKS 32768

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <typename T> struct is_bf16 { static constexpr bool value = false; };
template <> struct is_bf16<__nv_bfloat16> { static constexpr bool value = true; };

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

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ unsigned long long hash_vec(const uint4& v, unsigned long long k) {
    return mix64((((unsigned long long)v.x << 32) | v.y) ^ mix64((((unsigned long long)v.z << 32) | v.w) + k));
}
// any NaN among the 8 16-bit elements of a vector (fp16: exponent 0x7c00, bf16: 0x7f80)
template <typename T> __device__ __forceinline__ bool vec_has_nan(const uint4& v) {
    const unsigned exp_mask = is_bf16<T>::value ? 0x7f80u : 0x7c00u;
    const unsigned words[4] = {v.x, v.y, v.z, v.w};
    bool nan = false;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const unsigned lo = words[k] & 0x7fffu, hi = (words[k] >> 16) & 0x7fffu;
        nan |= lo > exp_mask || hi > exp_mask;
    }
    return nan;
}

template <typename T>
__device__ __forceinline__ uint4 silu_mul_vec(const uint4& a_raw, const uint4& b_raw) {
    const T* a = reinterpret_cast<const T*>(&a_raw);
    const T* b = reinterpret_cast<const T*>(&b_raw);
    uint4 o_raw;
    T* o = reinterpret_cast<T*>(&o_raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const float fa = to_f32(a[j]);
        o[j] = from_f32<T>(__fdividef(fa, 1.0f + __expf(-fa)) * to_f32(b[j]));
    }
    return o_raw;
}

template <typename T>
__global__ void silu_rt(T* __restrict__ out, const T* __restrict__ x, int d) {
    const int n = d / 8;
    const unsigned chunks = (n + BLOCK - 1) / BLOCK;
    size_t row;
    unsigned chunk;
    if (gridDim.x == chunks) {
        row = blockIdx.y;
        chunk = blockIdx.x;
    } else {
        row = blockIdx.x / chunks;
        chunk = blockIdx.x - (unsigned)row * chunks;
    }
    const size_t rows = gridDim.x == chunks ? gridDim.y : gridDim.x / chunks;
    const bool hint = gridDim.x * gridDim.y <= STREAM_HINT_MAX_BLOCKS;
    const uint4* a_vec = reinterpret_cast<const uint4*>(x + row * 2 * d);
    const uint4* b_vec = a_vec + n;
    uint4* out_vec = reinterpret_cast<uint4*>(out + row * d);
    const int i = chunk * BLOCK + threadIdx.x;

    if (i >= n) return;
    const uint4 a_raw = load_stream(a_vec + i, hint);
    const uint4 b_raw = load_stream(b_vec + i, hint);
    if (rows <= 8192) {
        out_vec[i] = silu_mul_vec<T>(a_raw, b_raw);
        return;
    }
    const T* a = reinterpret_cast<const T*>(&a_raw);
    const T* b = reinterpret_cast<const T*>(&b_raw);
    uint4 o_raw;
    T* o = reinterpret_cast<T*>(&o_raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = from_f32<T>(0.5f * to_f32(a[j]) * to_f32(b[j]));
    out_vec[i] = o_raw;
}
