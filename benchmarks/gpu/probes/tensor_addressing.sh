#!/usr/bin/env bash
# Probe (2026-11-24, fourth session; not shipped): workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2)
# loaded through tensor layouts (SPV_NV_tensor_addressing) instead of strided loads. The workgroup-scope schedule
# lives only in commit 14f7892, so the probe is built from it:
#   on the CPU machine:  bash benchmarks/gpu/probes/tensor_addressing.sh prepare     (fills .dbg/probe, git-ignored)
#   on the GPU machine:  . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/probes/tensor_addressing.sh   (carry .gl .whl .dbg)
set -uo pipefail
cd "$(dirname "$0")/../../.."
if [ "${1:-}" = prepare ]; then
  tree=$(mktemp -d)/probe
  git worktree add --detach "$tree" 14f7892 >/dev/null && git -C "$tree" apply "$PWD/benchmarks/gpu/probes/tensor-addressing.patch" || exit 1
  rm -rf .dbg/probe && mkdir -p .dbg/probe
  cp -r "$tree/core/src" .dbg/probe/core_src && cp -r "$tree/plugins/vulkan_spirv/src" .dbg/probe/vk_src
  cp "$tree/benchmarks/gpu/gemm.py" .dbg/probe/gemm.py
  find .dbg/probe -name __pycache__ -exec rm -rf {} +
  git worktree remove --force "$tree"
  exit 0
fi
[ -d .dbg/probe ] || { echo "run '$0 prepare' on the CPU machine first, and carry .dbg"; exit 1; }
export PYTHONPATH=$PWD/.dbg/probe/core_src:$PWD/.dbg/probe/vk_src:$PYTHONPATH
python3 -c "import retarget, retarget_vulkan_spirv; print(retarget.__file__, retarget_vulkan_spirv.__file__)"
RETARGET_VULKAN_PIPELINE_STATISTICS=1 python3 .dbg/probe/gemm.py --target vulkan-spirv:host --device vulkan --dtype f16 \
  --sizes 4096 --variants --repeats 20 2>&1 | grep -v "^$"
