#id = affine_map<(d0) -> (d0)>
    func.func @f(%a: tensor<4xf32>, %c: tensor<4xf32>) -> tensor<4xf32> {
      %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
          ins(%a : tensor<4xf32>) outs(%c : tensor<4xf32>) {
      ^bb0(%x: f32, %out: f32):
        %s = arith.addf %x, %out : f32
        linalg.yield %s : f32
      } -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }