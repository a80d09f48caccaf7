func.func @f() -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2xi32>) {
      %0 = arith.constant dense<[[1.5, -2.0], [0.25, 8.0]]> : tensor<2x2xf32>
      %1 = arith.constant dense<"0x