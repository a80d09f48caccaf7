#!/usr/bin/env bash
# Probe (2026-11-24, fifth session; not shipped): pipelines that ask the driver for no bounds checks on storage
# buffers (VK_EXT_pipeline_robustness; retarget proves every access in bounds before codegen, and NVIDIA's driver
# otherwise compares each load with the binding's size and predicates it), and 16-byte loads whose word index keeps
# its constant part apart. Times 4096^3 f16 as shipped and with no-driver-bounds-checks.patch applied, in turn,
# writing each pipeline cache to $OUT for vulkan_sass.py; then the zoo's Vulkan device times both ways.
#   . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/probes/no_driver_bounds_checks.sh      (carry .gl and .whl)
here=$(realpath "$(dirname "$0")")
cd "$here/../../.."
out=${OUT:-/tmp}
patch="$here/no-driver-bounds-checks.patch"
zoo() {
  COLUMNS=150 python3 -m retarget benchmark --suite zoo --models mobilenet_v2,resnet18,transformer_block \
    --devices vulkan --repeats 30 2>&1 | grep "vulkan:0"
}
for round in 1 2; do
  rm -rf ~/.cache/nvidia  # a fresh compile, so that the cache holds this pipeline alone
  echo "shipped (the driver's default checks)"
  RETARGET_VULKAN_PIPELINE_STATISTICS=1 python3 "$here/patched_matmul.py" "{}" --size 4096 \
    --pipeline-cache "$out/pipeline-cache-shipped.bin" 2>&1 | grep -v "^ *$" | tail -2
  rm -rf ~/.cache/nvidia
  echo "no-driver-bounds-checks.patch"
  bash "$here/with_patch.sh" "$patch" "{}" -- --pipeline-cache "$out/pipeline-cache-patched.bin"
done
echo "zoo, shipped"; zoo
git apply "$patch" 2>/dev/null || patch -p1 < "$patch" || exit 1
trap 'git apply -R "$patch" 2>/dev/null || patch -R -p1 < "$patch"' EXIT
echo "zoo, no-driver-bounds-checks.patch"; zoo
