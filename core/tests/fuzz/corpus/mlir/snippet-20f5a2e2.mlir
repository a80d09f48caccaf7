#id = affine_map<(d0, d1) -> (d0, d1)>
    func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
      %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
          ins(%a : tensor<2x3xf32>) outs(%a : tensor<2x3xf32>) {
      ^bb0(%x: f32, %out: f32):
        %i = linalg.index 1 : index
        %ii = arith.index_cast %i : index to i32
        %f = arith.sitofp %ii : i32 to f32
        %s = arith.addf %x, %f : f32
        linalg.yield %s : f32
      } -> tensor<2x3xf32>
      return %0 : tensor<2x3xf32>
    }