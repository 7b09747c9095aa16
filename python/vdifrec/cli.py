"""The ``vdifrec`` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import (
    _cli_doctor,
    _cli_fringe_test,
    _cli_monitor,
    _cli_quality,
    _cli_record,
    _cli_scans,
    _cli_serve,
    _cli_transfer,
    _cli_watch,
    _core,
)
from ._cli_args import (
    DEFAULTS,
    OptionError,
    Parser,
    UsageError,
    add_signal_arguments,
    argument_error,
    given,
    integer,
    number,
    os_error,
    path,
    positive,
)
from .files import check, generate

__all__ = ["main"]

# Exit codes.
OK, PROBLEMS, USAGE = 0, 1, 2


# -- generate ---------------------------------------------------------------------------------


def _add_generate(sub: Any) -> None:
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


def _add_check(sub: Any) -> None:
    p = sub.add_parser(
        "check",
        help="check a VDIF file or a scan: frames, gaps, order, duplicates, corruption",
        description="One pass over a VDIF file (or, with --disk, a scan's parts in order), in constant "
        "memory: frames, threads, per-second counts per thread, gaps, out-of-order and duplicate frames, "
        "invalid-flagged frames, corrupt stretches, and a scan's missing chunks. Exit status 0 when "
        "clean, 1 when anything is wrong, 2 on usage errors.",
    )
    p.add_argument("file", type=path, help="VDIF file, or with --disk the scan's name")
    _cli_scans.add_disk_arguments(p, required=False)
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


def print_check_report(r: dict[str, Any], every_second: bool = False) -> None:
    """Human-readable form of a check report."""
    f = r["format"]
    t = r["totals"]
    kind = "legacy" if f["legacy"] else f"EDV {f['edv']}"
    scan = r.get("scan")
    if scan:
        print(f"scan         {r['path']}: {r['file_bytes']} bytes in {scan['parts']} {scan['part_word']}(s)")
    else:
        print(f"file         {r['path']} ({r['file_bytes']} bytes)")
    print(
        f"format       {f['frame_size']}-byte frames, {kind}, {f['nchan']} ch x {f['bits']} bit "
        f"{'complex' if f['complex'] else 'real'}, station {r['station']}"
    )
    print(f"frames       {r['frames']} in {len(r['threads'])} thread(s): {', '.join(map(str, r['threads']))}")
    print(f"rate         {r['frames_per_second']} frames/s per thread ({r['frames_per_second_source']})")
    print(f"time         {r['first_frame_time']} .. {r['last_frame_time']}")
    print(
        f"counts       expected {t['expected']}  received {t['received']}  lost {t['lost']}  "
        f"out-of-order {t['out_of_order']}  duplicate {t['duplicates']}  invalid {t['invalid']}"
    )
    if t["out_of_window"] or t["time_jumps"] or t["late"]:
        print(f"time         {t['out_of_window']} frames out of window, {t['time_jumps']} jumps, {t['late']} late")
    rows = [s for s in r["seconds"] if every_second or s["lost"] or s["duplicates"] or s["out_of_order"] or s["invalid"]]
    if rows:
        print("second       station  thread  received/expected  lost  out-of-order  duplicate  invalid")
        for s in rows:
            for th in s["threads"]:
                print(
                    f"{s['vdif_seconds']:<12} {th['station']:>7}  {th['thread']:>6}  {th['received']:>8}/{th['expected']:<8}  "
                    f"{th['lost']:>4}  {th['out_of_order']:>12}  {th['duplicates']:>9}  {th['invalid']:>7}"
                )
    for g in r["gaps"]:
        (s0, f0), (s1, f1) = g["first_missing"], g["last_missing"]
        print(f"gap          station {g['station']} thread {g['thread']}: {g['missing']} frames missing, {s0}:{f0} .. {s1}:{f1} (unix second:frame)")
    if r["gaps_not_listed"]:
        print(f"gap          ... {r['gaps_not_listed']} more gaps not listed")
    for c in r["corrupt"]:
        print(f"corrupt      {c['bytes']} bytes at offset {c['offset']} ({c['reason']})")
    if r["corrupt_stretches"] > len(r["corrupt"]):
        print(f"corrupt      ... {r['corrupt_stretches'] - len(r['corrupt'])} more stretches not listed")
    for g in scan["gaps"] if scan else []:
        print(f"missing      {g['description']}")
    if r["trailing_bytes"]:
        print(f"trailing     {r['trailing_bytes']} bytes after the last whole frame")
    w = r["header_warnings"]
    if w["edv0_nonzero_words"]:
        print(f"header       {w['edv0_nonzero_words']} EDV 0 frames with non-zero words 4-7")
    if w["station_changes"]:
        print(f"header       {w['station_changes']} frames with another station id")
    print("result       " + ("CLEAN" if r["clean"] else "PROBLEMS FOUND"))


# -- info -------------------------------------------------------------------------------------


def _add_info(sub: Any) -> None:
    p = sub.add_parser("info", help="describe a VDIF file's stream (headers, rate, threads, time)")
    p.add_argument("file", type=path, help="VDIF file")
    p.add_argument("--sample-rate", type=positive(), default=None, help="Hz per channel, if the file cannot tell")
    p.set_defaults(func=_run_info)


def _run_info(a: argparse.Namespace) -> int:
    from .reader import open as open_reader

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


# -- entry point ------------------------------------------------------------------------------

_COMMANDS: list[Callable[[Any], None]] = [
    _add_generate,
    _add_check,
    _add_info,
    _cli_scans.add_scans,
    _cli_record.add_record,
    _cli_record.add_send,
    _cli_serve.add_serve,
    _cli_serve.add_vsi,
    _cli_monitor.add_monitor,
    _cli_quality.add_quality,
    _cli_fringe_test.add_fringe_test,
    _cli_watch.add_watch,
    _cli_transfer.add_push,
    _cli_transfer.add_receive,
    _cli_doctor.add_doctor,
    _cli_record.add_demo,
]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="vdifrec",
        description="Record 10 GbE VDIF streams without losing a byte; check what was recorded.",
    )
    p.add_argument("--version", action="version", version=f"vdifrec {_core.__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for add in _COMMANDS:
        add(sub)
    return p


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[command]
            return sub
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except (_core.ArgumentError, OptionError) as exc:
        # The engine (or the Python API) names the parameter; the operator typed a flag.
        parser.exit(USAGE, f"vdifrec {args.command}: error: {argument_error(_subparser(parser, args.command), exc)}\n")
    except UsageError as exc:
        parser.exit(USAGE, f"vdifrec {args.command}: error: {exc}\n")
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
