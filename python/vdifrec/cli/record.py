"""`vdifrec record`, `vdifrec send` and the real `vdifrec demo`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any

from .. import _core
from ..analysis.check import check
from ..recorder import Recorder
from ..reports import Summary
from ..sources import Sender
from .args import (
    DEFAULTS,
    USAGE,
    OptionError,
    UsageError,
    add_capture_arguments,
    add_disk_arguments,
    add_scan_arguments,
    add_signal_arguments,
    default,
    given,
    integer,
    number,
    os_error,
    output,
    path,
    positive,
    sigterm_as_interrupt,
    size,
)
from .printing import HEADER, HEADER_EVERY, STREAMS_HEADER, forward_refused, print_check_report, print_summary, row_line

# Seconds without a datagram before the operator is told.
IDLE_WARNING_S = 5.0


# -- record -----------------------------------------------------------------------------------


def add_record(sub: Any) -> None:
    p = sub.add_parser(
        "record",
        help="record a VDIF stream from a UDP port to disk, with a per-second table",
        description="Capture VDIF frames from a UDP port into a ring buffer and write them to disk "
        "without losing a byte. Prints 'listening on ADDRESS:PORT' once ready, one line per VDIF "
        "second, and a summary. Exit status 0 when everything buffered reached the disk (network "
        "loss is reported, not an error), 1 otherwise, 2 on usage errors.",
    )
    # Each flag's dest is the engine's name for the option, so errors map back to the flag.
    add_capture_arguments(p, port_required=True)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--out", dest="path", type=path, help="write to this file (rotated files get _0001, ...)")
    out.add_argument("--dir", dest="directory", type=path, help="write {prefix}_{YYYY}y{DOY}d{HH}h{MM}m{SS}s.vdif files here")
    p.add_argument("--prefix", help=f"file-name prefix with --dir (default {default('recorder', 'prefix')})")
    p.add_argument("--no-write", action="store_true", help="monitor only: write nothing")
    p.add_argument("--duration", type=positive(), default=None, help="stop after this many seconds")
    p.add_argument("--frames", dest="max_frames", type=integer, help="stop after this many frames")
    p.add_argument("--file-size", type=size, help="start a new file after this many bytes (also file scans: <scan>.0001.vdif, ...)")
    p.add_argument("--summary-json", type=output, default=None, help="write the summary (every counter, every second) as JSON here")
    add_scan_arguments(p)
    p.add_argument("--scan", help="name of the scan to record (with --disk): letters, digits, _ and -")
    p.add_argument("--start", help="the scan holds frames from this time on (UTC: 2026-11-30T22:48:47.5, 2026y334d22h48m47.5s; VDIF time EPOCH:SECONDS; or POSIX seconds)")
    p.add_argument("--stop", help="the scan holds frames before this VDIF time; the recording ends when it has passed")
    p.add_argument("--quiet", action="store_true", help="no per-second table")
    p.set_defaults(func=run_record)


def run_record(a: argparse.Namespace) -> int:
    if not (a.path or a.directory or a.no_write or a.disks):
        raise UsageError("where to? give --out FILE, --dir DIR (with --prefix), --disk DIR with --scan NAME, or --no-write to monitor only")
    if a.disks and not a.scan:
        raise UsageError("--disk records scans: name the scan with --scan NAME")
    if a.scan and not a.disks:
        raise UsageError("--scan needs the disks to write it to: --disk DIR (repeat for several)")
    if (a.start or a.stop) and not a.scan:
        raise UsageError("--start and --stop bound a scan: give --scan NAME and --disk DIR")
    options = given(a, "recorder")
    if a.disk_faults:
        options["disk_faults"] = dict(a.disk_faults)
    if a.no_write:
        options.pop("path", None)
        options.pop("directory", None)
    # The engine checks every option here, before any file is opened or socket bound.
    rec = Recorder(**options)
    with sigterm_as_interrupt():
        try:
            rec.start()
        except _core.ArgumentError:
            raise
        except (_core.OutputError, _core.PortInUseError) as exc:
            # Where to write, or a port taken: the operator's to change (named where the engine says which).
            raise OptionError(str(exc)) from None
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        except _core.RecorderError as exc:
            print(f"vdifrec record: {exc}", file=sys.stderr)
            return 1
        if a.scan:
            try:
                name = rec.start_scan(a.scan, a.start, a.stop)
            except _core.ArgumentError as exc:
                rec.stop()
                which, _, why = str(exc).partition(": ")
                flag = {"name": "--scan", "start": "--start", "stop": "--stop"}.get(which, f"--{which}")
                raise OptionError(f"{flag}: {why}") from None
            print(f"scan {name}: recording to {', '.join(a.disks)}", flush=True)
        summary = follow(rec, duration=a.duration, quiet=a.quiet, until_scan_ends=bool(a.stop))
    print_summary(summary, sys.stdout)
    if a.summary_json:
        try:
            with open(a.summary_json, "w") as fh:
                json.dump(summary.to_dict(), fh, indent=1)
        except OSError as exc:  # checked before the recording; gone or unwritable since
            print(f"vdifrec record: cannot write the summary: {os_error(exc)}", file=sys.stderr)
            return 1
    if not summary.ok:
        print(f"vdifrec record: not everything buffered reached the disk: {summary.error}", file=sys.stderr)
        return 1
    if forward_refused(summary, "vdifrec record"):
        return USAGE
    return 0


def follow(rec: Recorder, duration: float | None, quiet: bool, out: Any = None, until_scan_ends: bool = False) -> Summary:
    """Prints notes, the listening line and the table until the duration ends, the frame limit
    is reached, the recording fails, the scan ends (with `until_scan_ends`) or Ctrl-C/SIGTERM;
    then stops and returns the summary."""
    out = out or sys.stdout
    assert rec.address is not None, "follow() needs a started recorder"
    start = time.monotonic()
    notes_shown = 0

    def show_notes() -> None:
        nonlocal notes_shown
        notes = rec.notes
        for n in notes[notes_shown:]:
            print(n, file=out, flush=True)
        notes_shown = len(notes)

    show_notes()
    # Several streams: one line per stream per second, the port first.
    several = len(rec.addresses) > 1
    header = STREAMS_HEADER if several else HEADER
    print(f"listening on {rec.listening}", file=out, flush=True)
    if rec.status_address is not None:
        host, port = rec.status_address
        print(f"status on http://{host}:{port}/ (the page), /status and /metrics", file=out, flush=True)
    rows = 0
    idle_warned = False
    try:
        while True:
            left = None if duration is None else duration - (time.monotonic() - start)
            if left is not None and left <= 0:
                break
            for row in rec.seconds(timeout=0.2 if left is None else min(0.2, max(left, 0.01))):
                show_notes()
                if not quiet:
                    if rows % HEADER_EVERY == 0:
                        print(header, file=out, flush=True)
                    print(row_line(row, several), file=out, flush=True)
                rows += 1
            show_notes()
            if rec.finished or (until_scan_ends and rec.scan is None):
                break
            s = rec.stats()
            quiet_for = s.seconds_since_datagram if s.seconds_since_datagram is not None else time.monotonic() - start
            if quiet_for >= IDLE_WARNING_S and not idle_warned:
                local_only = rec.listening.startswith("127.")
                hint = " (127.0.0.1 hears only this host: --bind 0.0.0.0 or the interface address)" if local_only else ""
                print(f"no packets for {quiet_for:.0f} s on {rec.listening}{hint}", file=out, flush=True)
                idle_warned = True
            elif quiet_for < 1.0 and idle_warned:
                print("packets again", file=out, flush=True)
                idle_warned = False
    except KeyboardInterrupt:
        print("stopping: draining the ring to disk ...", file=out, flush=True)
    summary = rec.stop()
    # The last, partial seconds complete at stop.
    for row in summary.seconds[rows:]:
        if not quiet:
            if rows % HEADER_EVERY == 0:
                print(header, file=out, flush=True)
            print(row_line(row, several), file=out, flush=True)
        rows += 1
    return summary


# -- send -------------------------------------------------------------------------------------


_SEND_DESCRIPTION = """\
A paced VDIF source. By default a generated signal: noise plus a tone, real headers,
125000 frames/s of 8224 bytes (8.224 Gbps; --fps, --threads and the other signal
settings change it). Faults can be injected: --drop, --reorder, --garbage.

