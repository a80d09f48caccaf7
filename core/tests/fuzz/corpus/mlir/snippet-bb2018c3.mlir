func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
      %e = tensor.empty() : tensor<2x3xf32>
      %0 = linalg.