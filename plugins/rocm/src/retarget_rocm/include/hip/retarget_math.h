/* The math functions retarget's kernels call, for compiling without ROCm's device library (see
   hip_runtime.h). What LLVM's AMDGPU backend lowers itself (exp, log, sqrt, fabs, floor, ceil, rint,
   fma) is a clang builtin; the rest are small functions with the semantics of C's libm, which the
   reference (numpy) follows: NaN, infinities and signed zeros as C99 Annex F says.

   - sinf, cosf, tanf: the argument is reduced by pi/2 exactly enough at any size (Cody-Waite in
     double precision below 2^24, Payne-Hanek above); Cephes' polynomials on [-pi/4, pi/4].
   - tanhf, atanf: Cephes' polynomials and reductions. erff: the rational approximation Eigen and
     XLA use (within 5e-7). log1pf, expm1f: Goldberg's corrections of logf and expf.
   - powf: exp(y * log|x|) in double precision, with C's special cases. fmodf: exact (musl's
     integer long division). atan2f: atanf and C's quadrant and special cases.
   - f64: fabs, sqrt, floor, ceil, rint only; the target refuses other f64 math without ROCm.

   Only generic clang builtins appear here, so the file also compiles for the host CPU: the
   plugin's tests run these functions there against numpy. */
#pragma once

#ifndef RT_FN
#define RT_FN static inline
#endif

#define RT_INF __builtin_huge_valf()
#define RT_PI_F 3.14159265358979323846f
#define RT_PI_2_F 1.57079632679489661923f
#define RT_PI_4_F 0.78539816339744830962f

RT_FN float fabsf(float x) { return __builtin_fabsf(x); }
RT_FN float sqrtf(float x) { return __builtin_sqrtf(x); }
RT_FN float floorf(float x) { return __builtin_floorf(x); }
RT_FN float ceilf(float x) { return __builtin_ceilf(x); }
RT_FN float rintf(float x) { return __builtin_rintf(x); }
RT_FN float expf(float x) { return __builtin_expf(x); }
RT_FN float logf(float x) { return __builtin_logf(x); }

RT_FN double fabs(double x) { return __builtin_fabs(x); }
RT_FN double sqrt(double x) { return __builtin_sqrt(x); }
RT_FN double floor(double x) { return __builtin_floor(x); }
RT_FN double ceil(double x) { return __builtin_ceil(x); }
RT_FN double rint(double x) { return __builtin_rint(x); }

/* 2/pi in binary, 32 bits a word from the first bit after the point */
#define RT_TWO_OVER_PI(i) \
  ((i) == 0 ? 0xa2f9836eu : (i) == 1 ? 0x4e441529u : (i) == 2 ? 0xfc2757d1u : (i) == 3 ? 0xf534ddc0u : \
   (i) == 4 ? 0xdb629599u : (i) == 5 ? 0x3c439041u : (i) == 6 ? 0xfe5163abu : 0xdebbc561u)

/* the 32 bits of 2/pi from bit s (0-based; bits before the point are zero) */
RT_FN unsigned int rt_two_over_pi_bits(int s) {
  int q = s >= 0 ? s / 32 : -((31 - s) / 32), r = s - 32 * q;
  unsigned int hi = q < 0 ? 0u : RT_TWO_OVER_PI(q), lo = q + 1 < 0 ? 0u : RT_TWO_OVER_PI(q + 1);
  return r ? (hi << r) | (lo >> (32 - r)) : hi;
}

/* Payne-Hanek, for a finite |x| >= 2^24: x = m 2^e (m the 24-bit significand), so x 2/pi mod 4 is
   m times the 96 bits of 2/pi from bit e - 2, scaled by 2^-94: the quadrant is bits 94-95 of that
   product, and the 64 bits below them are the fraction, within 2^-70. */
RT_FN double rt_reduce_pi_2_large(float x, int *quadrant) {
  unsigned int bits = __builtin_bit_cast(unsigned int, x);
  unsigned long long m = (bits & 0x7fffffu) | 0x800000u;
  int s = (int)((bits >> 23) & 0xff) - 152;
  unsigned long long p = m * rt_two_over_pi_bits(s + 64);
  unsigned int l0 = (unsigned int)p;
  p = m * rt_two_over_pi_bits(s + 32) + (p >> 32);
  unsigned int l1 = (unsigned int)p;
  p = m * rt_two_over_pi_bits(s) + (p >> 32);
  unsigned int l2 = (unsigned int)p;
  int q = (int)(l2 >> 30);
  long long f = (long long)(((unsigned long long)(l2 & 0x3fffffffu) << 34) | ((unsigned long long)l1 << 2) |
                            (l0 >> 30));
  if (f < 0) q += 1;  /* a fraction of 1/2 or more is the next quadrant, less 1 */
  double r = (double)f * 5.421010862427522e-20 * 1.5707963267948966;  /* f 2^-64 pi/2 */
  *quadrant = (bits >> 31) ? -q & 3 : q & 3;
  return (bits >> 31) ? -r : r;
}

