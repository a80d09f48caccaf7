#a = affine_map<(d0, d1, d2) -> (d0, d2)>
    #b = affine_map<(d0, d1, d2) -> (d1, d2)>
    #c = affine_map<(d0, d1, d2) -> (d0, d1)>
    func.func @f(%x: tensor<3x4xf32>, %y: tensor<5x4xf32>, %c: tensor<3x5xf32>) -> tensor<3x5xf32> {
      %0 = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
          ins(%x, %y : tensor<3x4xf32>, tensor<5x4xf32>) outs(%c : tensor<3x5xf32>) {
      ^bb0(%p: f32, %q: f32, %acc: f32):
        %m = arith.mulf %p, %q : f32
        %s = arith.addf %acc, %m : f32
        linalg.yield %s : f32
      } -> tensor<3x5xf32>
      return %0 : tensor<3x5xf32>
    }