func.func @f(%a: tensor<4x6xf32>) -> tensor<5x9xf32> {
      %cst = arith.constant -1.0 : f32
      %0 = tensor.pad %a low[0, 1] high[1, 2] {
      ^bb0(%i: index, %j: index):
        tensor.yield %cst : f32
      } : tensor<4x6xf32> to tensor<5x9xf32>
      return %0 : tensor<5x9xf32>
    }