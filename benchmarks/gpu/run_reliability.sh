#!/usr/bin/env bash
# Issue 14's checks on this machine's GPU, in one go:
#  1. compute-sanitizer on every zoo model and four f16 matmuls (the tensor-core fragment paths) compiled for
#     cuda:host: memcheck with its leak check on all of them, racecheck and synccheck on the ones with
#     workgroup memory and barriers; each run also checks its answer (torch, or vmvx for the matmuls);
#  2. leaks on cuda: 10,000 calls and 100 loads of a small MLP (traced memory, RSS, threads, cuMemGetInfo);
#  3. the conformance suite's 16-thread and leak tests, and the cuda plugin's tests, on cuda (and on vulkan
#     where the NVIDIA Vulkan driver is set up, which runs the learned readbacks for real).
# Writes $OUT/reliability.md (the table), $OUT/reliability.json, the sanitizer logs under $OUT/sanitizer/,
# $OUT/leaks-cuda.json and $OUT/pytest-*.txt.
#   . benchmarks/gpu/preamble.sh; bash benchmarks/gpu/run_reliability.sh     (carry .gl and .whl)
#   STEPS="sanitizer leaks" bash benchmarks/gpu/run_reliability.sh          (some of: sanitizer leaks threads)
#   STEPS=sanitizer TOOLS=memcheck bash benchmarks/gpu/run_reliability.sh   (one sanitizer tool on every case)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 OUT=${OUT:-$(mktemp -d)}
STEPS=${STEPS:-sanitizer leaks threads}
step() { [[ " $STEPS " == *" $1 "* ]]; }
mkdir -p "$OUT/sanitizer"
R=benchmarks/gpu/reliability.py

if step sanitizer; then
  SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -z "$SANITIZER" ]; then
    echo "run_reliability.sh: compute-sanitizer not found (PATH, /usr/local/cuda*/bin): the sanitizer step is skipped"
  else
    python3 "$R" prepare "$OUT/modules" 2>&1 | grep -v "Warning\|return cls"
    for name in $(python3 "$R" names "$OUT/modules"); do
      tools="memcheck"
      case "$name" in mlp) ;; *) tools="memcheck racecheck synccheck" ;; esac  # mlp has no workgroup memory
      for tool in ${TOOLS:-$tools}; do
        flags=(--tool "$tool" --print-limit 20)
        # Host backtraces hold the Python frames of every allocation's call stack, and those frames hold our
        # objects: the module could then never be freed, and the leak check reported its buffers. Device
        # backtraces are enough to place a kernel's bad access; rerun with --show-backtrace yes for the host's.
        [ "$tool" = memcheck ] && flags+=(--leak-check full --show-backtrace device)
        echo "== $tool $name"
        timeout 1800 "$SANITIZER" "${flags[@]}" python3 "$R" run "$OUT/modules" "$name" >"$OUT/sanitizer/$tool-$name.log" 2>&1
        grep -E "ERROR SUMMARY|^RESULT" "$OUT/sanitizer/$tool-$name.log" | tail -2
      done
    done
  fi
fi

if step leaks; then
  python3 -m retarget.testing.leaks --device cuda --calls 10000 --loads 100 --json >"$OUT/leaks-cuda.json" \
    2>"$OUT/leaks-cuda.err" || cat "$OUT/leaks-cuda.err"
fi

if step threads; then
  python3 -m pytest -q -p no:cacheprovider plugins/cuda/tests/test_conformance.py -k "threads or leak or memory_in_use" \
    2>&1 | tail -5 | tee "$OUT/pytest-cuda-threads.txt"
  python3 -m pytest -q -p no:cacheprovider plugins/cuda 2>&1 | tail -5 | tee "$OUT/pytest-cuda.txt"
  python3 -m pytest -q -p no:cacheprovider plugins/vulkan_spirv/tests/test_conformance.py \
    -k "threads or leak or memory_in_use" 2>&1 | tail -5 | tee "$OUT/pytest-vulkan-threads.txt"
fi

python3 "$R" summarize "$OUT"
echo "run_reliability.sh: results in $OUT"
