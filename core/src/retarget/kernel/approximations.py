"""Polynomial coefficients of the float functions that code generators compute themselves rather than call (a
driver's builtin or a libm call a lane is inaccurate or slow): one table for the C-like renderer, llvm-cpu and the
SPIR-V emitter, so that every target computes the same approximation."""

# erf(x) = x * P(x^2) / Q(x^2) on [-4, 4] (Eigen's and XLA's rational erf, within 5e-7 of erf), highest power first
ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
         -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
         -1.42647390514189e-02)
# tanh(x) = x + x z P(z), z = x^2, below 0.625 in magnitude (Cephes' tanhf), highest power first
TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)
# e^r = 1 + r + r^2 P(r) for |r| <= ln2 / 2 (Cephes' expf), highest power first: so expm1(r) = r + r^2 P(r) there
EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
EXPM1_NEAR = 0.34657359027997264  # ln2 / 2
# log(1 + f) = f - f^2 / 2 + f^3 P(f) for 1 + f in [sqrt(1/2), sqrt(2)) (Cephes' logf), highest power first: log1p
# of such an f is that polynomial in f itself, with no log of 1 + f (a GPU driver's log is accurate near 1 only to
# 2^-22 absolutely, which is a relative error of 2^-22 / f: Mish of -10 was 0.5% off on NVIDIA's Vulkan)
LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
         2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)
LOG1P_NEAR = (-0.29289321881345254, 0.41421356237309515)  # sqrt(1/2) - 1, sqrt(2) - 1
# sin and cos (Cephes' sinf, cosf): x reduced by pi/4 in three parts, exact while |x| < 8192 (`TRIG_EXACT_BELOW`), to r
# in [-pi/4, pi/4]; then sin(r) = r + r z P(z) and cos(r) = 1 - z / 2 + z^2 Q(z), z = r^2, highest power first
PI_4_PARTS = (0.78515625, 2.4187564849853515625e-4, 3.77489497744594108e-8)
TRIG_EXACT_BELOW = 8192.0
SIN_P = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
COS_P = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)
# atan (Cephes' atanf): |x| reduced to [0, tan(pi/8)] (past tan(3pi/8): -1/|x| + pi/2; past tan(pi/8): (|x| - 1) /
# (|x| + 1) + pi/4), then atan(r) = r + r z P(z), z = r^2, highest power first
ATAN_P = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)
TAN_3PI_8, TAN_PI_8 = 2.414213562373095, 0.4142135623730950
