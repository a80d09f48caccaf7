module {
  func.func @main(%arg0: tensor<4x16xf32> {rt.name = "x"}, %arg1: tensor<16x8xf32> {rt.name = "w1"}, %arg2: tensor<8x4xf32> {rt.name = "w2"}) -> (tensor<4x4xf32>) {
    %0 = "rt.matmul"(%arg0, %arg1) : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
    %1 = "rt.matmul"(%0, %arg2) : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
    return %1 : tensor<4x4xf32>
  }
}
