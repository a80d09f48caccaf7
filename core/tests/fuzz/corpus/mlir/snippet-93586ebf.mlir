func.func @f() -> tensor<3xi32> {
      %0 = arith.constant dense_resource<weights> : tensor<3xi32>
      return %0 : tensor<3xi32>
    }
    {-#
      dialect_resources: { builtin: { weights: "