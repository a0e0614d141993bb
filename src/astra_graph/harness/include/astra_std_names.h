// astra-graph: makes libcu++'s cuda::std:: names visible as std::, and the fixed-width integer
// types globally, as <cstdint> does in a hosted C++ library. Shared by the shim headers.
#pragma once
#include <cuda/std/cstdint>
namespace std {
using namespace cuda::std;
}
using cuda::std::int8_t;
using cuda::std::int16_t;
using cuda::std::int32_t;
using cuda::std::int64_t;
using cuda::std::uint8_t;
using cuda::std::uint16_t;
using cuda::std::uint32_t;
using cuda::std::uint64_t;
using cuda::std::intptr_t;
using cuda::std::uintptr_t;
