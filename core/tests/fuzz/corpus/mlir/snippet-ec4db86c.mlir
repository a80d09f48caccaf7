func.func @f(%a: tensor<4x6xf32>) -> tensor<8x6xf32> {
      %s = arith.constant dense<[8, 6]> : tensor<2xi64>
      %0 = tensor.concat dim(1) %a, %a : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x12xf32>
      %1 = tensor.reshape %0(%s) : (tensor<4x12xf32>, tensor<2xi64>) -> tensor<8x6xf32>
      return %1 : tensor<8x6xf32>
    }