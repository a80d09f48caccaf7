func.func @f(%a: tensor<3x5xf32>) -> (tensor<3xf32>, tensor<5xf32>) {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<3xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<3xf32>) -> tensor<3xf32>
      %0 = linalg.reduce ins(%a : tensor<3x5xf32>) outs(%f : tensor<3xf32>) dimensions = [1]
        (%in: f32, %init: f32) {
          %s = arith.addf %in, %init : f32
          linalg.yield %s : f32
        }
      %e2 = tensor.empty() : tensor<5xf32>
      %n = arith.constant 0xFF800000 : f32
      %f2 = linalg.fill ins(%n : f32) outs(%e2 : tensor<5xf32>) -> tensor<5xf32>
      %1 = linalg.reduce { arith.maximumf } ins(%a : tensor<3x5xf32>) outs(%f2 : tensor<5xf32>) dimensions = [0]
      return %0, %1 : tensor<3xf32>, tensor<5xf32>
    }