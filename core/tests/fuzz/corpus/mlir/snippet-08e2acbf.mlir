#in = affine_map<(d0, d1) -> (d0 + d1)>
    #k = affine_map<(d0, d1) -> (d1)>
    #out = affine_map<(d0, d1) -> (d0)>
    func.func @f(%a: tensor<6xf32>, %k: tensor<3xf32>, %c: tensor<4xf32>) -> tensor<4xf32> {
      %0 = linalg.generic {indexing_maps = [#in, #k, #out], iterator_types = ["parallel", "reduction"]}
          ins(%a, %k : tensor<6xf32>, tensor<3xf32>) outs(%c : tensor<4xf32>) {
      ^bb0(%x: f32, %y: f32, %acc: f32):
        %m = arith.mulf %x, %y : f32
        %s = arith.addf %acc, %m : f32
        linalg.yield %s : f32
      } -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }