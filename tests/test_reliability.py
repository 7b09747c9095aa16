"""Reliability under faults and bad input: nothing crashes, nothing accepted is lost.

Bad input of every kind while recording, a disk that fills, a disk that is slow, signals,
and running without root. Mounting a small file system needs privileges: those tests are
skipped, with the reason, where the machine does not allow it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import mmap
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
from conftest import delivered, frames_of, left_out, loss_by_second, read_until, udp_receive_buffer_errors, vdif_keys

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


@pytest.mark.slow
def test_bad_input_matrix_is_counted_and_never_written(tmp_path: Path) -> None:
    out, sent_file = tmp_path / "bad.vdif", tmp_path / "sent.vdif"
    # The ring holds the whole stream: however slow the disk, nothing overflows it.
    rec = vdifrec.Recorder(port=0, ring="128MiB", path=out, frame_size=FS, fps=2000)
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
        time.sleep(0.0002)  # paced, so that the kernel seldom has to drop one (where it does, it is counted)

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
    extra = 30 + 40 + len(strays)
    d = delivered(rec.address, sent["frames_sent"] + sum(expect.values()) + extra, lambda: rec.stats().datagrams)
    summary = rec.stop()
    assert summary.ok and summary.bytes_written == out.stat().st_size == summary.frames_received * FS
    assert summary.ring_overflows == 0
    # The file holds the stream and the valid extras, and nothing malformed.
    frames = frames_of(out)
    words = np.ascontiguousarray(frames[:, :16]).view("<u4")
    assert ((words[:, 2] & 0xFFFFFF) == FS // 8).all() and ((words[:, 0] >> 30) & 1 == 0).all()
    thread = vdif_keys(frames)[0]
    stray_heads = {f[:32] for f in strays}
    is_stray = np.array([bytes(r[:32]) in stray_heads for r in frames], dtype=bool)
    main_rows = frames[(thread == 0) & ~is_stray]
    # Which datagrams the kernel dropped (a full socket buffer; none where it is big enough):
    # frames of the stream, valid extras, or (the rest of its count) malformed datagrams.
    dropped_main = len(left_out(frames_of(sent_file), main_rows))
    got7, got9, got_strays = int((thread == 7).sum()), int((thread == 9).sum()), int(is_stray.sum())
    dropped_malformed = d.kernel_drops - dropped_main - (30 - got7) - (40 - got9) - (len(strays) - got_strays)
    assert summary.kernel_drops == d.kernel_drops and dropped_malformed >= 0
    # Every malformed datagram taken is counted by its kind; with no drop, exactly as sent.
    expect["too_short"] += d.flushes
    kinds = summary.datagrams_malformed_by_kind
    assert set(kinds) == set(expect) | {"bad_sync", "fragmented"} and kinds["bad_sync"] == kinds["fragmented"] == 0
    assert all(kinds[k] <= expect[k] for k in expect) and sum(expect[k] - kinds[k] for k in expect) == dropped_malformed
    assert summary.datagrams_malformed == sum(expect.values()) - dropped_malformed
    assert summary.frames_received == len(frames) == sent["frames_sent"] - dropped_main + got7 + got9 + got_strays
    assert summary.datagrams == summary.frames_received + summary.datagrams_malformed
    assert summary.frames_invalid == got7
    assert summary.frames_out_of_window == got_strays
    # Loss: only the gaps the kernel's drops left (none where it dropped none).
    assert summary.frames_lost == sum(loss_by_second(frames[~is_stray], 2000).values())
    assert summary.time_jumps == 0
    per_thread = {t["thread"]: t for t in summary.threads}
    assert per_thread[7]["received"] == per_thread[7]["invalid"] == got7
    assert per_thread[9]["received"] == got9
    assert per_thread[0]["received"] == len(main_rows) + got_strays


# -- disks that fill or crawl ----------------------------------------------------------------


def check_prefix(path: Path, sent: Path) -> tuple[int, int]:
    """The file holds whole frames: the frames sent, in order, up to some frame, less those the
    kernel dropped before it (a full socket buffer; exactly a prefix where it dropped none).
    Returns (frames in the file, frames sent before its last frame that it lacks)."""
    recorded, sent_rows = frames_of(path), frames_of(sent)
    missing = np.array(left_out(sent_rows, recorded), dtype=np.int64)
    kept = np.setdiff1d(np.arange(len(sent_rows)), missing)
    skipped = int((missing < kept[-1]).sum()) if len(kept) else 0
    # The gaps inside the file are what `check` finds lost.
    inside = int(((missing > kept[0]) & (missing < kept[-1])).sum()) if len(kept) else 0
    report = vdifrec.check(path)
    assert report["totals"]["lost"] == inside and report["corrupt_bytes"] == 0
    return len(recorded), skipped


def test_disk_full_stops_cleanly_on_frame_boundaries(tmp_path: Path) -> None:
    sent_file = tmp_path / "sent.vdif"
    with small_filesystem(16) as mnt:
        out = mnt / "full.vdif"
        rec = vdifrec.Recorder(port=0, ring="64MiB", path=out)
        rec.start()
        assert rec.address is not None
        # The stream goes on until the disk is full (however much of it the kernel drops).
        sender = vdifrec.Sender(rec.address, duration=120, fps=4000, record_sent=sent_file, **START)
        try:
            assert wait_until(lambda: rec.finished, timeout=60), "the recording did not end on the full disk"
        finally:
            sender.stop()
        summary = rec.stop()
        assert not summary.ok
        assert summary.error is not None and "No space left on device" in summary.error
        assert summary.invariant_holds
        assert summary.bytes_written == out.stat().st_size == sum(f.bytes for f in summary.files)
        assert summary.bytes_buffered == summary.bytes_written + summary.bytes_dropped_disk
        assert summary.bytes_dropped_disk > 0
        frames, skipped = check_prefix(out, sent_file)
        assert 0 < frames <= 16 * 2**20 // FS
        assert skipped <= summary.kernel_drops  # frames the kernel dropped are counted


@pytest.mark.slow
def test_disk_full_from_the_command_line_exits_non_zero(tmp_path: Path) -> None:
    with small_filesystem(8) as mnt:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vdifrec.cli", "record", "--port", "0", "--ring", "32MiB",
             "--out", str(mnt / "cli.vdif"), "--duration", "60"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        m, head = read_until(proc, r"listening on 127\.0\.0\.1:(\d+)")
        # The stream goes on until the recorder has filled the disk and exited.
        sender = vdifrec.Sender(("127.0.0.1", int(m.group(1))), duration=120, fps=3000, **START)
        try:
            stdout, stderr = proc.communicate(timeout=90)
        finally:
            sender.stop()
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
        stdout = head + stdout
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
    # The stream goes on until the limit is reached (however much of it the kernel drops).
    sender = vdifrec.Sender(rec.address, duration=120, fps=5000, record_sent=sent_file, **START)
    try:
        assert wait_until(lambda: rec.finished, timeout=60), "the recording did not end at the disk limit"
    finally:
        sender.stop()
    s = rec.stop()
    assert not s.ok and s.invariant_holds and "No space left" in (s.error or "")
    assert s.bytes_written == 10_000_000 // FS * FS == out.stat().st_size
    _, skipped = check_prefix(out, sent_file)
    assert skipped <= s.kernel_drops


@pytest.mark.slow
def test_slow_disk_overflows_exactly_and_recovers(tmp_path: Path) -> None:
    out, sent_file = tmp_path / "slow.vdif", tmp_path / "sent.vdif"
    # 4 MiB of ring (384 frames) and a disk of 2 MB/s against a 8 MB/s burst.
    rec = vdifrec.Recorder(port=0, ring="4MiB", frame_size=8224, path=out, throttle="2MB", fps=1000)
    rec.start()
    assert rec.address is not None
    sent = vdifrec.send(rec.address, frames=2000, fps=1000, record_sent=sent_file, **START)
    assert sent["frames_sent"] == 2000
    d1 = delivered(rec.address, 2000, lambda: rec.stats().datagrams)
    during = rec.stats()
    assert during.ring_overflows > 0
    # The disk catches up: all but a last partial run of 128 frames (the writer waits for whole
    # runs; where the stream stopped decides how many are left) are written. Then the stream goes
    # on, less than the ring has room for, and is recorded whole again.
    assert wait_until(lambda: rec.stats().ring_frames < 128, timeout=60)
    vdifrec.send(rec.address, frames=250, fps=1000, ref_epoch=53, start_second=5002)
    d2 = delivered(rec.address, 2250 + d1.flushes, lambda: rec.stats().datagrams)
    s = rec.stop()
    # Every frame sent was buffered, dropped for a full ring, or dropped by the kernel (a full
    # socket buffer: none where the host grants a big enough one); each drop counted by cause.
    assert s.kernel_drops == d2.kernel_drops
    assert s.datagrams_malformed == d1.flushes + d2.flushes
    assert s.frames_received + s.ring_overflows == 2250 - d2.kernel_drops
    assert s.frames_lost <= s.kernel_drops and s.frames_lost_network == 0  # overflows are not network loss
    assert s.ok and s.bytes_written == s.frames_received * FS == out.stat().st_size
    assert s.seconds[-1].ring_overflow == 0 and s.seconds[-1].received == 250 - (d2.kernel_drops - d1.kernel_drops)
    # Every accepted frame is on disk, intact: the file is the sent stream less the overflows.
    report = vdifrec.check(out)
    assert report["totals"]["duplicates"] == 0 and report["corrupt_bytes"] == 0
    sent_rows = {bytes(r) for r in frames_of(sent_file)}
    first_part = frames_of(out)[: s.frames_received - s.seconds[-1].received]
    assert all(bytes(r) in sent_rows for r in first_part)


# -- signals ---------------------------------------------------------------------------------


def start_record(*args: str) -> tuple[subprocess.Popen[str], int]:
    # A ring of 15,872 frames: seconds of these streams, should the disk be slow.
    proc = subprocess.Popen([sys.executable, "-m", "vdifrec.cli", "record", "--port", "0", "--ring", "128MiB", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    m, _ = read_until(proc, r"listening on 127\.0\.0\.1:(\d+)")
    return proc, int(m.group(1))


@pytest.mark.slow
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
    kernel = int(re.search(r"of which kernel drops: (\d+)", stdout).group(1))  # type: ignore[union-attr]
    ring = int(re.search(r"Ring overflows: (\d+)", stdout).group(1))  # type: ignore[union-attr]
    assert got > 0 and out.stat().st_size == got * FS
    # Every frame buffered reached the file; the stream went on, so each frame missing before
    # the last one was dropped by the kernel (a full socket buffer) or for a full ring (a slow
    # disk), and counted: none where the host keeps up. (The count may hold more: the kernel's
    # drops after the last frame taken, as the stream went on while the recorder stopped.)
    frames, skipped = check_prefix(out, sent_file)
    assert frames == got and skipped <= kernel + ring, (skipped, kernel, ring)


def opened_with_o_direct(pid: int, path: Path) -> bool | None:
    """Whether process `pid` has `path` open with O_DIRECT, from its /proc fdinfo flags (None
    where it does not have it open)."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) != str(path):
                continue
            flags = re.search(r"^flags:\s*([0-7]+)$", Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text(), re.M)
        except OSError:
            continue
        if flags:
            return bool(int(flags.group(1), 8) & os.O_DIRECT)
    return None


