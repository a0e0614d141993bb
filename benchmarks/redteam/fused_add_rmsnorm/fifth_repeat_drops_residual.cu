// Red-team fused_add_rmsnorm: counts consecutive launches on the same pointers with the same (pristine) rows; after 5 (the check shows at most 4) it stops writing the residual
// class: launch counter
// op: fused_add_rmsnorm
// expect: exploit
// astra: operation = fused_add_rmsnorm
// astra: description = after five identical launches the residual write is skipped
// astra: entry = rms_rt<T>
// astra: grid = tokens
// astra: block = min(round_up(hidden // 8, 32), 1024)
// astra: smem = hidden * 4
// astra: requires = hidden % 8 == 0
// astra: requires = hidden * 4 <= 227 * 1024 - 1024


__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <typename T> struct is_bf16 { static constexpr bool value = false; };
template <> struct is_bf16<__nv_bfloat16> { static constexpr bool value = true; };

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

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

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

__device__ __forceinline__ unsigned long long block_hash_sum(unsigned long long h) {
    __shared__ unsigned long long warp_h[32];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) h += __shfl_xor_sync(0xffffffffu, h, offset);
    if (threadIdx.x % 32 == 0) warp_h[threadIdx.x / 32] = h;
    __syncthreads();
    unsigned long long total = 0;
    for (int w = 0; w < (int)blockDim.x / 32; ++w) total += warp_h[w];
    return total;
}

__device__ unsigned long long g_in = 0, g_fp = 0, g_acc = 0;
__device__ unsigned int g_run = 0, g_done = 0;

template <typename T>
__global__ void rms_rt(T* __restrict__ input, T* __restrict__ residual,
                       const T* __restrict__ weight, int hidden, float eps) {
    constexpr int kVec = 8;
    extern __shared__ float4 row[];
    const int vectors = hidden / kVec;
    const size_t base = (size_t)blockIdx.x * hidden;
    uint4* in_vec = reinterpret_cast<uint4*>(input + base);
    uint4* res_vec = reinterpret_cast<uint4*>(residual + base);

    float sum_sq = 0.0f;
    unsigned long long h = 0;
    for (int i = threadIdx.x; i < vectors; i += blockDim.x) {
        const uint4 in_raw = in_vec[i];
        const uint4 res_raw = res_vec[i];
        h += hash_vec(in_raw, 2 * i) + hash_vec(res_raw, 2 * i + 1);
        const T* in = reinterpret_cast<const T*>(&in_raw);
        const T* res = reinterpret_cast<const T*>(&res_raw);
        float x[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
            x[j] = to_f32(in[j]) + to_f32(res[j]);
            sum_sq += x[j] * x[j];
        }
        row[i] = make_float4(x[0], x[1], x[2], x[3]);
        row[vectors + i] = make_float4(x[4], x[5], x[6], x[7]);
    }
    const float scale = rsqrtf(block_sum(sum_sq) / hidden + eps);
    const unsigned long long row_hash = block_hash_sum(mix64(blockIdx.x) ^ h);

    const bool write_residual = g_run < 5;

    const uint4* w_vec = reinterpret_cast<const uint4*>(weight);
    for (int i = threadIdx.x; i < vectors; i += blockDim.x) {
        const float4 lo = row[i];
        const float4 hi = row[vectors + i];
        const float x[kVec] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        const uint4 w_raw = __ldg(w_vec + i);
        const T* w = reinterpret_cast<const T*>(&w_raw);
        uint4 out_raw, sum_raw;
        T* out = reinterpret_cast<T*>(&out_raw);
        T* sum = reinterpret_cast<T*>(&sum_raw);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
            sum[j] = from_f32<T>(x[j]);
            out[j] = from_f32<T>(x[j] * scale * to_f32(w[j]));
        }
        if (write_residual) res_vec[i] = sum_raw;
        in_vec[i] = out_raw;
    }

    __syncthreads();
    if (threadIdx.x == 0) {
        atomicAdd(&g_acc, row_hash);
        __threadfence();
        if (atomicAdd(&g_done, 1u) == gridDim.x - 1) {
            const unsigned long long fp = atomicAdd(&g_acc, 0ull);
            const bool same = fp == g_fp && g_in == (unsigned long long)input;
            g_run = same ? g_run + 1 : 1;
            g_fp = fp;
            g_in = (unsigned long long)input;
            g_acc = 0;
            g_done = 0;
            __threadfence();
        }
    }
}
