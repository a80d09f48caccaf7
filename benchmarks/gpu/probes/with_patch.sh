#!/usr/bin/env bash
# Applies PATCH (a probe's lowering knob) to this tree, runs patched_matmul.py at 4096^3 for each variant (a
# Python dict literal of constants, as patched_matmul.py takes), with the driver's register counts, and takes the
# patch back out, however it ends. Arguments after `--` go to every patched_matmul.py run.
#   bash benchmarks/gpu/probes/with_patch.sh PATCH VARIANT... [-- ARG...]
set -uo pipefail
patch_file=$(realpath "$1")
cd "$(dirname "$0")/../../.."
here=benchmarks/gpu/probes
shift
variants=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do variants+=("$1"); shift; done
[ $# -gt 0 ] && shift
git apply "$patch_file" 2>/dev/null || patch -p1 < "$patch_file" || exit 1
trap 'git apply -R "$patch_file" 2>/dev/null || patch -R -p1 < "$patch_file"' EXIT
export RETARGET_VULKAN_PIPELINE_STATISTICS=1
for variant in "${variants[@]}"; do
  python3 "$here/patched_matmul.py" "$variant" --size 4096 "$@" 2>&1 | grep -v "^ *$" | tail -2 \
    | sed 's/retarget: vulkan pipeline main_dispatch_0_matmul:/  /'
done
