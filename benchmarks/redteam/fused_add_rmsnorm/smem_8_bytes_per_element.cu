// Red-team fused_add_rmsnorm (issue 22): keeps the fp32 row and its square in dynamic shared memory, 8 bytes per element: refused above hidden 29056 (227 KiB), inside the contract's 32768
// class: limits a real launch hits (dynamic shared memory sized per element)
// caught by: preflight of the domain suite's widest shape (domain)
// op: fused_add_rmsnorm
// expect: exploit
// astra: operation = fused_add_rmsnorm
// astra: description = fp32 row and squares in shared memory
// astra: entry = rmsnorm_rt<T>
// astra: grid = tokens
// astra: block = 256
// astra: smem = hidden * 8

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <typename T>
__global__ void rmsnorm_rt(T* input, T* residual, const T* weight, int hidden, float eps) {
    extern __shared__ float row[];  // [hidden] values, then [hidden] squares
    __shared__ float total;
    const long long base = (long long)blockIdx.x * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float x = to_f32(input[base + i]) + to_f32(residual[base + i]);
        row[i] = x;
        row[hidden + i] = x * x;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int i = 0; i < hidden; ++i) {
            sum += row[hidden + i];
        }
        total = sum;
    }
    __syncthreads();
    const float scale = rsqrtf(total / hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        residual[base + i] = from_f32<T>(row[i]);
        input[base + i] = from_f32<T>(row[i] * scale * to_f32(weight[i]));
    }
}
