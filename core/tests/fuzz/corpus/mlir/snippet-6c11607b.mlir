func.func @f(%a: tensor<2x3xf32>) -> (tensor<4x3xf32>, tensor<3x5xf32>, tensor<1x2xf32>, tensor<4x6xf32>) {
      %0 = tosa.concat %a, %a {axis = 0 : i32} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
      %p = tosa.const_shape {values = dense<[0, 1, 1, 1]> : tensor<4xindex>} : () -> !tosa.shape<4>
      %v = "tosa.const"() <{values = dense<7.0> : tensor<1xf32>}> : () -> tensor<1xf32>
      %1 = tosa.pad %a, %p, %v : (tensor<2x3xf32>, !tosa.shape<4>, tensor<1xf32>) -> tensor<3x5xf32>
      %st = tosa.const_shape {values = dense<[1, 1]> : tensor<2xindex>} : () -> !tosa.shape<2>
      %sz = tosa.const_shape {values = dense<[1, 2]> : tensor<2xindex>} : () -> !tosa.shape<2>
      %2 = tosa.slice %a, %st, %sz : (tensor<2x3xf32>, !tosa.shape<2>, !tosa.shape<2>) -> tensor<1x2xf32>
      %m = tosa.const_shape {values = dense<[2, 2]> : tensor<2xindex>} : () -> !tosa.shape<2>
      %3 = tosa.tile %a, %m : (tensor<2x3xf32>, !tosa.shape<2>) -> tensor<4x6xf32>
      return %0, %1, %2, %3 : tensor<4x3xf32>, tensor<3x5xf32>, tensor<1x2xf32>, tensor<4x6xf32>
    }