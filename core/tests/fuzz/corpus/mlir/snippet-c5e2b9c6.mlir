func.func @f(%a: tensor<4x6xf32>) -> tensor<2x2xf32> {
      %0 = tensor.extract_slice %a[1, 1] [2, 2] [2, 3] : tensor<4x6xf32> to tensor<2x2xf32>
      return %0 : tensor<2x2xf32>
    }