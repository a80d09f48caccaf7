func.func @main(%a: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<4x3xf32>, tensor<1x2xf32>, tensor<3x5xf32>, tensor<2x3xi32>) {
      %0 = stablehlo.transpose %a, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
      %1 = stablehlo.concatenate %a, %a, dim = 0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
      %2 = stablehlo.slice %a [0:1, 0:3:2] : (tensor<2x3xf32>) -> tensor<1x2xf32>
      %z = stablehlo.constant dense<0.0> : tensor<f32>
      %3 = stablehlo.pad %a, %z, low = [0, 1], high = [1, 1], interior = [0, 0] : (tensor<2x3xf32>, tensor<f32>) -> tensor<3x5xf32>
      %i = stablehlo.iota dim = 1 : tensor<2x3xi32>
      %c = stablehlo.convert %a : (tensor<2x3xf32>) -> tensor<2x3xi32>
      %p = stablehlo.compare GT, %i, %c, SIGNED : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi1>
      %4 = stablehlo.select %p, %i, %c : tensor<2x3xi1>, tensor<2x3xi32>
      return %0, %1, %2, %3, %4 : tensor<3x2xf32>, tensor<4x3xf32>, tensor<1x2xf32>, tensor<3x5xf32>, tensor<2x3xi32>
    }