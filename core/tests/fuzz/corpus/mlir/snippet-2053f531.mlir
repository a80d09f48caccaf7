func.func @f(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32> {
      %i = arith.constant -3.40282347E+38 : f32
      %k = tensor.empty() : tensor<2x2xf32>
      %e = tensor.empty() : tensor<1x2x2x2xf32>
      %f = linalg.fill ins(%i : f32) outs(%e : tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
      %0 = linalg.pooling_nchw_max {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
           ins(%x, %k : tensor<1x2x4x4xf32>, tensor<2x2xf32>) outs(%f : tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
      return %0 : tensor<1x2x2x2xf32>
    }