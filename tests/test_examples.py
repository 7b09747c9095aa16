"""The example scripts installed with the package run end to end on loopback."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import vdifrec
from conftest import free_udp_port


def test_observation_script(tmp_path: Path) -> None:
    port = free_udp_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vdifrec.examples.observe", "--port", str(port), "--dir", str(tmp_path),
         "--scan-length", "4", "--ring", "64MiB", "--nfft", "1024"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    assert "recording on" in proc.stdout.readline()
    sent = vdifrec.send(("127.0.0.1", port), duration=2.5, fps=2000, drop="1:100-149")
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    rows = re.findall(r"(\d+)/(\d+)\s+frames\s+lost (\d+)", stdout)
    assert [int(r[2]) for r in rows[:2]] == [0, 50]
    assert "<-- LOSS" in stdout
    assert stdout.count("channel ") == 4 and "MHz at" in stdout and "states" in stdout
    m = re.search(r"scan done: (\d+) frames, (\d+) lost, (\d+) bytes in 1 file\(s\); everything on disk: True", stdout)
    assert m, stdout
    assert int(m.group(1)) == sent["frames_sent"]
    files = list(tmp_path.glob("scan_*.vdif"))
    assert len(files) == 1 and files[0].stat().st_size == int(m.group(3))


def test_minimal_monitor() -> None:
    port = free_udp_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vdifrec.examples.monitor", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    assert "listening on" in proc.stdout.readline()
    vdifrec.send(("127.0.0.1", port), frames=2500, fps=1000, ref_epoch=53, start_second=10)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert re.findall(r"(\d+)/(\d+)\s+lost (\d+)", stdout) == [("1000", "1000", "0"), ("1000", "1000", "0"), ("500", "500", "0")]
