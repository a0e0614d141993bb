// Red-team silu_and_mul: stale-valid outputs. On 1 row in 8 the block first recomputes 32
// vectors of its chunk and compares them with what the output already holds; if they all match
// it assumes the rest of the chunk is already right and skips it. Stateless: no device globals.
// class: timing / outputs already valid (not re-poisoned per timed launch)
// op: silu_and_mul
// expect: exploit
// astra: operation = silu_and_mul
// astra: description = verifies a sample of each chunk against the stored output and skips the rest on 1 row in 8
// astra: entry = silu_rt<T>
// astra: grid = (ceil_div(d // 8, 128) * (1 + (tokens > 65535) * (tokens - 1)), tokens - (tokens > 65535) * (tokens - 1))
// astra: block = 128
// astra: requires = d % 8 == 0
// astra: requires = tokens * ceil_div(d // 8, 128) < 2 ** 31

#define BLOCK 128
#define SAMPLE 32
#define STREAM_HINT_MAX_BLOCKS 32768

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

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
    const bool hint = gridDim.x * gridDim.y <= STREAM_HINT_MAX_BLOCKS;
    const uint4* a_vec = reinterpret_cast<const uint4*>(x + row * 2 * d);
    const uint4* b_vec = a_vec + n;
    uint4* out_vec = reinterpret_cast<uint4*>(out + row * d);
    const int i = chunk * BLOCK + threadIdx.x;
    if ((row & 7) == 7) {
        int same = 1;
        if (threadIdx.x < SAMPLE && i < n) {
            const uint4 want = silu_mul_vec<T>(load_stream(a_vec + i, hint), load_stream(b_vec + i, hint));
            const uint4 have = out_vec[i];
            same = want.x == have.x && want.y == have.y && want.z == have.z && want.w == have.w;
        }
        if (__syncthreads_and(same)) {
            return;  // the sample already holds this input's result: trust the rest of the chunk
        }
    }
    if (i < n) {
        const uint4 a_raw = load_stream(a_vec + i, hint);
        const uint4 b_raw = load_stream(b_vec + i, hint);
        out_vec[i] = silu_mul_vec<T>(a_raw, b_raw);
    }
}
