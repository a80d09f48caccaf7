#!/usr/bin/env bash
# The cuda target against torch on this machine's GPU; prints a table last, writes $OUT/cuda.json if OUT is set.
#   bash benchmarks/gpu/run.sh [--models mlp resnet18] [--repeats 50]
# Uses the image's torch, cuda-bindings and NVRTC; installs only retarget's core and cuda plugin, offline.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import retarget_cuda, retarget" 2>/dev/null; then
  "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e core -e plugins/cuda >/tmp/run-cuda-pip.log 2>&1 \
    || { echo "run.sh: could not install core and plugins/cuda; see /tmp/run-cuda-pip.log"; exit 1; }
fi
export PYTHONUNBUFFERED=1
exec "$PY" benchmarks/gpu/run_cuda.py "$@"
