"""The status endpoint does not slow capture: the reference stream (8.224 Gbit/s) recorded on
loopback while a client fetches /status and /metrics 100 times a second, against the same
recording without the client (the baseline, in the same run). Target: zero loss with the
client, and the capture's CPU per frame unchanged.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import vdifrec

from common import report

FPS = 125_000


def run(seconds: float, poll: bool) -> tuple[vdifrec.Summary, dict, int]:
    folder = Path(tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR")))
    rec = vdifrec.Recorder(port=0, ring="2GiB", directory=folder, frame_size=8224, fps=FPS,
                           file_size="4GiB", status_listen="0")
    rec.start()
    assert rec.address is not None and rec.status_address is not None
    url = "http://%s:%d" % rec.status_address
    stop = threading.Event()
    answered = 0

    def poller() -> None:
        nonlocal answered
        k = 0
        while not stop.is_set():
            t0 = time.monotonic()
            with urllib.request.urlopen(url + ("/status" if k % 2 == 0 else "/metrics"), timeout=5) as r:
                r.read()
            answered += 1
            k += 1
            time.sleep(max(0.0, 0.01 - (time.monotonic() - t0)))

    def cleaner() -> None:
        # Delete closed files as the recording goes, so a few GB of disk suffice.
        while not stop.is_set():
            cur = rec.stats().current_file if rec.running else None
            for p in folder.glob("*.vdif"):
                if str(p) != cur:
                    p.unlink(missing_ok=True)
            time.sleep(0.5)

    threads = [threading.Thread(target=cleaner)] + ([threading.Thread(target=poller)] if poll else [])
    for t in threads:
        t.start()
    sent = vdifrec.send(rec.address, duration=seconds, fps=FPS)
    deadline = time.monotonic() + 10
    while rec.stats().frames_received < sent["frames_sent"] and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    summary = rec.stop()
    shutil.rmtree(folder, ignore_errors=True)
    return summary, sent, answered


def main() -> dict[str, float]:
    seconds = float(os.environ.get("BENCH_STATUS_SECONDS", "10"))
    base, base_sent, _ = run(seconds, poll=False)
    polled, sent, answered = run(seconds, poll=True)
    cpu = lambda s: s.capture_cpu_s / max(s.frames_received, 1) * 1e9  # noqa: E731
    report(
        f"recording 8.224 Gbit/s for {seconds:g} s with /status and /metrics fetched 100 times a second",
        [
            ("requests answered", answered, ""),
            ("frames lost (all causes), polled", polled.frames_lost + polled.ring_overflows + polled.kernel_drops, "frames"),
            ("frames lost (all causes), baseline", base.frames_lost + base.ring_overflows + base.kernel_drops, "frames"),
            ("recorded / sent, polled", polled.frames_received / sent["frames_sent"], ""),
            ("capture CPU per frame, polled", cpu(polled), "ns"),
            ("capture CPU per frame, baseline", cpu(base), "ns"),
        ],
        [("capture CPU per frame, polled / baseline", cpu(polled) / cpu(base), "close to 1")],
    )
    return {"lost": polled.frames_lost, "cpu_ratio": cpu(polled) / cpu(base)}


if __name__ == "__main__":
    main()
