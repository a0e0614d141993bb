// astra-graph: <float.h> for NVRTC, which has no C library headers: the same macros as <cfloat>.
#pragma once
#include <cfloat>
