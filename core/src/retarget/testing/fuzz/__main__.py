"""`python -m retarget.testing.fuzz --target mlir --seconds 3600`: a long fuzz run.

Findings (one file per distinct failure, with its traceback beside it) go to
--findings (default ./fuzz-findings); the exit code is 1 if there were any.
`--replay FILE` runs one saved input and prints what happens.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import TARGETS, Finding, default_corpus, fuzz, replay


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retarget.testing.fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=[*TARGETS, "all"], default="all")
    parser.add_argument("--seconds", type=float, default=60.0, help="per target (default 60)")
    parser.add_argument("--count", type=int, default=None, help="stop after this many inputs per target")
    parser.add_argument("--seed", type=int, default=0, help="input i of a seed is always the same")
    parser.add_argument("--corpus", type=Path, default=None, help=f"default: {default_corpus()}")
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per input before it counts as a hang")
    parser.add_argument("--memory-limit-mb", type=int, default=2048, help="address space each input may add")
    parser.add_argument("--findings", type=Path, default=Path("fuzz-findings"))
    parser.add_argument("--replay", type=Path, default=None, help="run one saved input of --target and exit")
    args = parser.parse_args(argv)

    if args.replay is not None:
        if args.target == "all":
            parser.error("--replay needs --target")
        outcome = replay(args.target, args.replay, args.time_limit)
        print(outcome.traceback if isinstance(outcome, Finding) else f"clean: {outcome}")
        return 1 if isinstance(outcome, Finding) else 0

    targets = list(TARGETS) if args.target == "all" else [args.target]
    found = 0
    for name in targets:
        report = fuzz(name, seconds=args.seconds, count=args.count, seed=args.seed, corpus=args.corpus,
                      time_limit=args.time_limit, memory_limit=args.memory_limit_mb << 20,
                      findings_dir=args.findings, progress=lambda line: print(line, file=sys.stderr, flush=True))
        print(report.summary(), flush=True)
        found += len(report.findings)
    if found:
        print(f"{found} findings; inputs and tracebacks in {args.findings}/")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
