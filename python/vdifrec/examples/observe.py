"""An observation script: wait for the scan, record it, report each second, check the end.

    python -m vdifrec.examples.observe --port 46227 --bind 0.0.0.0 --dir /data \\
        --scan-start 2026-11-30T02:17:30 --scan-length 600 --prefix r41234_kv

It waits until the scan's start time (UTC), records until its end, prints one quality line per
VDIF second as it completes, and at the end checks 1/16 of the last second straight from the
ring: the spectrum of every channel with its tones, and the 2-bit state statistics.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import time

import vdifrec


def utc(text: str) -> dt.datetime:
    """ISO 8601 UTC (``2026-11-30T02:17:30``, with or without ``Z`` and a fraction of any length:
    Python 3.10's ``fromisoformat`` takes neither)."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: give UTC as 2026-11-30T02:17:30[.5]")
    t = dt.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.timezone.utc)
    return t + dt.timedelta(seconds=float(m.group(2) or 0))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True, help="UDP port of the VDIF stream")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (0.0.0.0 for the network)")
    p.add_argument("--dir", required=True, help="folder for the recording")
    p.add_argument("--prefix", default="scan", help="file-name prefix")
    p.add_argument("--scan-start", type=utc, default=None, help="UTC start, ISO 8601 (default: now)")
    p.add_argument("--scan-length", type=float, required=True, help="seconds to record")
    p.add_argument("--ring", default=vdifrec.defaults["recorder"]["ring"], help="ring buffer size (default: the recorder's, 1GiB)")
    p.add_argument("--nfft", type=int, default=1024, help="spectral channels of the final check")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    start = dt.datetime.now(dt.timezone.utc)
    if a.scan_start:
        start = a.scan_start
    end = start + dt.timedelta(seconds=a.scan_length)
    wait = (start - dt.datetime.now(dt.timezone.utc)).total_seconds()
    if wait > 0:
        print(f"waiting {wait:.1f} s for the scan start {start:%Y-%m-%dT%H:%M:%S} UTC", flush=True)
        time.sleep(wait)

    rec = vdifrec.Recorder(port=a.port, bind=a.bind, directory=a.dir, prefix=a.prefix, ring=a.ring)
    with rec:
        host, port = rec.address or ("?", 0)
        print(f"recording on {host}:{port} until {end:%H:%M:%S} UTC", flush=True)
        fps = 0
        while dt.datetime.now(dt.timezone.utc) < end and not rec.finished:
            for row in rec.seconds(timeout=0.5):
                fps = row.frames_per_second or fps
                flag = "" if row.lost == 0 and row.ring_overflow == 0 else "  <-- LOSS"
                print(
                    f"{row.time:%H:%M:%S}  {row.received:>7}/{row.expected:<7} frames  lost {row.lost:<6} "
                    f"ooo {row.out_of_order:<4} overflow {row.ring_overflow:<5} "
                    f"on disk {row.bytes_written / 1e9:7.2f} GB{flag}",
                    flush=True,
                )
                if dt.datetime.now(dt.timezone.utc) >= end:
                    break
        # The spectrum check on 1/16 of the last second, from the ring, before stopping: a
        # view yields to the recording (the capture may overwrite it), so it is kept small
        # and read at once.
        stats = rec.stats()
        n = min(max((fps or 1) // 16, 1), stats.frames_received)
        if n > 0:
            with rec.view(n) as frames:
                h = vdifrec.Header.from_bytes(bytes(frames[0, :32]), verify=False)
                rate = (fps or 1) * h.samples_per_frame
                spec = vdifrec.spectrum(frames, nfft=a.nfft, sample_rate=rate)
                bits = vdifrec.bstate(frames)
            print(f"spectrum check of the last {n} frames ({spec.nint} FFTs per channel):")
            for ch in range(spec.power.shape[1]):
                tones = [t for t in spec.tones() if t.channel == ch][:2]
                desc = ", ".join(f"{t.frequency / 1e6:.3f} MHz at {t.snr_db:.1f} dB" for t in tones) or "no tone"
                states = " ".join(f"{100 * f:5.1f}%" for f in bits.fractions[0, ch])
                print(f"  channel {ch}: {desc}; states {states}")
    summary = rec.stop()
    print(f"scan done: {summary.frames_received} frames, {summary.frames_lost} lost, "
          f"{summary.bytes_written} bytes in {len(summary.files)} file(s); everything on disk: {summary.ok}")
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
