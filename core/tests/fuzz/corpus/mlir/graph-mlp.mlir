module {
  func.func @predict(%arg0: tensor<2x8xf32> {rt.name = "x"}) -> (tensor<2x4xf32>) {
    %0 = "rt.constant"() {value = dense_resource<__c0> : tensor<8x4xf32>} : () -> tensor<8x4xf32>
    %1 = "rt.matmul"(%arg0, %0) : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
    %2 = "rt.constant"() {value = dense<[-0.15922501683235168, 0.5408455729484558, 0.21465912461280823, 0.35537269711494446]> : tensor<4xf32>} : () -> tensor<4xf32>
    %3 = "rt.add"(%1, %2) : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    %4 = "rt.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
    %5 = "rt.max"(%3, %4) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
    return %5 : tensor<2x4xf32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      __c0: "0x100000006CBF003E7F4607BEBDF2233FDFD5D63DA12109BFFD22B93E79E9A63FE673723FFE2734BF55F9A1BFEA8E1FBF6E45293D4ECD14C0EC0A60BE037A9FBFE0753BBF8F540BBF18F2A1BE3DC1D23E1471853F979E03BE46E8AE3F334A2ABF21F9B33ED249673F8589C03DF8553EBF32F66BBF0A5BEABED57A613E2B3B81BF1F3256BE"
    }
  }
#-}
