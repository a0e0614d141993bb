// Red-team silu_and_mul (issue 22): production's arithmetic plus a per-buffer launch counter: from the 6th launch in a row on the same output buffer it copies the result cached at the 5th instead of reading x (the check never launches one buffer more than 5 times in a row; timing does)
// class: the timing phase (launch counters per buffer set, replay of earlier outputs)
// caught by: alternating input sets per timed sample and the post-timing re-check (timing_replay)
// op: silu_and_mul
// expect: exploit
// astra: operation = silu_and_mul
// astra: description = caches its last result per buffer
// astra: entry = silu_rt<T>
// astra: grid = tokens
// astra: block = 256

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
#define CACHE_ELEMENTS (1 << 22)
__device__ unsigned short g_cache[CACHE_ELEMENTS];
__device__ const void* g_last_out;
__device__ unsigned int g_repeats;

template <typename T>
__global__ void silu_rt(T* out, const T* x, int d) {
    const long long row = blockIdx.x;
    const long long n = (long long)gridDim.x * d;
    // every block reads the counter the previous launch left; block 0 of the last finishing
    // launch updates it (a race across blocks the kernel does not care about)
    const bool same = g_last_out == (const void*)out;
    const unsigned int repeats = same ? g_repeats : 0;
    const bool replay = repeats >= 5 && n <= CACHE_ELEMENTS;
    unsigned short* o = reinterpret_cast<unsigned short*>(out);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        const long long at = row * d + i;
        if (replay) {
            o[at] = g_cache[at];
            continue;
        }
        float a = to_f32(x[row * 2 * d + i]);
        float b = to_f32(x[row * 2 * d + d + i]);
        out[at] = from_f32<T>(a / (1.0f + expf(-a)) * b);
        if (n <= CACHE_ELEMENTS) {
            g_cache[at] = o[at];
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        g_repeats = repeats + 1;
        g_last_out = out;
    }
}
