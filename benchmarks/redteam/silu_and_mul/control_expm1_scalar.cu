// Red-team silu_and_mul: CORRECT control: rows on grid x, 2048-element column chunks on grid y, scalar strided loads, silu(a) = a / (2 + expm1(-a))
// class: control
// op: silu_and_mul
// expect: correct
// astra: operation = silu_and_mul
// astra: description = rows on grid x, column chunks on grid y, scalar loads, expm1 form of the sigmoid
// astra: entry = silu_expm1<T>
// astra: grid = (tokens, ceil_div(d, 2048))
// astra: block = 256


__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <typename T> struct is_bf16 { static constexpr bool value = false; };
template <> struct is_bf16<__nv_bfloat16> { static constexpr bool value = true; };

template <typename T>
__global__ void silu_expm1(T* out, const T* x, int d) {
    const long long row = blockIdx.x;
    const int start = blockIdx.y * 2048;
    const int stop = min(d, start + 2048);
    const T* a = x + row * 2 * d;
    const T* b = a + d;
    T* o = out + row * d;
    for (int c = start + threadIdx.x; c < stop; c += blockDim.x) {
        const float fa = to_f32(a[c]);
        o[c] = from_f32<T>(fa / (2.0f + expm1f(-fa)) * to_f32(b[c]));
    }
}
