"""`vdifrec scans` and `vdifrec gather`: the scans recorded over several disks, listed and
gathered back into one file; and the `--disk` options `check` shares with them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .. import _core
from ..scans import gather, scans
from .args import OK, PROBLEMS, UsageError, add_disk_arguments, os_error, output, path

def add_scans(sub: Any) -> None:
    p = sub.add_parser(
        "scans",
        help="list the scans on a set of disks (name, format, size, chunks, time, missing)",
        description="List every scan on the disks, in any layout (file, FlexBuff vbs, Mark6 mk6): its "
        "size, parts (chunks or blocks), first and last frame time, and any part missing. Exit status 0 "
        "when every scan is whole, 1 when a part is missing or a scan cannot be read, 2 on usage errors.",
    )
    p.add_argument(
        "--disk",
        dest="disks",
        action="append",
        type=path,
        required=True,
        metavar="DIR",
        help="a directory (mount point) to look on; repeat it, or give a quoted glob such as '/mnt/disk*'",
    )
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(func=_run_scans)

    p = sub.add_parser(
        "gather",
        help="write a scan spread over disks into one VDIF file, its frames in order",
        description="Write the frames of a scan (vbs chunks or Mark6 blocks, in number order) into one "
        "new file, as jive5ab's disk2file and DiFX's mk6gather do. A scan with a missing part is "
        "refused unless --allow-gaps; then what exists is written, what is missing is said, and the "
        "exit status is 1.",
    )
    p.add_argument("scan", type=path, help="the scan's name")
    add_disk_arguments(p)
    p.add_argument("-o", "--out", type=output, required=True, help="the file to write (never overwritten)")
    p.add_argument("--allow-gaps", action="store_true", help="write the parts that exist when some are missing")
    p.set_defaults(func=_run_gather)


def _size(n: int) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def _runs(numbers: list[int]) -> str:
    out: list[str] = []
    for n in numbers:
        if out and n == int(out[-1].rpartition("-")[2]) + 1:
            out[-1] = f"{out[-1].partition('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ", ".join(out)


def _run_scans(a: argparse.Namespace) -> int:
    try:
        found = scans(a.disks)
    except OSError as exc:
        raise UsageError(os_error(exc)) from None
    if a.json:
        print(json.dumps(found, indent=1))
    else:
        print_scans(found)
    return PROBLEMS if any(s["missing"] or s["error"] for s in found) else OK


def print_scans(found: list[dict[str, Any]]) -> None:
    """The scans as a table, one line each (a scan that cannot be read says why under it)."""
    if not found:
        print("no scans found")
        return
    width = max(4, *(len(s["name"]) for s in found))
    print(f"{'name':<{width}}  format  {'size':>10}  chunks  {'first frame':<29}  {'last frame':<29}  missing")
    for s in found:
        first = s["first"]["time"] if s["first"] else "-"
        last = s["last"]["time"] if s["last"] else "-"
        missing = _runs(s["missing"]) if s["missing"] else "-"
        print(
            f"{s['name']:<{width}}  {s['format']:<6}  {_size(s['bytes']):>10}  {s['chunks']:>6}  "
            f"{first:<29}  {last:<29}  {missing}"
        )
        if s["error"]:
            print(f"{'':<{width}}  error: {s['error']}")


def _run_gather(a: argparse.Namespace) -> int:
    try:
        r = gather(a.scan, a.disks, a.out, format=a.format, allow_gaps=a.allow_gaps)
    except OSError as exc:
        raise UsageError(os_error(exc)) from None
    except _core.GapError as exc:
        print(f"vdifrec gather: {exc}", file=sys.stderr)
        return PROBLEMS
    except _core.FormatError as exc:
        print(f"vdifrec gather: {exc}", file=sys.stderr)
        return PROBLEMS
    print(f"wrote {r['out']}: {r['bytes']} bytes from {r['parts']} part(s) of scan {r['scan']} ({r['format']})")
    for g in r["gaps"]:
        print(f"missing      {g['description']}")
    if not r["complete"]:
        print(f"incomplete   {r['out']} lacks the frames of part(s) {_runs(r['missing'])}")
        return PROBLEMS
    return OK
