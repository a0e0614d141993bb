// rms_norm, production-grade: as FlashInfer's RMSNorm and vLLM's vectorised rms_norm.
// One block per token, 16-byte vector loads and stores (8 halves), fp32 math, a warp-shuffle
// reduction then one cross-warp step. Each thread keeps the first VECS vectors it loads in
// registers, so a row of up to block * VECS vectors is read from memory once; the rest of a
// longer row is read again in the second pass (from L2, where the first pass just put it).
// The block is as wide as the row needs (below, rounded up to a warp) up to MAX_BLOCK (rows of
// at most 256 take the warp-a-row path further below).
// A row of at most MAX_BLOCK vectors below 256 tokens (decode) takes one thread a vector, from 64
// tokens only up to 640 vectors (below); every other row takes VECS (2) vectors a thread, so a
// row of up to 2 x MAX_BLOCK vectors is read once
// (prefill rows up to 16384, decode rows past 8192). On the H100 against one vector a thread with
// blocks of at most 256 from 256 tokens on (the rule before, as vLLM's rms_norm; device mode, one
// round, fp16 / bf16, benchmarks/results/2026-11-27-h100/rms-vecs-c2b6528/): 2048 x 8192 1.094 /
// 1.089, 512 x 5120 1.159 / 1.141, 3001 x 3584 1.064 / 1.071, 1000 x 16384 1.110 / 1.109, 33 x
// 12288 1.233 / 1.220, 2 x 8200 1.239 / 1.231; the decode rows 0.98-1.01. Two vectors a thread
// compile to 40 registers, one 1024-thread block an SM (1000 x 16384 0.91); __launch_bounds__(1024,
// 2) holds them to 32 (with bf16 converted by hand, below: CUDA's conversions spilled 8 bytes
// there; four vectors a thread spilled 100 bytes under the bound, so VECS 4 is not offered). A
// second body for one-vector rows (the other slots idle cost about 1%) spilled at bf16 and lost
// 2-4% there.
// From 64 tokens on, a row of more than 640 vectors (hidden above 5120) takes VECS (2) vectors
// a thread even below 256 tokens: half the warps to reduce across (a 7168-wide row was 28 warps).
// Against one vector a thread (H100, 2026-11-27, benchmarks/results/2026-11-27-h100/
// rotary-rms-rules/, fp16 / bf16): 77 x 7168 1.026 / 1.037 (SGLang's kernel had been 1.03x ours
// there in bf16), 128 x 7168 1.028 / 1.039, 64 x 8192 1.024 / 1.038, 200 x 8192 1.014 / 1.023,
// 160 x 6144 1.014 / 1.018; at exactly 640 vectors it lost at 255 x 5120 (0.971 / 0.991) and
// gained little at 64 x 5120 (1.004 / 1.014), so 640 stays with one vector a thread.
// Where the whole row is kept, the weight's vectors are loaded with the row's, before the
// reduction: at decode the row and the weight are each one cold DRAM round trip, and loaded
// after the barrier the weight's was a second one in series (SGLang 0.5.23's rmsnorm, which
// loads both up front, was 2.16 us against 2.48 at 1 x 4096 on the H100,
// benchmarks/results/2026-11-27-h100/rms-anchors-0f32808/).
// Rows of at most 256 (32 vectors: a per-head q/k norm) take one warp each, WARP_ROWS rows a
// block, reduced by shuffles alone: a block of one warp a row left idle lanes and a barrier per
// row, and at most 32 resident blocks an SM (SGLang's warp kernel was 4.52 us against 6.13 at
// 6000 x 256). With both (rms-production-2e2062e/, fp16): 1 x 4096 2.12 us (SGLang 2.17), 6000 x
// 256 4.03 (4.50), 4096 x 128 2.65 (4.00); the narrow-row rule is in bytes (512: 32 vectors).
// astra: description = one block per token (one warp per row up to 256), 16-byte vectors, up to VECS a thread, and the weight kept in registers, shuffle reduction
// astra: entry = rms_norm_vec<T, VECS>
// astra: params = out, input, weight, hidden, eps, tokens = tokens
// astra: grid = select(hidden * elem_bytes <= 512, ceil_div(tokens, WARP_ROWS), tokens)
// astra: block = select(hidden * elem_bytes <= 512, 32 * WARP_ROWS, min(round_up(select(tokens < 256 and hidden // 8 <= MAX_BLOCK and (tokens < 64 or hidden // 8 <= 640), hidden // 8, ceil_div(hidden // 8, VECS)), 32), MAX_BLOCK))
// astra: tunable VECS = 2, 1
// astra: tunable MAX_BLOCK = 1024, 256, 512
// astra: tunable WARP_ROWS = 8, 4, 16
// astra: requires = hidden % 8 == 0

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

// The block's total of v, returned to every thread; blockDim.x is a multiple of 32.
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

