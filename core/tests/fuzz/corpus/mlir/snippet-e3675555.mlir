func.func @f(%x: tensor<1x4x4x2xf32>) -> tensor<1x2x2x2xf32> {
      %i = arith.constant 