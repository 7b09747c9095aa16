"""The control room's costs at the reference rate (8.224 Gbit/s on loopback), each against a
baseline recorded in the same run:

(a) the live-view example of docs/user/scripts.md, run as written for BENCH_LIVE_SECONDS (30 s): a view of
    1/16 of a second and its spectrum, once a second, while recording with the default ring;
    frames lost, spectra computed and stale views counted, against the same recording without
    the views;
(b) the latency stamps on, the live monitor on, both on, against both off, each
    BENCH_LIVE_COST_SECONDS (10 s), runs interleaved, medians of BENCH_LIVE_RUNS (3): frames
    lost, the capture's CPU per frame, the monitor's own CPU, and the per-stage latency table;
(c) each --live-fraction from 1/256 to 1 (BENCH_LIVE_STEP_SECONDS, 10 s, each): frames lost,
    looks computed and skipped, the monitor's CPU; the largest that stays as lossless as the
    baseline and the largest whose looks complete.

Frames go to the ring only (no disk) unless BENCH_LIVE_WRITE=1: a machine whose disk cannot
write 1 GB/s would lose frames to ring overflows that have nothing to do with what is measured.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import vdifrec
from vdifrec.cli.printing import print_latency

from common import env_float, env_int, report

FPS = 125_000
FS = 8224
RATE = FPS * 8192  # samples per second per channel of the reference stream


def lost(s: vdifrec.Summary) -> int:
    return s.frames_lost + s.ring_overflows + s.kernel_drops


def cpu_per_frame(s: vdifrec.Summary) -> float:
    return s.capture_cpu_s / max(s.frames_received, 1) * 1e9


def record(seconds: float, *, views: bool = False, write: bool | None = None, **options: Any) -> tuple[vdifrec.Summary, dict[str, Any]]:
    """Records the reference stream for `seconds`; with `views`, the docs' live-view example each second."""
    folder = Path(tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR")))
    if write is None:
        write = os.environ.get("BENCH_LIVE_WRITE") == "1"
    out = {"directory": folder, "file_size": "4GiB"} if write else {}
    rec = vdifrec.Recorder(port=0, frame_size=FS, fps=FPS, **out, **options)  # type: ignore[arg-type]
    rec.start()
    assert rec.address is not None
    sender = vdifrec.Sender(rec.address, duration=seconds, fps=FPS)
    while rec.stats().frames_received < FPS // 16 and not sender.finished:
        time.sleep(0.01)
    extra = {"spectra": 0, "stale": 0}
    end = time.monotonic() + seconds + 10
    while not sender.finished and time.monotonic() < end:
        if write:
            cur = rec.stats().current_file
            for p in folder.glob("*.vdif"):
                if str(p) != cur:
                    p.unlink(missing_ok=True)
        if views:
            # The docs' example (docs/user/scripts.md): 1/16 of a second from the ring, its spectrum, at once.
            try:
                with rec.view(FPS // 16) as frames:
                    vdifrec.spectrum(frames, nfft=1024, sample_rate=RATE)
                extra["spectra"] += 1
            except vdifrec.StaleViewError:
                extra["stale"] += 1
        time.sleep(1.0 if views else 0.2)
    sender.wait()
    summary = rec.stop()
    shutil.rmtree(folder, ignore_errors=True)
    return summary, extra


def main() -> dict[str, float]:
    seconds = env_float("BENCH_LIVE_SECONDS", 30.0)
    step = env_float("BENCH_LIVE_STEP_SECONDS", 10.0)

    base, _ = record(seconds)
    viewed, v = record(seconds, views=True)
    report(
        f"(a) the docs' live view (1/16 s and its spectrum, once a second), {seconds:g} s at 8.224 Gbit/s, default ring",
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

    cost_seconds = env_float("BENCH_LIVE_COST_SECONDS", 10.0)
    runs = env_int("BENCH_LIVE_RUNS", 3)
    kinds = {"off": {}, "latency": {"latency": True}, "live": {"live": True}, "both": {"live": True, "latency": True}}
    results: dict[str, list[vdifrec.Summary]] = {k: [] for k in kinds}
    for _ in range(runs):
        for kind, options in kinds.items():
            results[kind].append(record(cost_seconds, **options)[0])
    med = lambda kind, f: statistics.median(f(s) for s in results[kind])  # noqa: E731
    off = med("off", cpu_per_frame)
    rows = []
    for kind in kinds:
        rows += [
            (f"capture CPU per frame, {kind}", med(kind, cpu_per_frame), "ns"),
            (f"frames lost (all causes), {kind}, worst run", max(lost(s) for s in results[kind]), "frames"),
        ]
    for kind in ("live", "both"):
        rows += [
            (f"live looks computed / skipped, {kind}", med(kind, lambda s: s.live_computed or 0), f"/ {med(kind, lambda s: s.live_skips or 0):g}"),
            (f"live monitor CPU, {kind}", med(kind, lambda s: (s.live_cpu_s or 0) / cost_seconds * 100), "% of a core"),
        ]
    report(
        f"(b) latency stamps and the live monitor (auto fraction) at 8.224 Gbit/s, {cost_seconds:g} s runs, medians of {runs}",
        rows,
        [(f"capture CPU per frame, {kind} / off", med(kind, cpu_per_frame) / off, "at most 1.05" if kind == "latency" else "close to 1")
         for kind in ("latency", "live", "both")],
    )
    latency = results["latency"][-1].latency
    assert latency is not None
    print("capture only:")
    print_latency(latency, sys.stdout)
    # The whole path to disk: the write and durable stages too (O_DIRECT; then buffered). A
    # disk slower than the stream shows here as frames waiting in the ring.
    for direct in (True, False):
        written, _ = record(cost_seconds, write=True, latency=True, direct=direct)
        assert written.latency is not None
        print(f"written to {os.environ.get('BENCH_DIR') or tempfile.gettempdir()} ({'O_DIRECT' if direct else 'buffered'}): "
              f"{written.frames_received} frames, {written.ring_overflows} ring overflows, {written.bytes_written / 1e9:.1f} GB written")
        print_latency(written.latency, sys.stdout)

    print(f"\n== (c) --live-fraction at 8.224 Gbit/s, {step:g} s each (the baseline lost {lost(base)} frames in {seconds:g} s)")
    lossless = completes = 0.0
    for fraction in fractions():
        s, _ = record(step, live_fraction=fraction, status_listen="127.0.0.1:0")
        if s.ring_overflows == 0 and lost(s) <= lost(base) * step / seconds + 1:
            lossless = max(lossless, fraction)
        if (s.live_computed or 0) >= (s.live_skips or 0):
            completes = max(completes, fraction)
        print(f"  fraction {fraction:<7.4f} lost {lost(s):>8} (ring {s.ring_overflows}), looks {s.live_computed}, "
              f"skipped {s.live_skips}, monitor CPU {(s.live_cpu_s or 0) / step * 100:5.1f}% of a core")
    print(f"  largest fraction as lossless as the baseline: {lossless:g}; largest whose looks mostly complete: {completes:g}")
    return {"stale": v["stale"], "latency_cpu_ratio": med("latency", cpu_per_frame) / off, "best_fraction": lossless}


def fractions() -> list[float]:
    """The live fractions (c) tries: BENCH_LIVE_FRACTIONS, such as "1/256,1/64,1" (the default
    is 1/256, 1/64, 1/16, 1/4 and 1)."""
    out = []
    for text in os.environ.get("BENCH_LIVE_FRACTIONS", "1/256,1/64,1/16,1/4,1").split(","):
        top, _, bottom = text.strip().partition("/")
        out.append(float(top) / float(bottom or 1))
    return out


if __name__ == "__main__":
    main()
