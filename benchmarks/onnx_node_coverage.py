"""Per-op pass counts of ONNX's backend node tests for the ops the onnx importer claims.

    python benchmarks/onnx_node_coverage.py [-v] [--target TARGET --device DEVICE] [--only REGEX] [--json FILE]

Uses the selection and comparison of core/tests/importers/test_onnx_node_tests.py. With no target, each imported
graph runs on vmvx's interpreter (what the tests do); with one (`--target llvm-cpu --device local-task`, `--target
cuda --device cuda`, `--target vulkan-spirv --device vulkan`, ...) each case is compiled for it and run there, with
the same tolerances: the node tests as a check of a backend's code generation. `--only` runs the cases whose names
match a regular expression, and prints each failure whole (a mismatch's worst elements, a refusal's reason).
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import pathlib
import re
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location(
    "onnx_node_tests", HERE.parent / "core" / "tests" / "importers" / "test_onnx_node_tests.py")
tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tests)


def main(verbose: bool = False, target: str | None = None, device: str | None = None,
         json_out: str | None = None, only: str | None = None) -> float:
    passed, total = collections.Counter(), collections.Counter()
    failures, expected, kinds = [], collections.Counter(), collections.Counter()
    start = time.perf_counter()
    for name, case in tests.node_cases():
        if only and not re.search(only, name):
            continue
        op = tests.claimed_op(case)
        total[op] += 1
        try:
            with np.errstate(all="ignore"):
                tests.run_case(case, target, device)
            passed[op] += 1
        except Exception as e:  # noqa: BLE001 - a report, not a test
            reason = tests.expected_failure(name)
            expected[reason] += reason is not None
            kinds[_kind(e)] += reason is None
            failures.append((name, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"))
            if only:  # a few cases, looked into: the whole message
                print(f"FAIL {name}: {type(e).__name__}: {str(e).strip()}", flush=True)
            elif verbose:  # as they come: a run cut short still tells what failed
                print(f"FAIL {name}: {failures[-1][1][:200]}", flush=True)
    if not total:
        raise SystemExit(f"no node test's name matches --only {only!r}")
    width = max(map(len, total))
    for op in sorted(total):
        print(f"{op:<{width}}  {passed[op]:>3}/{total[op]:<3}")
    n_pass, n_all = sum(passed.values()), sum(total.values())
    rate = n_pass / n_all if n_all else 0.0
    where = f" on {target} ({device})" if target else " on vmvx's interpreter"
    print(f"\n{n_pass}/{n_all} node tests pass ({100 * rate:.1f}%) over {len(total)} claimed ops{where}, "
          f"in {time.perf_counter() - start:.0f} s")
    print(f"{sum(expected.values())} of the {n_all - n_pass} failures are listed expected failures; the others: "
          f"{kinds['wrong']} wrong results, {kinds['refused']} refused (a RetargetError), {kinds['error']} errors")
    for reason, count in expected.most_common():
        if count:
            print(f"  {count:>4}  {reason}")
    if json_out:
        pathlib.Path(json_out).write_text(json.dumps({
            "target": target, "device": device, "passed": n_pass, "total": n_all, "unexpected": dict(kinds),
            "ops": {op: [passed[op], total[op]] for op in sorted(total)},
            "failures": [{"case": name, "error": why, "expected": tests.expected_failure(name)}
                         for name, why in failures]}, indent=1))
    return rate


def _kind(e: Exception) -> str:
    """wrong: a result differs; refused: retarget said no, with a reason; error: anything else (a bug)."""
    from retarget.errors import RetargetError

    return "wrong" if isinstance(e, AssertionError) else "refused" if isinstance(e, RetargetError) else "error"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="list every failure")
    parser.add_argument("--target", help="compile each case for this target (default: vmvx's interpreter)")
    parser.add_argument("--device", help="the device to run the target's code on (default: the target's own)")
    parser.add_argument("--json", dest="json_out", help="write the counts and failures to this file")
    parser.add_argument("--only", metavar="REGEX", help="only the cases whose names match (each failure printed whole)")
    args = parser.parse_args()
    if args.target and not args.device:
        from retarget.testing.torch_cases import device_of

        args.device = device_of(args.target)
    main(args.verbose, args.target, args.device, args.json_out, args.only)
