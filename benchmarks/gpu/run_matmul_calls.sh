#!/usr/bin/env bash
# cuda and vulkan on this machine's GPU in one go (2026-11-24 session): the cuda plugin's tests (three
# command-buffer modes, DLPack), f32 GEMMs with several register-tile plans beside cuBLAS (TF32 off), f16 GEMMs
# (wmma), and where a MobileNetV2 / ResNet-18 call's time goes (numpy vs DLPack, each mode, 32- vs 64-bit
# indices, the slowest dispatches).
#   . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/run_matmul_calls.sh     (carry .gl and .whl)
#   STEPS="pytest calls" bash benchmarks/gpu/run_matmul_calls.sh             (some of: pytest f32 f16 vulkan calls)
# Writes $OUT/pytest-cuda.txt, $OUT/gemm-*.json, $OUT/calls.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 OUT=${OUT:-$(mktemp -d)}
STEPS=${STEPS:-pytest f32 f16 vulkan calls}
step() { [[ " $STEPS " == *" $1 "* ]]; }
if step pytest; then
  python3 -m pytest -q -p no:cacheprovider plugins/cuda 2>&1 | grep -v "Warning\|return cls" | tail -40 \
    | tee "$OUT/pytest-cuda.txt"
fi
step f32 && python3 benchmarks/gpu/gemm.py --target cuda:host --device cuda --dtype f32 --sizes 1024 2048 4096 --variants
step f16 && python3 benchmarks/gpu/gemm.py --target cuda:host --device cuda --dtype f16 --sizes 1024 4096
step vulkan && python3 benchmarks/gpu/gemm.py --target vulkan-spirv:host --device vulkan --dtype f32 --sizes 1024 4096 \
  --variants
step calls && python3 benchmarks/gpu/calls.py --models mobilenet_v2 resnet18 --index64 --repeats 40
true
