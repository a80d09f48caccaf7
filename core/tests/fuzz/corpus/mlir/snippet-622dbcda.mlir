#id = affine_map<(d0, d1) -> (d0, d1)>
    #red = affine_map<(d0, d1) -> (d0)>
    func.func @f(%a: tensor<3x5xf32>, %c: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
      %0 = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
          ins(%a : tensor<3x5xf32>) outs(%c : tensor<3xf32>) {
      ^bb0(%x: f32, %acc: f32):
        %sq = arith.mulf %x, %x : f32
        %s = arith.addf %sq, %acc : f32
        linalg.yield %s : f32
      } -> tensor<3xf32>
      %1 = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
          ins(%a : tensor<3x5xf32>) outs(%c : tensor<3xf32>) {
      ^bb0(%x: f32, %acc: f32):
        %m = arith.maximumf %acc, %x : f32
        linalg.yield %m : f32
      } -> tensor<3xf32>
      return %0, %1 : tensor<3xf32>, tensor<3xf32>
    }