"""IREE-style check files: expectations become results, evaluated after a run."""

import numpy as np
from retarget.importers.mlir import evaluate_checks, import_check_file
from retarget.vmvx.interpreter import run_function

CHECK_FILE = """func.func @add_test() {
  %a = util.unfoldable_constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %b = util.unfoldable_constant dense<[0.5, 0.5, 0.5]> : tensor<3xf32>
  %c = arith.addf %a, %b : tensor<3xf32>
  check.expect_almost_eq_const(%c, dense<[1.5, 2.5, 3.5001]> : tensor<3xf32>, atol 1.0e-03) : tensor<3xf32>
  check.expect_eq_const(%c, dense<[1.5, 2.5, 3.5]> : tensor<3xf32>) : tensor<3xf32>
  check.expect_almost_eq(%c, %a) : tensor<3xf32>
  %t = util.unfoldable_constant dense<1> : tensor<i32>
  check.expect_true(%t) : tensor<i32>
  check.expect_false(%t) : tensor<i32>
  return
}
"""


def test_check_operands_become_extra_results():
    module, checks = import_check_file(CHECK_FILE, "add.mlir")
    fn = module.functions["add_test"]
    assert len(fn.returns) == 1 + 1 + 2 + 1 + 1
    assert [c.kind for c in checks["add_test"]] == ["almost_eq", "eq", "almost_eq", "true", "false"]
    assert checks["add_test"][0].atol == 1e-3 and checks["add_test"][0].location == "add.mlir:5:3"


def test_evaluate_checks_reports_each_pass_and_failure():
    module, checks = import_check_file(CHECK_FILE, "add.mlir")
    results = run_function(module.functions["add_test"], [])
    outcome = evaluate_checks(checks["add_test"], results)
    assert [ok for ok, _ in outcome] == [True, True, False, True, False]
    assert outcome[2][1].startswith("add.mlir:7:3: expect_almost_eq failed")


def test_expected_constant_is_kept_as_an_array():
    _, checks = import_check_file(CHECK_FILE, "add.mlir")
    np.testing.assert_array_equal(checks["add_test"][1].expected, np.array([1.5, 2.5, 3.5], np.float32))
