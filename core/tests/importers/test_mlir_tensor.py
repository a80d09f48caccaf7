"""tensor: slices, inserts, pads, reshapes and concatenation."""

import numpy as np
from retarget.importers.mlir import import_mlir
from retarget.vmvx.interpreter import run_function


def run(text, *inputs):
    module = import_mlir(text, "test.mlir")
    (fn,) = module.functions.values()
    return run_function(fn, [np.asarray(x) for x in inputs])


A = np.arange(24, dtype=np.float32).reshape(4, 6)


def test_extract_slice_with_strides():
    text = """func.func @f(%a: tensor<4x6xf32>) -> tensor<2x2xf32> {
      %0 = tensor.extract_slice %a[1, 1] [2, 2] [2, 3] : tensor<4x6xf32> to tensor<2x2xf32>
      return %0 : tensor<2x2xf32>
    }"""
    np.testing.assert_array_equal(run(text, A)[0], A[1:4:2, 1:5:3])


def test_rank_reducing_extract_slice_with_constant_index_offset():
    text = """func.func @f(%a: tensor<4x6xf32>) -> tensor<6xf32> {
      %c2 = arith.constant 2 : index
      %0 = tensor.extract_slice %a[%c2, 0] [1, 6] [1, 1] : tensor<4x6xf32> to tensor<6xf32>
      return %0 : tensor<6xf32>
    }"""
    np.testing.assert_array_equal(run(text, A)[0], A[2])


def test_insert_slice_writes_into_the_destination():
    text = """func.func @f(%a: tensor<4x6xf32>, %s: tensor<2x3xf32>) -> tensor<4x6xf32> {
      %0 = tensor.insert_slice %s into %a[1, 2] [2, 3] [1, 1] : tensor<2x3xf32> into tensor<4x6xf32>
      return %0 : tensor<4x6xf32>
    }"""
    s = -np.ones((2, 3), np.float32)
    expected = A.copy()
    expected[1:3, 2:5] = s
    np.testing.assert_array_equal(run(text, A, s)[0], expected)


def test_insert_slice_with_strides_writes_every_stride_th_element():
    text = """func.func @f(%a: tensor<4x6xf32>, %s: tensor<2x2xf32>) -> tensor<4x6xf32> {
      %0 = tensor.insert_slice %s into %a[1, 0] [2, 2] [2, 5] : tensor<2x2xf32> into tensor<4x6xf32>
      return %0 : tensor<4x6xf32>
    }"""
    s = -np.arange(1, 5, dtype=np.float32).reshape(2, 2)
    expected = A.copy()
    expected[1:4:2, 0:6:5] = s
    np.testing.assert_array_equal(run(text, A, s)[0], expected)


def test_pad_with_constant_body():
    text = """func.func @f(%a: tensor<4x6xf32>) -> tensor<5x9xf32> {
      %cst = arith.constant -1.0 : f32
      %0 = tensor.pad %a low[0, 1] high[1, 2] {
      ^bb0(%i: index, %j: index):
        tensor.yield %cst : f32
      } : tensor<4x6xf32> to tensor<5x9xf32>
      return %0 : tensor<5x9xf32>
    }"""
    np.testing.assert_array_equal(run(text, A)[0], np.pad(A, [(0, 1), (1, 2)], constant_values=-1))


def test_collapse_and_expand_shape():
    text = """func.func @f(%a: tensor<4x6xf32>) -> tensor<2x2x6xf32> {
      %0 = tensor.collapse_shape %a [[0, 1]] : tensor<4x6xf32> into tensor<24xf32>
      %1 = tensor.expand_shape %0 [[0, 1, 2]] output_shape [2, 2, 6] : tensor<24xf32> into tensor<2x2x6xf32>
      return %1 : tensor<2x2x6xf32>
    }"""
    np.testing.assert_array_equal(run(text, A)[0], A.reshape(2, 2, 6))


def test_concat_and_reshape():
    text = """func.func @f(%a: tensor<4x6xf32>) -> tensor<8x6xf32> {
      %s = arith.constant dense<[8, 6]> : tensor<2xi64>
      %0 = tensor.concat dim(1) %a, %a : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x12xf32>
      %1 = tensor.reshape %0(%s) : (tensor<4x12xf32>, tensor<2xi64>) -> tensor<8x6xf32>
      return %1 : tensor<8x6xf32>
    }"""
    np.testing.assert_array_equal(run(text, A)[0], np.concatenate([A, A], 1).reshape(8, 6))


def test_extract_element_and_empty():
    text = """func.func @f(%a: tensor<4x6xf32>) -> tensor<2xf32> {
      %c1 = arith.constant 1 : index
      %c3 = arith.constant 3 : index
      %v = tensor.extract %a[%c1, %c3] : tensor<4x6xf32>
      %e = tensor.empty() : tensor<2xf32>
      %0 = linalg.fill ins(%v : f32) outs(%e : tensor<2xf32>) -> tensor<2xf32>
      return %0 : tensor<2xf32>
    }"""
    np.testing.assert_array_equal(run(text, A)[0], [A[1, 3]] * 2)
