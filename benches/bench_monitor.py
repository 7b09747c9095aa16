"""`vdifrec monitor` (the vdiftimeUDP replacement) at the reference rate on loopback.

The monitor runs as operators run it (a separate process printing a line per second) while the
sender sends 125000 frames/s of 8224 bytes (8.224 Gbit/s). Baseline in the same run: the same
sender into a plain recvmmsg-and-discard loop. Target: zero loss at the reference rate.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import vdifrec

from common import report

FPS = 125_000


def main() -> dict[str, float]:
    seconds = float(os.environ.get("BENCH_MONITOR_SECONDS", "10"))
    rx = vdifrec._core.DiscardReceiver()
    base = vdifrec.send(("127.0.0.1", rx.port), duration=seconds, fps=FPS)
    time.sleep(0.5)
    got = json.loads(rx.stop())

    proc = subprocess.Popen([sys.executable, "-m", "vdifrec.cli", "monitor", "0", "--fps", str(FPS)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = int(re.search(r":(\d+)", proc.stdout.readline()).group(1))  # type: ignore[union-attr]
    sent = vdifrec.send(("127.0.0.1", port), duration=seconds, fps=FPS)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    lines = re.findall(r": (\d+)/(\d+) fps .* lost (\d+) : ooo (\d+)", out)
    received = sum(int(m[0]) for m in lines)
    lost = sum(int(m[2]) for m in lines)
    report(
        f"vdifrec monitor at 8.224 Gbit/s for {seconds:g} s on loopback (sender on the same host)",
        [
            ("frames sent", sent["frames_sent"], "frames"),
            ("frames the monitor counted", received, "frames"),
            ("frames lost", lost, "frames"),
            ("sender rate achieved", sent["gbps"], "Gbit/s"),
            ("baseline: discard loop received / sent", got["datagrams"] / base["frames_sent"], ""),
        ],
        [("monitor counted / sent (target 1.00, zero loss)", received / sent["frames_sent"], "1.00")],
    )
    return {"ratio": received / sent["frames_sent"], "lost": lost}


if __name__ == "__main__":
    main()
