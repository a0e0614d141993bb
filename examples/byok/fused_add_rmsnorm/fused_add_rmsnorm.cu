// The RMSNorm kernel of layernorm_kernels.cuh, brought in without editing it. Its parameters
// come in its own order: the input's row stride and the token count are computed from the
// shape, eps and hidden are the contract's scalars.
// astra: operation = fused_add_rmsnorm
// astra: description = framework-style fused_add_rms_norm: cub::BlockReduce, scalar loads
// astra: entry = byok::fused_add_rms_norm_kernel<T, BLOCK>
// astra: params = input, input_stride: int64 = hidden, residual, weight, eps, num_tokens = tokens, hidden
// astra: grid = tokens
// astra: block = BLOCK
// astra: smem = hidden * 4
// astra: tunable BLOCK = 256, 128, 512, 1024
// astra: requires = hidden * 4 <= 227 * 1024 - 4096
#include "layernorm_kernels.cuh"
