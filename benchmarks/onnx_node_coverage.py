"""Per-op pass counts of ONNX's backend node tests for the ops the onnx importer claims.

    python benchmarks/onnx_node_coverage.py [-v]

Uses the selection and comparison of core/tests/importers/test_onnx_node_tests.py.
"""

from __future__ import annotations

import collections
import importlib.util
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location(
    "onnx_node_tests", HERE.parent / "core" / "tests" / "importers" / "test_onnx_node_tests.py")
tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tests)


def main(verbose: bool = False) -> float:
    passed, total = collections.Counter(), collections.Counter()
    failures, expected = [], collections.Counter()
    for name, case in tests.node_cases():
        op = tests.claimed_op(case)
        total[op] += 1
        try:
            with np.errstate(all="ignore"):
                tests.run_case(case)
            passed[op] += 1
        except Exception as e:  # noqa: BLE001 - a report, not a test
            reason = tests.expected_failure(name)
            expected[reason] += reason is not None
            failures.append((name, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"))
    width = max(map(len, total))
    for op in sorted(total):
        print(f"{op:<{width}}  {passed[op]:>3}/{total[op]:<3}")
    n_pass, n_all = sum(passed.values()), sum(total.values())
    rate = n_pass / n_all if n_all else 0.0
    print(f"\n{n_pass}/{n_all} node tests pass ({100 * rate:.1f}%) over {len(total)} claimed ops")
    print(f"{sum(expected.values())} of the {n_all - n_pass} failures are listed expected failures:")
    for reason, count in expected.most_common():
        if count:
            print(f"  {count:>4}  {reason}")
    if verbose:
        for name, why in failures:
            print(f"FAIL {name}: {why[:200]}")
    return rate


if __name__ == "__main__":
    main("-v" in sys.argv)
