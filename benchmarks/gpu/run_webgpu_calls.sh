#!/usr/bin/env bash
# webgpu-spirv through wgpu (Vulkan) on this machine's GPU in one go: the webgpu plugin's tests, then every zoo
# model checked against torch and timed per call (numpy in and out, medians), with the GPU's own time, both ways of
# waiting (spin, sleep), unchecked and checked shaders, and where a call's host time goes (upload, encode, submit,
# wait, read, other): see benchmarks/gpu/webgpu_calls.py.
#   . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/run_webgpu_calls.sh          (carry .gl and .whl)
#   STEPS=calls bash benchmarks/gpu/run_webgpu_calls.sh --models mobilenet_v2     (some of: pytest calls)
# Writes $OUT/pytest-webgpu.txt and $OUT/webgpu_calls.json; the table is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 OUT=${OUT:-$(mktemp -d)}
STEPS=${STEPS:-pytest calls}
step() { [[ " $STEPS " == *" $1 "* ]]; }
if step pytest; then
  python3 -m pytest -q -p no:cacheprovider plugins/webgpu 2>&1 | grep -v "Warning\|return cls" | tail -15 \
    | tee "$OUT/pytest-webgpu.txt"
fi
step calls && python3 benchmarks/gpu/webgpu_calls.py --repeats 50 "$@"
true
