func.func @f(%x: tensor<1x3x6x6xf32>, %w: tensor<4x3x3x3xf32>, %c: tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32> {
      %0 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
           ins(%x, %w : tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>) outs(%c : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
      return %0 : tensor<1x4x4x4xf32>
    }