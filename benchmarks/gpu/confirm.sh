#!/usr/bin/env bash
# A whole confirmation on a GPU machine, in one go (what the 2026-11-24 closing run did):
#  1. the GPU plugins' tests and the dynamic zoo on this GPU;
#  2. small convolutions, the lowering's choice beside the schedule before it (small_convs.py);
#  3. the zoo suite beside torch (run.sh: $OUT/zoo.txt, zoo.json, zoo.png);
#  4. fp16 mode beside f32 and torch's half model (fp16.py); the transformer block dispatch by dispatch (calls.py);
#  5. compute-sanitizer's memcheck, leak check included, on every reliability case.
#   . benchmarks/gpu/preamble.sh; OUT=/tmp/out bash benchmarks/gpu/confirm.sh      (carry .gl and .whl)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 OUT=${OUT:-$(mktemp -d)}
timeout 200 python3 -m pytest -q -p no:cacheprovider plugins/cuda plugins/vulkan_spirv plugins/webgpu \
  tests/test_zoo_dynamic.py 2>&1 | tail -3 | tee "$OUT/pytest-gpu.txt"
timeout 120 python3 benchmarks/gpu/small_convs.py --variants none default --repeats 40 2>&1 | tail -34
RUN_CUDA=0 ZOO_ARGS="--models mlp,mobilenet_v2,resnet18,transformer_block,gemm_1024,gemm_4096 --devices cuda,vulkan,webgpu --peers torch,onnxruntime --repeats 20" \
  timeout 240 bash benchmarks/gpu/run.sh 2>&1 | tail -4
timeout 120 python3 benchmarks/gpu/fp16.py --repeats 40 2>&1 | tail -21
timeout 90 python3 benchmarks/gpu/calls.py --models transformer_block --repeats 20 --per-dispatch 12 2>&1 \
  | grep -v "relative error" | tail -26
STEPS=sanitizer TOOLS=memcheck timeout 200 bash benchmarks/gpu/run_reliability.sh 2>&1 | grep -E "==|SUMMARY|RESULT" | tail -30
echo "confirm.sh: results in $OUT"