/* x = k pi/2 + r with |r| <= pi/4; returns r, and k mod 4 in *quadrant. Below 2^24, k fits in 24 bits,
   and two parts of pi/2 in double precision (Cody-Waite) give r to within 2^-60 or so; above, Payne-Hanek. */
RT_FN float rt_reduce_pi_2(float x, int *quadrant) {
  if (!(__builtin_fabsf(x) < 16777216.0f)) {
    if (x - x != 0.0f) {  /* inf or NaN: sin and cos are NaN */
      *quadrant = 0;
      return x - x;
    }
    return (float)rt_reduce_pi_2_large(x, quadrant);
  }
  double xd = (double)x;
  double k = __builtin_rint(xd * 0.63661977236758134308);
  if (k == 0.0) {
    *quadrant = 0;
    return x;  /* keeps -0 */
  }
  double r = __builtin_fma(-k, 1.5707963267948966, xd);
  r = __builtin_fma(-k, 6.123233995736766e-17, r);
  *quadrant = (int)k & 3;
  return (float)r;
}

RT_FN float rt_sin_poly(float r) {
  float z = r * r;
  return r + r * z * (-1.6666654611e-1f + z * (8.3321608736e-3f + z * -1.9515295891e-4f));
}

RT_FN float rt_cos_poly(float r) {
  float z = r * r;
  return 1.0f - 0.5f * z + z * z * (4.166664568298827e-2f + z * (-1.388731625493765e-3f + z * 2.443315711809948e-5f));
}

RT_FN float sinf(float x) {
  if (x == 0.0f) return x;  /* keeps -0 */
  int q;
  float r = rt_reduce_pi_2(x, &q);
  float v = (q & 1) ? rt_cos_poly(r) : rt_sin_poly(r);
  return (q & 2) ? -v : v;
}

RT_FN float cosf(float x) {
  int q;
  float r = rt_reduce_pi_2(x, &q);
  float v = (q & 1) ? rt_sin_poly(r) : rt_cos_poly(r);
  return ((q + 1) & 2) ? -v : v;
}

RT_FN float tanf(float x) {
  if (x == 0.0f) return x;
  int q;
  float r = rt_reduce_pi_2(x, &q);
  float s = rt_sin_poly(r), c = rt_cos_poly(r);
  return (q & 1) ? -c / s : s / c;
}

RT_FN float tanhf(float x) {
  float a = __builtin_fabsf(x);
  if (x == 0.0f) return x;  /* keeps -0 */
  if (a < 0.625f) {
    float z = x * x;
    return x + x * z * ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                         1.33314422036e-1f) * z - 3.33332819422e-1f);
  }
  if (!(a < 9.0f)) return a == a ? __builtin_copysignf(1.0f, x) : x;  /* tanh rounds to 1; or NaN */
  float e = __builtin_expf(2.0f * a);
  return __builtin_copysignf(1.0f - 2.0f / (e + 1.0f), x);
}

RT_FN float atanf(float x) {
  float a = __builtin_fabsf(x), base = 0.0f, t = a;
  if (a > 2.414213562373095f) {
    base = RT_PI_2_F;
    t = -1.0f / a;
  } else if (a > 0.4142135623730950f) {
    base = RT_PI_4_F;
    t = (a - 1.0f) / (a + 1.0f);
  }
  float z = t * t;
  float y = base + ((((8.05374449538e-2f * z - 1.38776856032e-1f) * z + 1.99777106478e-1f) * z -
                     3.33329491539e-1f) * z * t + t);
  return __builtin_copysignf(y, x);
}

RT_FN float atan2f(float y, float x) {
  if (x != x || y != y) return x + y;
  float ax = __builtin_fabsf(x), ay = __builtin_fabsf(y);
  if (ax == RT_INF && ay == RT_INF) return __builtin_copysignf(x > 0.0f ? RT_PI_4_F : 3.0f * RT_PI_4_F, y);
  if (ax == RT_INF) return __builtin_copysignf(x > 0.0f ? 0.0f : RT_PI_F, y);
  if (ay == RT_INF) return __builtin_copysignf(RT_PI_2_F, y);
  if (y == 0.0f) return __builtin_copysignf(__builtin_signbit(x) ? RT_PI_F : 0.0f, y);
  if (x == 0.0f) return __builtin_copysignf(RT_PI_2_F, y);
  float r = atanf(ay / ax);  /* in [0, pi/2] */
  if (x < 0.0f) r = RT_PI_F - r;
  return __builtin_copysignf(r, y);
}

RT_FN float erff(float x) {
  x = x != x ? x : x < -4.0f ? -4.0f : x > 4.0f ? 4.0f : x;
  float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return x * (p / q);  /* p / q first: x may be subnormal */
}

RT_FN float log1pf(float x) {
  float u = 1.0f + x;
  if (u - u != 0.0f) return __builtin_logf(u);  /* inf or NaN */
  return u == 1.0f ? x : __builtin_logf(u) * (x / (u - 1.0f));
}

RT_FN float expm1f(float x) {
  float u = __builtin_expf(x);
  if (u == 1.0f) return x;
  if (u - u != 0.0f) return u;  /* inf or NaN */
  if (u - 1.0f == -1.0f) return -1.0f;
  return (u - 1.0f) * (x / __builtin_logf(u));
}

