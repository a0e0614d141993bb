// torch's 16-bit element types for NVRTC, written for astra-graph (not torch's code).
//
// c10::Half and c10::BFloat16 are their own types in a framework's build, distinct from
// __half and __nv_bfloat16: code specialises templates for both, and chooses paths with
// std::is_same_v<scalar_t, c10::Half>. So they are distinct types here too, with the
// semantics torch documents: two bytes of storage (`x`), conversion to and from float (round
// to nearest even), to and from CUDA's type, and arithmetic that computes in float and rounds
// the result back (Half op Half -> Half; Half op float -> float; Half op double -> double;
// Half op int -> Half). A kernel is instantiated with these types
// (astra_framework_t<__half> is c10::Half), so it compiles the framework's own path.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

// The C++ library headers torch's element-type headers include (c10/util/Half.h and
// BFloat16.h: <cmath>, <cstdint>, <cstring>, <limits>, <type_traits>; <utility> through
// them), so a framework file gets them wherever it includes torch, as in its own build:
// vLLM's fp8 common.cuh uses std::is_same_v before any include of its own names
// <type_traits>. Here they are the std shims over libcu++ (harness/include).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

namespace c10 {

#define ASTRA_TORCH_16BIT(NAME, CUDA_T, TO_FLOAT, FROM_FLOAT)                                \
  struct alignas(2) NAME {                                                                   \
    unsigned short x;                                                                        \
    struct from_bits_t {};                                                                   \
    static constexpr __host__ __device__ from_bits_t from_bits() { return from_bits_t(); }  \
    NAME() = default;                                                                        \
    constexpr __host__ __device__ NAME(unsigned short bits, from_bits_t) : x(bits) {}        \
    __host__ __device__ NAME(float value) {                                                  \
      CUDA_T converted = FROM_FLOAT(value);                                                  \
      x = *reinterpret_cast<unsigned short*>(&converted);                                    \
    }                                                                                        \
    __host__ __device__ NAME(const CUDA_T& value) {                                          \
      x = *reinterpret_cast<const unsigned short*>(&value);                                  \
    }                                                                                        \
    __host__ __device__ operator float() const {                                             \
      return TO_FLOAT(*reinterpret_cast<const CUDA_T*>(&x));                                 \
    }                                                                                        \
    __host__ __device__ operator CUDA_T() const { return *reinterpret_cast<const CUDA_T*>(&x); } \
  };                                                                                         \
  inline __host__ __device__ NAME operator+(const NAME& a, const NAME& b) {                  \
    return static_cast<float>(a) + static_cast<float>(b);                                    \
  }                                                                                          \
  inline __host__ __device__ NAME operator-(const NAME& a, const NAME& b) {                  \
    return static_cast<float>(a) - static_cast<float>(b);                                    \
  }                                                                                          \
  inline __host__ __device__ NAME operator*(const NAME& a, const NAME& b) {                  \
    return static_cast<float>(a) * static_cast<float>(b);                                    \
  }                                                                                          \
  inline __host__ __device__ NAME operator/(const NAME& a, const NAME& b) {                  \
    return static_cast<float>(a) / static_cast<float>(b);                                    \
  }                                                                                          \
  inline __host__ __device__ NAME operator-(const NAME& a) { return -static_cast<float>(a); } \
  inline __host__ __device__ NAME& operator+=(NAME& a, const NAME& b) { return a = a + b; }  \
  inline __host__ __device__ NAME& operator-=(NAME& a, const NAME& b) { return a = a - b; }  \
  inline __host__ __device__ NAME& operator*=(NAME& a, const NAME& b) { return a = a * b; }  \
  inline __host__ __device__ NAME& operator/=(NAME& a, const NAME& b) { return a = a / b; }  \
  inline __host__ __device__ float operator+(NAME a, float b) { return static_cast<float>(a) + b; } \
  inline __host__ __device__ float operator-(NAME a, float b) { return static_cast<float>(a) - b; } \
  inline __host__ __device__ float operator*(NAME a, float b) { return static_cast<float>(a) * b; } \
  inline __host__ __device__ float operator/(NAME a, float b) { return static_cast<float>(a) / b; } \
  inline __host__ __device__ float operator+(float a, NAME b) { return a + static_cast<float>(b); } \
  inline __host__ __device__ float operator-(float a, NAME b) { return a - static_cast<float>(b); } \
  inline __host__ __device__ float operator*(float a, NAME b) { return a * static_cast<float>(b); } \
  inline __host__ __device__ float operator/(float a, NAME b) { return a / static_cast<float>(b); } \
  inline __host__ __device__ float& operator+=(float& a, const NAME& b) { return a += static_cast<float>(b); } \
  inline __host__ __device__ float& operator*=(float& a, const NAME& b) { return a *= static_cast<float>(b); } \
  inline __host__ __device__ double operator*(NAME a, double b) { return static_cast<double>(a) * b; } \
  inline __host__ __device__ double operator*(double a, NAME b) { return a * static_cast<double>(b); } \
  inline __host__ __device__ double operator+(NAME a, double b) { return static_cast<double>(a) + b; } \
  inline __host__ __device__ double operator+(double a, NAME b) { return a + static_cast<double>(b); } \
  inline __host__ __device__ NAME operator*(NAME a, int b) { return a * static_cast<NAME>(static_cast<float>(b)); } \
  inline __host__ __device__ NAME operator*(int a, NAME b) { return static_cast<NAME>(static_cast<float>(a)) * b; } \
  inline __host__ __device__ NAME operator+(NAME a, int b) { return a + static_cast<NAME>(static_cast<float>(b)); } \
  inline __host__ __device__ NAME operator+(int a, NAME b) { return static_cast<NAME>(static_cast<float>(a)) + b; }

ASTRA_TORCH_16BIT(Half, __half, __half2float, __float2half_rn)
ASTRA_TORCH_16BIT(BFloat16, __nv_bfloat16, __bfloat162float, __float2bfloat16_rn)
#undef ASTRA_TORCH_16BIT

// torch gives both types a read-only-cache load (found by argument-dependent lookup), which
// framework code uses as __ldg(&x[i]) on scalar_t pointers.
inline __device__ Half __ldg(const Half* p) { return __ldg(reinterpret_cast<const __half*>(p)); }
inline __device__ BFloat16 __ldg(const BFloat16* p) {
  return __ldg(reinterpret_cast<const __nv_bfloat16*>(p));
}

// 8-bit floats: storage, construction from bits and exact widening to float only. torch's
// rounding from float (saturating or not, per type) is not reproduced, so code that converts
// float to these through a constructor fails to compile here instead of rounding differently.
#define ASTRA_TORCH_8BIT(NAME, INTERPRETATION)                                               \
  struct alignas(1) NAME {                                                                   \
    unsigned char x;                                                                         \
    struct from_bits_t {};                                                                   \
    static constexpr __host__ __device__ from_bits_t from_bits() { return from_bits_t(); }  \
    NAME() = default;                                                                        \
    constexpr __host__ __device__ NAME(unsigned char bits, from_bits_t) : x(bits) {}         \
    __device__ operator float() const {                                                      \
      return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, INTERPRETATION)));               \
    }                                                                                        \
  };

