"""A minimal stream monitor: one line per VDIF second, nothing written.

    python -m vdifrec.examples.monitor --port 46227 --bind 0.0.0.0
"""

from __future__ import annotations

import argparse
import sys

import vdifrec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bind", default="127.0.0.1")
    p.add_argument("--seconds", type=int, default=None, help="stop after this many VDIF seconds")
    a = p.parse_args(argv)
    rec = vdifrec.Recorder(port=a.port, bind=a.bind)
    rec.start()
    host, port = rec.address or ("?", 0)
    print(f"listening on {host}:{port}", flush=True)
    shown = 0

    def show(row: vdifrec.SecondRow) -> None:
        print(f"{row.time:%Y-%m-%d %H:%M:%S}  {row.received}/{row.expected}  lost {row.lost}", flush=True)

    try:
        for row in rec.seconds():
            show(row)
            shown += 1
            if a.seconds is not None and shown >= a.seconds:
                break
    except KeyboardInterrupt:
        pass
    # Stopping completes the last, partial second.
    for row in rec.stop().seconds[shown:]:
        show(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
