func.func @f(%a: tensor<2xf32> {rt.name = "image"}, %b: tensor<2xf32>) -> tensor<2xf32> {
      %0 = arith.addf %a, %b : tensor<2xf32>
      return %0 : tensor<2xf32>
    }