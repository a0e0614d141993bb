// fused_add_rmsnorm, production-grade: as FlashInfer's FusedAddRMSNorm, which SGLang ships, with
// SGLang's register row where a row fits the block. One block per token, 16-byte vector loads
// and stores, the sum of squares reduced with warp shuffles and one cross-warp step. Between the
// reduction and the normalising write the fp32 sum row is kept
// - in registers where the row has at most one vector per thread (hidden <= 8 * block: every
//   shape up to hidden 8192 at the default MAX_BLOCK), as SGLang's register kernel does: the
//   shared-memory round trip of the row was the gap to it at 1-333 tokens on the H100 (0.95-0.98
//   at 9 shapes, benchmarks/results/2026-11-26-h100/anchors-cleanflush-6658c1d/);
// - else in dynamic shared memory, each thread looping over its vectors.
// Input and residual are each read once either way. __launch_bounds__(1024, 2) keeps the kernel
// at 32 registers (the register path alone compiled to 36-37 for bf16), so two 1024-thread
// blocks still fit an SM: an earlier register-row variant at 38-40 registers ran one block per
// SM and was 0.905x at 333x7168 (fused-add-rmsnorm-variants-4ec270a.json). The cost: rows wider
// than the block with 1-2 tokens, on the unchanged shared-memory path, ran 0.94-0.98 of the
// kernel before this change (2x8200, 1x16392 on the H100, fused-register-row-68d915e/), which
// 1-13-token rows up to hidden 4096 ran 1.01-1.05x faster.
// Dynamic shared memory is hidden * 4 bytes on the shared-memory path, none on the register path;
// above 48 KB the launcher must raise the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize.
// astra: description = one block per token, 16-byte vectors, fp32 row in registers (one vector per thread) or shared memory
// astra: entry = fused_add_rmsnorm_vec<T>
// astra: grid = tokens
// astra: block = min(round_up(hidden // 8, 32), MAX_BLOCK)
// astra: tunable MAX_BLOCK = 1024, 256, 512
// astra: smem = select(hidden // 8 <= MAX_BLOCK, 0, hidden * 4)
// astra: requires = hidden % 8 == 0
// astra: requires = hidden * 4 <= 227 * 1024 - 1024

// Element pairs convert in one instruction each way (cvt.rn.f16x2.f32 / .bf16x2.f32), half the
// conversions of element-by-element code on the path from the barrier to the last store.
__device__ __forceinline__ float2 pair_to_f32(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 pair_to_f32(__nv_bfloat162 v) { return __bfloat1622float2(v); }
template <typename T> struct Pair;
template <> struct Pair<__half> {
    using type = __half2;
    static __device__ __forceinline__ type from_f32(float a, float b) { return __floats2half2_rn(a, b); }
};
template <> struct Pair<__nv_bfloat16> {
    using type = __nv_bfloat162;
    static __device__ __forceinline__ type from_f32(float a, float b) {
        return __floats2bfloat162_rn(a, b);
    }
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

// The block's total of v, returned to every thread; blockDim.x is a multiple of 32.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_totals[32];
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0) {
        warp_totals[warp] = v;
    }
    __syncthreads();
    v = lane < blockDim.x / 32 ? warp_totals[lane] : 0.0f;
    return warp_sum(v);
}

constexpr int kVecBytes = 16;  // one uint4: 8 fp16/bf16 elements, two float4 of the fp32 row

// x = input + residual in fp32 for one vector; returns the sum rounded to T (the new residual)
// and adds x's squares to sum_sq.
template <typename T>
__device__ __forceinline__ uint4 add_vector(uint4 in_raw, uint4 res_raw, float* x, float& sum_sq) {
    using T2 = typename Pair<T>::type;
    const T2* in = reinterpret_cast<const T2*>(&in_raw);
    const T2* res = reinterpret_cast<const T2*>(&res_raw);
    uint4 sum_raw;
    T2* sum = reinterpret_cast<T2*>(&sum_raw);
#pragma unroll
    for (int j = 0; j < kVecBytes / 4; ++j) {
        const float2 a = pair_to_f32(in[j]);
        const float2 b = pair_to_f32(res[j]);
        x[2 * j] = a.x + b.x;
        x[2 * j + 1] = a.y + b.y;
        sum[j] = Pair<T>::from_f32(x[2 * j], x[2 * j + 1]);
        sum_sq += x[2 * j] * x[2 * j] + x[2 * j + 1] * x[2 * j + 1];
    }
    return sum_raw;
}

