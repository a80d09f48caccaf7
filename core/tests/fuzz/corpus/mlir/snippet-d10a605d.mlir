func.func @f(%a: tensor<2xi32>, %b: tensor<2xi32>) -> tensor<2xi1> {
      %0 = arith.cmpi ult, %a, %b : tensor<2xi32>
      return %0 : tensor<2xi1>
    }