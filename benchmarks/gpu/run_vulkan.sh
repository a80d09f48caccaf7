#!/usr/bin/env bash
# The vulkan-spirv target on this machine's GPU in one go: every scalar op on the device against the
# reference, the zoo beside torch (eager and CUDA graph), and f16 GEMMs (cooperative matrices where the
# device has them) beside cuBLAS. Writes $OUT/vulkan.json and $OUT/gemm-vulkan.json when OUT is set.
#   . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/run_vulkan.sh     (carry .gl and .whl; see ../shared/gpu)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider plugins/vulkan_spirv/tests/test_numerics.py -k "scalar_op or sharing" 2>&1 \
  | tail -4
python3 benchmarks/gpu/run_target.py --target vulkan-spirv:host --device vulkan --repeats 30 "$@"
python3 benchmarks/gpu/gemm.py --target vulkan-spirv:host --device vulkan --sizes 1024 4096 --repeats 20
