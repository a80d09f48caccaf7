"""The math of the stand-in HIP headers (include/hip/retarget_math.h), which kernels compiled without
ROCm call, run on the host CPU against numpy (the reference's semantics): NaN, infinities and signed
zeros exactly, finite values within a few ulp. On the GPU, LLVM lowers the builtins these functions
start from (expf, logf, sqrtf) itself; here the host's libm does: what is tested is the functions'
own logic (reductions, polynomials, special cases)."""

import ctypes
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from retarget_rocm.compile import INCLUDE

UNARY = {"sinf": (np.sin, 2), "cosf": (np.cos, 2), "tanf": (np.tan, 4), "tanhf": (np.tanh, 2),
         "atanf": (np.arctan, 2), "log1pf": (np.log1p, 3), "expm1f": (np.expm1, 3),
         "erff": (np.vectorize(math.erf, otypes=[np.float64]), 8)}
BINARY = {"powf": (np.power, 2), "fmodf": (np.fmod, 0), "atan2f": (np.arctan2, 4)}
EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -2.5, 1e-3, -1e-4, 0.75, 3.0, -7.25,
                  20.0, -20.0, 1e30, -1e30, 3e38, 0.3, 1e-40, -1e-40, 1.0, -1.0, 0.625, 9.0, 88.0, 89.0, -104.0,
                  np.pi / 2, 16777216.0, 16777215.0], dtype=np.float32)
F32 = np.ctypeslib.ndpointer(np.float32, flags="C_CONTIGUOUS")


@pytest.fixture(scope="module")
def math_lib(tmp_path_factory):
    from retarget_rocm import toolchain

    compiler = (toolchain.clang().path if toolchain.clang() else None) or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler for the host (clang or g++)")
    tmp = tmp_path_factory.mktemp("rocm-math")
    source = tmp / "math.cpp"
    lines = ['#include "retarget_math.h"']
    lines += [f'extern "C" void t_{f}(const float *x, float *y, long n) {{ for (long i = 0; i < n; i++) '
              f'y[i] = {f}(x[i]); }}' for f in UNARY]
    lines += [f'extern "C" void t_{f}(const float *a, const float *b, float *y, long n) {{ for (long i = 0; i < n; '
              f'i++) y[i] = {f}(a[i], b[i]); }}' for f in BINARY]
    source.write_text("\n".join(lines) + "\n")
    out = tmp / "math.so"
    command = [compiler, "-x", "c++", "-std=c++17", "-O2", "-shared", "-fPIC", "-fno-fast-math",
               "-I", str(Path(INCLUDE) / "hip"), str(source), "-o", str(out)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return ctypes.CDLL(str(out))


def _inputs():
    rng = np.random.default_rng(0)
    wide = np.ldexp(rng.random(4000) * 2 - 1, rng.integers(-30, 128, 4000)).astype(np.float32)
    return np.concatenate([EDGES, (rng.standard_normal(4000) * 10).astype(np.float32), wide,
                           np.linspace(-100, 100, 4001, dtype=np.float32)])


def _assert_close(got, want, ulps: int, what: str) -> None:
    both_nan = np.isnan(got) & np.isnan(want)
    exact = (got == want) & (np.signbit(got) == np.signbit(want))
    finite = np.isfinite(got) & np.isfinite(want) & (want != 0)
    spacing = np.spacing(np.abs(want)).astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf where `finite` is already false
        within = finite & (np.abs(got.astype(np.float64) - want.astype(np.float64)) <= ulps * spacing)
    bad = ~(both_nan | exact | within)
    assert not bad.any(), f"{what}: {list(zip(*(a[bad][:5] for a in (got, want))))}"


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_math_matches_numpy(math_lib, name):
    reference, ulps = UNARY[name]
    x = _inputs()
    got = np.empty_like(x)
    fn = getattr(math_lib, f"t_{name}")
    fn.argtypes = [F32, F32, ctypes.c_long]
    fn(x, got, len(x))
    with np.errstate(all="ignore"):
        want = reference(x.astype(np.float64)).astype(np.float32)
    _assert_close(got, want, ulps, name)


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_math_matches_numpy(math_lib, name):
    reference, ulps = BINARY[name]
    rng = np.random.default_rng(1)
    a = np.concatenate([np.repeat(EDGES, len(EDGES)), (rng.standard_normal(3000) * 5).astype(np.float32),
                        np.array([-2, -3, -8, -0.5, 2, 10, 1e-3], np.float32)])
    b = np.concatenate([np.tile(EDGES, len(EDGES)), (rng.standard_normal(3000) * 3).astype(np.float32),
                        np.array([3, 2, 1 / 3, -3, 0.5, -40, 1e4], np.float32)])
    got = np.empty_like(a)
    fn = getattr(math_lib, f"t_{name}")
    fn.argtypes = [F32, F32, F32, ctypes.c_long]
    fn(a, b, got, len(a))
    with np.errstate(all="ignore"):
        want = reference(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    _assert_close(got, want, ulps, name)
