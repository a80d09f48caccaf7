func.func @f(%a: tensor<3x5xf32>, %v: tensor<5xf32>) -> tensor<5x3xf32> {
      %e = tensor.empty() : tensor<5x3xf32>
      %t = linalg.transpose ins(%a : tensor<3x5xf32>) outs(%e : tensor<5x3xf32>) permutation = [1, 0]
      %b = linalg.broadcast ins(%v : tensor<5xf32>) outs(%e : tensor<5x3xf32>) dimensions = [1]
      %0 = linalg.map { arith.addf } ins(%t, %b : tensor<5x3xf32>, tensor<5x3xf32>) outs(%e : tensor<5x3xf32>)
      %1 = linalg.map ins(%0 : tensor<5x3xf32>) outs(%e : tensor<5x3xf32>)
        (%x: f32) {
          %y = math.tanh %x : f32
          linalg.yield %y : f32
        }
      return %1 : tensor<5x3xf32>
    }