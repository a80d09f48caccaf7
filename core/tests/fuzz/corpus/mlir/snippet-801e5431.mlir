func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
      %c = arith.constant 2.0 : f32
      %t = tensor.splat %c : tensor<4xf32>
      %0 = arith.mulf %a, %t : tensor<4xf32>
      return %0 : tensor<4xf32>
    }