#!/usr/bin/env bash
# Vulkan f16 GEMMs through cooperative matrices of workgroup scope (VK_NV_cooperative_matrix2) beside the
# subgroup schedule and cuBLAS, in one process per size list: what the device offers, then every tile variant.
#   . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/run_workgroup_matrices.sh     (carry .gl and .whl)
set -uo pipefail
cd "$(dirname "$0")/../.."
python3 - <<'PY'
import json, retarget
for d in retarget.devices():
    if d.driver == "vulkan" and d.available:
        p = d.properties
        print(d.name, "| workgroup matrices:", json.dumps(p.get("cooperative_matrix_workgroup"), indent=None))
PY
python3 benchmarks/gpu/gemm.py --target vulkan-spirv:host --device vulkan --dtype f16 --sizes 4096 2048 8192 \
  --variants --repeats 20 "$@"
