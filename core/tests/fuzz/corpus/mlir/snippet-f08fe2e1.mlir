#id = affine_map<(d0, d1) -> (d0, d1)>
    #col = affine_map<(d0, d1) -> (d0)>
    #tr = affine_map<(d0, d1) -> (d1, d0)>
    func.func @f(%a: tensor<3x4xf32>, %v: tensor<3xf32>, %t: tensor<4x3xf32>) -> tensor<3x4xf32> {
      %e = tensor.empty() : tensor<3x4xf32>
      %0 = linalg.generic {indexing_maps = [#id, #col, #tr, #id], iterator_types = ["parallel", "parallel"]}
          ins(%a, %v, %t : tensor<3x4xf32>, tensor<3xf32>, tensor<4x3xf32>) outs(%e : tensor<3x4xf32>) {
      ^bb0(%x: f32, %y: f32, %z: f32, %out: f32):
        %s = arith.mulf %x, %y : f32
        %q = arith.subf %s, %z : f32
        %g = math.exp %q : f32
        linalg.yield %g : f32
      } -> tensor<3x4xf32>
      return %0 : tensor<3x4xf32>
    }