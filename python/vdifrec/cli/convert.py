"""`vdifrec convert`: a VDIF file, or a scan, written into a new file with some threads kept,
channels corner-turned into single-channel threads and frames cut smaller."""

from __future__ import annotations

import argparse
import errno
import sys
from typing import Any

from .. import _core
from ..convert import convert
from .args import OK, PROBLEMS, UsageError, add_disk_arguments, integer, os_error, output, path
from .printing import runs

__all__ = ["add_convert"]


def add_convert(sub: Any) -> None:
    p = sub.add_parser(
        "convert",
        help="write a VDIF file or scan into a new file: some threads, channels as single-channel threads, smaller frames",
        description="Write a VDIF file, or with --disk a scan in any layout (file, vbs, mk6), into a new VDIF "
        "file: only the threads listed (--threads), each frame's channels corner-turned into single-channel "
        "threads (--channels), frames cut smaller (--payload). A corner-turned frame of C channels becomes one "
        "frame per channel listed, of 1/C of the payload, with the same time and frame number; channel c of "
        "thread t becomes thread t*C+c, as jive5ab numbers the threads it splits (so a channel keeps its "
        "thread ID whichever others are kept); its header is EDV 0 with words 4-7 zero (legacy headers stay "
        "legacy). --payload N cuts each frame of Q payload bytes (after any corner turn) into Q/N frames, "
        "frame number f becoming f*Q/N+i: the frame rate becomes Q/N times the input's. The frames of one "
        "time are written together, in frame-number order. Every option is checked against the stream "
        "before anything is written. OUT is written beside its name and renamed to it once whole: a "
        "conversion that fails leaves nothing under that name, or with --force the file it would have "
        "replaced as it was. Exit status 0 when written, 1 when the input cannot be read whole (a frame unlike "
        "the first, a missing part) or the disk cannot take the output (full: said with what was written), "
        "2 on usage errors.",
    )
    p.add_argument("input", metavar="IN", type=path, help="the VDIF file, or with --disk the scan's name")
    p.add_argument("out", metavar="OUT", type=output,
                   help="the VDIF file to write (an existing file only with --force; never the input)")
    p.add_argument("--threads", metavar="LIST",
                   help="keep only these VDIF thread IDs: numbers and ranges such as 0-3,7 (each one of the stream's)")
    p.add_argument("--channels", metavar="LIST",
                   help="corner-turn: these channels (0 to C-1, such as 0-3,7) each become a single-channel thread, "
                        "channel c of thread t thread t*C+c; each frame's 1/C of the payload must be a multiple of 8 bytes")
    p.add_argument("--payload", metavar="N", type=integer,
                   help="payload bytes of each output frame: a multiple of 8 (and of one sample time of every channel) "
                        "that divides the payload, after any corner turn; frames are numbered as many times as fast")
    add_disk_arguments(p, required=False)
    p.add_argument("--force", action="store_true", help="replace OUT if it exists (once the new one is whole)")
    p.set_defaults(func=_run_convert)


#: What a disk that cannot take the output says.
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def _run_convert(a: argparse.Namespace) -> int:
    try:
        r = convert(a.input, a.out, threads=a.threads, channels=a.channels, payload=a.payload,
                    disks=a.disks, format=a.format, force=a.force)
    except OSError as exc:
        if exc.errno in _DISK_FULL:
            # Not a usage error: the disk could not take the conversion (said with what it got to).
            print(f"vdifrec convert: {os_error(exc)}", file=sys.stderr)
            return PROBLEMS
        raise UsageError(os_error(exc)) from None
    except _core.FormatError as exc:  # GapError too
        print(f"vdifrec convert: {exc}", file=sys.stderr)
        return PROBLEMS
    print(f"wrote {r['out']}: {r['frames_out']:,} frames of {r['frame_size_out']} bytes ({r['bytes_out']:,} bytes) "
          f"from {r['frames_kept']:,} of {r['frames_in']:,} frames of {r['frame_size_in']} bytes of {r['input']}")
    print(f"threads      {runs(r['threads_in'])} in, {runs(r['threads_out'])} out; "
          f"{r['channels_in']} channel(s) in, {r['channels_out']} out; {r['fan_out']} frame(s) out per frame kept")
    for t in r["torn"]:
        print(f"left out     {t['description']}")
    return OK
