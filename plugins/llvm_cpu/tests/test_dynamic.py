"""Dynamic shapes on llvm-cpu: kernels that take their sizes at run time, on both local drivers."""

from __future__ import annotations

import numpy as np
import pytest
import retarget
from retarget.kernel.ir import print_kernel
from retarget.kernel.lower import lower_dispatch
from retarget.passes.dispatch import form_dispatches
from retarget.testing import dynamic


@pytest.mark.parametrize("case", sorted(dynamic.CASES))
def test_dynamic_case_matches_the_reference_at_each_size_on_local_task(case):
    dynamic.check("llvm-cpu", "local-task", [case])


@pytest.mark.parametrize("case", ["matmul_few_rows", "conv_batch_image"])
def test_dynamic_case_matches_the_reference_at_each_size_on_local_sync(case):
    dynamic.check("llvm-cpu", "local-sync", [case])


def test_kernel_takes_its_sizes_as_scalars_and_loops_to_them():
    fn = dynamic.module("matmul_tails").functions["main"]
    (dispatch,) = form_dispatches(fn)
    # a named arch, not the host: the tile widths below are those of 256-bit vectors (the host's may be 512)
    kernel = lower_dispatch(dispatch.function, retarget.compiler.resolve_target("llvm-cpu:x86-64-v3")[1])
    assert kernel.scalars == ("k", "m", "n")
    text = print_kernel(kernel)
    assert "%dim_m: i64" in text and "cmp.lt(((%wg * %chunk15) + %p14), (%dim_m / 4))" in text  # row tiles
    assert "to (%dim_m - (4 * (%dim_m / 4)))" in text  # then the rows past the last full tile, one at a time
    assert "to (%dim_n - (16 * (%dim_n / 16)))" in text  # and the columns past it


def test_a_batch_of_one_still_spreads_over_workgroups():
    """[n, 4, 5, 6] with n symbolic: the workgroups split n x 4 rows, not n alone."""
    fn = dynamic.module("elementwise_batch").functions["main"]
    (dispatch,) = form_dispatches(fn)
    desc = retarget.compiler.resolve_target("llvm-cpu")[1]
    from dataclasses import replace

    kernel = lower_dispatch(dispatch.function, replace(desc, extra={**desc.extra, "cores": 4}))
    assert "(4 * %dim_n)" in print_kernel(kernel)
    x = np.random.default_rng(0).standard_normal((1, 4, 5, 6)).astype(np.float32)
    got = retarget.load(retarget.compile(dynamic.module("elementwise_batch"), "llvm-cpu"), "local-task").main(x)
    np.testing.assert_allclose(got, dynamic.reference("elementwise_batch", [x]), rtol=1e-6)
