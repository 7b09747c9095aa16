"""Recording on loopback: byte-exact files, exact loss counts, malformed datagrams, PSN,
rotation, draining at stop, the summary JSON, and the `vdifrec record` command line.

Rates are modest here (the speed targets are benchmarks); every wait is bounded. Where the
host grants the recorder a small socket buffer (no CAP_NET_ADMIN, net.core.rmem_max untuned)
the kernel may drop some frames: the counts expected then follow from what it dropped (see
conftest.delivered), and are the stream's own where it dropped nothing.
"""

from __future__ import annotations

import collections
import hashlib
import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import vdifrec
from conftest import Delivery, delivered, frames_of, free_udp_port, left_out, loss_by_second, read_until, vdif_keys

FS = 8224
START = dict(ref_epoch=53, start_second=2000)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_while_sending(tmp_path: Path, rec_kw: dict, send_kw: dict) -> tuple[vdifrec.Summary, dict, Delivery]:
    """Starts a recorder, sends to it, waits until every datagram sent was taken by the recorder
    or dropped by the kernel (bounded), stops. Also says what the kernel dropped; the recorder
    must have counted exactly that. The ring holds every stream sent here, so however slow the
    disk, nothing overflows it (test_slow_disk_overflows_exactly_and_recovers does that)."""
    rec = vdifrec.Recorder(port=0, ring="192MiB", **rec_kw)
    rec.start()
    assert rec.address is not None
    sent = vdifrec.send(rec.address, **send_kw)
    d = delivered(rec.address, sent["frames_sent"] + sent.get("garbage_sent", 0), lambda: rec.stats().datagrams)
    summary = rec.stop()
    assert summary.kernel_drops == d.kernel_drops and summary.ring_overflows == 0
    return summary, sent, d


@pytest.mark.slow
def test_file_is_byte_identical_to_what_was_sent(tmp_path: Path) -> None:
    out, sent_file = tmp_path / "rec.vdif", tmp_path / "sent.vdif"
    summary, sent, d = record_while_sending(
        tmp_path, dict(path=out), dict(frames=20_000, fps=10_000, record_sent=sent_file, **START)
    )
    assert sent["frames_sent"] == 20_000
    n = 20_000 - d.kernel_drops
    assert summary.ok and summary.invariant_holds
    assert summary.frames_received == n and summary.datagrams_malformed == d.flushes
    assert summary.bytes_buffered == summary.bytes_written == n * FS
    assert [f.bytes for f in summary.files] == [n * FS]
    # The file is what was sent (less the frames the kernel dropped, where it dropped any).
    recorded = frames_of(out)
    if d.kernel_drops == 0:
        assert sha(out.read_bytes()) == sha(sent_file.read_bytes())
    assert len(left_out(frames_of(sent_file), recorded)) == d.kernel_drops
    # Frame size and rate were learned from the stream: the rate from the highest frame number
    # received (10000 unless the kernel dropped frame 9999 of both seconds).
    assert summary.frame_size == FS and summary.frames_per_second == vdif_keys(recorded)[2].max() + 1
    if d.kernel_drops == 0:
        assert summary.frames_per_second == 10_000
    assert summary.frames_lost == sum(loss_by_second(recorded, summary.frames_per_second).values())
    assert vdifrec.check(out, fps=10_000)["clean"] == (sum(loss_by_second(recorded, 10_000).values()) == 0)


@pytest.mark.slow
def test_injected_drops_are_counted_per_second_and_in_total(tmp_path: Path) -> None:
    out, sent_file = tmp_path / "r.vdif", tmp_path / "s.vdif"
    summary, sent, d = record_while_sending(
        tmp_path,
        dict(path=out, fps=5000),
        dict(frames=20_000, fps=5000, drop="1:100-199,2:4990-4999,every:1000", record_sent=sent_file, **START),
    )
    # every:1000 drops the 1000th, 2000th, ... frame: 5 a second. The ranges add 100 in second 1
    # and 10 in second 2, one of which (frame 4999) every:1000 drops anyway: 129 in all.
    assert sent["frames_dropped"] == 129
    # The very last frame of the sequence is dropped too; nothing after the last frame received
    # is guessed, so it is not counted lost.
    assert loss_by_second(frames_of(sent_file), 5000) == {2000: 5, 2001: 105, 2002: 14, 2003: 4}
    # The recorder counts the gaps in what it received: those, and any the kernel's drops add.
    recorded = frames_of(out)
    assert len(left_out(frames_of(sent_file), recorded)) == d.kernel_drops
    per_second = {r.vdif_seconds: r.lost for r in summary.seconds}
    assert per_second == loss_by_second(recorded, 5000)
    assert summary.frames_lost == sum(per_second.values())
    assert summary.frames_received == 20_000 - 129 - d.kernel_drops
    assert sum(r.received for r in summary.seconds) == summary.frames_received
    assert summary.ok