With --file F, or --scan NAME --disk DIR (a scan recorded in any layout: file, vbs,
mk6), a recording is replayed instead: its frames in recorded order, each exactly as
recorded, each due at its place in the sequence, at the recording's own frame rate:
frames per second per thread from the data (the highest frame number of a whole VDIF
second + 1), or from the headers' sample rate (EDV 1, 3) where it never passes a whole
second, times its threads. --rate overrides it. The summary says how it was found.

Framings (--to): HOST:PORT or udp://HOST:PORT, one frame per datagram; udps://HOST:PORT,
each datagram led by a 64-bit little-endian packet sequence number (the frame's place
in the sequence, as --psn); tcp://HOST:PORT, one connection, frames back to back.

examples:
  vdifrec send --to 127.0.0.1:46227 --duration 10
  vdifrec send --to udps://10.0.1.1:46227 --scan kvn_scan1 --disk '/mnt/disk*'
  vdifrec send --to tcp://10.0.2.1:2650 --file scan.vdif --rate 4Gbps
"""


def add_send(sub: Any) -> None:
    p = sub.add_parser(
        "send",
        help="send a FILA10G-like VDIF stream, or replay a recording at its own rate, over UDP or TCP",
        description=_SEND_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--to", required=True, metavar="[SCHEME://]HOST:PORT",
                   help="where to, and how: HOST:PORT or udp://HOST:PORT (one frame per datagram), udps://HOST:PORT "
                        "(each datagram led by a 64-bit packet sequence number, as --psn), tcp://HOST:PORT (one "
                        "connection, frames back to back)")
    p.add_argument("--duration", type=number, help="seconds of stream to send (a replay ends with the recording)")
    p.add_argument("--frames", type=integer, help="frames to send (all threads)")
    add_signal_arguments(p)
    p.add_argument("--psn", action="store_true", default=None,
                   help="prepend an 8-byte packet sequence number (the same as udps://; not over tcp://)")
    p.add_argument("--drop", help="frames to leave out: S:A-B (second S from the start, frames A..B), every:N")
    p.add_argument("--reorder", type=integer, help="swap every N-th frame with the next")
    p.add_argument("--garbage", type=integer, help="stray datagrams of random size and content to mix in (UDP only)")
    p.add_argument("--file", type=path, help="replay this VDIF file instead of generating")
    p.add_argument("--scan", metavar="NAME", type=path,
                   help="replay this scan, recorded on the --disk directories in any layout, instead of generating")
    add_disk_arguments(p, required=False)
    p.add_argument("--rate", metavar="RATE",
                   help="replay at this data rate of VDIF frames, 4Gbps (bits per second) or 500MB/s (bytes), "
                        "instead of the recording's own")
    p.add_argument("--record-sent", help="write exactly the frames sent to this file")
    p.add_argument("--cpu", type=integer, help="pin the sender to this CPU")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run_send)


#: How a send's pace was found, as its summary line says it.
_RATE_SOURCES = {
    "signal": "--fps x --threads",
    "frame-number wrap": "the recording's frame numbers",
    "header": "the recording's headers",
    "rate": "--rate",
}


def run_send(a: argparse.Namespace) -> int:
    options = given(a, "sender") | given(a, "signal")
    options.pop("to")
    try:
        sender = Sender(a.to, **options)
    except _core.SenderError as exc:
        # "to: nobody accepts a connection at ...": main() names the flag.
        raise OptionError(str(exc)) from None
    except OSError as exc:
        raise UsageError(os_error(exc)) from None
    except _core.FormatError as exc:
        raise UsageError(str(exc)) from None
    with sigterm_as_interrupt():
        try:
            while (result := sender.wait(0.2)) is None:
                pass
        except KeyboardInterrupt:
            result = sender.stop()
    if a.json:
        print(json.dumps(result, indent=1))
    else:
        what = f"replayed {result['replayed']}: " if result["replayed"] else ""
        how = _RATE_SOURCES.get(result["rate_source"], result["rate_source"])
        print(
            f"{what}sent {result['frames_sent']} frames ({result['bytes_sent']} bytes) to {result['to']} in "
            f"{result['duration_s']:.2f} s: {result['achieved_frame_rate']:.1f} frames/s, {result['gbps']:.3f} Gbit/s "
            f"(paced at {result['frame_rate']:.1f} frames/s, {result['threads']} threads, from {how}); "
            f"dropped {result['frames_dropped']}, reordered {result['frames_reordered']}, "
            f"garbage {result['garbage_sent']}, refused {result['refused']}"
        )
    return 0


# -- demo -------------------------------------------------------------------------------------


def add_demo(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="the main job on a built-in example: a FILA10G-like stream sent on loopback and recorded",
        description="Sends the reference stream (125000 frames/s of 8224 bytes = 8.224 Gbps, 4 channels "
        "x 2 bits, a 200 MHz tone) to 127.0.0.1, records it into a temporary folder with the per-second "
        "table and summary, then checks the file.",
    )
    p.add_argument("--seconds", type=positive(), default=10.0, help="seconds to send (default 10)")
    p.add_argument("--fps", type=integer, help=f"frames per second (default {DEFAULTS['signal']['fps']})")
    p.add_argument("--ring", type=size, help=f"ring buffer size (default {default('recorder', 'ring')})")
    p.add_argument("--keep", type=path, default=None, help="record into this folder and keep the file (default: a temporary folder)")
    p.set_defaults(func=run_demo)


def run_demo(a: argparse.Namespace) -> int:

    cpus = sorted(os.sched_getaffinity(0))
    # The recorder pins its capture and writer to the last two CPUs when there are four or
    # more; the sender takes the one before them.
    sender_cpu = cpus[-3] if len(cpus) >= 4 else None
    with tempfile.TemporaryDirectory(prefix="vdifrec-demo-") as tmp:
        folder = a.keep if a.keep is not None else tmp
        fps = a.fps if a.fps is not None else DEFAULTS["signal"]["fps"]
        frame_size = DEFAULTS["signal"]["frame_size"]
        # The engine checks --fps and --ring here, before a folder is made or a socket bound.
        rec = Recorder(
            port=0, directory=folder, prefix="demo_fila10g", ring=a.ring if a.ring is not None else DEFAULTS["recorder"]["ring"],
            frame_size=frame_size, fps=fps,
        )
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise UsageError(f"--keep: {folder} is not a folder")
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--keep: cannot make the folder {folder}: {exc.strerror or exc}") from None
        try:
            rec.start()
        except (_core.OutputError, _core.PortInUseError) as exc:
            raise OptionError(str(exc)) from None
        assert rec.address is not None
        print(f"demo: sending {a.seconds:g} s of the reference stream ({fps} frames/s of {frame_size} bytes, "
              f"{fps * frame_size * 8 / 1e9:.3f} Gbit/s) to {rec.address[0]}:{rec.address[1]}; recording into {folder}")
        sender = Sender(rec.address, duration=a.seconds, fps=fps, cpu=sender_cpu)
        with sigterm_as_interrupt():
            summary = follow(rec, duration=a.seconds + 1.5, quiet=False)
        sent = sender.stop()
        print_summary(summary, sys.stdout)
        print(f"sender: {sent['frames_sent']} frames sent at {sent['gbps']:.3f} Gbit/s")
        code = 0 if summary.ok else 1
        for f in summary.files:
            print(f"\n$ vdifrec check {f.path}")
            report = check(f.path, fps=fps)
            print_check_report(report)
        return code
