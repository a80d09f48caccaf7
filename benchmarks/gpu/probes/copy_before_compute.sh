#!/usr/bin/env bash
# Probe (2026-11-24, fourth session; not shipped): with two staged copies, move each step's global -> shared copy
# next to its loads, before the multiplies, to see whether NVIDIA's Vulkan compiler turns an adjacent copy into an
# asynchronous one (LDGSTS). Times four variants beside the shipped kernel, with copy-before-compute.patch applied.
#   . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/probes/copy_before_compute.sh      (carry .gl and .whl)
here=$(dirname "$0")
plans="'retarget_vulkan_spirv.targets.LARGE_FRAGMENT_PLANS'"
exec bash "$here/with_patch.sh" "$here/copy-before-compute.patch" "{}" \
  "{$plans: {'NVIDIA': [(2, 2, 4, 4, 2)]}}" "{$plans: {'NVIDIA': [(2, 2, 4, 4, 2)]}, 'COPY_BEFORE_COMPUTE': True}" \
  "{$plans: {'NVIDIA': [(2, 2, 4, 4, 1)]}}" "{$plans: {'NVIDIA': [(2, 2, 4, 4, 1)]}, 'COPY_BEFORE_COMPUTE': True}" "{}"
