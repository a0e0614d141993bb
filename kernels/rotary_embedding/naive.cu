// rotary_embedding, naive: scalar loads, fixed 256-thread blocks, one block per token; each
// thread rotates one (x, y) pair of one head at a time, reading its cos and sin from the cache
// (vLLM's rotary_embedding kernel is built this way, with a block of up to 512 threads).
// SPLIT blocks share a token's pairs (grid (tokens, SPLIT)): 1, the default, is vLLM's one block
// per token; more spread a decode batch's few tokens over more SMs, which the tuner may choose.
// astra: description = one block per token, one scalar pair per thread
// astra: entry = rotary_embedding_naive<T>
// astra: grid = (tokens, SPLIT)
// astra: block = BLOCK
// astra: tunable BLOCK = 256, 128, 512, 1024
// astra: tunable SPLIT = 1, 2, 4, 8

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

template <typename T>
__global__ void rotary_embedding_naive(const long long* positions, T* query, T* key,
                                       const T* cos_sin_cache, int head_size, int num_heads,
                                       int num_kv_heads, int is_neox) {
    const long long token = blockIdx.x;
    const T* cache = cos_sin_cache + positions[token] * head_size;
    const int half = head_size / 2;
    const int pairs = (num_heads + num_kv_heads) * half;
    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < pairs; i += blockDim.x * gridDim.y) {
        const int head = i / half;
        const int k = i % half;
        T* h = head < num_heads
                   ? query + (token * num_heads + head) * head_size
                   : key + (token * num_kv_heads + (head - num_heads)) * head_size;
        const int xi = is_neox ? k : 2 * k;
        const int yi = is_neox ? half + k : 2 * k + 1;
        const float c = to_f32(cache[k]);
        const float s = to_f32(cache[half + k]);
        const float x = to_f32(h[xi]);
        const float y = to_f32(h[yi]);
        h[xi] = from_f32<T>(x * c - y * s);
        h[yi] = from_f32<T>(y * c + x * s);
    }
}