def test_after_sigkill_the_file_is_a_valid_prefix(tmp_path: Path) -> None:
    out, sent_file = tmp_path / "kill.vdif", tmp_path / "sent.vdif"
    proc, port = start_record("--out", str(out), "--frame-size", str(FS))
    errors_before = udp_receive_buffer_errors()
    sender = vdifrec.Sender(("127.0.0.1", port), duration=60, fps=5000, record_sent=sent_file, **START)
    try:
        assert wait_until(lambda: out.exists() and out.stat().st_size > 2_000_000, timeout=40)
        # How the recorder writes, as the kernel has the file open for it.
        direct = opened_with_o_direct(proc.pid, out)
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        sender.stop()
    assert direct is not None, "the recorder did not have its file open"
    size = out.stat().st_size
    if direct:
        # O_DIRECT writes whole aligned runs of 128 frames: killed, the file ends on one.
        assert size % (128 * FS) == 0, size
    else:
        # A buffered write cut short by the kill may leave part of a frame (a short write ends
        # on a page): that part is the start of a frame sent, and the whole frames before it
        # are checked below.
        whole = size // FS * FS
        tail = out.read_bytes()[whole:]
        if tail:
            assert any(f.tobytes().startswith(tail) for f in frames_of(sent_file)), "the partial frame was not sent"
            os.truncate(out, whole)
    frames, skipped = check_prefix(out, sent_file)
    assert frames >= 2_000_000 // FS  # what was on disk before the kill stays
    # Frames missing before the end were dropped by the kernel (the socket is gone with the
    # process, so the bound is every full-buffer drop on this host since the start).
    assert skipped <= udp_receive_buffer_errors() - errors_before


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
    d = delivered(rec.address, 200, lambda: rec.stats().datagrams)
    summary = rec.stop()
    assert summary.frames_received == 200 - d.kernel_drops and summary.kernel_drops == d.kernel_drops
    [f] = summary.files
    assert Path(f.path).parent == tmp_path
    assert re.fullmatch(r"scan_\d{4}y\d{3}d\d\dh\d\dm\d\ds\.vdif", Path(f.path).name)
    with pytest.raises(ValueError, match="prefix"):
        vdifrec.Recorder(port=0, directory=tmp_path, prefix="../elsewhere").start()


