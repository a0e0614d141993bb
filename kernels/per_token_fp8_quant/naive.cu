// per_token_fp8_quant, naive: scalar loads, fixed 256-thread blocks, one block per token, a
// shared-memory tree reduction of |x|; the second pass re-reads x and stores one byte at a time.
// astra: description = the kind of starting point the Astra paper began from
// astra: entry = per_token_fp8_quant_naive<T>
// astra: grid = tokens
// astra: block = BLOCK
// astra: tunable BLOCK = 256, 128, 512, 1024
#include <cuda_fp8.h>

// E4M3's largest finite value, and the scale's floor for an all-zero row (the contract's notes)
#define FP8_MAX 448.0f
#define MIN_SCALE (1.0f / (FP8_MAX * 512.0f))

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void per_token_fp8_quant_naive(__nv_fp8_e4m3* out, const T* x, float* scale,
                                          int hidden) {
    __shared__ float partial[BLOCK];  // BLOCK: a power of two (the tree reduction halves it)
    const long long base = (long long)blockIdx.x * hidden;

    float amax = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        amax = fmaxf(amax, fabsf(to_f32(x[base + i])));
    }
    partial[threadIdx.x] = amax;
    __syncthreads();
    for (int width = blockDim.x / 2; width > 0; width /= 2) {
        if (threadIdx.x < width) {
            partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + width]);
        }
        __syncthreads();
    }

    const float s = fmaxf(partial[0] / FP8_MAX, MIN_SCALE);
    if (threadIdx.x == 0) {
        scale[blockIdx.x] = s;
    }
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        out[base + i] = __nv_fp8_e4m3(to_f32(x[base + i]) / s);  // round to nearest, saturating
    }
}
