// silu_and_mul with 16-byte loads: one block per token, 8 elements per thread per step.
// astra: description = vectorized test kernel
// astra: entry = silu_mul_vec8<T>
// astra: grid = tokens
// astra: block = min(d // 8, 1024)
// astra: requires = d % 8 == 0

__device__ __forceinline__ float as_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename T>
__global__ void silu_mul_vec8(T* __restrict__ out, const T* __restrict__ x, int d) {
    const size_t row = blockIdx.x;
    const uint4* gate = reinterpret_cast<const uint4*>(x + row * 2 * d);
    const uint4* up = reinterpret_cast<const uint4*>(x + row * 2 * d + d);
    uint4* dst = reinterpret_cast<uint4*>(out + row * d);
    for (int v = threadIdx.x; v < d / 8; v += blockDim.x) {
        uint4 g = gate[v];
        uint4 u = up[v];
        uint4 r;
        const T* gs = reinterpret_cast<const T*>(&g);
        const T* us = reinterpret_cast<const T*>(&u);
        T* rs = reinterpret_cast<T*>(&r);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const float a = as_float(gs[j]);
            store(rs + j, a * as_float(us[j]));
        }
        dst[v] = r;
    }
}
