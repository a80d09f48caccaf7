#!/usr/bin/env bash
# A whole confirmation on a GPU machine (what the 2026-11-24 closing runs did), in steps that fit the device
# tool's 10 minutes a call when split in two (STEPS="pytest gemm fp16", then STEPS="zoo sanitizer calls small"):
#  pytest:    the GPU plugins' tests and the dynamic zoo on this GPU;
#  issue6:    issue 6's command, ISSUE_RUNS times (3), each its own process: Vulkan's f16 GEMM 4096^3 beside cuBLAS;
#  gemm:      f16 GEMMs beside cuBLAS on cuda (the Hopper wgmma schedule) and on Vulkan (cooperative matrices);
#  fp16:      fp16 mode beside f32 and torch's half model (fp16.py);
#  zoo:       the zoo suite beside torch (run.sh: $OUT/zoo.txt, zoo.json, zoo.png);
#  sanitizer: compute-sanitizer's memcheck, leak check included, on every reliability case;
#  calls:     the transformer block dispatch by dispatch (calls.py);
#  small:     small convolutions, the lowering's choice beside the schedule before it (small_convs.py);
#  importers: the torch importer's composed-op tests (3-D convolutions, grid_sample, scatters, gather, unpool, ...) and
#             the scatter and segment kernels' tests on cuda, vulkan and webgpu (RETARGET_IMPORTER_TARGETS): a call
#             of its own;
#  onnx_ops:  the ONNX importer's tests that run on RETARGET_IMPORTER_TARGETS (transformer ops, Resize, the recurrent,
#             signal, control-flow and image ops) on cuda, vulkan and webgpu;
#  staged:    sizes that depend on the data (NonZero, Unique, NonMaxSuppression, x[mask]: stages with host ops between
#             them) and ai.onnx.ml (linear models, SVM regressors, tree ensembles) on cuda, vulkan and webgpu;
#  narrow:    float8, float4 and the 4- and 2-bit integers (kernel/narrow.py) on cuda, vulkan and webgpu, bit for bit
#             against ml_dtypes, and the scalar op cases (log1p and expm1 near 0 among them) on vulkan and webgpu;
#             then BitCast (a view) and DeformConv on the three;
#  nodes:     ONNX's node tests of every claimed op compiled for each of NODE_TARGETS (cuda vulkan-spirv
#             webgpu-spirv:host) and run there (benchmarks/onnx_node_coverage.py --target; NODE_ONLY=REGEX picks
#             cases): $OUT/nodes-TARGET.txt and .json;
#  new_ops:   benchmarks/new_ops.py on cuda, vulkan and webgpu beside torch's CUDA;
#  differential: random models (retarget.testing.differential) on vulkan, cuda and webgpu against float64, the
#             GEMM family up to 2048 so that the cooperative-matrix and wgmma schedules and their edges run, and
#             integer graphs against torch (DIFF_PAIRS="TARGET=DEVICE ..." picks the pairs, one call each if the
#             three overrun 10 minutes; DIFF_RUNS="FAMILY:DTYPE:SEED:COUNT:MAX_SIZE[:dynamic][:onnx] ..." the runs).
#   . benchmarks/gpu/preamble.sh; OUT=/tmp/out STEPS="pytest gemm fp16" bash benchmarks/gpu/confirm.sh   (carry .gl .whl)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 OUT=${OUT:-$(mktemp -d)}
STEPS=${STEPS:-pytest gemm fp16 zoo sanitizer calls small}
step() { [[ " $STEPS " == *" $1 "* ]]; }
if step pytest; then
  timeout 240 python3 -m pytest -q -p no:cacheprovider plugins/cuda plugins/vulkan_spirv plugins/webgpu \
    tests/test_zoo_dynamic.py 2>&1 | tail -3 | tee "$OUT/pytest-gpu.txt"
fi
if step issue6; then
  for run in $(seq "${ISSUE_RUNS:-3}"); do
    timeout 120 python3 benchmarks/gpu/gemm.py --target vulkan-spirv:host --device vulkan --dtype f16 --sizes 4096 \
      --repeats 20 2>&1 | grep -E "^(gemm|check)" | sed "s|^|run $run: |"
  done | tee "$OUT/issue6.txt"
fi
if step gemm; then
  timeout 120 python3 benchmarks/gpu/gemm.py --target cuda:host --device cuda --dtype f16 --sizes 2048 4096 8192 \
    --repeats 20 2>&1 | grep -E "^(gemm|check)"
  timeout 120 python3 benchmarks/gpu/gemm.py --target vulkan-spirv:host --device vulkan --dtype f16 \
    --sizes 2048 4096 --repeats 20 2>&1 | grep -E "^(gemm|check)"
fi
step fp16 && timeout 120 python3 benchmarks/gpu/fp16.py --repeats 40 2>&1 | tail -21
if step zoo; then
  RUN_CUDA=0 ZOO_ARGS="--models mlp,mobilenet_v2,resnet18,transformer_block,gemm_1024,gemm_4096 --devices cuda,vulkan,webgpu --peers torch,onnxruntime --repeats 20" \
    timeout 240 bash benchmarks/gpu/run.sh 2>&1 | tail -4
