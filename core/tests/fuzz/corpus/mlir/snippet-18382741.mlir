func.func @f(%a: tensor<4x6xf32>, %s: tensor<2x3xf32>) -> tensor<4x6xf32> {
      %0 = tensor.insert_slice %s into %a[1, 2] [2, 3] [1, 1] : tensor<2x3xf32> into tensor<4x6xf32>
      return %0 : tensor<4x6xf32>
    }