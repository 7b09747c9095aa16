"""Reliability under faults and bad input: nothing crashes, nothing accepted is lost.

Bad input of every kind while recording, a disk that fills, a disk that is slow, signals,
and running without root. Mounting a small file system needs privileges: those tests are
skipped, with the reason, where the machine does not allow it.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import vdifrec

FS = 8224
START = dict(ref_epoch=53, start_second=5000)


@contextlib.contextmanager
def small_filesystem(mib: int) -> Iterator[Path]:
    """A tmpfs of `mib` MiB made for the test, or a skip saying why it cannot be made."""
    mnt = Path(tempfile.mkdtemp(prefix="vdifrec-small-"))
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        mnt.rmdir()
        pytest.skip(f"cannot mount a small file system here ({r.stderr.strip() or 'mount failed'}); "
                    "the disk-full path is still covered by the disk_limit test")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        mnt.rmdir()


def wait_until(cond, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


def frame(thread: int = 0, seconds: int = 5000, frame_nr: int = 0, *, invalid: bool = False,
          ref_epoch: int = 53, legacy: bool = False, frame_length: int | None = None, payload: int = 0x55) -> bytes:
    h = vdifrec.Header(edv=None if legacy else 0, frame_size=FS, nchan=4, bits=2, seconds=seconds,
                       ref_epoch=ref_epoch, frame_nr=frame_nr, thread_id=thread, invalid=invalid)
    if frame_length is not None:
        h["frame_length"] = frame_length // 8
    head = h.to_bytes()
    return head + bytes([payload]) * (FS - len(head))


# -- the bad-input matrix --------------------------------------------------------------------


def test_bad_input_matrix_is_counted_and_never_written(tmp_path: Path) -> None:
    out, sent_file = tmp_path / "bad.vdif", tmp_path / "sent.vdif"
    rec = vdifrec.Recorder(port=0, ring="64MiB", path=out, frame_size=FS, fps=2000)
    rec.start()
    assert rec.address is not None
    # The reference stream (at a modest rate), into which everything else is mixed.
    main = vdifrec.Sender(rec.address, duration=4, fps=2000, record_sent=sent_file, **START)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    rng = random.Random(4)
    expect = {"too_short": 0, "too_long": 0, "bad_frame_length": 0, "legacy_mismatch": 0, "format_mismatch": 0}

    def bad(data: bytes, kind: str) -> None:
        s.sendto(data, rec.address)
        expect[kind] += 1
        time.sleep(0.0002)  # paced: the kernel must not drop them, so counts are exact

    time.sleep(0.3)
    # Every size 0..2100, then sizes up to the largest UDP payload; random content.
    sizes = list(range(0, 2101)) + list(range(2101, 65508, 257)) + [FS - 1, FS + 1, 65507]
    for n in sizes:
        data = rng.randbytes(n)
        kind = "too_short" if n < FS else "too_long"
        if n == FS:
            continue
        bad(data, kind)
    for _ in range(20):  # random bytes of exactly the frame size
        data = rng.randbytes(FS)
        # The legacy bit (word 0, bit 30) is checked first, then the frame length.
        bad(data, "legacy_mismatch" if data[3] & 0x40 else "bad_frame_length")
    for _ in range(10):  # VDIF with a wrong frame-length field
        bad(frame(frame_length=FS - 8), "bad_frame_length")
    for _ in range(10):  # legacy headers in a stream of 32-byte headers
        bad(frame(legacy=True), "legacy_mismatch")
    h = vdifrec.Header(frame_size=FS, nchan=8, bits=2, seconds=5000, ref_epoch=53).to_bytes()
    for _ in range(10):  # another channel layout
        bad(h + bytes(FS - 32), "format_mismatch")
    # A port-scan-like burst: empty datagrams from many source ports.
    for _ in range(200):
        scan = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        scan.sendto(b"", rec.address)
        scan.close()
        expect["too_short"] += 1
    # Valid frames that are part of the stream, in their own counters:
    for k in range(30):  # the invalid flag set, on thread 7
        s.sendto(frame(thread=7, seconds=5001, frame_nr=k, invalid=True), rec.address)
        time.sleep(0.001)
    for k in range(40):  # a second sender, thread 9
        s.sendto(frame(thread=9, seconds=5001, frame_nr=100 + k), rec.address)
        time.sleep(0.001)
    strays = [frame(seconds=9000), frame(seconds=100), frame(seconds=5001, ref_epoch=52), frame(seconds=2**30 - 1)]
    for f in strays:  # seconds jumping forward and back, a changed reference epoch, on thread 0
        s.sendto(f, rec.address)
        time.sleep(0.02)
    s.close()
    sent = main.wait(30)
    assert sent is not None
    assert wait_until(lambda: rec.stats().frames_received >= sent["frames_sent"] + 30 + 40 + len(strays))
    summary = rec.stop()
    assert summary.kernel_drops == 0  # else the exact counts below could not hold
    assert summary.datagrams_malformed_by_kind == expect | {"bad_sync": 0, "fragmented": 0}
    assert summary.datagrams_malformed == sum(expect.values())
    extra = 30 + 40 + len(strays)
    assert summary.frames_received == sent["frames_sent"] + extra
    assert summary.frames_invalid == 30
    assert summary.frames_out_of_window == len(strays)
    assert summary.frames_lost == 0 and summary.time_jumps == 0
    per_thread = {t["thread"]: t for t in summary.threads}
    assert per_thread[7]["received"] == 30 and per_thread[7]["invalid"] == 30
    assert per_thread[9]["received"] == 40
    assert per_thread[0]["received"] == sent["frames_sent"] + len(strays)
    assert summary.ok and summary.bytes_written == out.stat().st_size == summary.frames_received * FS
    # The file holds the stream and the valid extras, and nothing malformed.
    frames = np.fromfile(out, np.uint8).reshape(-1, FS)
    words = frames[:, :16].view("<u4")
    assert ((words[:, 2] & 0xFFFFFF) == FS // 8).all() and ((words[:, 0] >> 30) & 1 == 0).all()
    main_rows = frames[((words[:, 3] >> 16) & 0x3FF) == 0]
    sent_rows = np.fromfile(sent_file, np.uint8).reshape(-1, FS)
    stray_heads = {f[:32] for f in strays}
    kept = np.array([bytes(r[:32]) not in stray_heads for r in main_rows])
    assert np.array_equal(main_rows[kept], sent_rows)


# -- disks that fill or crawl ----------------------------------------------------------------


def check_prefix(path: Path, sent: Path) -> int:
    data = path.read_bytes()
    assert len(data) % FS == 0
    assert data == sent.read_bytes()[: len(data)]
    assert vdifrec.check(path)["clean"]
    return len(data) // FS


def test_disk_full_stops_cleanly_on_frame_boundaries(tmp_path: Path) -> None:
    sent_file = tmp_path / "sent.vdif"
    with small_filesystem(16) as mnt:
        out = mnt / "full.vdif"
        rec = vdifrec.Recorder(port=0, ring="64MiB", path=out)
        rec.start()
        assert rec.address is not None
        sender = vdifrec.Sender(rec.address, frames=4000, fps=4000, record_sent=sent_file, **START)
        assert wait_until(lambda: rec.finished)
        summary = rec.stop()
        sender.stop()
        assert not summary.ok
        assert summary.error is not None and "No space left on device" in summary.error
        assert summary.invariant_holds
        assert summary.bytes_written == out.stat().st_size == sum(f.bytes for f in summary.files)
        assert summary.bytes_buffered == summary.bytes_written + summary.bytes_dropped_disk
        assert summary.bytes_dropped_disk > 0
        assert 0 < check_prefix(out, sent_file) <= 16 * 2**20 // FS


def test_disk_full_from_the_command_line_exits_non_zero(tmp_path: Path) -> None:
    with small_filesystem(8) as mnt:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vdifrec.cli", "record", "--port", "0", "--ring", "32MiB",
             "--out", str(mnt / "cli.vdif"), "--duration", "30"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert proc.stdout is not None
        port = None
        for _ in range(20):
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", proc.stdout.readline())
            if m:
                port = int(m.group(1))
                break
        assert port is not None
        vdifrec.Sender(("127.0.0.1", port), frames=3000, fps=3000, **START).wait(30)
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 1
        assert "not everything buffered reached the disk" in stderr and "No space left" in stderr
        m = re.search(r"Bytes written: (\d+)  dropped on the way to disk: (\d+)", stdout)
        assert m and int(m.group(1)) == (mnt / "cli.vdif").stat().st_size and int(m.group(2)) > 0
        assert "Invariant (buffered = written + dropped = sum of file sizes): holds" in stdout


def test_disk_limit_test_aid_gives_the_same_accounting(tmp_path: Path) -> None:
    # A full disk simulated in the writer (where mounting is not allowed, this covers the path).
    out, sent_file = tmp_path / "lim.vdif", tmp_path / "sent.vdif"
    rec = vdifrec.Recorder(port=0, ring="64MiB", path=out, disk_limit=10_000_000, direct=False)
    rec.start()
    assert rec.address is not None
    vdifrec.Sender(rec.address, frames=3000, fps=5000, record_sent=sent_file, **START).wait(30)
    assert wait_until(lambda: rec.finished)
    s = rec.stop()
    assert not s.ok and s.invariant_holds and "No space left" in (s.error or "")
    assert s.bytes_written == 10_000_000 // FS * FS == out.stat().st_size
    check_prefix(out, sent_file)


def test_slow_disk_overflows_exactly_and_recovers(tmp_path: Path) -> None:
    out, sent_file = tmp_path / "slow.vdif", tmp_path / "sent.vdif"
    # 4 MiB of ring (384 frames) and a disk of 2 MB/s against a 8 MB/s burst.
    rec = vdifrec.Recorder(port=0, ring="4MiB", path=out, throttle="2MB", fps=1000)
    rec.start()
    assert rec.address is not None
    sent = vdifrec.send(rec.address, frames=2000, fps=1000, record_sent=sent_file, **START)
    assert wait_until(lambda: rec.stats().frames_received + rec.stats().ring_overflows >= 2000)
    during = rec.stats()
    assert during.ring_overflows > 0
    # The disk catches up; then the stream goes on and is recorded whole again.
    assert wait_until(lambda: rec.stats().ring_frames == 0, timeout=60)
    vdifrec.send(rec.address, frames=300, fps=1000, ref_epoch=53, start_second=5002)
    assert wait_until(lambda: rec.stats().frames_received + rec.stats().ring_overflows >= 2300)
    s = rec.stop()
    assert s.kernel_drops == 0
    assert s.frames_received + s.ring_overflows == sent["frames_sent"] + 300
    assert s.frames_lost == 0  # overflows are not network loss
    assert s.ok and s.bytes_written == s.frames_received * FS == out.stat().st_size
    assert s.seconds[-1].ring_overflow == 0 and s.seconds[-1].received == 300
    # Every accepted frame is on disk, intact: the file is the sent stream less the overflows.
    report = vdifrec.check(out)
    assert report["totals"]["duplicates"] == 0 and report["corrupt_bytes"] == 0
    sent_rows = {bytes(r) for r in np.fromfile(sent_file, np.uint8).reshape(-1, FS)}
    first_part = np.fromfile(out, np.uint8).reshape(-1, FS)[: s.frames_received - 300]
    assert all(bytes(r) in sent_rows for r in first_part)


# -- signals ---------------------------------------------------------------------------------


def start_record(*args: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-m", "vdifrec.cli", "record", "--port", "0", "--ring", "32MiB", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for _ in range(20):
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", proc.stdout.readline())
        if m:
            return proc, int(m.group(1))
    proc.kill()
    raise AssertionError("no listening line")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_sigint_and_sigterm_drain_and_summarise(tmp_path: Path, sig: int) -> None:
    out, sent_file = tmp_path / "sig.vdif", tmp_path / "sent.vdif"
    proc, port = start_record("--out", str(out))
    sender = vdifrec.Sender(("127.0.0.1", port), duration=20, fps=3000, record_sent=sent_file, **START)
    time.sleep(1.5)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=30)
    sender.stop()
    assert proc.returncode == 0, stderr
    got = int(re.search(r"Stream Good Packet: (\d+)", stdout).group(1))  # type: ignore[union-attr]
    assert got > 0 and out.stat().st_size == got * FS
    assert check_prefix(out, sent_file) == got


def test_after_sigkill_the_file_is_a_valid_prefix(tmp_path: Path) -> None:
    out, sent_file = tmp_path / "kill.vdif", tmp_path / "sent.vdif"
    proc, port = start_record("--out", str(out), "--frame-size", str(FS))
    sender = vdifrec.Sender(("127.0.0.1", port), duration=20, fps=5000, record_sent=sent_file, **START)
    assert wait_until(lambda: out.exists() and out.stat().st_size > 2_000_000)
    proc.kill()
    proc.communicate(timeout=30)
    sender.stop()
    frames = check_prefix(out, sent_file)
    assert frames % 128 == 0  # whole O_DIRECT runs, no partial frame


# -- security --------------------------------------------------------------------------------


def test_file_names_come_from_numbers_only(tmp_path: Path) -> None:
    # The most extreme time a header can carry still names a file inside the directory.
    rec = vdifrec.Recorder(port=0, ring="4MiB", directory=tmp_path, prefix="scan", frame_size=FS)
    rec.start()
    assert rec.address is not None
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for k in range(200):
        s.sendto(frame(seconds=2**30 - 1, ref_epoch=63, frame_nr=k), rec.address)
    s.close()
    assert wait_until(lambda: rec.stats().frames_received == 200)
    summary = rec.stop()
    [f] = summary.files
    assert Path(f.path).parent == tmp_path
    assert re.fullmatch(r"scan_\d{4}y\d{3}d\d\dh\d\dm\d\ds\.vdif", Path(f.path).name)
    with pytest.raises(ValueError, match="prefix"):
        vdifrec.Recorder(port=0, directory=tmp_path, prefix="../elsewhere").start()


def test_listening_endpoints_default_to_localhost() -> None:
    with vdifrec.Recorder(port=0, ring="4MiB", status_listen="0") as rec:
        assert rec.address is not None and rec.address[0] == "127.0.0.1"
        assert rec.status_address is not None and rec.status_address[0] == "127.0.0.1"


def test_recording_without_privileges(tmp_path: Path) -> None:
    """The udp backend records with no capability at all (what an ordinary user has): the
    socket buffer and mlock are refused, said so in the notes, and nothing else changes."""
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: every other test runs that way")
    if subprocess.run(["setpriv", "--version"], capture_output=True).returncode != 0:
        pytest.skip("setpriv (util-linux) is not available to drop the capabilities")
    out = tmp_path / "user.vdif"
    script = (
        "import re, vdifrec\n"
        "caps = re.search(r'CapEff:\\s*(\\S+)', open('/proc/self/status').read()).group(1)\n"
        f"rec = vdifrec.Recorder(port=0, ring='16MiB', path={str(out)!r})\n"
        "rec.start()\n"
        "print('listening on %s:%d' % rec.address, flush=True)\n"
        "rec.wait(frames=1000, duration=20)\n"
        "s = rec.stop()\n"
        "print('caps', caps, flush=True)\n"
        "for n in s.notes: print('note', n, flush=True)\n"
        "print('summary', s.frames_received, s.ok, flush=True)\n"
    )
    # No capabilities, and root gets none back on exec (securebits noroot).
    cmd = ["setpriv", "--securebits", "+noroot,+noroot_locked", "--inh-caps=-all", "--bounding-set=-all",
           "prlimit", "--memlock=65536", sys.executable, "-c", script]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        _, err = proc.communicate()
        pytest.skip(f"cannot drop the capabilities here: {err.strip()[-200:]}")
    port = int(line.strip().rsplit(":", 1)[1])
    vdifrec.send(("127.0.0.1", port), frames=1000, fps=5000, **START)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "caps 0000000000000000" in stdout
    assert "mlock: not permitted" in stdout and "raise net.core.rmem_max" in stdout
    assert "summary 1000 True" in stdout
    assert out.stat().st_size == 1000 * FS
