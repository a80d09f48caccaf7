#!/usr/bin/env bash
# Probe (2026-11-24, fourth session; not shipped): a ring of staged copies for the fragment matmul: S copies in
# shared memory and D sets of staging registers, each step's global loads issued D steps before they are stored,
# one barrier a step, no shared-memory store between two barriers (STAGING_RING = (S, D)). Times the variants
# beside the shipped kernel, with staging-ring.patch applied.
#   . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/probes/staging_ring.sh      (carry .gl and .whl)
here=$(dirname "$0")
plans="'retarget_vulkan_spirv.targets.LARGE_FRAGMENT_PLANS'"
exec bash "$here/with_patch.sh" "$here/staging-ring.patch" "{}" \
  "{$plans: {'NVIDIA': [(2, 2, 4, 4, 1)]}, 'STAGING_RING': (4, 4)}" \
  "{$plans: {'NVIDIA': [(2, 2, 4, 4, 1)]}, 'STAGING_RING': (4, 2)}" \
  "{$plans: {'NVIDIA': [(2, 2, 4, 4, 1)]}, 'STAGING_RING': (3, 2)}" \
  "{$plans: {'NVIDIA': [(2, 2, 4, 4, 2)]}, 'STAGING_RING': (2, 2)}" "{}"
