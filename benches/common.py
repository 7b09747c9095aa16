"""Shared helpers for the benchmarks: timing with medians, and printing ratios.

Every benchmark measures its baseline in the same run, on the same data, because these
machines are shared and noisy; the ratio is what to compare between runs.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall time of `fn` over `repeats` runs, after `warmup` untimed runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def report(title: str, rows: list[tuple[str, float, str]], ratios: list[tuple[str, float, str]]) -> None:
    """Prints a table of (name, value, unit) rows and of (name, ratio, target) rows."""
    print(f"\n== {title}")
    for name, value, unit in rows:
        print(f"  {name:<44} {value:>12.3f} {unit}")
    for name, ratio, target in ratios:
        print(f"  {name:<44} {ratio:>12.2f}x   (target {target})")


def env_float(name: str, default: float) -> float:
    """A positive number from the environment (a benchmark's size or length)."""
    value = float(os.environ.get(name, default))
    if not value > 0:
        raise ValueError(f"{name}={value!r}: give a positive number")
    return value


def env_int(name: str, default: int) -> int:
    """A whole number, 1 or more, from the environment."""
    value = int(os.environ.get(name, default))
    if value < 1:
        raise ValueError(f"{name}={value!r}: give a whole number, 1 or more")
    return value
