func.func @f(%x: tensor<1x5x5x3xf32>, %w: tensor<3x3x3xf32>) -> tensor<1x3x3x3xf32> {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<1x3x3x3xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x3x3x3xf32>) -> tensor<1x3x3x3xf32>
      %0 = linalg.depthwise_conv_2d_nhwc_hwc {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
           ins(%x, %w : tensor<1x5x5x3xf32>, tensor<3x3x3xf32>) outs(%f : tensor<1x3x3x3xf32>) -> tensor<1x3x3x3xf32>
      return %0 : tensor<1x3x3x3xf32>
    }