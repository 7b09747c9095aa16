"""`vdifrec push` and `vdifrec receive`: shipping scans from the station to the correlator.

At the correlator:

  vdifrec receive --listen 0.0.0.0:2630 --dir /data/incoming --token-file ~/.vdifrec-token

At the station, a scan on the recording disks (as one file, or --as vbs), or plain files:

  vdifrec push kvn_scan1 --disk '/mnt/disk*' --to correlator.example.org:2630 --token-file ~/.vdifrec-token
  vdifrec push /data/r1.vdif --to correlator.example.org:2630 --token-file ~/.vdifrec-token --rate 4Gbps --nice
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, TextIO

from ..transfer import PushProgress, Receiver, TransferError, push
from .args import OK, PROBLEMS, UsageError, integer, number, os_error, path, sigterm_as_interrupt, size

def add_push(sub: Any) -> None:
    p = sub.add_parser(
        "push",
        help="send files or scans to a `vdifrec receive` over parallel TCP streams, checksummed and resumable",
        description="Send files, or scans found on the recording disks (--disk), to a `vdifrec receive`. "
        "Blocks travel over several TCP connections, each block checked (xxh3-128) before it is written; "
        "the receiver reads the whole copy back before giving it its name. A push that was cut resumes "
        "with only the missing blocks; an identical copy already there is skipped, a different one "
        "refused. Exit status 0 when every item is verified (or was already there), 1 when one failed "
        "or was refused, 2 for a usage error.",
    )
    p.add_argument("sources", nargs="+", metavar="SOURCE", type=path,
                   help="a file; or, with --disk, the name of a scan recorded on those disks")
    p.add_argument("--to", required=True, metavar="HOST:PORT", help="the receiver")
    p.add_argument("--token-file", required=True, type=path, metavar="FILE",
                   help="the shared token (first line; chmod 600), the same file as the receiver's")
    p.add_argument("--disk", dest="disks", action="append", type=path, metavar="DIR",
                   help="a recording disk to find the scans on; repeat it, or give a quoted glob such as '/mnt/disk*'")
    p.add_argument("--as", dest="layout", choices=["file", "vbs"], default="file",
                   help="a scan lands as one file <dir>/<scan> (file, default) or as <dir>/<scan>/<scan>.NNNNNNNN (vbs)")
    p.add_argument("--streams", type=_streams, default="auto",
                   help="TCP connections: a number, or auto (default) to choose from throughput and both hosts' CPU use")
    p.add_argument("--max-streams", type=integer, metavar="N", help="the most streams auto may use (default 32)")
    p.add_argument("--block-size", type=size, metavar="SIZE", help="bytes per block (default 64MiB)")
    p.add_argument("--rate", metavar="RATE", help="cap the aggregate rate: 4Gbps (bits per second) or 500MB/s (bytes)")
    p.add_argument("--nice", action="store_true",
                   help="lower the push's CPU priority and I/O class, to share a host that is recording")
    p.add_argument("--retry-seconds", type=number, metavar="S",
                   help="keep trying for this long when connections break without progress, or the receiver answers busy, "
                        "refuses the connection (not listening yet) or drops it in the handshake (default 60)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run_push)


def _streams(text: str) -> int | str:
    """`auto` or a whole number (the engine checks the range)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of streams or auto, got {text!r}") from None


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