ASTRA_TORCH_8BIT(Float8_e4m3fn, __NV_E4M3)
ASTRA_TORCH_8BIT(Float8_e5m2, __NV_E5M2)
#undef ASTRA_TORCH_8BIT

// ROCm's fp8 (exponent bias 8, a single zero): CUDA builds name it only in type tests (vLLM's
// std::is_same_v<quant_type_t, c10::Float8_e4m3fnuz>). CUDA has no conversion for it, so it is
// storage only: code that computes with it fails to compile here instead of being guessed.
struct alignas(1) Float8_e4m3fnuz {
  unsigned char x;
  struct from_bits_t {};
  static constexpr __host__ __device__ from_bits_t from_bits() { return from_bits_t(); }
  Float8_e4m3fnuz() = default;
  constexpr __host__ __device__ Float8_e4m3fnuz(unsigned char bits, from_bits_t) : x(bits) {}
};

}  // namespace c10

namespace at {
using c10::BFloat16;
using c10::Float8_e4m3fn;
using c10::Float8_e4m3fnuz;
using c10::Float8_e5m2;
using c10::Half;
}  // namespace at

namespace torch {
namespace headeronly {
using c10::BFloat16;
using c10::Float8_e4m3fn;
using c10::Float8_e4m3fnuz;
using c10::Float8_e5m2;
using c10::Half;
}  // namespace headeronly
}  // namespace torch

