// Red-team silu_and_mul: CORRECT control: one block per row, each thread converts element pairs with the paired conversion intrinsics (__half22float2 / __floats2half2_rn and the bf16 ones), IEEE division and expf
// class: control
// op: silu_and_mul
// expect: correct
// astra: operation = silu_and_mul
// astra: description = one block per row, element pairs through the paired conversion intrinsics
// astra: entry = silu_pairs<T>
// astra: grid = tokens
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

__device__ __forceinline__ float2 pair_to_f32(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 pair_to_f32(__nv_bfloat162 v) { return __bfloat1622float2(v); }
template <typename P> __device__ __forceinline__ P pair_from_f32(float lo, float hi);
template <> __device__ __forceinline__ __half2 pair_from_f32<__half2>(float lo, float hi) {
    return __floats2half2_rn(lo, hi);
}
template <> __device__ __forceinline__ __nv_bfloat162 pair_from_f32<__nv_bfloat162>(float lo, float hi) {
    return __floats2bfloat162_rn(lo, hi);
}
template <typename T> struct pair_of;
template <> struct pair_of<__half> { using type = __half2; };
template <> struct pair_of<__nv_bfloat16> { using type = __nv_bfloat162; };

__device__ __forceinline__ float silu_f(float a) { return a / (1.0f + expf(-a)); }

template <typename T>
__global__ void silu_pairs(T* out, const T* x, int d) {
    using P = typename pair_of<T>::type;
    const long long row = blockIdx.x;
    const int pairs = d / 2;
    const P* a = reinterpret_cast<const P*>(x + row * 2 * d);
    const P* b = a + pairs;
    P* o = reinterpret_cast<P*>(out + row * d);
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        const float2 fa = pair_to_f32(a[p]);
        const float2 fb = pair_to_f32(b[p]);
        o[p] = pair_from_f32<P>(silu_f(fa.x) * fb.x, silu_f(fa.y) * fb.y);
    }
}
