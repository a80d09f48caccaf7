func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
      %x = math.absf %a : tensor<4xf32>
      %p = math.powf %x, %b : tensor<4xf32>
      %0 = math.fma %p, %b, %a : tensor<4xf32>
      return %0 : tensor<4xf32>
    }