// x * scale * weight rounded once to T, for one vector.
template <typename T>
__device__ __forceinline__ uint4 normalise_vector(const float* x, float scale, uint4 w_raw) {
    using T2 = typename Pair<T>::type;
    const T2* w = reinterpret_cast<const T2*>(&w_raw);
    uint4 out_raw;
    T2* out = reinterpret_cast<T2*>(&out_raw);
#pragma unroll
    for (int j = 0; j < kVecBytes / 4; ++j) {
        const float2 wf = pair_to_f32(w[j]);
        out[j] = Pair<T>::from_f32(x[2 * j] * scale * wf.x, x[2 * j + 1] * scale * wf.y);
    }
    return out_raw;
}

template <typename T>
__global__ void __launch_bounds__(1024, 2)
    fused_add_rmsnorm_vec(T* __restrict__ input, T* __restrict__ residual,
                          const T* __restrict__ weight, int hidden, float eps) {
    constexpr int kVec = kVecBytes / sizeof(T);
    extern __shared__ float4 row[];  // [2][vectors]: halves stored apart, conflict-free
    const int vectors = hidden / kVec;
    const size_t base = (size_t)blockIdx.x * hidden;
    uint4* in_vec = reinterpret_cast<uint4*>(input + base);
    uint4* res_vec = reinterpret_cast<uint4*>(residual + base);
    const uint4* w_vec = reinterpret_cast<const uint4*>(weight);
    // The weight's first vector is loaded with the row, before the reduction, so its DRAM
    // latency overlaps the row's instead of following the barrier: one cold round trip fewer
    // at decode shapes, where every thread holds one vector (SGLang's register kernel, which
    // loads the weight up front, was 0.3 us faster at 1-77 tokens on the H100, ee25b74).
    const int first = static_cast<int>(threadIdx.x);
    const uint4 w_first = first < vectors ? __ldg(w_vec + first) : make_uint4(0, 0, 0, 0);

    // One vector per thread: the row in registers. The header asks no shared memory exactly when
    // this holds (its smem: hidden // 8 <= MAX_BLOCK, with block = min(round_up(hidden // 8, 32),
    // MAX_BLOCK)), so a launch by another geometry must give hidden * 4 bytes whenever the row
    // is wider than its block.
    if (vectors <= static_cast<int>(blockDim.x)) {
        float x[kVec];
        float sum_sq = 0.0f;
        if (first < vectors) {
            res_vec[first] = add_vector<T>(in_vec[first], res_vec[first], x, sum_sq);
        }
        const float scale = rsqrtf(block_sum(sum_sq) / hidden + eps);
        if (first < vectors) {
            in_vec[first] = normalise_vector<T>(x, scale, w_first);
        }
        return;
    }

    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < vectors; i += blockDim.x) {
        float x[kVec];
        res_vec[i] = add_vector<T>(in_vec[i], res_vec[i], x, sum_sq);
        row[i] = make_float4(x[0], x[1], x[2], x[3]);
        row[vectors + i] = make_float4(x[4], x[5], x[6], x[7]);
    }

    const float scale = rsqrtf(block_sum(sum_sq) / hidden + eps);

    for (int i = threadIdx.x; i < vectors; i += blockDim.x) {
        const float4 lo = row[i];  // written by this same thread above: no barrier needed
        const float4 hi = row[vectors + i];
        const float x[kVec] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        in_vec[i] = normalise_vector<T>(x, scale, i == first ? w_first : __ldg(w_vec + i));
    }
}
