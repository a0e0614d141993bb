// astra-graph: <stdint.h> for NVRTC (see cstdint).
#pragma once
#include <cstdint>
