// rms_norm, naive: scalar loads, fixed 256-thread blocks, one block per token, a shared-memory
// tree reduction; the second pass re-reads the input and recomputes the scale per element.
// astra: description = the kind of starting point the Astra paper began from
// astra: entry = rms_norm_naive<T>
// astra: grid = tokens
// astra: block = BLOCK
// astra: tunable BLOCK = 256, 128, 512, 1024

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

template <typename T>
__global__ void rms_norm_naive(T* out, const T* input, const T* weight, int hidden, float eps) {
    __shared__ float partial[BLOCK];  // BLOCK: a power of two (the tree reduction halves it)
    const long long base = (long long)blockIdx.x * hidden;

    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float x = to_f32(input[base + i]);
        sum_sq += x * x;
    }
    partial[threadIdx.x] = sum_sq;
    __syncthreads();
    for (int width = blockDim.x / 2; width > 0; width /= 2) {
        if (threadIdx.x < width) {
            partial[threadIdx.x] += partial[threadIdx.x + width];
        }
        __syncthreads();
    }

    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float scale = rsqrtf(partial[0] / hidden + eps);
        out[base + i] = from_f32<T>(to_f32(input[base + i]) * scale * to_f32(weight[i]));
    }
}
