func.func @f(%a: tensor<4xf32>) -> tensor<5xf32> {
      %0 = stablehlo.exponential %a : (tensor<4xf32>) -> tensor<5xf32>
      return %0 : tensor<5xf32>
    }