// gelu_tanh_and_mul, naive: scalar loads, fixed 256-thread blocks, one block per token (tanh-approximated GELU).
// astra: description = the kind of starting point the Astra paper began from
// astra: entry = gelu_tanh_and_mul_naive<T>
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

// the tanh approximation, a/2 * (1 + tanh(u)) with u = sqrt(2/pi) * (a + 0.044715 a^3), written
// as a / (1 + exp(-2u)) (1 + tanh(u) = 2 / (1 + exp(-2u))): the same function without the
// cancellation of 1 + tanhf(u) for negative u (vLLM's and FlashInfer's form), whose fp32 error
// grows past the fp16 tolerance in the tail (with tanh correctly rounded to fp32: 0.05% at
// a = -4, 30% at a = -5); exp(-2u) = inf for very negative a gives -0
__device__ __forceinline__ float gelu(float a) {
    const float u = 0.79788456080286536f * (a + 0.044715f * a * a * a);
    return a / (1.0f + expf(-2.0f * u));
}

template <typename T>
__global__ void gelu_tanh_and_mul_naive(T* out, const T* x, int d) {
    const long long row = blockIdx.x;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float a = to_f32(x[row * 2 * d + i]);
        float b = to_f32(x[row * 2 * d + d + i]);
        out[row * d + i] = from_f32<T>(gelu(a) * b);
    }
}
