func.func @f(%a: tensor<4x6xf32>) -> tensor<2xf32> {
      %c1 = arith.constant 1 : index
      %c3 = arith.constant 3 : index
      %v = tensor.extract %a[%c1, %c3] : tensor<4x6xf32>
      %e = tensor.empty() : tensor<2xf32>
      %0 = linalg.fill ins(%v : f32) outs(%e : tensor<2xf32>) -> tensor<2xf32>
      return %0 : tensor<2xf32>
    }