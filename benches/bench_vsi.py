"""The VSI-S control port does not slow capture: `vdifrec serve` receives the reference stream
(8.224 Gbit/s) on loopback while a client polls `record?` and `evlbi?` as fast as it can, against
the same run without the client (the baseline, in the same run). Target: zero loss with the
client, the capture's CPU per frame unchanged; the figure of merit is commands answered per
second.

By default the stream is received and counted between scans (what serve does all day); with
BENCH_VSI_RECORD=1 each run is a scan written to BENCH_VSI_DISK (default: a folder under
BENCH_DIR), for a host whose disks keep up with 1.03 GB/s. BENCH_VSI_SECONDS (default 10).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import vdifrec
from vdifrec.vsi import VSIClient

from common import report

FPS = 125_000


def counters(c: VSIClient) -> dict[str, float]:
    return {k: float(v) for k, v in (f.split("=", 1) for f in c.send("stats?").fields) if re.fullmatch(r"-?[0-9.e+-]+", v)}


def run(c: VSIClient, port: int, seconds: float, poll: bool, record: bool, scan: str) -> tuple[dict[str, float], int]:
    before = counters(c)
    if record:
        assert c.send(f"record=on:{scan}").code == 0
    stop = threading.Event()
    answered = 0

    def poller() -> None:
        nonlocal answered
        with VSIClient(c.address) as p:
            while not stop.is_set():
                p.send("record?" if answered % 2 == 0 else "evlbi?")
                answered += 1

    t = threading.Thread(target=poller)
    if poll:
        t.start()
    sent = vdifrec.send(("127.0.0.1", port), duration=seconds, fps=FPS)
    # Commands are counted while the stream flows, not while the ring drains.
    stop.set()
    if poll:
        t.join()
    deadline = time.monotonic() + 10
    while counters(c)["datagrams"] - before["datagrams"] < sent["frames_sent"] and time.monotonic() < deadline:
        time.sleep(0.05)
    if record:
        c.send("record=off")
        while c.send("record?").fields != ("off",):
            time.sleep(0.1)
    after = counters(c)
    diff = {k: after[k] - before.get(k, 0.0) for k in after}
    diff["frames_sent"] = sent["frames_sent"]
    return diff, answered


def main() -> dict[str, float]:
    seconds = float(os.environ.get("BENCH_VSI_SECONDS", "10"))
    record = os.environ.get("BENCH_VSI_RECORD") == "1"
    disk = Path(os.environ.get("BENCH_VSI_DISK") or tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR")))
    port = 46_000 + os.getpid() % 1000
    out = disk / "serve.out"
    with open(out, "w") as fh:
        serve = subprocess.Popen(
            [sys.executable, "-m", "vdifrec.cli", "serve", "--control", "127.0.0.1:0", "--disk", str(disk), "--port", str(port),
             "--frame-size", "8224", "--fps", str(FPS), "--ring", "2GiB", "--log", os.devnull],
            stdout=fh, stderr=subprocess.STDOUT, text=True,
        )
    try:
        m = None
        for _ in range(600):
            m = re.search(r"control on ([0-9.]+):(\d+)", out.read_text())
            if m or serve.poll() is not None:
                break
            time.sleep(0.05)
        assert m, out.read_text()
        with VSIClient((m.group(1), int(m.group(2)))) as c:
            base, _ = run(c, port, seconds, poll=False, record=record, scan="bench_base")
            polled, answered = run(c, port, seconds, poll=True, record=record, scan="bench_polled")
    finally:
        serve.terminate()
        serve.wait(timeout=60)
        if not os.environ.get("BENCH_VSI_DISK"):
            shutil.rmtree(disk, ignore_errors=True)

    def lost(d: dict[str, float]) -> float:
        # Frames sent and not taken (kernel drops among them), and frames the ring could not
        # hold. (Not the accounting's sequence gaps: the pause between the two runs is one.)
        return d["frames_sent"] - d["frames_received"] + d["ring_overflows"]

    def cpu(d: dict[str, float]) -> float:
        return d["capture_cpu_s"] / max(d["frames_received"], 1) * 1e9

    what = "recording a scan" if record else "receiving between scans"
    report(
        f"vdifrec serve {what} at 8.224 Gbit/s for {seconds:g} s, a client polling record? and evlbi? flat out",
        [
            ("commands answered per second", answered / seconds, "/s"),
            ("frames sent and not buffered, polled", lost(polled), "frames"),
            ("frames sent and not buffered, baseline", lost(base), "frames"),
            ("received / sent, polled", polled["frames_received"] / polled["frames_sent"], ""),
            ("capture CPU per frame, polled", cpu(polled), "ns"),
            ("capture CPU per frame, baseline", cpu(base), "ns"),
        ],
        [("capture CPU per frame, polled / baseline", cpu(polled) / cpu(base), "close to 1")],
    )
    return {"commands_per_second": answered / seconds, "lost": lost(polled), "cpu_ratio": cpu(polled) / cpu(base)}


if __name__ == "__main__":
    main()
