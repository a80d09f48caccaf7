func.func @f(%a: tensor<4x6xf32>) -> tensor<6xf32> {
      %c2 = arith.constant 2 : index
      %0 = tensor.extract_slice %a[%c2, 0] [1, 6] [1, 1] : tensor<4x6xf32> to tensor<6xf32>
      return %0 : tensor<6xf32>
    }