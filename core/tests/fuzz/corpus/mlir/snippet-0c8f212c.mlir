func.func @f(%a: tensor<4xi8>) -> tensor<4xi8> {
      %0 = tosa.rescale %a {scale32 = true} : (tensor<4xi8>) -> tensor<4xi8>
      return %0 : tensor<4xi8>
    }