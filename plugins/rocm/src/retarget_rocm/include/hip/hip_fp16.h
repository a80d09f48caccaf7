/* retarget's stand-in for <hip/hip_fp16.h> (see hip_runtime.h): half is clang's _Float16, converted
   with round to nearest even, as ROCm's __float2half. */
#pragma once
#include "hip_runtime.h"

typedef _Float16 __half;

RT_FN float __half2float(__half x) { return (float)x; }
RT_FN __half __float2half(float x) { return (__half)x; }