/* 2^k for an integer |k| <= 2000, as two in-range factors */
RT_FN double rt_scale(double v, int k) {
  int h = k / 2;
  double a = __builtin_bit_cast(double, (unsigned long long)(h + 1023) << 52);
  double b = __builtin_bit_cast(double, (unsigned long long)(k - h + 1023) << 52);
  return v * a * b;
}

/* e^t for |t| <= 1000, to about 1e-16: t = k ln2 + r, |r| <= ln2 / 2, Taylor to r^13 */
RT_FN double rt_exp_double(double t) {
  double k = __builtin_rint(t * 1.4426950408889634);
  double r = __builtin_fma(-k, 0.6931471805599453, t);
  r = __builtin_fma(-k, 2.3190468138462996e-17, r);
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  return rt_scale(p, (int)k);
}

/* ln x for a normal, finite x > 0, to about 1e-16: x = m 2^e with m in [sqrt(1/2), sqrt(2)),
   ln m = 2 atanh(s) with s = (m - 1) / (m + 1), |s| < 0.172, the series to s^19 */
RT_FN double rt_log_double(double x) {
  unsigned long long b = __builtin_bit_cast(unsigned long long, x);
  int e = (int)((b >> 52) & 0x7ff) - 1023;
  double m = __builtin_bit_cast(double, (b & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);
  if (m > 1.4142135623730951) {
    m *= 0.5;
    e += 1;
  }
  double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double p = 1.0 / 19.0;
  p = p * s2 + 1.0 / 17.0;
  p = p * s2 + 1.0 / 15.0;
  p = p * s2 + 1.0 / 13.0;
  p = p * s2 + 1.0 / 11.0;
  p = p * s2 + 1.0 / 9.0;
  p = p * s2 + 1.0 / 7.0;
  p = p * s2 + 1.0 / 5.0;
  p = p * s2 + 1.0 / 3.0;
  return e * 0.6931471805599453 + (e * 2.3190468138462996e-17 + 2.0 * s * p * s2) + 2.0 * s;
}

RT_FN float powf(float x, float y) {
  if (y == 0.0f || x == 1.0f) return 1.0f;
  if (x != x || y != y) return x + y;
  float ax = __builtin_fabsf(x), ay = __builtin_fabsf(y);
  if (ay == RT_INF) {
    if (ax == 1.0f) return 1.0f;
    return (ax > 1.0f) == (y > 0.0f) ? RT_INF : 0.0f;
  }
  bool y_int = __builtin_floorf(y) == y;
  bool y_odd = y_int && ay < 16777216.0f && __builtin_floorf(y * 0.5f) != y * 0.5f;
  if (x == 0.0f || ax == RT_INF) {
    float r = (x == 0.0f) == (y < 0.0f) ? RT_INF : 0.0f;
    return y_odd ? __builtin_copysignf(r, x) : r;
  }
  if (x < 0.0f && !y_int) return __builtin_nanf("");
  double t = (double)y * rt_log_double((double)ax);
  t = t > 1000.0 ? 1000.0 : t < -1000.0 ? -1000.0 : t;
  float r = (float)rt_exp_double(t);
  return x < 0.0f && y_odd ? -r : r;
}

/* musl's fmodf: exact, by long division of the significands */
RT_FN float fmodf(float x, float y) {
  unsigned int ux = __builtin_bit_cast(unsigned int, x), uy = __builtin_bit_cast(unsigned int, y);
  int ex = (ux >> 23) & 0xff, ey = (uy >> 23) & 0xff;
  unsigned int sx = ux & 0x80000000u, i;
  if ((uy << 1) == 0 || y != y || ex == 0xff) return (x * y) / (x * y);
  if ((ux << 1) <= (uy << 1)) return (ux << 1) == (uy << 1) ? 0.0f * x : x;
  if (!ex) {
    for (i = ux << 9; (i >> 31) == 0; ex--, i <<= 1) {}
    ux <<= -ex + 1;
  } else {
    ux &= 0xffffffffu >> 9;
    ux |= 1u << 23;
  }
  if (!ey) {
    for (i = uy << 9; (i >> 31) == 0; ey--, i <<= 1) {}
    uy <<= -ey + 1;
  } else {
    uy &= 0xffffffffu >> 9;
    uy |= 1u << 23;
  }
  for (; ex > ey; ex--) {
    i = ux - uy;
    if ((i >> 31) == 0) {
      if (i == 0) return 0.0f * x;
      ux = i;
    }
    ux <<= 1;
  }
  i = ux - uy;
  if ((i >> 31) == 0) {
    if (i == 0) return 0.0f * x;
    ux = i;
  }
  for (; (ux >> 23) == 0; ux <<= 1, ex--) {}
  if (ex > 0) {
    ux -= 1u << 23;
    ux |= (unsigned int)ex << 23;
  } else {
    ux >>= -ex + 1;
  }
  return __builtin_bit_cast(float, ux | sx);
}
