func.func @f(%a: tensor<5xf32>) -> tensor<5xf32> {
      %0 = tosa.