@pytest.mark.slow
def test_garbage_is_counted_as_malformed_and_not_written(tmp_path: Path) -> None:
    out, sent_file = tmp_path / "g.vdif", tmp_path / "s.vdif"
    summary, sent, d = record_while_sending(
        tmp_path,
        dict(path=out, frame_size=FS),
        dict(frames=5000, fps=5000, garbage=300, record_sent=sent_file, **START),
    )
    assert sent["garbage_sent"] == 300
    # What the kernel dropped (a full socket buffer) was frames or garbage; the file tells which.
    recorded = frames_of(out)
    frames_dropped = len(left_out(frames_of(sent_file), recorded))
    garbage = 300 - (d.kernel_drops - frames_dropped) + d.flushes
    assert summary.datagrams_malformed == garbage
    assert summary.datagrams == 5300 - d.kernel_drops + d.flushes
    kinds = summary.datagrams_malformed_by_kind
    assert kinds["too_short"] + kinds["too_long"] + kinds["bad_frame_length"] == garbage
    assert summary.frames_received == len(recorded) == 5000 - frames_dropped
    # (The rate is learned: from the highest frame number received.)
    assert summary.frames_lost == sum(loss_by_second(recorded, summary.frames_per_second).values())
    if d.kernel_drops == 0:
        assert sha(out.read_bytes()) == sha(sent_file.read_bytes())


@pytest.mark.slow
def test_psn_offset_is_stripped_and_psn_gaps_counted(tmp_path: Path) -> None:
    out, sent_file = tmp_path / "p.vdif", tmp_path / "s.vdif"
    summary, sent, d = record_while_sending(
        tmp_path,
        dict(path=out, offset=8, psn=True),
        dict(frames=6000, fps=5000, psn=True, drop="0:10-14", record_sent=sent_file, **START),
    )
    assert loss_by_second(frames_of(sent_file), 5000) == {2000: 5, 2001: 0}
    # The 5 frames left out, and any the kernel dropped in between, are gaps in both counts.
    recorded = frames_of(out)
    assert len(left_out(frames_of(sent_file), recorded)) == d.kernel_drops
    lost = sum(loss_by_second(recorded, summary.frames_per_second).values())  # the rate as learned
    assert summary.psn_lost == summary.frames_lost == lost and summary.psn_out_of_order == 0
    assert summary.frames_received == 5995 - d.kernel_drops
    if d.kernel_drops == 0:
        assert lost == 5 and sha(out.read_bytes()) == sha(sent_file.read_bytes())


