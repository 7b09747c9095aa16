"""The control room's costs at the reference rate (8.224 Gbit/s on loopback), each against a
baseline recorded in the same run:

(a) the README's live-view example, run as written for BENCH_LIVE_SECONDS (30 s): a view of
    1/16 of a second and its spectrum, once a second, while recording with the default ring;
    frames lost, spectra computed and stale views counted, against the same recording without
    the views;
(b) the engine's live monitor and latency stamps on, against both off: frames lost, the
    capture's CPU per frame, the monitor's own CPU, and the per-stage latency table;
(c) the largest --live-fraction that stays as lossless as the baseline on this machine
    (BENCH_LIVE_STEP_SECONDS, 10 s, per fraction).

Frames go to the ring only (no disk) unless BENCH_LIVE_WRITE=1: a machine whose disk cannot
write 1 GB/s would lose frames to ring overflows that have nothing to do with what is measured.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import vdifrec
from vdifrec.table import print_latency

from common import env_float, report

FPS = 125_000
FS = 8224
RATE = FPS * 8192  # samples per second per channel of the reference stream


def lost(s: vdifrec.Summary) -> int:
    return s.frames_lost + s.ring_overflows + s.kernel_drops


def cpu_per_frame(s: vdifrec.Summary) -> float:
    return s.capture_cpu_s / max(s.frames_received, 1) * 1e9


def record(seconds: float, *, views: bool = False, **options: Any) -> tuple[vdifrec.Summary, dict[str, Any]]:
    """Records the reference stream for `seconds`; with `views`, the README's example each second."""
    folder = Path(tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR")))
    write = os.environ.get("BENCH_LIVE_WRITE") == "1"
    out = {"directory": folder, "file_size": "4GiB"} if write else {}
    rec = vdifrec.Recorder(port=0, frame_size=FS, fps=FPS, **out, **options)  # type: ignore[arg-type]
    rec.start()
    assert rec.address is not None
    sender = vdifrec.Sender(rec.address, duration=seconds, fps=FPS)
    extra = {"spectra": 0, "stale": 0, "live_cpu_s": 0.0}
    end = time.monotonic() + seconds + 10
    while not sender.finished and time.monotonic() < end:
        if write:
            cur = rec.stats().current_file
            for p in folder.glob("*.vdif"):
                if str(p) != cur:
                    p.unlink(missing_ok=True)
        if views:
            # The README's example: 1/16 of a second from the ring, its spectrum, at once.
            try:
                with rec.view(FPS // 16) as frames:
                    vdifrec.spectrum(frames, nfft=1024, sample_rate=RATE)
                extra["spectra"] += 1
            except vdifrec.StaleViewError:
                extra["stale"] += 1
        time.sleep(1.0 if views else 0.2)
    sender.wait()
    look = rec.live()
    if look is not None:
        extra["live_cpu_s"] = look.cpu_s
    summary = rec.stop()
    shutil.rmtree(folder, ignore_errors=True)
    return summary, extra


def main() -> dict[str, float]:
    seconds = env_float("BENCH_LIVE_SECONDS", 30.0)
    step = env_float("BENCH_LIVE_STEP_SECONDS", 10.0)

    base, _ = record(seconds)
    viewed, v = record(seconds, views=True)
    report(
        f"(a) the README's live view (1/16 s and its spectrum, once a second), {seconds:g} s at 8.224 Gbit/s, default ring",
        [
            ("spectra computed", v["spectra"], ""),
            ("views found stale (StaleViewError)", v["stale"], ""),
            ("frames lost to the ring, with views", viewed.ring_overflows, "frames"),
            ("frames lost (all causes), with views", lost(viewed), "frames"),
            ("frames lost (all causes), baseline", lost(base), "frames"),
            ("capture CPU per frame, with views", cpu_per_frame(viewed), "ns"),
            ("capture CPU per frame, baseline", cpu_per_frame(base), "ns"),
        ],
        [("capture CPU per frame, views / baseline", cpu_per_frame(viewed) / cpu_per_frame(base), "close to 1")],
    )

    on, o = record(seconds, live=True, latency=True)
    report(
        f"(b) live monitor (auto fraction) and latency stamps on vs off, {seconds:g} s at 8.224 Gbit/s",
        [
            ("live looks computed", on.live_computed or 0, ""),
            ("live looks skipped", on.live_skips or 0, ""),
            ("live monitor CPU", o["live_cpu_s"] / seconds * 100, "% of a core"),
            ("frames lost to the ring, on", on.ring_overflows, "frames"),
            ("frames lost (all causes), on", lost(on), "frames"),
            ("frames lost (all causes), off", lost(base), "frames"),
            ("capture CPU per frame, on", cpu_per_frame(on), "ns"),
            ("capture CPU per frame, off", cpu_per_frame(base), "ns"),
        ],
        [("capture CPU per frame, on / off", cpu_per_frame(on) / cpu_per_frame(base), "at most 1.05")],
    )
    assert on.latency is not None
    print_latency(on.latency, sys.stdout)

    print(f"\n== (c) --live-fraction against the baseline's loss ({lost(base)} frames in {seconds:g} s), {step:g} s each")
    best = 0.0
    for fraction in (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0):
        s, x = record(step, live_fraction=fraction, status_listen="127.0.0.1:0")
        ok = s.ring_overflows == 0 and lost(s) <= lost(base) * step / seconds + 1
        best = fraction if ok and fraction > best else best
        print(f"  fraction {fraction:<7.4f} lost {lost(s):>8} (ring {s.ring_overflows}), looks {s.live_computed}, "
              f"skipped {s.live_skips}, monitor CPU {x['live_cpu_s'] / step * 100:5.1f}% of a core")
    print(f"  largest fraction as lossless as the baseline: {best:g}")
    return {"stale": v["stale"], "cpu_ratio": cpu_per_frame(on) / cpu_per_frame(base), "best_fraction": best}


if __name__ == "__main__":
    main()
