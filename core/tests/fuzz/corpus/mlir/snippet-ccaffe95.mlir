func.func @add_test() {
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