fi
if step sanitizer; then
  STEPS=sanitizer TOOLS=memcheck timeout 220 bash benchmarks/gpu/run_reliability.sh 2>&1 \
    | grep -E "==|SUMMARY|RESULT" | tail -30
fi
if step calls; then
  timeout 90 python3 benchmarks/gpu/calls.py --models transformer_block --repeats 20 --per-dispatch 12 2>&1 \
    | grep -v "relative error" | tail -26
fi
if step differential; then
  for pair in ${DIFF_PAIRS:-vulkan-spirv:host=vulkan cuda:host=cuda webgpu-spirv:host=webgpu}; do
    for run in ${DIFF_RUNS:-gemm:f16:0:40:2048 gemm:f32:0:30:1024 graph:f32:0:60:256 graph:f16:0:30:256 \
                int:i8:0:40:256 int:ui8:0:40:256 int:i16:0:30:256 int:i64:0:40:256}; do
      set -- ${run//:/ }
      flags=""  # fields after MAX_SIZE: "dynamic" (a dynamic batch), "onnx" (through the ONNX importer)
      for extra in "${@:6}"; do
        case "$extra" in dynamic) flags+=" --dynamic" ;; onnx) flags+=" --importer onnx" ;; esac
      done
      PYTHONWARNINGS=ignore timeout 150 python3 -m retarget.testing.differential --pair "$pair" --family "$1" \
        --dtype "$2" --seed "$3" --count "$4" --max-size "$5" $flags 2>&1 | sed "s|^|$pair $run: |" | tail -12
    done
  done | tee "$OUT/differential.txt"
fi
if step importers; then
  RETARGET_IMPORTER_TARGETS="cuda vulkan-spirv webgpu-spirv" timeout 560 python3 -m pytest -q -p no:cacheprovider \
    core/tests/importers/test_torch_more_ops.py core/tests/importers/test_torch_conv3d.py \
    core/tests/importers/test_torch_gather.py core/tests/importers/test_torch_unpool.py core/tests/test_scatter_kernel.py \
    core/tests/test_segment_reduce.py 2>&1 | tail -3 | tee "$OUT/importers-gpu.txt"
fi
if step onnx_ops; then
  RETARGET_IMPORTER_TARGETS="cuda vulkan-spirv webgpu-spirv" timeout 400 python3 -m pytest -q -p no:cacheprovider \
    core/tests/importers/test_onnx_more_ops.py core/tests/importers/test_onnx_resize.py \
    core/tests/importers/test_onnx_recurrent.py core/tests/importers/test_onnx_signal.py \
    core/tests/importers/test_onnx_control.py core/tests/importers/test_onnx_image.py 2>&1 | tail -4 \
    | tee "$OUT/onnx-ops-gpu.txt"
fi
if step staged; then
  RETARGET_IMPORTER_TARGETS="cuda vulkan-spirv webgpu-spirv" timeout 300 python3 -m pytest -q -p no:cacheprovider \
    core/tests/importers/test_onnx_data_dependent.py core/tests/importers/test_torch_nonzero.py \
    core/tests/importers/test_onnx_ml.py core/tests/importers/test_onnx_ml_trees.py 2>&1 | tail -4 \
    | tee "$OUT/staged-ml-gpu.txt"
fi
if step narrow; then
  RETARGET_IMPORTER_TARGETS="cuda vulkan-spirv webgpu-spirv" timeout 200 python3 -m pytest -q -p no:cacheprovider \
    core/tests/importers/test_onnx_narrow_types.py plugins/vulkan_spirv/tests/test_numerics.py \
    plugins/webgpu/tests/test_device.py -k "narrow or scalar_op or each_op" 2>&1 | tail -4 | tee "$OUT/narrow-gpu.txt"
  RETARGET_IMPORTER_TARGETS="cuda vulkan-spirv webgpu-spirv" timeout 200 python3 -m pytest -q -p no:cacheprovider \
    core/tests/importers/test_bitcast.py core/tests/importers/test_onnx_deform_conv.py 2>&1 | tail -4 \
    | tee "$OUT/bitcast-deform-gpu.txt"
fi
if step nodes; then
  for target in ${NODE_TARGETS:-cuda vulkan-spirv webgpu-spirv:host}; do
    name=${target//:/-}  # webgpu-spirv:host: the adapter's features (shader-f16), not the default profile's
    PYTHONWARNINGS=ignore timeout "${NODE_TIMEOUT:-180}" python3 benchmarks/onnx_node_coverage.py -v --target "$target" \
      ${NODE_ONLY:+--only "$NODE_ONLY"} --json "$OUT/nodes-$name.json" > "$OUT/nodes-$name.txt" 2>&1
    grep -E "node tests pass|wrong results" "$OUT/nodes-$name.txt" || echo "$target: no summary (timed out?)"
  done
fi
if step new_ops; then
  timeout 200 python3 benchmarks/new_ops.py --pairs cuda:host=cuda vulkan-spirv:host=vulkan webgpu-spirv:host=webgpu \
    --repeats 30 --json "$OUT/new_ops.json" 2>&1 | tail -23 | tee "$OUT/new_ops.txt"
fi
step small && timeout 120 python3 benchmarks/gpu/small_convs.py --variants none default --repeats 40 2>&1 | tail -34
echo "confirm.sh: results in $OUT"
