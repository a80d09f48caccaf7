#!/usr/bin/env bash
# Probe (2026-11-24, fifth session; not shipped): pipelines that ask the driver for no bounds checks on storage
# buffers (VK_EXT_pipeline_robustness; retarget proves every access in bounds before codegen, and NVIDIA's driver
# otherwise compares each load with the binding's size and predicates it), and 16-byte loads whose word index keeps
# its constant part apart. Times 4096^3 f16 with the patch applied, the driver's checks off and on
# (RETARGET_VULKAN_DRIVER_BOUNDS_CHECKS, which the patch adds), and writes each pipeline cache to $OUT for
# vulkan_sass.py.
#   . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/probes/no_driver_bounds_checks.sh      (carry .gl and .whl)
here=$(dirname "$0")
out=${OUT:-/tmp}
for checks in 0 1 0 1; do
  echo "driver bounds checks: $checks"
  rm -rf ~/.cache/nvidia  # a fresh compile, so that the cache holds this pipeline alone
  RETARGET_VULKAN_DRIVER_BOUNDS_CHECKS=$checks bash "$here/with_patch.sh" "$here/no-driver-bounds-checks.patch" "{}" \
    -- --pipeline-cache "$out/pipeline-cache-checks-$checks.bin"
done
