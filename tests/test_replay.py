"""Replaying recordings with `vdifrec send --file/--scan`: a vbs scan recorded here by the
project's own recorder (two threads, starting mid-second) goes out at its own frame rate, byte
for byte, over plain UDP to a second recorder, over TCP to a plain socket reader, and over UDP
with packet sequence numbers to a recorder counting them.

Everything is on 127.0.0.1, at a modest rate (5000 frames/s of 2080 bytes), and every wait is
bounded. Where the kernel drops datagrams (a full socket buffer), what is expected follows from
what it dropped (conftest.delivered), as in test_record.
"""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import vdifrec
from conftest import delivered, frames_of, left_out, ring_holding

FS = 2080  # 2048 bytes of payload: 2048 samples of 4 channels x 2 bits
FPS = 2500  # per thread
THREADS = 2
RATE = FPS * THREADS  # frames per second, all threads
START = dict(ref_epoch=53, start_second=2000)
SENT = 16_000  # frame sets 0..7999: seconds 2000.0 to 2003.2
# The scan's window: [2000.4, 2003.0), 2.6 s from the middle of a second.
WINDOW = dict(start=(53, 2000.4), stop=(53, 2003.0))
IN_WINDOW = int(2.6 * RATE)
CHUNK_RE = re.compile(r"^[^/.]+\.([0-9]{8})$")  # jive5ab's chunk names
TIMEOUT = 60.0

pytestmark = pytest.mark.slow


@dataclasses.dataclass(frozen=True)
class Scan:
    name: str
    disks: list[Path]
    data: bytes
    """Its chunks in number order, read here as jive5ab finds them."""
    file: Path
    """The same bytes as one file."""

    @property
    def frames(self) -> int:
        return len(self.data) // FS

    def disk_args(self) -> list[str]:
        return [a for d in self.disks for a in ("--disk", str(d))]


def vbs_data(disks: list[Path], name: str) -> bytes:
    chunks: dict[int, Path] = {}
    for d in disks:
        for f in (d / name).iterdir() if (d / name).is_dir() else []:
            m = CHUNK_RE.match(f.name)
            if m and f.name.startswith(name + "."):
                chunks[int(m.group(1))] = f
    assert sorted(chunks) == list(range(len(chunks))), "chunks 0..N-1"
    return b"".join(chunks[n].read_bytes() for n in sorted(chunks))


@pytest.fixture(scope="module")
def scan(tmp_path_factory: pytest.TempPathFactory) -> Scan:
    """A two-thread vbs scan over two disks, recorded from a sender by a vdifrec recorder, its
    window starting 0.4 s into a VDIF second."""
    root = tmp_path_factory.mktemp("replay")
    disks = [root / "disk0", root / "disk1"]
    for d in disks:
        d.mkdir()
    rec = vdifrec.Recorder(port=0, ring=ring_holding(SENT, FS), frame_size=FS, fps=FPS,
                           disks=[str(d) for d in disks], format="vbs", chunk_size="1MiB")
    rec.start()
    assert rec.address is not None
    name = rec.start_scan("replay_src", **WINDOW)
    sent = vdifrec.send(rec.address, frames=SENT, fps=FPS, threads=THREADS, frame_size=FS, **START)
    delivered(rec.address, sent["frames_sent"], lambda: rec.stats().datagrams)
    s = rec.stop_scan() if rec.scan else rec.wait_scan(10)
    rec.stop()
    assert s is not None and s.name == name and s.format == "vbs"
    data = vbs_data(disks, name)
    assert len(data) == s.bytes_written and s.frames > IN_WINDOW * 0.9
    file = root / "replay_src.vdif"
    file.write_bytes(data)
    return Scan(name, disks, data, file)


def poll_count(rec: vdifrec.Recorder, running: threading.Event) -> tuple[list[tuple[float, int]], threading.Thread]:
    """(time, datagrams received) every 20 ms while `running` is set, in a thread."""
    samples: list[tuple[float, int]] = []

    def poll() -> None:
        while running.is_set():
            samples.append((time.monotonic(), rec.stats().datagrams))
            time.sleep(0.02)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    return samples, t


def received_rate(samples: list[tuple[float, int]], total: int) -> float:
    """Frames per second the recorder received, fitted over the middle of the stream (from a
    tenth to nine tenths of it), where the start and the end do not weigh in. The recorder
    publishes its counts every 50 ms: each count is taken when it was first seen."""
    first_seen = {n: t for t, n in reversed(samples)}
    mid = [(t, n) for n, t in first_seen.items() if 0.1 * total <= n <= 0.9 * total]
    assert len(mid) >= 10, f"too few samples in the middle of the stream: {samples[:5]}...{samples[-5:]}"
    t, n = np.array(mid, dtype=float).T
    return float(np.polyfit(t - t[0], n, 1)[0])


