#!/usr/bin/env bash
# Heterogeneous execution on this machine's GPU in one go: the tests of --fallback, then each GPU target all on
# the GPU beside the same zoo models split with llvm-cpu (an op refused on the GPU; webgpu's int64 argmax), every
# result checked against torch. Writes $OUT/fallback.json and $OUT/fallback.md when OUT is set.
#   . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/run_fallback.sh     (carry .gl and .whl; see ../shared/gpu)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider tests/test_fallback.py core/tests/test_placement.py 2>&1 | tail -4
python3 -m pytest -q -p no:cacheprovider plugins/cuda/tests plugins/vulkan_spirv/tests \
  -k "split or starts_with_a_barrier or support_table" 2>&1 | tail -4
python3 benchmarks/gpu/fallback.py --pairs cuda=cuda vulkan-spirv:host=vulkan webgpu-spirv:host=webgpu "$@"
