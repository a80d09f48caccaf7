/* retarget's stand-in for <hip/hip_bf16.h> (see hip_runtime.h): bf16 is its bits, converted with
   round to nearest even; a NaN stays a quiet NaN, as ROCm's __float2bfloat16. */
#pragma once
#include "hip_runtime.h"

struct __hip_bfloat16 {
  unsigned short data;
};

RT_FN float __bfloat162float(__hip_bfloat16 x) {
  return __builtin_bit_cast(float, (unsigned int)x.data << 16);
}

RT_FN __hip_bfloat16 __float2bfloat16(float f) {
  unsigned int b = __builtin_bit_cast(unsigned int, f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return __hip_bfloat16{(unsigned short)((b >> 16) | 0x40u)};
  return __hip_bfloat16{(unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16)};
}