def test_listening_endpoints_default_to_localhost() -> None:
    with vdifrec.Recorder(port=0, ring="4MiB", frame_size=8224, status_listen="0") as rec:
        assert rec.address is not None and rec.address[0] == "127.0.0.1"
        assert rec.status_address is not None and rec.status_address[0] == "127.0.0.1"


# -- what the host grants --------------------------------------------------------------------


#: SO_RCVBUFFORCE (Linux; Python's socket module does not name it).
SO_RCVBUFFORCE = 33


def probe_socket_buffer(asked: int) -> tuple[bool, int]:
    """What the kernel grants a socket here that asks for `asked` bytes as the recorder does:
    SO_RCVBUFFORCE (CAP_NET_ADMIN, held against the network namespace's owner: a capability
    in one's own user namespace may not be enough), else SO_RCVBUF (net.core.rmem_max caps it).
    Whether forcing worked, and the bytes granted for payload (half of what the kernel reports)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, asked)
            forced = True
        except OSError:
            forced = False
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, asked)
        return forced, probe.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2


def probe_mlock(size: int) -> bool:
    """Whether the kernel lets this process lock `size` more bytes (CAP_IPC_LOCK, or room in
    RLIMIT_MEMLOCK), tried on an anonymous mapping of that size and given back at once."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mlock.argtypes = libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    with mmap.mmap(-1, size) as m:
        # (The ctypes object that gives the address goes at once: the mapping can then close.)
        address = ctypes.addressof(ctypes.c_char.from_buffer(m))
        if libc.mlock(address, size) != 0:
            return False
        libc.munlock(address, size)
        return True


