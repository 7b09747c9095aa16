"""The example scripts installed with the package run end to end on loopback.

Where the host grants the recorder a small socket buffer (no CAP_NET_ADMIN, net.core.rmem_max
untuned) the kernel may drop frames: the counts expected then follow from what it dropped
(conftest.delivered), and are the stream's own where it dropped nothing.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import vdifrec
from conftest import delivered, frames_of, free_udp_port, left_out, loss_by_second, output_line, read_until, vdif_keys


@pytest.mark.slow
def test_observation_script(tmp_path: Path) -> None:
    port = free_udp_port()
    # The script records for as long as it is told, from its own start, and only stops then:
    # 12 s holds its start (the ring, the socket), the 2.5 s stream sent once it listens, and
    # the time a busy host takes to carry both, with room to spare; the test waits it out.
    proc = subprocess.Popen(
        [sys.executable, "-m", "vdifrec.examples.observe", "--port", str(port), "--dir", str(tmp_path),
         "--scan-length", "12", "--ring", "64MiB", "--nfft", "1024"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    _, head = read_until(proc, "recording on")
    sent_file = tmp_path / "sent.vdif"
    sent = vdifrec.send(("127.0.0.1", port), duration=2.5, fps=2000, drop="1:100-149", record_sent=sent_file)
    d = delivered(("127.0.0.1", port), sent["frames_sent"])
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    stdout = head + stdout
    files = list(tmp_path.glob("scan_*.vdif"))
    assert len(files) == 1
    # 50 frames left out of the second second; and whatever the kernel dropped (none where the
    # socket buffer it grants suffices), which the file tells.
    recorded = frames_of(files[0])
    assert len(left_out(frames_of(sent_file), recorded)) == d.kernel_drops
    # The script learns the rate: from the highest frame number received.
    lost = loss_by_second(recorded, int(vdif_keys(recorded)[2].max()) + 1)
    first = min(lost)
    assert loss_by_second(frames_of(sent_file), 2000)[first + 1] == 50
    rows = re.findall(r"(\d+)/(\d+)\s+frames\s+lost (\d+)", stdout)
    assert [int(r[2]) for r in rows[:2]] == [lost[first], lost[first + 1]]
    if d.kernel_drops == 0:
        assert [int(r[2]) for r in rows[:2]] == [0, 50]
    assert "<-- LOSS" in stdout
    assert stdout.count("channel ") == 4 and "MHz at" in stdout and "states" in stdout
    m = re.search(r"scan done: (\d+) frames, (\d+) lost, (\d+) bytes in 1 file\(s\); everything on disk: True", stdout)
    assert m, stdout
    assert int(m.group(1)) == sent["frames_sent"] - d.kernel_drops == len(recorded)
    assert int(m.group(2)) == sum(lost.values())
    assert files[0].stat().st_size == int(m.group(3))


@pytest.mark.slow
def test_minimal_monitor() -> None:
    port = free_udp_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vdifrec.examples.monitor", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    _, head = read_until(proc, "listening on")
    vdifrec.send(("127.0.0.1", port), frames=2500, fps=1000, ref_epoch=53, start_second=10)
    d = delivered(("127.0.0.1", port), 2500)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    stdout = head + stdout
    rows = [tuple(map(int, r)) for r in re.findall(r"(\d+)/(\d+)\s+lost (\d+)", stdout)]
    if d.kernel_drops == 0:
        assert rows == [(1000, 1000, 0), (1000, 1000, 0), (500, 500, 0)]
    # Whatever the kernel dropped: each second's expected frames were received or lost, every
    # frame sent was received or dropped, and what it dropped is lost but for those before the
    # first or after the last frame received (no second expects them).
    assert len(rows) == 3 and all(received + lost == expected for received, expected, lost in rows)
    received, expected, lost = (sum(column) for column in zip(*rows))
    assert received == 2500 - d.kernel_drops
    assert 2500 - d.kernel_drops <= expected <= 2500 and lost == d.kernel_drops - (2500 - expected)


@pytest.mark.slow
def test_schedule_script_runs_three_scans_through_vsi(tmp_path: Path) -> None:
    """The VSI-S schedule against `vdifrec serve`, with a sender going on throughout: three
    scans, each holding frames, written and checked, with gaps between them."""
    port = free_udp_port()
    disk = tmp_path / "disk0"
    disk.mkdir()
    out = tmp_path / "serve.out"
    with open(out, "w") as fh:
        serve = subprocess.Popen(
            [sys.executable, "-m", "vdifrec.cli", "serve", "--control", "127.0.0.1:0", "--disk", str(disk),
             "--port", str(port), "--ring", "64MiB", "--log", str(tmp_path / "serve.log")],
            stdout=fh, stderr=subprocess.STDOUT, text=True,
        )
    sender = None
    try:
        m = output_line(out, r"control on ([0-9.]+:\d+)", proc=serve)
        # The stream goes on until the schedule is done (however long its start and its scans
        # take on a busy host), and is stopped then.
        sender = vdifrec.Sender(("127.0.0.1", port), duration=300, fps=2000)
        r = subprocess.run(
            [sys.executable, "-m", "vdifrec.examples.schedule", "--control", m.group(1), "--mode", "VDIF_8192-131.072-4-2",
             "--scans", "3", "--length", "1.5", "--gap", "0.5"],
            capture_output=True, text=True, timeout=120,
        )
        sender.stop()
        sender = None
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.count("!record= 0 ;") == 3 and r.stdout.count("!record= 1 ;") == 3
        checks = re.findall(r"!scan_check\? 0 : \? : (sched_0\d) : VDIF : 8 : \S+ : (\S+)s : ", r.stdout)
        assert [c[0] for c in checks] == ["sched_01", "sched_02", "sched_03"]
        assert all(0.5 < float(c[1]) < 3 for c in checks), checks
        assert sorted(p.name for p in disk.iterdir() if p.is_dir()) == ["sched_01", "sched_02", "sched_03"]
    finally:
        if sender is not None:
            sender.stop()
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=30) == 0
