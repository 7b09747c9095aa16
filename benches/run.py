"""Runs every benchmark (`make bench`). Each prints its figures and its ratio to a baseline
measured in the same run. Pass names to run a subset: `python benches/run.py decode`."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

BENCHES = ["decode", "spectrum", "monitor", "status", "live", "backends", "record", "scans", "vsi", "dask", "push"]


def main(argv: list[str]) -> int:
    names = argv or BENCHES
    for name in names:
        if name not in BENCHES:
            print(f"unknown benchmark {name!r}; choose from {', '.join(BENCHES)}", file=sys.stderr)
            return 2
        importlib.import_module(f"bench_{name}").main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
