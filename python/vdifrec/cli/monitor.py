"""`vdifrec monitor`: DiFX's vdiftimeUDP, same columns, without its faults.

vdiftimeUDP prints one line per change of the VDIF seconds field. So does this, with the same
columns (operators' eyes and scripts keep working), but:

- the thread count is the number of threads seen that second, not the highest thread id + 1;
- thread ids are 10 bits (vdiftimeUDP reads 6), the legacy flag is bit 30 of word 0;
- the first frame of a new second is counted in that second, not the previous one;
- without ``--thread``, totals and maxima add up per thread (not all threads against one max);
- a second is printed once complete (1/16 s into the next), so late frames are not miscounted;

and it adds the frames lost and out of order. Ctrl-C or SIGTERM prints the last, partial
second before exiting.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from typing import Any, TextIO

from .. import _core
from ..recorder import Recorder
from ..reports import SecondRow, ThreadSecond
from .args import OptionError, UsageError, default, given, integer, positive, sigterm_as_interrupt, size
from .printing import HEADER_EVERY

HEADER = (
    "----- VDIF Time ------------------------------ Computer Time ---------Time Delta----"
    "Frames total/max-----Rate peak------Rate nominal----Rate actual-----Lost----OutOfOrder"
)


def _doy(t: float, decimals: int = 0) -> str:
    d = _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc)
    base = f"{d.year:04d}y{d.timetuple().tm_yday:03d}doy {d:%H:%M:%S}"
    if decimals:
        frac = f"{t % 1:.{decimals}f}"[1:]
        return base + frac
    return base


def monitor_line(row: SecondRow, payload_bytes: int, thread: int | None, elapsed: float | None) -> str | None:
    """One vdiftimeUDP line for a completed second (None if the selected thread is absent)."""
    parts: list[ThreadSecond] = row.threads if thread is None else [t for t in row.threads if t.thread == thread]
    parts = [t for t in parts if t.received or t.ring_overflow]
    if not parts:
        return None
    first_frame = min(t.first_frame for t in parts)
    total = sum(t.received for t in parts)
    # Per thread: the highest frame number seen + 1; summed over the threads shown.
    maxima = [t.last_frame + 1 for t in parts]
    peak_per_thread = 8e-6 * max(maxima) * payload_bytes
    nominal = 8e-6 * total * payload_bytes
    seen = min(t.first_seen for t in parts)
    actual = nominal / elapsed if elapsed and elapsed > 0 else nominal
    offset = row.unix_second - seen
    lost = sum(t.lost for t in parts)
    ooo = sum(t.out_of_order for t in parts)
    return (
        f"VDIF frame#{first_frame:<7d} {_doy(row.unix_second)} : PC {_doy(seen, 2)} : "
        f"off {offset:5.1f}s : {total}/{sum(maxima)} fps : {len(parts)}x{peak_per_thread:.2f} Mbps : "
        f"{nominal:.2f} Mbps : {actual:.2f} Mbps : lost {lost} : ooo {ooo}"
    )


def add_monitor(sub: Any) -> None:
    p = sub.add_parser(
        "monitor",
        help="watch a VDIF stream like DiFX vdiftimeUDP (one line per second, nothing written)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Each flag's dest is the engine's name for the option, so errors map back to the flag.
    p.add_argument("port", type=integer, help="UDP port")
    p.add_argument("--bind", help=f"address to listen on (default {default('recorder', 'bind')}; 0.0.0.0 for the network)")
    p.add_argument("--offset", type=integer, help="bytes before each frame to skip (8 for a PSN; default 0)")
    p.add_argument("--thread", type=thread_id, default=None, help="show only this VDIF thread (0-1023)")
    p.add_argument("--cpu", dest="capture_cpu", type=integer, help="pin the capture thread to this CPU")
    p.add_argument("--bigendian", dest="big_endian", action="store_true", default=None, help="headers are big-endian (each 32-bit word byte-swapped)")
    p.add_argument("--fps", type=integer, help="frames per second per thread (default: learned)")
    p.add_argument("--ring", type=size, help=f"ring buffer size (default {default('recorder', 'ring')})")
    p.add_argument("--duration", type=positive(), default=None, help="stop after this many seconds")
    p.set_defaults(func=run_monitor)


def thread_id(text: str) -> int:
    """A VDIF thread id: 10 bits."""
    v = integer(text)
    if not 0 <= v <= 1023:
        raise argparse.ArgumentTypeError(f"a VDIF thread id is 0-1023, got {text!r}")
    return v


def run_monitor(a: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        rec = Recorder(**given(a, "recorder"))
        rec.start()
    except _core.ArgumentError:
        raise
    except _core.PortInUseError as exc:
        raise OptionError(str(exc)) from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    assert rec.address is not None
    print(f"listening on {rec.address[0]}:{rec.address[1]}", file=out, flush=True)
    payload_bytes: int | None = None
    lines = 0
    rows: list[SecondRow] = []
    printed = 0
    start = time.monotonic()

    def emit_ready(final: bool) -> None:
        """Prints every row whose successor has arrived (its actual rate needs the next
        second's first arrival); at the end, the rest too."""
        nonlocal payload_bytes, lines, printed
        while printed < len(rows) and (final or printed + 1 < len(rows)):
            row = rows[printed]
            nxt = rows[printed + 1] if printed + 1 < len(rows) else None
            printed += 1
            if payload_bytes is None:
                payload_bytes = _payload_bytes(rec)
            elapsed = (nxt.first_seen if nxt else row.last_seen) - row.first_seen
            line = monitor_line(row, payload_bytes, a.thread, elapsed)
            if line is None:
                continue
            if lines % HEADER_EVERY == 0:
                print(HEADER, file=out, flush=True)
            print(line, file=out, flush=True)
            lines += 1

    with sigterm_as_interrupt():
        try:
            while a.duration is None or time.monotonic() - start < a.duration:
                for row in rec.seconds(timeout=0.2):
                    rows.append(row)
                    emit_ready(final=False)
                if rec.finished:
                    break
        except KeyboardInterrupt:
            pass
        summary = rec.stop()
    # The last, partial second completes at stop.
    rows.extend(summary.seconds[len(rows):])
    emit_ready(final=True)
    return 0


def _payload_bytes(rec: Recorder) -> int:
    """Payload size from a frame of the stream itself (legacy headers are 16 bytes)."""
    try:
        frame = rec.latest(1)[0]
    except (_core.RecorderError, IndexError):
        return 0
    return _core.Header.from_bytes(bytes(frame[:32]), verify=False).payload_size
