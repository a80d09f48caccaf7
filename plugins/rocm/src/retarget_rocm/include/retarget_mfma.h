/* The core's fragment intrinsics on CDNA's matrix cores: 16x16x16 multiply-accumulates of f16 or bf16
   into f32, held by a wavefront of 64 lanes (v_mfma_f32_16x16x16f16, v_mfma_f32_16x16x16bf16_1k;
   gfx908 has the f16 one, gfx90a and newer both). Used on both routes (ROCm's headers or the
   stand-ins), so it reads elements as their bits and needs nothing but clang's builtins.

   Where each lane's elements are (AMD's matrix instruction calculator for these instructions; lane l,
   register i of 4):
     A (16 x 16, m x k):   A[l % 16][4 (l / 16) + i]
     B (16 x 16, k x n):   B[4 (l / 16) + i][l % 16]
     C, D (16 x 16, m x n): D[4 (l / 16) + i][l % 16]
   A fragment in memory is row-major with rows `stride` elements apart. */
#pragma once

#define RT_MFMA_FN static __device__ inline __attribute__((always_inline))

typedef _Float16 rt_f16x4 __attribute__((ext_vector_type(4)));
typedef short rt_i16x4 __attribute__((ext_vector_type(4)));
typedef float rt_f32x4 __attribute__((ext_vector_type(4)));

template <typename T> struct rt_mfma_a;
template <typename T> struct rt_mfma_b;
template <> struct rt_mfma_a<__half> { rt_f16x4 v; };
template <> struct rt_mfma_b<__half> { rt_f16x4 v; };
template <> struct rt_mfma_a<__hip_bfloat16> { rt_i16x4 v; };
template <> struct rt_mfma_b<__hip_bfloat16> { rt_i16x4 v; };
struct rt_mfma_acc { rt_f32x4 v; };

RT_MFMA_FN unsigned int rt_mfma_lane() { return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)); }

/* four elements of A's row (consecutive) or of B's column (`stride` apart), as the instruction's bits */
template <typename V, typename E, typename T>
RT_MFMA_FN void rt_mfma_gather(V &v, const T *p, long long step) {
  for (int i = 0; i < 4; i++) v[i] = __builtin_bit_cast(E, p[i * step]);
}

RT_MFMA_FN void rt_mfma_load_a(rt_mfma_a<__half> &f, const __half *p, long long stride) {
  unsigned int l = rt_mfma_lane();
  rt_mfma_gather<rt_f16x4, _Float16>(f.v, p + (l % 16) * stride + 4 * (l / 16), 1);
}

RT_MFMA_FN void rt_mfma_load_b(rt_mfma_b<__half> &f, const __half *p, long long stride) {
  unsigned int l = rt_mfma_lane();
  rt_mfma_gather<rt_f16x4, _Float16>(f.v, p + 4 * (l / 16) * stride + l % 16, stride);
}

RT_MFMA_FN void rt_mfma_load_a(rt_mfma_a<__hip_bfloat16> &f, const __hip_bfloat16 *p, long long stride) {
  unsigned int l = rt_mfma_lane();
  rt_mfma_gather<rt_i16x4, short>(f.v, p + (l % 16) * stride + 4 * (l / 16), 1);
}

RT_MFMA_FN void rt_mfma_load_b(rt_mfma_b<__hip_bfloat16> &f, const __hip_bfloat16 *p, long long stride) {
  unsigned int l = rt_mfma_lane();
  rt_mfma_gather<rt_i16x4, short>(f.v, p + 4 * (l / 16) * stride + l % 16, stride);
}

RT_MFMA_FN void rt_mfma_fill(rt_mfma_acc &f, float x) { f.v = x; }

RT_MFMA_FN void rt_mfma_load_acc(rt_mfma_acc &f, const float *p, long long stride) {
  unsigned int l = rt_mfma_lane();
  const float *q = p + 4 * (l / 16) * stride + l % 16;
  for (int i = 0; i < 4; i++) f.v[i] = q[i * stride];
}

RT_MFMA_FN void rt_mfma_store(float *p, const rt_mfma_acc &f, long long stride) {
  unsigned int l = rt_mfma_lane();
  float *q = p + 4 * (l / 16) * stride + l % 16;
  for (int i = 0; i < 4; i++) q[i * stride] = f.v[i];
}

RT_MFMA_FN void rt_mfma_mma(rt_mfma_acc &d, const rt_mfma_a<__half> &a, const rt_mfma_b<__half> &b,
                            const rt_mfma_acc &c) {
  d.v = __builtin_amdgcn_mfma_f32_16x16x16f16(a.v, b.v, c.v, 0, 0, 0);
}

RT_MFMA_FN void rt_mfma_mma(rt_mfma_acc &d, const rt_mfma_a<__hip_bfloat16> &a, const rt_mfma_b<__hip_bfloat16> &b,
                            const rt_mfma_acc &c) {
  d.v = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a.v, b.v, c.v, 0, 0, 0);
}
