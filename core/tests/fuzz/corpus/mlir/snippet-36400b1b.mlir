func.func @main(%a: tensor<1x4x4x1xf32>) -> tensor<1x2x2x1xf32> {
      %init = stablehlo.constant dense<0xFF800000> : tensor<f32>
      %0 = "stablehlo.reduce_window"(%a, %init) <{padding = dense<[[0, 0], [1, 1], [1, 1], [0, 0]]> : tensor<4x2xi64>, window_dimensions = array<i64: 1, 3, 3, 1>, window_strides = array<i64: 1, 2, 2, 1>}> ({
      ^bb0(%x: tensor<f32>, %y: tensor<f32>):
        %m = stablehlo.maximum %x, %y : tensor<f32>
        stablehlo.return %m : tensor<f32>
      }) : (tensor<1x4x4x1xf32>, tensor<f32>) -> tensor<1x2x2x1xf32>
      return %0 : tensor<1x2x2x1xf32>
    }