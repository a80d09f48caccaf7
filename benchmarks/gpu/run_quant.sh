#!/usr/bin/env bash
# Precision and quantization on this machine's GPU, in one go:
#  1. the quantization tests on the device (cuda and vulkan-spirv against the numpy model of each scheme);
#  2. an int4 GEMV-heavy model (an LLM decoder's MLP at batch 1, 2 blocks of 4096 -> 11008 -> 4096: 180M
#     weights, far more than the L2) in f32, f16, int8, int4 and 8da on cuda and vulkan-spirv: each result
#     checked against its numpy model, then timed (benchmarks/quant_speed.py). Expect int4 faster than f16.
# Writes $OUT/quant_speed.txt (the table) and $OUT/quant_speed.json; OUT defaults to a new temporary folder.
#   . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/run_quant.sh [--repeats 50] [--blocks 4]
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export OUT
status=0
"$PY" -m pytest -q -p no:cacheprovider plugins/cuda/tests/test_quantization.py \
  plugins/vulkan_spirv/tests/test_quantization.py 2>&1 | tail -4 | tee "$OUT/quant_tests.txt" || status=$?
"$PY" benchmarks/quant_speed.py --targets cuda:host=cuda vulkan-spirv:host=vulkan "$@" 2>&1 \
  | tee "$OUT/quant_speed.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "run_quant.sh: results in $OUT"
exit "$status"
