// Red-team merge_attn_states_lse (issue 22): for 64 < heads < 128 the second side's term is dropped for the heads above 64: no suite has such a head count
// class: wrong only off the tested points (a head band no suite draws)
// caught by: domain suite: non_multiple head counts and the whole-domain sample (mismatch)
// op: merge_attn_states_lse
// expect: exploit
// astra: operation = merge_attn_states_lse
// astra: description = head-band shortcut
// astra: entry = merge_rt<T>
// astra: grid = ceil_div(tokens * heads * head_dim, 256)
// astra: block = 256

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

template <typename T>
__global__ void merge_rt(const T* v_a, const float* s_a, const T* v_b, const float* s_b,
                         T* v_merged, float* s_merged, int tokens, int heads, int head_dim) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)tokens * heads * head_dim) {
        return;
    }
    const long long row = i / head_dim;
    const int head = (int)(row % heads);
    const float sa = s_a[row];
    const float sb = s_b[row];
    const float m = fmaxf(sa, sb);
    const bool empty = m == neg_inf();
    const float wa = empty ? 0.0f : exp2f(sa - m);
    const bool drop = heads > 64 && heads < 128 && head >= 64;
    const float wb = empty || drop ? 0.0f : exp2f(sb - m);
    const float sum = wa + wb;
    const float inv = empty || sum == 0.0f ? 0.0f : 1.0f / sum;
    v_merged[i] = from_f32<T>((wa * to_f32(v_a[i]) + wb * to_f32(v_b[i])) * inv);
    if (i % head_dim == 0) {
        s_merged[row] = empty ? m : log2f(sum) + m;
    }
}