// torch's numeric_limits of Float8_e4m3fn (its bit patterns: no infinity, NaN 0x7F, largest
// finite 448 = 0x7E, smallest normal 2^-6 = 0x08, smallest subnormal 2^-9 = 0x01, epsilon
// 2^-3 = 0x20), which framework code reads as the fp8 range (vLLM's quant_type_max). std:: is
// libcu++'s cuda::std here (harness/include), so the specialisation is made there.
template <>
class cuda::std::numeric_limits<c10::Float8_e4m3fn> {
  using T = c10::Float8_e4m3fn;
  static constexpr __host__ __device__ T bits(unsigned char b) { return T(b, T::from_bits()); }

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = false;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = false;
  static constexpr int digits = 4;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -5;
  static constexpr int max_exponent = 8;
  static constexpr __host__ __device__ T min() { return bits(0x08); }
  static constexpr __host__ __device__ T lowest() { return bits(0xFE); }
  static constexpr __host__ __device__ T max() { return bits(0x7E); }
  static constexpr __host__ __device__ T epsilon() { return bits(0x20); }
  static constexpr __host__ __device__ T quiet_NaN() { return bits(0x7F); }
  static constexpr __host__ __device__ T denorm_min() { return bits(0x01); }
};

// glibc's uint and ushort: device.HOST_TYPEDEFS, written before this file.

// torch's portability macros (torch/headeronly/macros/Macros.h), which device code uses to
// annotate its functions; the header itself is replaced by this file.
#define C10_HOST_DEVICE __host__ __device__
#define C10_DEVICE __device__
#define C10_HOST __host__
#define C10_ALWAYS_INLINE __forceinline__
#define C10_LIKELY(expr) (__builtin_expect(static_cast<bool>(expr), 1))
#define C10_UNLIKELY(expr) (__builtin_expect(static_cast<bool>(expr), 0))

// math.h's POSIX constants, which framework code uses and NVRTC's headers do not define.
#ifndef M_PI
#define M_E 2.7182818284590452354
#define M_LOG2E 1.4426950408889634074
#define M_LN2 0.69314718055994530942
#define M_PI 3.14159265358979323846
#define M_PI_2 1.57079632679489661923
#define M_2_SQRTPI 1.12837916709551257390
#define M_SQRT2 1.41421356237309504880
#define M_SQRT1_2 0.70710678118654752440
#endif

// The framework's type for each element type under test (T in an imported header's entry).
template <typename T>
struct astra_framework_type {
  using type = T;
};
template <>
struct astra_framework_type<__half> {
  using type = c10::Half;
};
template <>
struct astra_framework_type<__nv_bfloat16> {
  using type = c10::BFloat16;
};
template <typename T>
using astra_framework_t = typename astra_framework_type<T>::type;

// The type a framework's caller instantiates a launcher with for each element type under test,
// where it spells its own (vLLM's merge_attn_states: uint16_t for half):
// astra_caller_t<T, type for __half, type for __nv_bfloat16, type for float>.
template <typename T, typename F16, typename BF16, typename F32>
struct astra_caller_type {
  using type = F32;
};
template <typename F16, typename BF16, typename F32>
struct astra_caller_type<__half, F16, BF16, F32> {
  using type = F16;
};
template <typename F16, typename BF16, typename F32>
struct astra_caller_type<__nv_bfloat16, F16, BF16, F32> {
  using type = BF16;
};
template <typename T, typename F16, typename BF16, typename F32>
using astra_caller_t = typename astra_caller_type<T, F16, BF16, F32>::type;