def test_a_scan_replays_byte_for_byte_at_its_own_rate(scan: Scan, tmp_path: Path) -> None:
    out = tmp_path / "replayed.vdif"
    rec = vdifrec.Recorder(port=0, ring=ring_holding(scan.frames, FS), frame_size=FS, path=out)
    rec.start()
    assert rec.address is not None
    running = threading.Event()
    running.set()
    samples, poller = poll_count(rec, running)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "vdifrec.cli", "send", "--to", f"127.0.0.1:{rec.address[1]}", "--scan", scan.name,
             *scan.disk_args(), "--json"],
            capture_output=True, text=True, timeout=TIMEOUT,
        )
        assert r.returncode == 0, r.stderr
        sent = json.loads(r.stdout)
        d = delivered(rec.address, sent["frames_sent"], lambda: rec.stats().datagrams)
    finally:
        running.clear()
        poller.join(5)
        summary = rec.stop()
    assert sent["to"] == f"udp://127.0.0.1:{rec.address[1]}"
    assert sent["replayed"].startswith(f"{scan.name} (vbs on ")
    # The rate from the scan's own frames: 2500 per thread (the highest frame number of a
    # whole VDIF second + 1) times two threads.
    assert (sent["frames_per_second"], sent["threads"]) == (FPS, THREADS)
    assert (sent["frame_rate"], sent["rate_source"]) == (RATE, "frame-number wrap")
    assert sent["frames_sent"] == scan.frames and sent["bytes_sent"] == len(scan.data)
    assert sent["achieved_frame_rate"] == pytest.approx(sent["frames_sent"] / sent["duration_s"])
    assert sent["achieved_frame_rate"] == pytest.approx(RATE, rel=0.01), sent
    assert sent["duration_s"] == pytest.approx(scan.frames / RATE, rel=0.01)
    # What the recorder received, over time, came at that rate too.
    assert received_rate(samples, scan.frames) == pytest.approx(RATE, rel=0.01)
    # Byte for byte, in the recorded order (less what the kernel dropped, where it did).
    assert summary.frames_received == scan.frames - d.kernel_drops
    if d.kernel_drops == 0:
        assert out.read_bytes() == scan.data
    else:
        assert len(left_out(frames_of(scan.data, FS), frames_of(out, FS))) == d.kernel_drops


@pytest.fixture
def tcp_reader() -> Iterator[tuple[int, dict[str, bytes]]]:
    """A TCP port on 127.0.0.1 and what one connection to it brought, once it closed
    (`got["data"]`): a plain socket reader, bounded in time."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(TIMEOUT)
    got: dict[str, bytes] = {}

    def read() -> None:
        conn, _ = server.accept()
        conn.settimeout(TIMEOUT)
        parts = []
        with conn:
            while chunk := conn.recv(1 << 20):
                parts.append(chunk)
        got["data"] = b"".join(parts)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    try:
        yield server.getsockname()[1], got
        t.join(TIMEOUT)
        assert not t.is_alive(), "the connection was not closed"
    finally:
        server.close()


def test_tcp_carries_the_file_byte_for_byte(scan: Scan, tcp_reader: tuple[int, dict[str, bytes]]) -> None:
    port, got = tcp_reader
    # Faster than recorded: 50 MB/s of frames, 4x the scan's own rate.
    sent = vdifrec.send(f"tcp://127.0.0.1:{port}", file=scan.file, rate="50MB/s")
    assert sent["to"] == f"tcp://127.0.0.1:{port}" and sent["replayed"] == str(scan.file)
    assert (sent["frame_rate"], sent["rate_source"]) == (pytest.approx(50e6 / FS), "rate")
    assert sent["frames_sent"] == scan.frames and sent["bytes_sent"] == len(scan.data)
    time_limit = time.monotonic() + TIMEOUT
    while "data" not in got and time.monotonic() < time_limit:
        time.sleep(0.01)
    assert got.get("data") == scan.data


def test_udps_replay_loses_no_packet_sequence_number(scan: Scan, tmp_path: Path) -> None:
    out = tmp_path / "udps.vdif"
    rec = vdifrec.Recorder(port=0, ring=ring_holding(scan.frames, FS), frame_size=FS, offset=8, psn=True, path=out)
    rec.start()
    assert rec.address is not None
    try:
        sent = vdifrec.send(f"udps://127.0.0.1:{rec.address[1]}", scan=scan.name, disks=scan.disks)
        d = delivered(rec.address, sent["frames_sent"], lambda: rec.stats().datagrams)
    finally:
        summary = rec.stop()
    assert sent["to"].startswith("udps://") and sent["frames_sent"] == scan.frames
    assert sent["bytes_sent"] == scan.frames * (8 + FS)
    assert summary.psn_out_of_order == 0 and summary.psn_lost <= d.kernel_drops
    assert summary.frames_received == scan.frames - d.kernel_drops
    if d.kernel_drops == 0:
        assert summary.psn_lost == 0 and out.read_bytes() == scan.data


def test_a_refused_connection_and_a_bad_scheme_name_to(tcp_reader: tuple[int, dict[str, bytes]]) -> None:
    # (The reader's port is in use by it: bind another and let it go, so nobody listens there.)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(vdifrec.SenderError, match=rf"^to: nobody accepts a connection at tcp://127.0.0.1:{free}"):
        vdifrec.Sender(f"tcp://127.0.0.1:{free}", frames=10, fps=1000)
    with pytest.raises(vdifrec.ArgumentError, match=r"^to: unknown scheme .*udp://.*udps://.*tcp://"):
        vdifrec.Sender("sctp://127.0.0.1:9", frames=10)
    # The generated signal goes over TCP too.
    port, got = tcp_reader
    sent = vdifrec.send(f"tcp://127.0.0.1:{port}", frames=100, fps=1000, frame_size=FS, **START)
    assert sent["rate_source"] == "signal" and sent["frames_sent"] == 100
    time_limit = time.monotonic() + TIMEOUT
    while "data" not in got and time.monotonic() < time_limit:
        time.sleep(0.01)
    data = got.get("data", b"")
    assert len(data) == 100 * FS and data[:32] == vdifrec.Header.from_bytes(data[:32]).to_bytes()
