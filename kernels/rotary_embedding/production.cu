// rotary_embedding, production-grade: 16-byte vectors and a 2-D block with no division.
// - A thread rotates 8 pairs of one head: for NeoX one 16-byte vector of each half of the head,
//   for GPT-J the two 16-byte vectors holding 8 interleaved pairs; with one 16-byte vector each
//   of cos and sin from the token's cache row (the same row for every head: it stays in L1).
// - block = (head_size / 16, heads a block): threadIdx.x is the 8-pair chunk of a head,
//   threadIdx.y the head, so consecutive threads touch consecutive 16-byte vectors of one head,
//   then of the next (coalesced) and no thread divides to find its head and chunk (vLLM's scalar
//   kernel divides for every pair). grid = (tokens, head groups): query heads first, then key
//   heads, so at decode one token's heads spread over several SMs instead of one block.
// - Heads a block: HEADS, but no more than 128 threads hold (min(HEADS, 128 / threads a head));
//   at the default 8 that is fewer only above head size 256 (4 heads of 512). FlashInfer's rotary
//   kernels launch 128 threads. At head size 512, 8 heads a block (256 threads) put 2 tokens x 10
//   heads on 4 SMs and ran 0.975 / 0.960 of FlashInfer's kernel; 4 heads a block ran 1.013 /
//   1.036x the 8-head launch there, 0.994-1.056x (fp16) / 1.000-1.032x (bf16) at ten shapes of
//   head size 512, 400 and 336 and 1-4096 tokens, the slowest within the noise, and no suite
//   shape changed beyond it (H100, 2026-11-27, benchmarks/results/2026-11-27-h100/
//   rotary-rms-rules/).
// - fp32 math, each element rounded once; the layout flag is uniform over the launch (no
//   divergence).
// astra: description = 16-byte vectors, (chunk, head) blocks, (token, head group) grid
// astra: entry = rotary_embedding_vec<T>
// astra: grid = (tokens, ceil_div(num_heads + num_kv_heads, min(HEADS, max(1, 128 // (head_size // 16)))))
// astra: block = (head_size // 16, min(HEADS, max(1, 128 // (head_size // 16))))
// astra: tunable HEADS = 8, 4, 16, 32
// astra: requires = head_size % 16 == 0
// astra: requires = head_size // 16 <= 1024

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// Rotates 8 pairs: x[j] and y[j] (8 elements each, given as 16-byte vectors of T) by c[j], s[j].
template <typename T>
__device__ __forceinline__ void rotate8(float (&x)[8], float (&y)[8], const uint4& c_raw,
                                        const uint4& s_raw) {
    const T* c = reinterpret_cast<const T*>(&c_raw);
    const T* s = reinterpret_cast<const T*>(&s_raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const float cj = to_f32(c[j]);
        const float sj = to_f32(s[j]);
        const float xj = x[j];
        x[j] = xj * cj - y[j] * sj;
        y[j] = y[j] * cj + xj * sj;
    }
}

template <typename T>
__global__ void rotary_embedding_vec(const long long* __restrict__ positions, T* __restrict__ query,
                                     T* __restrict__ key, const T* __restrict__ cos_sin_cache,
                                     int head_size, int num_heads, int num_kv_heads, int is_neox) {
    static_assert(sizeof(T) == 2, "8 elements per 16-byte vector");
    const int head = blockIdx.y * blockDim.y + threadIdx.y;
    if (head >= num_heads + num_kv_heads) {
        return;
    }
    const size_t token = blockIdx.x;
    const int chunk = threadIdx.x;     // 8 pairs
    const int chunks = blockDim.x;     // head_size / 16: vectors per half head
    const uint4* cache =
        reinterpret_cast<const uint4*>(cos_sin_cache + __ldg(positions + token) * head_size);
    const uint4 c_raw = __ldg(cache + chunk);
    const uint4 s_raw = __ldg(cache + chunks + chunk);
    T* h = head < num_heads
               ? query + (token * num_heads + head) * head_size
               : key + (token * num_kv_heads + (head - num_heads)) * head_size;
    uint4* hv = reinterpret_cast<uint4*>(h);
    const int xi = is_neox ? chunk : 2 * chunk;            // NeoX: x in the first half,
    const int yi = is_neox ? chunks + chunk : 2 * chunk + 1;  // y in the second; GPT-J: both
    uint4 a_raw = hv[xi];                                   // vectors interleave x and y
    uint4 b_raw = hv[yi];
    T* a = reinterpret_cast<T*>(&a_raw);
    T* b = reinterpret_cast<T*>(&b_raw);
    float x[8], y[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        if (is_neox) {
            x[j] = to_f32(a[j]);
            y[j] = to_f32(b[j]);
        } else {  // pair j: elements 2j and 2j + 1 of the 16 in a, b
            const T* pair = j < 4 ? a + 2 * j : b + 2 * (j - 4);
            x[j] = to_f32(pair[0]);
            y[j] = to_f32(pair[1]);
        }
    }
    rotate8<T>(x, y, c_raw, s_raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        if (is_neox) {
            a[j] = from_f32<T>(x[j]);
            b[j] = from_f32<T>(y[j]);
        } else {
            T* pair = j < 4 ? a + 2 * j : b + 2 * (j - 4);
            pair[0] = from_f32<T>(x[j]);
            pair[1] = from_f32<T>(y[j]);
        }
    }
    hv[xi] = a_raw;
    hv[yi] = b_raw;
}
