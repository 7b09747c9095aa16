"""`vdifrec watch HOST:PORT`: the control room's view of a recorder, every few seconds.

One line per poll, as the original system's client printed it (VDIF time, total frames, stream
capacity, file name, file capacity), plus the loss; a loud line when new loss appears, when
the stream stops, or when the recorder does not answer.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.parse
from typing import Any, TextIO

from ._cli_args import positive, sigterm_as_interrupt
from .remote import RemoteStatus


def add_watch(sub: Any) -> None:
    p = sub.add_parser("watch", help="poll a recorder's status endpoint and print a line every few seconds",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("address", type=status_address, help="HOST:PORT of the recorder's --status-listen")
    p.add_argument("--every", type=positive(), default=3.0, help="seconds between polls (default 3)")
    p.add_argument("--count", type=positive(int), default=None, help="stop after this many polls")
    p.add_argument("--stalled-after", type=positive(), default=5.0,
                   help="call the stream stopped after this many seconds without packets (default 5)")
    p.set_defaults(func=run_watch)


def status_address(text: str) -> str:
    """HOST:PORT (or http://HOST:PORT), as a recorder's --status-listen serves it: the form
    only; whether anyone answers there is what watch reports, poll by poll."""
    url = text if "://" in text else "http://" + text
    problem = argparse.ArgumentTypeError(f"expected HOST:PORT (a port 1..65535) such as 127.0.0.1:8089, got {text!r}")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is no number, or out of 0..65535
        raise problem from None
    if parts.scheme != "http":
        raise argparse.ArgumentTypeError(f"the status endpoint speaks plain http: give HOST:PORT, got {text!r}")
    if not parts.hostname or port is None or not 1 <= port <= 65535:
        raise problem
    return text


def _loud(text: str, out: TextIO) -> str:
    # Red and bold on a terminal; plain (but unmistakable) in a log.
    return f"\033[1;31m{text}\033[0m" if out.isatty() else text


def run_watch(a: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    remote = RemoteStatus(a.address)
    previous: dict[str, int] | None = None
    polls = 0
    with sigterm_as_interrupt():
        try:
            while a.count is None or polls < a.count:
                if polls:
                    time.sleep(a.every)
                polls += 1
                now = time.strftime("%H:%M:%S")
                try:
                    doc = remote.status()
                except ConnectionError as exc:
                    print(_loud(f"{now} !!! NO ANSWER from {a.address}: {exc} !!!", out), file=out, flush=True)
                    continue
                st = doc["stats"]
                causes = {
                    "network": max(st["frames_lost"] - st["kernel_drops"], 0),
                    "kernel": st["kernel_drops"],
                    "ring": st["ring_overflows"],
                    "malformed": st["datagrams_malformed"],
                }
                lost = sum(causes.values())
                file_name = (doc["current_file"] or "-").rsplit("/", 1)[-1]
                print(
                    f"{now}  VDIF {doc['vdif_time'] or '-'}  frames {st['frames_received']}  "
                    f"stream {st['bytes_buffered']} B  file {file_name} {doc['current_file_bytes']} B  "
                    f"lost {lost}  {doc['rates']['receive_gbps']:.2f} Gbit/s  [{doc['state']}]",
                    file=out, flush=True,
                )
                if previous is not None:
                    new = {k: causes[k] - previous[k] for k in causes}
                    if any(v > 0 for v in new.values()):
                        detail = ", ".join(f"{k} {v}" for k, v in new.items() if v)
                        print(_loud(f"{now} !!! LOSS: {sum(new.values())} frames since the last poll ({detail}) !!!", out),
                              file=out, flush=True)
                previous = causes
                idle = st.get("seconds_since_datagram")
                if idle is None:
                    # Nothing yet: a stall only once the recorder has waited that long.
                    idle = st["elapsed_s"] if st["elapsed_s"] >= a.stalled_after else None
                    stalled = idle is not None
                else:
                    stalled = idle >= a.stalled_after
                if doc["state"] in ("recording", "waiting") and stalled:
                    what = f"no packets for {idle:.0f} s"
                    print(_loud(f"{now} !!! STREAM STOPPED: {what} !!!", out), file=out, flush=True)
        except KeyboardInterrupt:
            pass
    return 0
