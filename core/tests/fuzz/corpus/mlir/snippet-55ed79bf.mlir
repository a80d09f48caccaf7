func.func @f() -> (tensor<2xf32>, tensor<f32>) {
      %0 = arith.constant dense<0xFF800000> : tensor<2xf32>
      %1 = arith.constant 0x7F800000 : f32
      %2 = tensor.splat %1 : tensor<f32>
      return %0, %2 : tensor<2xf32>, tensor<f32>
    }