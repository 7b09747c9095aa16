"""`vdifrec generate`, `vdifrec check` and `vdifrec info`: making a synthetic recording and
looking at one file or scan."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from .. import _core
from ..analysis.check import check
from ..reader import open as open_reader
from ..sources import generate
from .args import (
    DEFAULTS,
    OK,
    PROBLEMS,
    UsageError,
    add_disk_arguments,
    add_signal_arguments,
    given,
    integer,
    number,
    os_error,
    path,
    positive,
)
from .printing import print_check_report

__all__ = ["add_check", "add_generate", "add_info"]


# -- generate ---------------------------------------------------------------------------------


def add_generate(sub: Any) -> None:
    p = sub.add_parser(
        "generate",
        help="write a synthetic FILA10G-like recording (noise + tone)",
        description="Write Gaussian noise plus a test tone, quantised at the optimal thresholds, "
        "as VDIF frames with valid headers. Defaults: the reference 8.224 Gbps stream "
        "(125000 frames/s of 8224 bytes, 4 channels x 2 bits, 1024 Msps, tone at 200 MHz of 512).",
    )
    p.add_argument("out", type=path, help="output file (.vdif)")
    p.add_argument("--seconds", type=number, help=f"seconds of data (default {DEFAULTS['generate']['seconds']:g})")
    add_signal_arguments(p)
    p.add_argument("--correlation", type=number, help="correlation of a common noise between inputs, 0..1 (default 0)")
    p.add_argument("--delay", type=integer, help="lag of the common noise per input, in samples (default 0)")
    p.set_defaults(func=_run_generate)


def _run_generate(a: argparse.Namespace) -> int:
    signal = given(a, "signal")
    try:
        h = generate(a.out, seconds=a.seconds, **signal)
    except OSError as exc:
        raise UsageError(os_error(exc)) from None
    # What was written, read back from the file (nothing recomputed here).
    size = os.path.getsize(a.out)
    frames = size // h.frame_size
    fps, threads = signal.get("fps", DEFAULTS["signal"]["fps"]), signal.get("threads", DEFAULTS["signal"]["threads"])
    rate = fps * h.samples_per_frame
    print(
        f"wrote {a.out}: {frames} frames of {h.frame_size} bytes ({size} bytes), "
        f"{threads} thread(s) x {h.nchan} ch x {h.bits} bit, {rate / 1e6:g} Msps per channel, "
        f"ref_epoch {h.ref_epoch} seconds {h.seconds}"
    )
    return OK


# -- check ------------------------------------------------------------------------------------


def add_check(sub: Any) -> None:
    p = sub.add_parser(
        "check",
        help="check a VDIF file or a scan: frames, gaps, order, duplicates, corruption",
        description="One pass over a VDIF file (or, with --disk, a scan's parts in order), in constant "
        "memory: frames, threads, per-second counts per thread, gaps, out-of-order and duplicate frames, "
        "invalid-flagged frames, corrupt stretches, and a scan's missing chunks. Exit status 0 when "
        "clean, 1 when anything is wrong, 2 on usage errors.",
    )
    p.add_argument("file", type=path, help="VDIF file, or with --disk the scan's name")
    add_disk_arguments(p, required=False)
    p.add_argument("--fps", type=integer, help="frames per second per thread (default: learned)")
    p.add_argument("--frame-size", type=integer, help="frame size in bytes (default: from the first header)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (keys: docs/reference/formats/check.md)")
    p.add_argument("--seconds", action="store_true", help="print every second's counts, not only problem seconds")
    p.set_defaults(func=_run_check)


def _run_check(a: argparse.Namespace) -> int:
    try:
        report = check(a.file, fps=a.fps, frame_size=a.frame_size, disks=a.disks, format=a.format)
    except OSError as exc:
        raise UsageError(os_error(exc)) from None
    except _core.FormatError as exc:
        print(f"vdifrec check: {exc}", file=sys.stderr)
        return PROBLEMS
    if a.json:
        print(json.dumps(report, indent=1))
    else:
        print_check_report(report, every_second=a.seconds)
    return OK if report["clean"] else PROBLEMS


# -- info -------------------------------------------------------------------------------------


def add_info(sub: Any) -> None:
    p = sub.add_parser("info", help="describe a VDIF file's stream (headers, rate, threads, time)")
    p.add_argument("file", type=path, help="VDIF file")
    p.add_argument("--sample-rate", type=positive(), default=None, help="Hz per channel, if the file cannot tell")
    p.set_defaults(func=_run_info)


def _run_info(a: argparse.Namespace) -> int:
    try:
        with open_reader(a.file, sample_rate=a.sample_rate) as fh:
            print(repr(fh))
            print(f"header0      {fh.header0!r}")
            print(f"shape        {fh.shape} {fh.dtype}")
    except OSError as exc:
        raise UsageError(os_error(exc)) from None
    except _core.FormatError as exc:
        print(f"vdifrec info: {exc}", file=sys.stderr)
        return PROBLEMS
    return OK
