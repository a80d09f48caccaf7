func.func @f(%a: tensor<2x3xf32>, %b: tensor<1x3xf32>) -> tensor<2x3xf32> {
      %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
      %0 = tosa.add %a, %b : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
      %1 = tosa.mul %0, %a, %shift : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<1xi8>) -> tensor<2x3xf32>
      %2 = tosa.sub %1, %b : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
      %3 = tosa.clamp %2 {max_val = 1.0 : f32, min_val = -0.5 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
      return %3 : tensor<2x3xf32>
    }