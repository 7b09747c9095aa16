"""`vdifrec record`, `vdifrec send` and the real `vdifrec demo`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any

from . import _core
from ._cli_args import UsageError, nonneg_int, positive, sigterm_as_interrupt, size
from .recorder import Recorder, Sender, parse_address
from .reports import Summary
from .table import HEADER, print_summary, row_line

# How often the header line is repeated in a long table.
HEADER_EVERY = 40
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
    p.add_argument("--port", type=nonneg_int("--port"), required=True, help="UDP port (0: any free port)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 or the interface address to hear the network)")
    p.add_argument("--multicast", default=None, help="multicast group to join")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--out", default=None, help="write to this file (rotated files get _0001, ...)")
    out.add_argument("--dir", default=None, help="write {prefix}_{YYYY}y{DOY}d{HH}h{MM}m{SS}s.vdif files here")
    p.add_argument("--prefix", default="vdifrec", help="file-name prefix with --dir (default vdifrec)")
    p.add_argument("--no-write", action="store_true", help="monitor only: write nothing")
    p.add_argument("--duration", type=positive("--duration"), default=None, help="stop after this many seconds")
    p.add_argument("--frames", type=positive("--frames", int), default=None, help="stop after this many frames")
    p.add_argument("--ring", type=size("--ring"), default=1 << 30, help="ring buffer size (default 1GiB)")
    p.add_argument("--frame-size", type=positive("--frame-size", int), default=None, help="bytes per frame incl. header (default: learned from the first frame)")
    p.add_argument("--offset", type=nonneg_int("--offset"), default=0, help="bytes to strip before each frame (8 for a PSN)")
    p.add_argument("--psn", action="store_true", help="count gaps in the 8-byte packet sequence numbers (with --offset 8)")
    p.add_argument("--fps", type=positive("--fps", int), default=None, help="frames per second per thread (default: learned)")
    p.add_argument("--file-size", type=size("--file-size"), default=None, help="start a new file after this many bytes")
    p.add_argument("--capture-cpu", type=nonneg_int("--capture-cpu"), default=None, help="pin the capture thread to this CPU")
    p.add_argument("--writer-cpu", type=nonneg_int("--writer-cpu"), default=None, help="pin the writer thread to this CPU")
    p.add_argument("--no-direct", action="store_true", help="buffered writes instead of O_DIRECT")
    p.add_argument("--rcvbuf", type=size("--rcvbuf"), default=256 << 20, help="socket receive buffer to ask for (default 256MiB)")
    p.add_argument("--backend", default="udp", choices=["udp", "afpacket", "pfring"],
                   help="capture backend: udp (default, no privileges), afpacket (TPACKET_V3 on --interface, CAP_NET_RAW), pfring (PF_RING on --interface)")
    p.add_argument("--interface", default=None, help="network interface for the afpacket and pfring backends")
    p.add_argument("--pfring-library", default=None, help="path of libpfring.so (default: the system's)")
    p.add_argument("--summary-json", default=None, help="write the summary (every counter, every second) as JSON here")
    p.add_argument("--status-listen", default=None, help="serve GET /status (JSON) and /metrics (Prometheus) at HOST:PORT (PORT alone: localhost)")
    p.add_argument("--quiet", action="store_true", help="no per-second table")
    p.set_defaults(func=run_record)


def run_record(a: argparse.Namespace) -> int:
    if a.psn and a.offset < 8:
        raise UsageError("--psn needs --offset 8 (the sequence number is 8 bytes before each frame)")
    if not (a.out or a.dir or a.no_write):
        raise UsageError("where to? give --out FILE, --dir DIR (with --prefix), or --no-write to monitor only")
    rec = Recorder(
        port=a.port,
        bind=a.bind,
        multicast=a.multicast,
        path=None if a.no_write else a.out,
        directory=None if a.no_write else a.dir,
        prefix=a.prefix,
        ring=a.ring,
        frame_size=a.frame_size,
        offset=a.offset,
        psn=a.psn,
        fps=a.fps,
        file_size=a.file_size,
        capture_cpu=a.capture_cpu,
        writer_cpu=a.writer_cpu,
        direct=not a.no_direct,
        backend=a.backend,
        rcvbuf=a.rcvbuf,
        max_frames=a.frames,
        status_listen=a.status_listen,
        interface=a.interface,
        pfring_library=a.pfring_library,
    )
    with sigterm_as_interrupt():
        try:
            rec.start()
        except (_core.OutputError, _core.PortInUseError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        except _core.RecorderError as exc:
            print(f"vdifrec record: {exc}", file=sys.stderr)
            return 1
        summary = follow(rec, duration=a.duration, quiet=a.quiet, bind=a.bind)
    print_summary(summary, sys.stdout)
    if a.summary_json:
        with open(a.summary_json, "w") as fh:
            json.dump(summary.to_dict(), fh, indent=1)
    if not summary.ok:
        print(f"vdifrec record: not everything buffered reached the disk: {summary.error}", file=sys.stderr)
        return 1
    return 0


def follow(rec: Recorder, duration: float | None, quiet: bool, bind: str, out: Any = None) -> Summary:
    """Prints notes, the listening line and the table until the duration ends, the frame limit
    is reached, the recording fails or Ctrl-C/SIGTERM; then stops and returns the summary."""
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
    print(f"listening on {rec.listening}", file=out, flush=True)
    if rec.status_address is not None:
        print(f"status on http://{rec.status_address[0]}:{rec.status_address[1]}/status and /metrics", file=out, flush=True)
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
                        print(HEADER, file=out, flush=True)
                    print(row_line(row), file=out, flush=True)
                rows += 1
            show_notes()
            if rec.finished:
                break
            s = rec.stats()
            quiet_for = s.seconds_since_datagram if s.seconds_since_datagram is not None else time.monotonic() - start
            if quiet_for >= IDLE_WARNING_S and not idle_warned:
                local_only = rec.backend == "udp" and bind.startswith("127.")
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
                print(HEADER, file=out, flush=True)
            print(row_line(row), file=out, flush=True)
        rows += 1
    return summary


# -- send -------------------------------------------------------------------------------------


def add_send(sub: Any) -> None:
    p = sub.add_parser(
        "send",
        help="send a FILA10G-like VDIF stream (or replay a file) to HOST:PORT over UDP",
        description="A paced VDIF source: noise plus a tone, real headers, 125000 frames/s of 8224 "
        "bytes by default (8.224 Gbps). Faults can be injected: --drop, --reorder, --garbage.",
    )
    p.add_argument("--to", required=True, help="HOST:PORT to send to")
    p.add_argument("--duration", type=positive("--duration"), default=None, help="seconds of stream to send")
    p.add_argument("--frames", type=positive("--frames", int), default=None, help="frames to send (all threads)")
    p.add_argument("--fps", type=positive("--fps", int), default=125000, help="frames per second per thread (default 125000)")
    p.add_argument("--frame-size", type=positive("--frame-size", int), default=8224, help="bytes per frame incl. header (default 8224)")
    p.add_argument("--nchan", type=positive("--nchan", int), default=4, help="channels (default 4)")
    p.add_argument("--bits", type=int, choices=[1, 2, 4, 8], default=2, help="bits per sample (default 2)")
    p.add_argument("--threads", type=positive("--threads", int), default=1, help="VDIF threads (default 1)")
    p.add_argument("--station", type=nonneg_int("--station"), default=0, help="station id")
    p.add_argument("--ref-epoch", type=nonneg_int("--ref-epoch"), default=None, help="reference epoch (default: now)")
    p.add_argument("--start-second", type=nonneg_int("--start-second"), default=None, help="VDIF seconds of the first frame (default: now)")
    p.add_argument("--tone-mhz", type=float, default=None, help="tone frequency in MHz (default 0.390625 of the band)")
    p.add_argument("--seed", type=int, default=1, help="random seed of the payload pool")
    p.add_argument("--psn", action="store_true", help="prepend an 8-byte packet sequence number")
    p.add_argument("--drop", default=None, help="frames to leave out: S:A-B (second S from the start, frames A..B), every:N")
    p.add_argument("--reorder", type=positive("--reorder", int), default=None, help="swap every N-th frame with the next")
    p.add_argument("--garbage", type=nonneg_int("--garbage"), default=0, help="stray datagrams of random size and content to mix in")
    p.add_argument("--file", default=None, help="replay this VDIF file instead of generating")
    p.add_argument("--record-sent", default=None, help="write exactly the frames sent to this file")
    p.add_argument("--cpu", type=nonneg_int("--cpu"), default=None, help="pin the sender to this CPU")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run_send)


def run_send(a: argparse.Namespace) -> int:
    if a.duration is None and a.frames is None and a.file is None:
        raise UsageError("give --duration SECONDS or --frames N (or --file F) to bound what is sent")
    try:
        host, port = parse_address(a.to, "--to")
        sender = Sender(
            (host, port), duration=a.duration, frames=a.frames, fps=a.fps, frame_size=a.frame_size,
            nchan=a.nchan, bits=a.bits, threads=a.threads, station=a.station, ref_epoch=a.ref_epoch,
            start_second=a.start_second, tone_mhz=a.tone_mhz, seed=a.seed, psn=a.psn, drop=a.drop,
            reorder=a.reorder, garbage=a.garbage, file=a.file, record_sent=a.record_sent, cpu=a.cpu,
        )
    except ValueError as exc:
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
        print(
            f"sent {result['frames_sent']} frames ({result['bytes_sent']} bytes) to {host}:{port} in "
            f"{result['duration_s']:.2f} s: {result['gbps']:.3f} Gbit/s; dropped {result['frames_dropped']}, "
            f"reordered {result['frames_reordered']}, garbage {result['garbage_sent']}, refused {result['refused']}"
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
    p.add_argument("--seconds", type=positive("--seconds"), default=10.0, help="seconds to send (default 10)")
    p.add_argument("--fps", type=positive("--fps", int), default=125000, help="frames per second (default 125000)")
    p.add_argument("--ring", type=size("--ring"), default=1 << 30, help="ring buffer size (default 1GiB)")
    p.add_argument("--keep", default=None, help="record into this folder and keep the file (default: a temporary folder)")
    p.set_defaults(func=run_demo)


def run_demo(a: argparse.Namespace) -> int:
    from .cli import print_check_report
    from .files import check

    cpus = sorted(os.sched_getaffinity(0))
    # On four or more CPUs, give the capture, the writer and the sender a CPU each.
    pin = len(cpus) >= 4
    with tempfile.TemporaryDirectory(prefix="vdifrec-demo-") as tmp:
        folder = a.keep or tmp
        os.makedirs(folder, exist_ok=True)
        rec = Recorder(
            port=0, directory=folder, prefix="demo_fila10g", ring=a.ring, frame_size=8224, fps=a.fps,
            capture_cpu=cpus[-1] if pin else None, writer_cpu=cpus[-2] if pin else None,
        )
        rec.start()
        assert rec.address is not None
        print(f"demo: sending {a.seconds:g} s of the reference stream ({a.fps} frames/s of 8224 bytes, "
              f"{a.fps * 8224 * 8 / 1e9:.3f} Gbit/s) to {rec.address[0]}:{rec.address[1]}; recording into {folder}")
        sender = Sender(rec.address, duration=a.seconds, fps=a.fps, cpu=cpus[-3] if pin else None)
        with sigterm_as_interrupt():
            summary = follow(rec, duration=a.seconds + 1.5, quiet=False, bind="127.0.0.1")
        sent = sender.stop()
        print_summary(summary, sys.stdout)
        print(f"sender: {sent['frames_sent']} frames sent at {sent['gbps']:.3f} Gbit/s")
        code = 0 if summary.ok else 1
        for f in summary.files:
            print(f"\n$ vdifrec check {f.path}")
            report = check(f.path, fps=a.fps)
            print_check_report(report)
        return code
