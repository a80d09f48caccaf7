func.func @f(%a: tensor<4x6xf32>) -> tensor<2x2x6xf32> {
      %0 = tensor.collapse_shape %a [[0, 1]] : tensor<4x6xf32> into tensor<24xf32>
      %1 = tensor.expand_shape %0 [[0, 1, 2]] output_shape [2, 2, 6] : tensor<24xf32> into tensor<2x2x6xf32>
      return %1 : tensor<2x2x6xf32>
    }