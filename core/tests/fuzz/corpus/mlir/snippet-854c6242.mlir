func.func @f(%a: tensor<3x4xf32>, %b: tensor<5x6xf32>) -> tensor<3x6xf32> {
      %0 = linalg.matmul ins(%a, %b : tensor<3x4xf32>, tensor<5x6xf32>) outs(%a : tensor<3x4xf32>) -> tensor<3x6xf32>
      return %0 : tensor<3x6xf32>
    }