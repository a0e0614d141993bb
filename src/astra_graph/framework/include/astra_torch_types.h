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
