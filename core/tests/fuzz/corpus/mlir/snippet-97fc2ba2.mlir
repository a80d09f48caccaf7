func.func @main(%a: tensor<3x4xf32>) -> tensor<3xf32> {
      %init = stablehlo.constant dense<1.0> : tensor<f32>
      %0 = stablehlo.reduce(%a init: %init) across dimensions = [1] : (tensor<3x4xf32>, tensor<f32>) -> tensor<3xf32>
       reducer(%x: tensor<f32>, %y: tensor<f32>)  {
        %s = stablehlo.add %x, %y : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }
      return %0 : tensor<3xf32>
    }