func.func @f(%x: tensor<1x4x4x2xf32>, %w: tensor<2x2x2x2xf32>, %b: tensor<4xf32>) -> tensor<1x3x3x4xf32> {
      %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
      %0 = tosa.depthwise_conv2d %x, %w, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 1, 1>}
           : (tensor<1x4x4x2xf32>, tensor<2x2x2x2xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x3x3x4xf32>
      return %0 : tensor<1x3x3x4xf32>
    }