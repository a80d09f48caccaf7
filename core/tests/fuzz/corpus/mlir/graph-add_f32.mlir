module {
  func.func @main(%arg0: tensor<1000xf32> {rt.name = "x"}, %arg1: tensor<1000xf32> {rt.name = "y"}) -> (tensor<1000xf32>) {
    %0 = "rt.add"(%arg0, %arg1) : (tensor<1000xf32>, tensor<1000xf32>) -> tensor<1000xf32>
    return %0 : tensor<1000xf32>
  }
}
