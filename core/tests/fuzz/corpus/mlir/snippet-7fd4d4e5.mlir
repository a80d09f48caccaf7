func.func @f(%a: tensor<1x4x2xf32>, %i: tensor<1x3xi32>) -> (tensor<1x4x2xf32>, tensor<1x4x2xi32>, tensor<1x3x2xf32>) {
      %z = "tosa.const"() <{values = dense<0.0> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
      %c = tosa.greater %a, %z : (tensor<1x4x2xf32>, tensor<1x1x1xf32>) -> tensor<1x4x2xi1>
      %n = tosa.negate %a : (tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
      %0 = tosa.select %c, %a, %n : (tensor<1x4x2xi1>, tensor<1x4x2xf32>, tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
      %1 = tosa.cast %a : (tensor<1x4x2xf32>) -> tensor<1x4x2xi32>
      %2 = tosa.gather %a, %i : (tensor<1x4x2xf32>, tensor<1x3xi32>) -> tensor<1x3x2xf32>
      return %0, %1, %2 : tensor<1x4x2xf32>, tensor<1x4x2xi32>, tensor<1x3x2xf32>
    }