// A 32-bit word of two elements as two floats: bf16 is the high half of a float, so its
// conversion is a shift and a mask, written out (the intrinsics' conversion took more registers:
// two vectors a thread at bf16 spilled 8 bytes under the 32-register bound with them)
__device__ __forceinline__ float2 word_to_f32(unsigned int w, __half) {
    return __half22float2(*reinterpret_cast<const __half2*>(&w));
}
__device__ __forceinline__ float2 word_to_f32(unsigned int w, __nv_bfloat16) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
__device__ __forceinline__ unsigned int f32_to_word(float a, float b, __half) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const unsigned int*>(&h);
}
__device__ __forceinline__ unsigned int f32_to_word(float a, float b, __nv_bfloat16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const unsigned int*>(&h);
}

template <typename T>
__device__ __forceinline__ float sum_of_squares(const uint4& raw) {
    const unsigned int words[4] = {raw.x, raw.y, raw.z, raw.w};
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 v = word_to_f32(words[j], T());
        s += v.x * v.x + v.y * v.y;
    }
    return s;
}

template <typename T>
__device__ __forceinline__ uint4 normalise(const uint4& x_raw, const uint4& w_raw, float scale) {
    const unsigned int xs[4] = {x_raw.x, x_raw.y, x_raw.z, x_raw.w};
    const unsigned int ws[4] = {w_raw.x, w_raw.y, w_raw.z, w_raw.w};
    unsigned int o[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 xf = word_to_f32(xs[j], T());
        const float2 wf = word_to_f32(ws[j], T());
        o[j] = f32_to_word(xf.x * scale * wf.x, xf.y * scale * wf.y, T());
    }
    return make_uint4(o[0], o[1], o[2], o[3]);
}

// __launch_bounds__(1024, 2): the header above says why
template <typename T, int kVecs>
__global__ void __launch_bounds__(1024, 2)
    rms_norm_vec(T* __restrict__ out, const T* __restrict__ input, const T* __restrict__ weight,
                 int hidden, float eps, int tokens) {
    const int n = hidden / (16 / (int)sizeof(T));  // vectors per row
    const uint4* w_vec = reinterpret_cast<const uint4*>(weight);
    if (n <= 32) {
        // one warp a row (the header's geometry gives rows of at most 512 bytes, 32 vectors,
        // blocks of whole warps, one row each): no block barrier, so a warp past the last row
        // simply leaves
        const int lane = threadIdx.x % 32;
        const size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
        if (row >= (size_t)tokens) {
            return;
        }
        const uint4* in_vec = reinterpret_cast<const uint4*>(input + row * hidden);
        const bool active = lane < n;
        const uint4 x = active ? __ldg(in_vec + lane) : make_uint4(0, 0, 0, 0);
        const uint4 w = active ? __ldg(w_vec + lane) : make_uint4(0, 0, 0, 0);
        const float scale = rsqrtf(warp_sum(active ? sum_of_squares<T>(x) : 0.0f) / hidden + eps);
        if (active) {
            reinterpret_cast<uint4*>(out + row * hidden)[lane] = normalise<T>(x, w, scale);
        }
        return;
    }
    const size_t base = (size_t)blockIdx.x * hidden;
    const uint4* in_vec = reinterpret_cast<const uint4*>(input + base);
    uint4* out_vec = reinterpret_cast<uint4*>(out + base);
    const int stride = blockDim.x;
    const int spill = threadIdx.x + kVecs * stride;  // first vector not kept in registers

    // the weight comes with the row only where the block keeps the whole row (hidden at most
    // VECS vectors a thread: every decode row, and a prefill row with VECS 2): where part
    // of it is read again after the barrier, the weight read early only took its place in the
    // memory system (bf16 1000 x 16384 took 1 / 0.82 of the time, rms-production-2e2062e/)
    const bool whole_row = n <= kVecs * stride;
    uint4 kept[kVecs];
    uint4 kept_w[kVecs];
    float sum_sq = 0.0f;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {  // all loads issued before the first use
        const int i = threadIdx.x + k * stride;
        if (i < n) {
            kept[k] = __ldg(in_vec + i);
            if (whole_row) {
                kept_w[k] = __ldg(w_vec + i);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
        if (threadIdx.x + k * stride < n) {
            sum_sq += sum_of_squares<T>(kept[k]);
        }
    }
    for (int i = spill; i < n; i += stride) {
        sum_sq += sum_of_squares<T>(__ldg(in_vec + i));
    }

    const float scale = rsqrtf(block_sum(sum_sq) / hidden + eps);

#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
        const int i = threadIdx.x + k * stride;
        if (i < n) {
            out_vec[i] = normalise<T>(kept[k], whole_row ? kept_w[k] : __ldg(w_vec + i), scale);
        }
    }
    for (int i = spill; i < n; i += stride) {
        out_vec[i] = normalise<T>(__ldg(in_vec + i), __ldg(w_vec + i), scale);
    }
}
