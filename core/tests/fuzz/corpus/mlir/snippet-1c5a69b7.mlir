func.func public @main(%a: tensor<3xf32>) -> tensor<3xf32> {
      %0 = call @double(%a) : (tensor<3xf32>) -> tensor<3xf32>
      %1 = func.call @double(%0) : (tensor<3xf32>) -> tensor<3xf32>
      return %1 : tensor<3xf32>
    }
    func.func private @double(%x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = arith.addf %x, %x : tensor<3xf32>
      return %0 : tensor<3xf32>
    }