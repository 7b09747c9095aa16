"""`vdifrec scans` and `vdifrec gather`: the scans recorded over several disks, listed (and one
left torn by a recorder stopped mid-write repaired, `scans --repair`) and gathered back into one
file; and the `--disk` options `check` shares with them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .. import _core
from ..scans import gather, repair, scans
from .args import OK, PROBLEMS, UsageError, add_disk_arguments, os_error, output, path
from .printing import runs

def add_scans(sub: Any) -> None:
    p = sub.add_parser(
        "scans",
        help="list the scans on a set of disks (name, format, size, chunks, time, missing, torn); repair a torn one",
        description="List every scan on the disks, in any layout (file, FlexBuff vbs, Mark6 mk6): its "
        "size and parts (chunks or blocks) of whole frames, first and last frame time, any part missing, "
        "and what a recorder stopped mid-write left torn at the ends of files (never read). With --repair "
        "SCAN, cut that scan's torn pieces back to whole frames so that every reader, jive5ab's too, sees "
        "a clean scan, and say what was cut. Exit status 0 when every scan is whole, 1 when a part is "
        "missing, something is torn or a scan cannot be read (after --repair: when a part is missing), "
        "2 on usage errors.",
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
    p.add_argument("--format", choices=["file", "vbs", "mk6"],
                   help="list only the scans in this layout; with --repair, the scan's layout (default: detected)")
    p.add_argument("--name", metavar="PATTERN",
                   help="list only the scans whose names match this shell-style pattern ('r41*', '*_ds?', "
                        "'no00[0-3]*'; quote it so that the shell passes it on); only their files are read")
    p.add_argument("--repair", metavar="SCAN", type=path,
                   help="cut this scan's torn pieces back to whole frames (only once no recorder writes it); "
                        "a second run cuts nothing")
    p.add_argument("--json", action="store_true", help="print the list (or the repair's report) as JSON")
    p.set_defaults(func=_run_scans)

    p = sub.add_parser(
        "gather",
        help="write a scan spread over disks into one VDIF file, its frames in order",
        description="Write the frames of a scan (vbs chunks or Mark6 blocks, in number order) into one "
        "new file, as jive5ab's disk2file and DiFX's mk6gather do. A scan with a missing part is "
        "refused unless --allow-gaps; then what exists is written, what is missing is said, and the "
        "exit status is 1. What a recorder stopped mid-write left torn at the ends of files is left "
        "out (the whole frames before it are written) and said; it is no error.",
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


def _run_scans(a: argparse.Namespace) -> int:
    if a.repair is not None:
        return _run_repair(a)
    try:
        found = scans(a.disks, name=a.name, format=a.format, progress=not a.json)
    except OSError as exc:
        raise UsageError(os_error(exc)) from None
    if a.json:
        print(json.dumps(found, indent=1))
    else:
        print_scans(found)
    return PROBLEMS if any(s["missing"] or s["error"] or s["torn"] for s in found) else OK


def _place(t: dict[str, Any], word: str) -> str:
    """Where a torn piece is: `chunk 13 of /d1/s/s.00000013`, or the file alone."""
    return t["path"] if t["part"] is None else f"{word} {t['part']} of {t['path']}"


#: What a part is called in each layout, as the engine's messages call it.
PART_WORD = {"file": "file", "vbs": "chunk", "mk6": "block"}


def torn_line(pieces: list[dict[str, Any]], fmt: str) -> str:
    """`1 piece, 4,076 bytes (chunk 13 of /d1/s/s.00000013)`."""
    n = len(pieces)
    places = ", ".join(_place(t, PART_WORD[fmt]) for t in pieces)
    return f"{n} piece{'' if n == 1 else 's'}, {sum(t['bytes'] for t in pieces):,} bytes ({places})"


def _run_repair(a: argparse.Namespace) -> int:
    try:
        r = repair(a.repair, a.disks, format=a.format)
    except OSError as exc:
        raise UsageError(os_error(exc)) from None
    except _core.FormatError as exc:
        print(f"vdifrec scans --repair: {exc}", file=sys.stderr)
        return PROBLEMS
    if a.json:
        print(json.dumps(r, indent=1))
    else:
        label = f"{r['scan']} ({r['format']} on {', '.join(r['disks'])})"
        if not r["cut"]:
            print(f"repaired     {label}: nothing torn, nothing cut")
        else:
            n = len(r["cut"])
            print(f"repaired     {label}: cut {n} torn piece{'' if n == 1 else 's'}, {r['bytes_cut']:,} bytes")
        for c in r["cut"]:
            print(f"cut          {_place(c, PART_WORD[r['format']])}: {c['bytes']:,} bytes from byte {c['offset']:,}, "
                  f"{c['frames_kept']:,} whole frames kept: {c['action']}")
        for note in r["notes"]:
            print(f"note         {note}")
        print(f"now          {r['bytes']:,} bytes of whole frames in {r['parts']} part(s)"
              + (f", part(s) {runs(r['missing'])} missing" if r["missing"] else ""))
        for path in r["written"]:
            print(f"report       {path}")
    return PROBLEMS if r["missing"] else OK


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
        missing = runs(s["missing"]) if s["missing"] else "-"
        print(
            f"{s['name']:<{width}}  {s['format']:<6}  {_size(s['bytes']):>10}  {s['chunks']:>6}  "
            f"{first:<29}  {last:<29}  {missing}"
        )
        if not s["closed"]:
            print(f"{'':<{width}}  never closed: no summary beside it (a recorder stopped mid-scan, "
                  "or another program wrote it)")
        if s["torn"]:
            print(f"{'':<{width}}  torn: {torn_line(s['torn'], s['format'])}")
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
    if r["torn"]:
        print(f"left out     {r['torn_bytes']:,} torn bytes: {torn_line(r['torn'], r['format'])}")
    for t in r["torn"]:
        print(f"torn         {t['description']}")
    if not r["complete"]:
        print(f"incomplete   {r['out']} lacks the frames of part(s) {runs(r['missing'])}")
        return PROBLEMS
    return OK
