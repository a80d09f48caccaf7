func.func @main(%a: tensor<4x3xf32>, %b: tensor<4x5xf32>) -> tensor<3x5xf32> {
      %0 = "stablehlo.dot_general"(%a, %b) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
      return %0 : tensor<3x5xf32>
    }