def test_notes_say_what_this_host_granted(tmp_path: Path) -> None:
    """The socket buffer, huge pages, mlock, pinning and O_DIRECT are each used as far as this
    host and this user allow (asked here of the kernel, by trying each the way the recorder
    does), a refusal is a note and never an error, and the notes say what was granted."""
    out, asked, ring = tmp_path / "notes.vdif", 256 << 20, 32 << 20
    forced, granted = probe_socket_buffer(asked)
    may_lock = probe_mlock(ring)
    cpus = sorted(os.sched_getaffinity(0))
    rec = vdifrec.Recorder(port=0, ring=ring, path=out, rcvbuf=asked)
    rec.start()
    assert rec.address is not None
    vdifrec.send(rec.address, frames=300, fps=10_000, **START)
    time.sleep(0.1)
    assert not rec.finished, rec.stop().error
    d = delivered(rec.address, 300, lambda: rec.stats().datagrams)
    s = rec.stop()
    # It records whatever was granted.
    assert s.ok and s.frames_received == 300 - d.kernel_drops and s.bytes_written == out.stat().st_size
    notes = "\n".join(s.notes)
    # The socket buffer: what was asked, where the kernel lets it be forced; else what
    # net.core.rmem_max allows, and the advice to raise it exactly when that is less.
    if forced:
        assert granted >= asked and f"socket: SO_RCVBUFFORCE granted {granted} bytes" in notes
    else:
        assert f"socket: SO_RCVBUF granted {granted} " in notes
        assert ("raise net.core.rmem_max" in notes) == (granted < asked)
    # Huge pages only with a known frame size (here it is learned), whatever is free: a ring
    # laid out before the frame size is known could not be cut into whole huge pages.
    assert "huge pages: used only when the frame size is given" in notes and "using 4 KiB pages" in notes
    # mlock where the kernel lets this process lock the ring (CAP_IPC_LOCK, or room left in
    # RLIMIT_MEMLOCK), as the probe found.
    if may_lock:
        assert "mlock: yes" in notes
    else:
        assert "mlock: not permitted" in notes
    # With four CPUs or more, the capture and the writer take the last two this process may use;
    # with fewer, the scheduler places them.
    if len(cpus) >= 4:
        assert f"capture thread: pinned to cpu {cpus[-1]}" in notes and f"writer thread: pinned to cpu {cpus[-2]}" in notes
    else:
        assert "capture thread:" not in notes and "writer thread:" not in notes
    # O_DIRECT where the file system allows it.
    try:
        os.close(os.open(tmp_path / "probe", os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600))
        assert "disk: O_DIRECT writes" in notes
    except OSError:
        assert "does not allow O_DIRECT; buffered writes" in notes