@pytest.mark.slow
def test_rotation_keeps_every_byte(tmp_path: Path) -> None:
    sent_file = tmp_path / "sent.vdif"
    rec_dir = tmp_path / "rec"
    rec_dir.mkdir()
    summary, _, d = record_while_sending(
        tmp_path,
        dict(directory=rec_dir, prefix="scan", file_size="4MiB"),
        dict(frames=3000, fps=5000, record_sent=sent_file, **START),
    )
    files = [Path(f.path) for f in summary.files]
    # 4 MiB rounds down to 3 runs of 128 frames (3 × 1052672 bytes); 3000 frames → 8 files
    # (fewer frames, where the kernel dropped some, may need fewer).
    n = 3000 - d.kernel_drops
    assert len(files) == -(-n // 384)
    assert [f.stat().st_size for f in files] == [f.bytes for f in summary.files]
    assert all(f.bytes == 384 * FS for f in summary.files[:-1])
    assert all(re.fullmatch(r"scan_\d{4}y\d{3}d\d\dh\d\dm\d\ds(_\d+)?\.vdif", f.name) for f in files)
    joined = b"".join(f.read_bytes() for f in files)
    assert len(left_out(frames_of(sent_file), frames_of(joined))) == d.kernel_drops
    assert summary.bytes_written == sum(f.bytes for f in summary.files) == n * FS


@pytest.mark.slow
def test_stop_drains_the_ring(tmp_path: Path) -> None:
    # A writer throttled to 4 MB/s still has most of the data in the ring at stop.
    out, sent_file = tmp_path / "d.vdif", tmp_path / "s.vdif"
    rec = vdifrec.Recorder(port=0, ring="64MiB", path=out, throttle="4MB")
    rec.start()
    assert rec.address is not None
    vdifrec.send(rec.address, frames=4000, fps=10_000, record_sent=sent_file, **START)
    d = delivered(rec.address, 4000, lambda: rec.stats().datagrams)
    before = rec.stats()
    assert before.bytes_written < before.bytes_buffered  # still in the ring
    summary = rec.stop()
    n = 4000 - d.kernel_drops
    assert summary.ok and summary.frames_received == n and summary.bytes_written == n * FS
    assert len(left_out(frames_of(sent_file), frames_of(out))) == d.kernel_drops


@pytest.mark.slow
def test_monitor_only_writes_nothing(tmp_path: Path) -> None:
    summary, _, d = record_while_sending(tmp_path, dict(), dict(frames=3000, fps=5000, **START))
    assert summary.frames_received == 3000 - d.kernel_drops and summary.files == []
    assert summary.bytes_written == 0 and summary.bytes_dropped_disk == 0 and summary.ok


def test_max_frames_stops_the_capture(tmp_path: Path) -> None:
    out = tmp_path / "m.vdif"
    rec = vdifrec.Recorder(port=0, ring="16MiB", frame_size=8224, path=out, max_frames=1000)
    rec.start()
    assert rec.address is not None
    # 3000 frames; more only should the kernel have dropped 2000 of them (a tiny socket buffer).
    for second in range(START["start_second"], START["start_second"] + 20):
        vdifrec.send(rec.address, frames=3000, fps=10_000, ref_epoch=53, start_second=second)
        if rec.wait(duration=2, frames=1000).frames_received >= 1000:
            break
    summary = rec.stop()
    assert summary.frames_received == 1000 and out.stat().st_size == 1000 * FS


def test_refuses_to_overwrite_and_names_bad_arguments(tmp_path: Path) -> None:
    existing = tmp_path / "exists.vdif"
    existing.write_bytes(b"x")
    with pytest.raises(vdifrec.OutputError, match="never overwrites"):
        vdifrec.Recorder(port=0, path=existing).start()
    with pytest.raises(vdifrec.OutputError, match="does not exist"):
        vdifrec.Recorder(port=0, directory=tmp_path / "nope").start()
    with pytest.raises(ValueError, match="ring: cannot read"):
        vdifrec.Recorder(port=0, ring="lots")
    with pytest.raises(vdifrec.ArgumentError, match="^port: 70000 is out of range: give 0..65535"):
        vdifrec.Recorder(port=70000)
    with pytest.raises(vdifrec.ArgumentError, match="^psn: .*needs offset 8"):
        vdifrec.Recorder(port=0, psn=True)
    with pytest.raises(ValueError, match="bind: .* is not an IP address"):
        vdifrec.Recorder(port=0, bind="nowhere")


def test_port_in_use_is_named(tmp_path: Path) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    try:
        with pytest.raises(vdifrec.PortInUseError, match=f"^port: {port} on 127.0.0.1 is in use"):
            vdifrec.Recorder(port=port).start()
    finally:
        s.close()


def start_cli_record(*args: str) -> tuple[subprocess.Popen[str], int, str]:
    """`vdifrec record` listening on a free port; the port, and what it printed up to and
    including its 'listening on' line (bounded: 30 s)."""
    # A ring that holds the streams sent here whole (15,872 frames), however slow the disk.
    proc = subprocess.Popen(
        [sys.executable, "-m", "vdifrec.cli", "record", "--port", "0", "--ring", "128MiB", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    m, head = read_until(proc, r"listening on 127\.0\.0\.1:(\d+)")
    return proc, int(m.group(1)), head


@pytest.mark.slow
def test_cli_record_table_summary_and_json(tmp_path: Path) -> None:
    out, js = tmp_path / "cli.vdif", tmp_path / "summary.json"
    sent_file = tmp_path / "sent.vdif"
    # It records until Ctrl-C, sent once the stream has all been taken (or dropped): the
    # 2-minute --duration only bounds a test gone wrong.
    proc, port, head = start_cli_record("--out", str(out), "--duration", "120", "--summary-json", str(js), "--fps", "5000")
    try:
        sent = vdifrec.send(("127.0.0.1", port), frames=12_500, fps=5000, drop="1:0-49", record_sent=sent_file, **START)
        d = delivered(("127.0.0.1", port), sent["frames_sent"])
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    text = head + stdout
    assert "Time" in text and "Frame_Num/Sec" in text and "Packet_Loss" in text
    rows = re.findall(r"^(\d+)\s+(\d+)/(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", text, re.M)
    # Time, Frame_Num/Sec and Packet_Loss columns: the stream's (5000 a second, 50 left out of
    # the second one, the last one half) less what the kernel dropped, where it dropped any.
    assert loss_by_second(frames_of(sent_file), 5000) == {2000: 0, 2001: 50, 2002: 0}
    recorded = frames_of(out)
    assert len(left_out(frames_of(sent_file), recorded)) == d.kernel_drops
    received = collections.Counter(vdif_keys(recorded)[1].tolist())
    lost = loss_by_second(recorded, 5000)
    assert [(int(r[0]), int(r[1]), int(r[2]), int(r[6])) for r in rows] == [
        (sec, received[sec], received[sec] + lost[sec], lost[sec]) for sec in sorted(lost)
    ]
    if d.kernel_drops == 0:
        assert [(int(r[1]), int(r[2]), int(r[6])) for r in rows] == [(5000, 5000, 0), (4950, 5000, 50), (2500, 2500, 0)]
    n = 12_450 - d.kernel_drops
    assert f"Stream Good Packet: {n}\n" in text
    assert f"Saved File Name: {out}" in text
    assert f"File Capacity: {n * FS}\n" in text
    s = json.loads(js.read_text())
    for key in ["frames_received", "frames_lost", "frames_out_of_order", "frames_duplicate", "frames_invalid",
                "datagrams_malformed", "datagrams_malformed_by_kind", "kernel_drops", "ring_overflows",
                "bytes_buffered", "bytes_written", "bytes_dropped_disk", "files", "threads", "seconds"]:
        assert key in s, key
    assert sent["frames_dropped"] == 50
    assert s["frames_received"] == n and s["frames_lost"] == sum(lost.values())
    assert s["kernel_drops"] == d.kernel_drops and s["datagrams_malformed"] == d.flushes
    assert s["bytes_written"] == s["bytes_buffered"] == out.stat().st_size == n * FS
    assert s["bytes_dropped_disk"] == 0
    assert s["files"] == [{"path": str(out), "bytes": n * FS}]
    assert [r["lost"] for r in s["seconds"]] == [lost[sec] for sec in sorted(lost)]
    assert s["seconds"][1]["threads"][0]["lost"] == lost[2001]


@pytest.mark.slow
def test_cli_record_sigterm_drains_and_summarises(tmp_path: Path) -> None:
    out = tmp_path / "t.vdif"
    proc, port, _ = start_cli_record("--out", str(out))
    vdifrec.send(("127.0.0.1", port), frames=3000, fps=10_000, **START)
    d = delivered(("127.0.0.1", port), 3000)
    time.sleep(0.5)
    proc.terminate()
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert f"Stream Good Packet: {3000 - d.kernel_drops}\n" in stdout
    assert out.stat().st_size == (3000 - d.kernel_drops) * FS


@pytest.mark.slow
def test_cli_usage_errors(tmp_path: Path, cli) -> None:
    r = cli("record", "--port", "0")
    assert r.returncode == 2 and "--out FILE, --dir DIR" in r.stderr
    r = cli("record", "--port", "0", "--out", str(tmp_path / "x.vdif"), "--ring", "huge")
    assert r.returncode == 2 and "--ring: cannot read" in r.stderr
    (tmp_path / "e.vdif").write_bytes(b"")
    r = cli("record", "--port", "0", "--out", str(tmp_path / "e.vdif"))
    assert r.returncode == 2 and "never overwrites" in r.stderr
    r = cli("send", "--to", "127.0.0.1:9")
    assert r.returncode == 2 and "--duration: give duration or frames" in r.stderr
    r = cli("send", "--to", "nohost", "--frames", "1")
    assert r.returncode == 2 and "HOST:PORT" in r.stderr
    r = cli("send", "--to", "127.0.0.1:9", "--frames", "10", "--drop", "3:9-1")
    assert r.returncode == 2 and "drop:" in r.stderr


def test_refused_datagrams_are_counted_not_fatal() -> None:
    # Nobody listens on this port: the kernel refuses; the sender counts and carries on.
    port = free_udp_port()
    result = vdifrec.send(("127.0.0.1", port), frames=200, fps=10_000, **START)
    assert result["refused"] > 0
    assert result["frames_sent"] + result["refused"] == 200


@pytest.mark.slow
def test_sender_records_what_it_sends_with_reordering(tmp_path: Path) -> None:
    sent_file = tmp_path / "s.vdif"
    summary, sent, d = record_while_sending(
        tmp_path,
        dict(path=tmp_path / "r.vdif", fps=5000),
        dict(frames=6000, fps=5000, reorder=500, record_sent=sent_file, **START),
    )
    # Frames 500, 1000, ... 5500 are sent after their successors (6000, the last, has none).
    assert sent["frames_reordered"] == 11
    frames = frames_of(sent_file)
    fnr = vdif_keys(frames)[2]
    assert (np.diff(fnr.astype(np.int64)) < 0).sum() == 11 + 1  # the swaps, and one second wrap
    # The file holds frames in arrival order: the bytes sent (less any the kernel dropped). A
    # frame is out of order when one after it in the sequence came first.
    recorded = frames_of(tmp_path / "r.vdif")
    assert len(left_out(frames, recorded)) == d.kernel_drops
    _, second, fnr = vdif_keys(recorded)
    seq = second.astype(np.int64) * 5000 + fnr
    assert summary.frames_out_of_order == int((seq < np.maximum.accumulate(seq)).sum())
    assert summary.frames_lost == sum(loss_by_second(recorded, 5000).values())
    if d.kernel_drops == 0:
        assert summary.frames_out_of_order == 11 and summary.frames_lost == 0


@pytest.mark.slow
def test_replaying_a_file_records_the_same_bytes(tmp_path: Path) -> None:
    source = tmp_path / "source.vdif"
    vdifrec.generate(source, seconds=1.5, fps=2000, threads=2, ref_epoch=53, start_second=50)
    out = tmp_path / "replayed.vdif"
    summary, sent, d = record_while_sending(tmp_path, dict(path=out), dict(file=source, fps=2000))
    assert sent["frames_sent"] == 6000
    assert summary.frames_received == 6000 - d.kernel_drops and summary.ok
    recorded = frames_of(out)
    assert len(left_out(frames_of(source), recorded)) == d.kernel_drops
    thread = vdif_keys(recorded)[0]
    assert [t["thread"] for t in summary.threads] == [0, 1]
    for t in summary.threads:
        assert t["received"] == (thread == t["thread"]).sum()
        # The rate is learned: from the highest frame number received.
        assert t["lost"] == sum(loss_by_second(recorded[thread == t["thread"]], summary.frames_per_second).values())
    if d.kernel_drops == 0:
        assert summary.frames_lost == 0 and sha(out.read_bytes()) == sha(source.read_bytes())


@pytest.mark.slow
def test_multi_thread_stream_counts_per_thread(tmp_path: Path) -> None:
    out, sent_file = tmp_path / "mt.vdif", tmp_path / "s.vdif"
    summary, sent, d = record_while_sending(
        tmp_path, dict(path=out, fps=1000),
        dict(frames=8000, fps=1000, threads=4, drop="1:500-509", record_sent=sent_file, **START),
    )
    # The drop takes frames 500-509 of second 1 on every thread: 40 frames.
    assert sent["frames_dropped"] == 40
    sent_rows = frames_of(sent_file)
    sent_thread = vdif_keys(sent_rows)[0]
    assert {t: loss_by_second(sent_rows[sent_thread == t], 1000) for t in range(4)} == {
        t: {2000: 0, 2001: 10} for t in range(4)}
    # Counted per thread: those, and any gaps the kernel's drops add.
    recorded = frames_of(out)
    assert len(left_out(sent_rows, recorded)) == d.kernel_drops
    thread = vdif_keys(recorded)[0]
    per_thread = {t["thread"]: t["lost"] for t in summary.threads}
    assert per_thread == {t: sum(loss_by_second(recorded[thread == t], 1000).values()) for t in range(4)}
    assert summary.frames_lost == sum(per_thread.values()) and summary.frames_received == 7960 - d.kernel_drops
    assert [len(r.threads) for r in summary.seconds] == [4, 4]
    assert summary.seconds[1].lost == sum(loss_by_second(recorded[thread == t], 1000)[2001] for t in range(4))
    if d.kernel_drops == 0:
        assert per_thread == {0: 10, 1: 10, 2: 10, 3: 10} and summary.seconds[1].lost == 40


def test_stray_datagrams_before_the_first_frame_do_not_confuse_learning(tmp_path: Path) -> None:
    out = tmp_path / "l.vdif"
    rec = vdifrec.Recorder(port=0, ring="16MiB", frame_size=8224, path=out)
    rec.start()
    assert rec.address is not None
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for size in (0, 7, 100, 8224, 9000):
        s.sendto(b"\xff" * size, rec.address)
    s.close()
    strays = delivered(rec.address, 5, lambda: rec.stats().datagrams)
    vdifrec.send(rec.address, frames=1000, fps=10_000, **START)
    d = delivered(rec.address, 1005 + strays.flushes, lambda: rec.stats().datagrams)
    summary = rec.stop()
    assert summary.datagrams_malformed == 5 - strays.kernel_drops + strays.flushes + d.flushes
    assert summary.frames_received == 1000 - (d.kernel_drops - strays.kernel_drops) and summary.frame_size == FS
    assert out.stat().st_size == summary.frames_received * FS


@pytest.mark.slow
def test_a_recording_verifies_against_the_generator(tmp_path: Path) -> None:
    # The soak test's check: every recorded frame regenerated and compared, nothing stored.
    out = tmp_path / "v.vdif"
    summary, sent, d = record_while_sending(tmp_path, dict(path=out), dict(frames=3000, fps=5000, threads=2, seed=7, **START))
    n = 3000 - d.kernel_drops  # every frame received, whichever the kernel dropped
    args = dict(fps=5000, threads=2, seed=7, **START)
    v = json.loads(vdifrec._core.verify_sent(str(out), args))
    assert {k: v[k] for k in ("frames", "matching", "differing", "out_of_order", "first_difference")} == {
        "frames": n, "matching": n, "differing": 0, "out_of_order": 0, "first_difference": None}
    data = bytearray(out.read_bytes())
    data[1234 * FS + 100] ^= 0x10  # one bit of one payload
    out.write_bytes(bytes(data))
    v = json.loads(vdifrec._core.verify_sent(str(out), args))
    assert v["differing"] == 1 and v["first_difference"] == 1234 * FS
    assert json.loads(vdifrec._core.verify_sent(str(out), args | {"seed": 8}))["matching"] == 0
    # A frame repeated later (intact bytes, wrong place) is out of order, not differing.
    data = bytearray(out.read_bytes())
    data[2000 * FS:2001 * FS] = data[10 * FS:11 * FS]
    out.write_bytes(bytes(data))
    v = json.loads(vdifrec._core.verify_sent(str(out), args))
    assert (v["differing"], v["out_of_order"]) == (1, 1)
