"""A short observing schedule run through VSI-S, as the Field System runs one: three scans with
gaps between them, against a `vdifrec serve` (or jive5ab) control port.

    vdifrec serve --disk '/mnt/disk*' --port 46227 &
    python -m vdifrec.examples.schedule --control localhost:2620 --scans 3 --length 10 --gap 5

Before the first scan it sets the mode and the data protocol (as the Field System's set-up
procedure does), then for each scan: `record=on`, `record?` once a second while it records,
`record=off`, waits for `record?` to say off (the tail is on disk), and prints `scan_check?`
and `evlbi?`. The exit status is 1 if any command was refused.
"""

from __future__ import annotations

import argparse
import sys
import time

from vdifrec.vsi import VSIClient, VSIError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--control", default="127.0.0.1:2620", help="HOST:PORT of the VSI-S control port")
    p.add_argument("--mode", default="VDIF_8192-8192-4-2", help="mode= to set (default the reference stream's)")
    p.add_argument("--protocol", default="pudp", help="net_protocol= to set: pudp (plain frames) or udps (with sequence numbers)")
    p.add_argument("--prefix", default="sched", help="scan names: <prefix>_01, <prefix>_02, ...")
    p.add_argument("--scans", type=int, default=3, help="number of scans")
    p.add_argument("--length", type=float, default=10.0, help="seconds per scan")
    p.add_argument("--gap", type=float, default=5.0, help="seconds between scans")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    refused = 0
    try:
        with VSIClient(a.control) as fs:

            def say(command: str) -> tuple[str, ...]:
                nonlocal refused
                r = fs.send(command)
                print(f"{time.strftime('%H:%M:%S')}  {command:<28} {r}", flush=True)
                refused += not r.ok
                return r.fields

            say(f"mode={a.mode}")
            say(f"net_protocol={a.protocol}")
            for k in range(1, a.scans + 1):
                if k > 1:
                    time.sleep(a.gap)
                say(f"record=on:{a.prefix}_{k:02d}")
                end = time.monotonic() + a.length
                while time.monotonic() < end:
                    time.sleep(min(1.0, max(end - time.monotonic(), 0)))
                    say("record?")
                say("record=off")
                for _ in range(600):  # the tail on disk: bounded at a minute
                    if fs.send("record?").fields == ("off",):
                        break
                    time.sleep(0.1)
                say("scan_check?")
                say("evlbi?")
    except VSIError as exc:
        print(f"schedule: {exc}", file=sys.stderr)
        return 1
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
