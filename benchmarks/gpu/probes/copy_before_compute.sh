#!/usr/bin/env bash
# Probe (2026-11-24, fourth session; not shipped): with two staged copies, move each step's global -> shared copy
# next to its loads, before the multiplies, to see whether NVIDIA's Vulkan compiler turns an adjacent copy into an
# asynchronous one (LDGSTS). It applies copy-before-compute.patch to this tree, times four variants beside the
# shipped kernel, and takes the patch back out.   . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/probes/copy_before_compute.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
here=benchmarks/gpu/probes
git apply "$here/copy-before-compute.patch" 2>/dev/null || patch -p1 < "$here/copy-before-compute.patch" || exit 1
trap 'git apply -R "$here/copy-before-compute.patch" 2>/dev/null || patch -R -p1 < "$here/copy-before-compute.patch"' EXIT
export RETARGET_VULKAN_PIPELINE_STATISTICS=1
P="'retarget_vulkan_spirv.targets.LARGE_FRAGMENT_PLANS': {'NVIDIA': [(2, 2, 4, 4, 2)]}"
P1="'retarget_vulkan_spirv.targets.LARGE_FRAGMENT_PLANS': {'NVIDIA': [(2, 2, 4, 4, 1)]}"
while IFS='|' read -r p; do
  [ -z "$p" ] && continue
  python3 "$here/patched_matmul.py" "$p" --size 4096 2>&1 | grep -v "^ *$" | tail -2 \
    | sed 's/retarget: vulkan pipeline main_dispatch_0_matmul:/  /'
done <<LIST
{}
{$P}
{$P, 'COPY_BEFORE_COMPUTE': True}
{$P1}
{$P1, 'COPY_BEFORE_COMPUTE': True}
{}
LIST
