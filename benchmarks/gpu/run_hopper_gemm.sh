#!/usr/bin/env bash
# The cuda backend's wgmma schedule for half-precision GEMMs on Hopper (retarget_cuda.hopper_gemm, issue 5):
# its tests on the GPU, then f16 GEMMs at several sizes beside cuBLAS, each size with the schedule's other
# plans and the core's wmma schedule for comparison (device time, medians), then linear layers (+ bias) beside
# torch.addmm.
#   . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/run_hopper_gemm.sh      (carry .gl and .whl)
#   STEPS="pytest" SIZES="4096" bash benchmarks/gpu/run_hopper_gemm.sh
# Writes $OUT/pytest-hopper.txt, $OUT/gemm-cuda-f16.json and $OUT/gemm-cuda-f16-bias.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 OUT=${OUT:-$(mktemp -d)}
STEPS=${STEPS:-pytest f16 bias}
SIZES=${SIZES:-2048 4096 8192}
step() { [[ " $STEPS " == *" $1 "* ]]; }
if step pytest; then
  python3 -m pytest -q -p no:cacheprovider plugins/cuda/tests/test_hopper_gemm.py 2>&1 | grep -v "Warning\|return cls" \
    | tail -40 | tee "$OUT/pytest-hopper.txt"
fi
step f16 && python3 benchmarks/gpu/gemm.py --target cuda:host --device cuda --dtype f16 --sizes $SIZES --variants
step bias && python3 benchmarks/gpu/gemm.py --target cuda:host --device cuda --dtype f16 --sizes $SIZES --bias
true
