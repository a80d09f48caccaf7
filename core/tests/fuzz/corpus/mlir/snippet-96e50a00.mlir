func.func @f(%a: tensor<3xi32>, %b: tensor<3xi32>) -> tensor<3xi1> {
      %0 = "arith.cmpi"(%a, %b) <{predicate = 2 : i64}> : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi1>
      return %0 : tensor<3xi1>
    }