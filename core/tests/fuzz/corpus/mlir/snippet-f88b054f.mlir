func.func @f(%x: tensor<1x4x4x2xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x4x2xi32>) {
      %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
      %0 = tosa.max_pool2d %x {kernel = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x4x4x2xf32>) -> tensor<1x2x2x2xf32>
      %1 = tosa.avg_pool2d %x, %zp, %zp {acc_type = f32, kernel = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x4x4x2xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x2x2x2xf32>
      %2 = tosa.reduce_sum %x {axis = 1 : i32} : (tensor<1x4x4x2xf32>) -> tensor<1x1x4x2xf32>
      %3 = tosa.argmax %x {axis = 1 : i32} : (tensor<1x4x4x2xf32>) -> tensor<1x4x2xi32>
      return %0, %1, %2, %3 : tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x4x2xi32>
    }