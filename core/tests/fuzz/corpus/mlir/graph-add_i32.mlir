module {
  func.func @main(%arg0: tensor<1000xi32> {rt.name = "x"}, %arg1: tensor<1000xi32> {rt.name = "y"}) -> (tensor<1000xi32>) {
    %0 = "rt.add"(%arg0, %arg1) : (tensor<1000xi32>, tensor<1000xi32>) -> tensor<1000xi32>
    return %0 : tensor<1000xi32>
  }
}
