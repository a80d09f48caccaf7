#!/usr/bin/env bash
# Probe (2026-11-24, fourth session; not shipped): a ring of staged copies for the fragment matmul: S copies in
# shared memory and D sets of staging registers, each step's global loads issued D steps before they are stored,
# one barrier a step, no shared-memory store between two barriers. STAGING_RING = (S, D). It applies
# staging-ring.patch to this tree, times the variants beside the shipped kernel, and takes the patch back out.
#   . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/probes/staging_ring.sh      (carry .gl and .whl)
set -uo pipefail
cd "$(dirname "$0")/../../.."
here=benchmarks/gpu/probes
git apply "$here/staging-ring.patch" 2>/dev/null || patch -p1 < "$here/staging-ring.patch" || exit 1
trap 'git apply -R "$here/staging-ring.patch" 2>/dev/null || patch -R -p1 < "$here/staging-ring.patch"' EXIT
export RETARGET_VULKAN_PIPELINE_STATISTICS=1
T="'retarget_vulkan_spirv.targets.LARGE_FRAGMENT_PLANS'"
while IFS='|' read -r p; do
  [ -z "$p" ] && continue
  python3 "$here/patched_matmul.py" "$p" --size 4096 2>&1 | grep -v "^ *$" | tail -2 \
    | sed 's/retarget: vulkan pipeline main_dispatch_0_matmul:/  /'
done <<LIST
{}
{$T: {'NVIDIA': [(2, 2, 4, 4, 1)]}, 'STAGING_RING': (4, 4)}
{$T: {'NVIDIA': [(2, 2, 4, 4, 1)]}, 'STAGING_RING': (4, 2)}
{$T: {'NVIDIA': [(2, 2, 4, 4, 1)]}, 'STAGING_RING': (3, 2)}
{$T: {'NVIDIA': [(2, 2, 4, 4, 2)]}, 'STAGING_RING': (2, 2)}
{}
LIST
