// The activation kernel of activation_kernels.cuh, brought in without editing it: these header
// lines say which operation it implements, how to instantiate and launch it, and what the
// launcher may tune; the kernel comes in through the #include.
// astra: operation = silu_and_mul
// astra: description = framework-style act_and_mul: functor template argument, scalar loads
// astra: entry = byok::act_and_mul_kernel<T, byok::SiluFunctor<T>, true>
// astra: params = out, x, d
// astra: grid = tokens
// astra: block = min(d, MAX_BLOCK)
// astra: tunable MAX_BLOCK = 1024, 128, 256, 512
#include "activation_kernels.cuh"
