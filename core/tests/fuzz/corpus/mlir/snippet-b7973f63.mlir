func.func @f(%a: tensor<2x3x4xf32>, %b: tensor<2x4x5xf32>, %m: tensor<3x4xf32>, %v: tensor<4xf32>) -> (tensor<2x3x5xf32>, tensor<3xf32>) {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<2x3x5xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
      %0 = linalg.batch_matmul ins(%a, %b : tensor<2x3x4xf32>, tensor<2x4x5xf32>) outs(%f : tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
      %e1 = tensor.empty() : tensor<3xf32>
      %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<3xf32>) -> tensor<3xf32>
      %1 = linalg.matvec ins(%m, %v : tensor<3x4xf32>, tensor<4xf32>) outs(%f1 : tensor<3xf32>) -> tensor<3xf32>
      return %0, %1 : tensor<2x3x5xf32>, tensor<3xf32>
    }