func.func @f(%a: tensor<1x3x4xf32>, %b: tensor<1x4x5xf32>) -> tensor<5x3xf32> {
      %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
      %0 = tosa.matmul %a, %b, %zp, %zp : (tensor<1x3x4xf32>, tensor<1x4x5xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x3x5xf32>
      %s = tosa.const_shape {values = dense<[3, 5]> : tensor<2xindex>} : () -> !tosa.shape<2>
      %1 = tosa.reshape %0, %s : (tensor<1x3x5xf32>, !tosa.shape<2>) -> tensor<3x5xf32>
      %2 = tosa.transpose %1 {perms = array<i32: 1, 0>} : (tensor<3x5xf32>) -> tensor<5x3xf32>
      return %2 : tensor<5x3xf32>
    }