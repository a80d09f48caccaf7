"""The benchmark suite: `retarget benchmark` under another name, with `--suite zoo` as the default.

    .venv/bin/python benchmarks/run.py                                   # every model, device and peer
    .venv/bin/python benchmarks/run.py --models mlp,mobilenet_v2 --devices local-sync --repeats 50 \\
        --json-out out/zoo.json --png out/zoo.png

Every flag is `retarget benchmark`'s (`--help` lists them); the code is `retarget.bench`.
"""

import sys

from retarget.cli import main

if __name__ == "__main__":
    args = sys.argv[1:]
    wants_help = "--help" in args or "-h" in args
    names_a_module = any(a.endswith(".rtm") for a in args)
    if "--suite" not in args and not names_a_module and not wants_help:
        args = ["--suite", "zoo", *args]
    sys.argv = [sys.argv[0], "benchmark", *args]
    main()