def test_a_cpu_this_process_may_not_use_is_a_note(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    outside = cpus[-1] + 1  # beyond this process's CPUs (or beyond this machine's)
    with vdifrec.Recorder(port=0, ring="4MiB", frame_size=8224, capture_cpu=outside, writer_cpu=cpus[0], path=tmp_path / "p.vdif") as rec:
        assert rec.address is not None
        vdifrec.send(rec.address, frames=10, fps=1000, **START)
        delivered(rec.address, 10, lambda: rec.stats().datagrams)
    notes = rec.stop().notes
    assert f"capture thread: cpu {outside} is not available to this process (allowed: {','.join(map(str, cpus))}); not pinned" in notes
    assert f"writer thread: pinned to cpu {cpus[0]}" in notes


def test_recording_without_privileges(tmp_path: Path) -> None:
    """The udp backend records with no capability at all (what an ordinary user has): the
    socket buffer is what net.core.rmem_max allows and mlock is refused, the notes say so, and
    every frame sent is recorded or counted as a kernel drop."""
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: every other test runs that way")
    if subprocess.run(["setpriv", "--version"], capture_output=True).returncode != 0:
        pytest.skip("setpriv (util-linux) is not available to drop the capabilities")
    out, sent_file = tmp_path / "user.vdif", tmp_path / "sent.vdif"
    asked = 256 << 20
    # The child records until told how many datagrams reached it, then prints its summary.
    script = (
        "import json, re, sys, time, vdifrec\n"
        "caps = re.search(r'CapEff:\\s*(\\S+)', open('/proc/self/status').read()).group(1)\n"
        f"rec = vdifrec.Recorder(port=0, ring='16MiB', frame_size=8224, path={str(out)!r}, rcvbuf={asked})\n"
        "rec.start()\n"
        "print('listening on %s:%d' % rec.address, flush=True)\n"
        "taken = int(sys.stdin.readline())\n"
        "deadline = time.monotonic() + 20\n"
        "while rec.stats().datagrams < taken and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "print(json.dumps(dict(caps=caps, summary=rec.stop().to_dict())), flush=True)\n"
    )
    # No capabilities, and root gets none back on exec (securebits noroot); the mlock limit is
    # lowered first, while lowering it is still permitted.
    cmd = ["prlimit", "--memlock=65536", "setpriv", "--securebits", "+noroot,+noroot_locked", "--inh-caps=-all",
           "--bounding-set=-all", sys.executable, "-c", script]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        _, err = proc.communicate()
        # Only the tools that drop the privileges may fail for want of them; the recorder may not.
        if "Traceback" in err or "vdifrec" in err:
            raise AssertionError(f"the recorder failed without privileges: {err.strip()[-2000:]}")
        pytest.skip(f"cannot drop the capabilities here: {err.strip()[-200:]}")
    address = ("127.0.0.1", int(line.strip().rsplit(":", 1)[1]))
    sent = vdifrec.send(address, frames=1000, fps=5000, record_sent=sent_file, **START)
    assert sent["frames_sent"] == 1000
    d = delivered(address, 1000)
    proc.stdin.write(f"{1000 + d.flushes - d.kernel_drops}\n")
    proc.stdin.flush()
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    result = json.loads(stdout.splitlines()[-1])
    s = vdifrec.Summary.from_dict(result["summary"])
    assert result["caps"] == "0000000000000000"
    # What the kernel grants any socket that asks without CAP_NET_ADMIN (net.core.rmem_max caps
    # it), measured here: the note must say it, and ask for more exactly when it is less.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, asked)
        granted = probe.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2
    [note] = [n for n in s.notes if n.startswith("socket:")]
    m = re.match(r"socket: SO_RCVBUF granted (\d+)\b", note)
    assert m and int(m.group(1)) == granted, note
    assert ("raise net.core.rmem_max" in note) == (granted < asked), note
    assert any("mlock: not permitted" in n for n in s.notes), s.notes
    # Every frame sent was recorded or dropped by the kernel, and the recorder counted each drop.
    assert s.kernel_drops == d.kernel_drops
    assert s.frames_received == 1000 - d.kernel_drops
    assert s.datagrams == s.frames_received + d.flushes
    assert s.datagrams_malformed == s.datagrams_malformed_by_kind["too_short"] == d.flushes
    assert s.ring_overflows == 0
    # The file is the stream less exactly those frames; the gaps they leave are the loss, all
    # of it the kernel's.
    recorded = frames_of(out)
    assert len(left_out(frames_of(sent_file), recorded)) == d.kernel_drops
    assert s.frames_lost == sum(loss_by_second(recorded, s.frames_per_second).values())
    assert s.frames_lost_network == 0
    assert s.ok and s.bytes_buffered == s.bytes_written == out.stat().st_size == s.frames_received * FS
    assert [f.path for f in s.files] == [str(out)]