class _Progress:
    """A bar redrawn in place on a terminal; a plain line every 10 s in a log."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.start = time.monotonic()
        self.last_line = 0.0
        self.seen: list[tuple[float, int]] = []

    def __call__(self, p: PushProgress) -> None:
        now = time.monotonic()
        self.seen = [s for s in self.seen if now - s[0] < 3.0] + [(now, p.bytes_done)]
        t0, b0 = self.seen[0]
        rate = (p.bytes_done - b0) / (now - t0) if now > t0 else 0.0
        left = p.bytes_total - p.bytes_done
        eta = time.strftime("%H:%M:%S", time.gmtime(left / rate)) if rate > 0 else "--:--:--"
        share = 100.0 * p.bytes_done / p.bytes_total if p.bytes_total else 100.0
        line = (f"{p.item}  {_gb(p.bytes_done)} of {_gb(p.bytes_total)}  {share:5.1f} %  "
                f"{8 * rate / 1e9:6.2f} Gbit/s  {p.streams} streams  ETA {eta}")
        if self.tty:
            self.out.write("\r\033[K" + line)
            self.out.flush()
        elif now - self.last_line >= 10.0:
            self.last_line = now
            print(line, file=self.out, flush=True)

    def end(self) -> None:
        if self.tty:
            self.out.write("\r\033[K")
            self.out.flush()


def _item_line(i: dict[str, Any]) -> str:
    name, state = i["name"], i["state"]
    if state in ("sent", "resumed"):
        resumed = f", {i['blocks_resumed']} of {i['blocks']} blocks already there" if i["blocks_resumed"] else ""
        return (f"{name}: {state}, {_gb(i['bytes'])} verified (xxh3 {i['digest']}); {_gb(i['bytes_sent'])} sent in "
                f"{i['seconds']:.1f} s, {i['rate_bps'] / 1e9:.2f} Gbit/s; {i['streams_reason']}; "
                f"{i['blocks_resent']} blocks re-sent{resumed}")
    if state == "skipped":
        return f"{name}: skipped, an identical copy is already there (xxh3 {i['digest']})"
    return f"{name}: {state.upper()}: {i['error']}"


def run_push(a: argparse.Namespace) -> int:
    bar = None if a.json else _Progress(sys.stderr)
    interrupted = False
    try:
        with sigterm_as_interrupt():
            summary = push(*a.sources, to=a.to, token_file=a.token_file,
                           disks=a.disks, layout=a.layout, streams=a.streams, max_streams=a.max_streams,
                           block_size=a.block_size, rate=a.rate, nice=a.nice, retry_seconds=a.retry_seconds,
                           progress=bar, check=False)
    except KeyboardInterrupt:
        interrupted = True
        summary = None
    except OSError as exc:
        raise UsageError(os_error(exc)) from None
    finally:
        if bar is not None:
            bar.end()
    if summary is None:
        print("vdifrec push: interrupted; what reached the receiver stays there: push again to resume", file=sys.stderr)
        return PROBLEMS if interrupted else OK
    if a.json:
        print(json.dumps(summary, indent=2))
    else:
        for i in summary["items"]:
            print(_item_line(i))
            for n in i["notes"]:
                print(f"  note: {n}")
        for n in summary["notes"]:
            print(f"note: {n}")
        print(f"{len(summary['items'])} item(s), {_gb(summary['bytes'])}: {'all verified' if summary['ok'] else 'NOT ALL DONE'}; "
              f"{_gb(summary['bytes_sent'])} sent in {summary['seconds']:.1f} s, {summary['rate_bps'] / 1e9:.2f} Gbit/s")
    return OK if summary["ok"] else PROBLEMS


def add_receive(sub: Any) -> None:
    p = sub.add_parser(
        "receive",
        help="receive pushed files and scans (the correlator's end), until Ctrl-C or SIGTERM",
        description="Serve `vdifrec push`: every connection must prove it holds the token; transfers land "
        "below --dir only (names are checked; no paths, no links followed), each block checked before it "
        "is written at its place in a preallocated partial copy, the whole copy read back before it gets "
        "its name. A refused or broken connection never stops the receiver. One line per transfer ended.",
    )
    p.add_argument("--listen", required=True, metavar="[HOST:]PORT",
                   help="where to listen: a port alone listens on localhost only; 0.0.0.0:PORT for every interface")
    p.add_argument("--dir", required=True, type=path, help="the directory transfers land in (created if absent)")
    p.add_argument("--token-file", required=True, type=path, metavar="FILE", help="the shared token (first line; chmod 600)")
    p.add_argument("--max-connections", type=integer, metavar="N", help="connections served at once (default 64)")
    p.add_argument("--max-memory", type=size, metavar="SIZE",
                   help="memory for block buffers, one block per data connection (default 2GiB)")
    p.add_argument("--json", action="store_true", help="print each transfer's record as a line of JSON")
    p.set_defaults(func=run_receive)


def _event_line(e: dict[str, Any]) -> str:
    stamp = time.strftime("%H:%M:%S")
    who = f"from {e['peer']}"
    if e["state"] == "received":
        rate = 8 * e["bytes_received"] / e["seconds"] / 1e9 if e["seconds"] > 0 else 0.0
        resumed = f", resumed with {e['blocks_resumed']} of {e['blocks']} blocks already here" if e["blocks_resumed"] else ""
        return (f"{stamp}  received {e['name']} {who}: {_gb(e['bytes'])} verified (xxh3 {e['digest']}), "
                f"{_gb(e['bytes_received'])} in {e['seconds']:.1f} s ({rate:.2f} Gbit/s), "
                f"{e['blocks_damaged']} damaged blocks sent again{resumed}")
    if e["state"] == "skipped":
        return f"{stamp}  skipped {e['name']} {who}: {e['message']}"
    name = e["name"] or "connection"
    return f"{stamp}  {e['state'].upper()} {name} {who}: {e['message']}"


def run_receive(a: argparse.Namespace) -> int:
    try:
        r = Receiver(a.dir, listen=a.listen, token_file=a.token_file,
                     max_connections=a.max_connections, max_memory=a.max_memory)
    except TransferError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(os_error(exc)) from None
    print(f"receiving on {r.address} into {a.dir} (Ctrl-C or SIGTERM stops)", file=sys.stderr, flush=True)
    try:
        with sigterm_as_interrupt():
            while True:
                for e in r.events():
                    print(json.dumps(e) if a.json else _event_line(e), flush=True)
                time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        r.stop()
    for e in r.events():
        print(json.dumps(e) if a.json else _event_line(e), flush=True)
    print("vdifrec receive: stopped; partial copies keep their manifests and resume when pushed again",
          file=sys.stderr)
    return OK
