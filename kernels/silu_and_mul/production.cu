// silu_and_mul, production-grade: as FlashInfer's act_and_mul, which SGLang ships.
// One block per token, 16-byte vector loads and stores (8 halves), block = min(d/8, 1024).
// astra: description = one block per token, 16-byte vectors, fp32 math rounded once
// astra: entry = silu_and_mul_vec<T>
// astra: grid = tokens
// astra: block = min(d // 8, MAX_BLOCK)
// astra: tunable MAX_BLOCK = 1024, 128, 256, 512
// astra: tunable FAST_MATH = 0, 1
// astra: requires = d % 8 == 0

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

template <typename T>
__global__ void silu_and_mul_vec(T* __restrict__ out, const T* __restrict__ x, int d) {
    constexpr int kVec = 16 / sizeof(T);
    const size_t row = blockIdx.x;
    const uint4* a_vec = reinterpret_cast<const uint4*>(x + row * 2 * d);
    const uint4* b_vec = reinterpret_cast<const uint4*>(x + row * 2 * d + d);
    uint4* out_vec = reinterpret_cast<uint4*>(out + row * d);
    for (int i = threadIdx.x; i < d / kVec; i += blockDim.x) {
        uint4 a_raw = __ldg(a_vec + i);
        uint4 b_raw = __ldg(b_vec + i);
        uint4 o_raw;
        const T* a = reinterpret_cast<const T*>(&a_raw);
        const T* b = reinterpret_cast<const T*>(&b_raw);
        T* o = reinterpret_cast<T*>(&o_raw);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
            const float fa = to_f32(a[j]);
            o[j] = from_f32<T>(fa / (1.0f + expf(-fa)) * to_f32(b[j]));
        }
        out_vec[i] = o_raw;
    }
}
