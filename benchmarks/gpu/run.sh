#!/usr/bin/env bash
# On a GPU machine, in one go:
#  1. the cuda target against torch, as before (benchmarks/gpu/run_cuda.py): $OUT/cuda.json and its table;
#  2. the zoo suite on every device beside the peers (`retarget benchmark --suite zoo`):
#     $OUT/zoo.txt (the table), $OUT/zoo.json, $OUT/zoo.png (when matplotlib is there).
#   bash benchmarks/gpu/run.sh [--models mlp resnet18] [--repeats 50]     # these flags go to run_cuda.py
#   ZOO_ARGS="--models mlp,resnet18 --devices cuda --repeats 50" bash benchmarks/gpu/run.sh
#   RUN_CUDA=0 bash benchmarks/gpu/run.sh                                  # the suite alone
# OUT defaults to a new temporary folder, printed at the end. Uses the image's torch, cuda-bindings, NVRTC,
# llvmlite and matplotlib; installs only retarget's core, cuda and llvm-cpu plugins, offline.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import retarget_cuda, retarget_llvm_cpu, retarget" 2>/dev/null; then
  "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e core -e plugins/cuda -e plugins/llvm_cpu \
    >/tmp/run-cuda-pip.log 2>&1 \
    || { echo "run.sh: could not install core and plugins/cuda, plugins/llvm_cpu; see /tmp/run-cuda-pip.log"; exit 1; }
fi
export PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export OUT
status=0
if [ "${RUN_CUDA:-1}" != 0 ]; then
  "$PY" benchmarks/gpu/run_cuda.py "$@" || status=$?
fi
png=(--png "$OUT/zoo.png")
if ! "$PY" -c "import matplotlib" 2>/dev/null; then
  echo "run.sh: matplotlib is not installed, so no zoo.png"
  png=()
fi
# shellcheck disable=SC2086  # ZOO_ARGS is a list of flags
COLUMNS=${COLUMNS:-170} "$PY" -m retarget benchmark --suite zoo ${ZOO_ARGS:-} --json-out "$OUT/zoo.json" "${png[@]}" \
  | tee "$OUT/zoo.txt" || status=$?
echo "run.sh: results in $OUT"
exit "$status"
