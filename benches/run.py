"""Runs every benchmark (`make bench`). Each prints its figures and its ratio to a baseline
measured in the same run. Pass names to run a subset: `python benches/run.py decode`.

`--tiny` (`make bench-tiny`) runs each at a size that takes seconds, not minutes: its figures
mean nothing, but every benchmark is run end to end, so that none rots unnoticed (CI runs it).
A size given in the environment still wins."""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

#: Every benchmark's sizes and lengths at their smallest (see each benchmark for what they mean).
TINY = {
    "BENCH_DECODE_FRAMES": "500",
    "BENCH_CORNERTURN_FRAMES": "512",
    "BENCH_CORNERTURN_REPEATS": "1",
    "BENCH_SPECTRUM_GB": "0.02",
    "BENCH_MONITOR_SECONDS": "0.5",
    "BENCH_STATUS_SECONDS": "0.5",
    "BENCH_LIVE_SECONDS": "1",
    "BENCH_LIVE_STEP_SECONDS": "0.5",
    "BENCH_LIVE_COST_SECONDS": "0.5",
    "BENCH_LIVE_RUNS": "1",
    "BENCH_LIVE_FRACTIONS": "1/64",
    "BENCH_BACKEND_FPS": "10000",
    "BENCH_BACKEND_SECONDS": "0.5",
    "BENCH_BACKEND_REPEATS": "1",
    "BENCH_RECORD_SECONDS": "0.5",
    "BENCH_LADDER": "20000",
    "BENCH_WRITE_MIB": "32",
    "BENCH_TWO_SECONDS": "0.5",
    "BENCH_COST_SECONDS": "0.5",
    "BENCH_COST_RUNS": "1",
    "BENCH_SCAN_SECONDS": "0.5",
    "BENCH_SCAN_MIB": "32",
    "BENCH_VSI_SECONDS": "0.5",
    "BENCH_DASK_GB": "0.01",
    "BENCH_DASK_FILES": "2",
    "BENCH_DASK_REPEATS": "1",
    "BENCH_DASK_FRINGE_SECONDS": "0.02",
    "BENCH_PUSH_GB": "0.02",
    "BENCH_PUSH_REPEATS": "1",
    "BENCH_PUSH_RELAY_MB": "8",
    "BENCH_PUSH_RELAY_STREAMS": "1,auto",
    "BENCH_PUSH_RECORD_SECONDS": "0.5",
    "BENCH_PUSH_RECORD_WRITE": "0",
    "BENCH_OBSERVE_PLAN_REPEATS": "1",
    "BENCH_OBSERVE_SECONDS": "1",
    "BENCH_OBSERVE_SCAN_SECONDS": "0.5",
    "BENCH_OBSERVE_RUNS": "1",
    "BENCH_OBSERVE_RING": "256MiB",
    "BENCH_FORWARD_SECONDS": "1",
    "BENCH_FORWARD_FPS": "10000",
    "BENCH_FORWARD_REPEATS": "1",
    "BENCH_FORWARD_RING": "256MiB",
    "BENCH_CATALOGUE_SCANS": "20,60",
    "BENCH_CATALOGUE_DISKS": "4",
    "BENCH_CATALOGUE_REPEATS": "1",
    "BENCH_CATALOGUE_COMMANDS": "1",
    "BENCH_CATALOGUE_MK6": "20",
    "BENCH_CATALOGUE_OBSERVE_SECONDS": "0",
}

BENCHES = ["decode", "cornerturn", "spectrum", "monitor", "status", "live", "backends", "record", "scans", "vsi", "dask", "push", "observe", "forward", "catalogue"]


def main(argv: list[str]) -> int:
    if "--tiny" in argv:
        argv = [a for a in argv if a != "--tiny"]
        for key, value in TINY.items():
            os.environ.setdefault(key, value)
    names = argv or BENCHES
    for name in names:
        if name not in BENCHES:
            print(f"unknown benchmark {name!r}; choose from {', '.join(BENCHES)}", file=sys.stderr)
            return 2
        t0 = time.monotonic()
        importlib.import_module(f"bench_{name}").main()
        print(f"\n(bench_{name}: {time.monotonic() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
