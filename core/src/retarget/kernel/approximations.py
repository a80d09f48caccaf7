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
