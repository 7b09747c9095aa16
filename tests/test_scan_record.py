"""Recording scans onto several disks: vbs and Mark6 layouts checked field by field against the
reference (reassembled here independently of vdifrec's readers), VDIF-time windows to the
frame, disks that fill or fail mid-scan, scan names, and `vdifrec record --scan`.

Every stream is modest (the speed targets are benchmarks) and every wait is bounded. Where the
host's socket buffer is small the kernel may drop frames: what is expected then follows from
what it dropped (conftest.delivered), and the disks must hold exactly the frames received.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import vdifrec
from conftest import delivered, frames_of, left_out, output_line, ring_holding, run_cli, vdif_keys

FS = 8224
FPS = 10_000
START = dict(ref_epoch=53, start_second=2000)
# Epoch 53 starts 2026-07-01; second 2000 of it is 00:33:20 UTC.
T0 = "2026-07-01T00:33:20"
CHUNK_RE = re.compile(r"^.+/[^/.]+\.([0-9]{8})$")  # jive5ab's chunk pattern


def disks(tmp_path: Path, n: int) -> list[Path]:
    out = []
    for i in range(n):
        d = tmp_path / f"disk{i}"
        d.mkdir()
        out.append(d)
    return out


def vbs_chunks(ds: list[Path], scan: str) -> dict[int, Path]:
    """Every chunk of `scan` by number, as jive5ab finds them: `<disk>/<scan>/<scan>.NNNNNNNN`."""
    found: dict[int, Path] = {}
    for d in ds:
        for f in sorted((d / scan).glob("*")) if (d / scan).is_dir() else []:
            m = CHUNK_RE.match(str(f))
            if m and f.name.startswith(scan + "."):
                n = int(m.group(1))
                assert n not in found, f"chunk {n} is on two disks"
                found[n] = f
    return found


def gather_vbs(ds: list[Path], scan: str) -> bytes:
    chunks = vbs_chunks(ds, scan)
    assert sorted(chunks) == list(range(len(chunks))), "chunk numbers are 0..N-1"
    data = b"".join(chunks[n].read_bytes() for n in sorted(chunks))
    for n, f in chunks.items():
        assert f.stat().st_size % FS == 0, f"chunk {n} holds whole frames"
    return data


def mk6_blocks(ds: list[Path], scan: str) -> tuple[dict[int, bytes], list[tuple[int, ...]]]:
    """Each Mark6 file of the scan parsed by the reference's layout: 20-byte header (sync
    0xfeed6666, version 2, block_size, packet_format 0, packet_size), then [blocknum, wb_size,
    wb_size - 8 bytes] blocks."""
    blocks: dict[int, bytes] = {}
    headers = []
    for d in ds:
        f = d / scan
        if not f.exists():
            continue
        raw = f.read_bytes()
        assert raw[:4] == bytes([0x66, 0x66, 0xED, 0xFE])
        sync, version, block_size, packet_format, packet_size = struct.unpack_from("<Iiiii", raw, 0)
        headers.append((sync, version, block_size, packet_format, packet_size))
        assert (version, packet_format, packet_size) == (2, 0, FS)
        at, last = 20, -1
        while at < len(raw):
            num, wb = struct.unpack_from("<ii", raw, at)
            assert num > last, "block numbers increase within a file"
            assert (wb - 8) % FS == 0 and at + wb <= len(raw)
            blocks[num] = raw[at + 8 : at + wb]
            at, last = at + wb, num
    largest = max(len(b) for b in blocks.values()) + 8 if blocks else 0
    assert all(h[2] == largest for h in headers), "every file's block_size is the scan's largest block, header included"
    return blocks, headers


def assert_all_on_disk(s: vdifrec.ScanSummary) -> None:
    """A scan that ended well says all it wrote is on disk (synced), up to its last frame."""
    assert (s.durable_frames, s.durable_bytes) == (s.frames, s.bytes_written), s
    assert s.durable_up_to == s.last_frame and s.durable_up_to is not None


def record(tmp_path: Path, rec_kw: dict, send_kw: dict, scan: dict | None = None):
    """Starts a recorder on disks, starts a scan, sends, waits until every datagram is taken or
    dropped by the kernel (bounded), stops the scan and the recorder. The ring holds the whole
    stream: however slow the disks (each vbs chunk is synced), nothing overflows it, and what is
    on disk is what the kernel let through."""
    rec = vdifrec.Recorder(port=0, ring=ring_holding(send_kw["frames"]), frame_size=FS, **rec_kw)
    rec.start()
    name = rec.start_scan(**(scan or dict(name="kvn_scan1")))
    sent = vdifrec.send(rec.address, **send_kw)
    d = delivered(rec.address, sent["frames_sent"], lambda: rec.stats().datagrams)
    s = rec.stop_scan() if rec.scan else rec.wait_scan(10)
    summary = rec.stop()
    return name, s, summary, d


@pytest.mark.slow
def test_vbs_scan_over_three_disks_is_what_was_sent(tmp_path: Path) -> None:
    ds = disks(tmp_path, 3)
    sent_file = tmp_path / "sent.vdif"
    name, s, run, d = record(
        tmp_path,
        dict(disks=[str(tmp_path / "disk*")], chunk_size="1MiB", writers=3),
        dict(frames=20_000, fps=FPS, record_sent=sent_file, **START),
    )
    n = 20_000 - d.kernel_drops
    assert name == "kvn_scan1" and s.name == "kvn_scan1" and s.format == "vbs"
    assert s.invariant_holds and run.invariant_holds and s.error is None
    assert s.frames == n and s.bytes_written == n * FS and s.bytes_dropped_disk == 0
    # Three writers finish chunks out of order: at the end every one is on disk.
    assert_all_on_disk(s)
    data = gather_vbs(ds, "kvn_scan1")
    recorded = frames_of(data)
    if d.kernel_drops == 0:
        assert data == sent_file.read_bytes()
    assert len(left_out(frames_of(sent_file), recorded)) == d.kernel_drops
    chunks = vbs_chunks(ds, "kvn_scan1")
    # 1 MiB is 128 frames (a whole aligned run); the first chunk ends on a run boundary.
    assert len(chunks) == s.chunks and all(f.stat().st_size <= 128 * FS for f in chunks.values())
    assert sum(f.stat().st_size for f in chunks.values()) == s.bytes_written
    assert sorted(f.path for f in s.files) == sorted(str(p) for p in chunks.values())
    # Every disk took chunks; each disk's count is what is on it.
    for disk, rec_disk in zip(ds, s.disks):
        on_disk = [p for p in chunks.values() if p.parent.parent == disk]
        assert rec_disk.path == str(disk) and rec_disk.chunks == len(on_disk) > 0
        assert rec_disk.bytes == sum(p.stat().st_size for p in on_disk)
    # The JSON summary lies beside the scan on each disk, and is not a chunk.
    for disk in ds:
        js = json.loads((disk / "kvn_scan1" / "kvn_scan1.summary.json").read_text())
        assert js["name"] == "kvn_scan1" and js["frames"] == n and js["bytes_written"] == n * FS
        assert js["durable_bytes"] == n * FS and js["durable_up_to"] == s.last_frame
    assert run.scans[0].name == "kvn_scan1" and run.bytes_written == n * FS and run.bytes_outside_scans == 0


@pytest.mark.slow
def test_mk6_scan_matches_the_reference_layout(tmp_path: Path) -> None:
    ds = disks(tmp_path, 4)
    sent_file = tmp_path / "sent.vdif"
    _, s, run, d = record(
        tmp_path,
        dict(disks=[str(x) for x in ds], format="mk6", chunk_size="1MiB", writers=2),
        dict(frames=12_345, fps=FPS, record_sent=sent_file, **START),
    )
    n = 12_345 - d.kernel_drops
    blocks, headers = mk6_blocks(ds, "kvn_scan1")
    assert sorted(blocks) == list(range(len(blocks))) and len(blocks) == s.chunks
    sizes = [len(blocks[k]) for k in sorted(blocks)]
    assert all(x == 128 * FS for x in sizes[:-1]) and 0 < sizes[-1] <= 128 * FS, "only the last block is short"
    data = b"".join(blocks[k] for k in sorted(blocks))
    assert len(data) == n * FS == s.bytes_written
    if d.kernel_drops == 0:
        assert data == sent_file.read_bytes()
    assert len(left_out(frames_of(sent_file), frames_of(data))) == d.kernel_drops
    # The files' sizes are the frames plus the headers: 20 per file, 8 per block.
    on_disk = sum((x / "kvn_scan1").stat().st_size for x in ds if (x / "kvn_scan1").exists())
    assert on_disk == s.bytes_written + s.bytes_headers == n * FS + 20 * len(headers) + 8 * len(blocks)
    assert s.invariant_holds and run.invariant_holds and s.bytes_dropped_disk == 0
    # Each file synced now and then, and when it closed: all of it on disk.
    assert_all_on_disk(s)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["vbs", "file"])
def test_a_vdif_time_window_holds_exactly_its_frames(tmp_path: Path, fmt: str) -> None:
    ds = disks(tmp_path, 2 if fmt == "vbs" else 1)
    sent_file = tmp_path / "sent.vdif"
    # [second 2000 + 0.25, second 2001 + 0.5): frames 2500..14999 of the 30000 sent.
    _, s, run, d = record(
        tmp_path,
        dict(disks=[str(x) for x in ds], fps=FPS, chunk_size="1MiB"),
        dict(frames=30_000, fps=FPS, record_sent=sent_file, **START),
        # The same window as UTC text, or as VDIF time (reference epoch, seconds since it).
        scan=dict(name="w", start=f"{T0}.25", stop="2026y182d00h33m21.5s") if fmt == "file"
        else dict(name="w", start=(53, 2000.25), stop="53:2001.5"),
    )
    sent = frames_of(sent_file)
    _, sec, fnr = vdif_keys(sent)
    t = (sec.astype(np.int64) - 2000) * FPS + fnr
    window = sent[(t >= 2500) & (t < 15_000)]
    data = gather_vbs(ds, "w") if fmt == "vbs" else (ds[0] / "w.vdif").read_bytes()
    recorded = frames_of(data)
    missing = left_out(window, recorded)
    assert s.frames == len(recorded) == 12_500 - len(missing)
    assert s.start is not None and s.start.startswith(f"{T0}.25")
    assert s.first_frame is not None and s.last_frame is not None
    assert_all_on_disk(s)
    if not missing:
        assert data == window.tobytes()
        assert s.ok and s.frames_lost == 0
        assert s.first_frame.startswith(f"{T0}.25") and s.last_frame.startswith("2026-07-01T00:33:21.4999")
    # Received but outside the window: counted, not written.
    assert run.bytes_outside_scans == (30_000 - d.kernel_drops) * FS - s.bytes_buffered
    assert run.invariant_holds


@pytest.mark.slow
def test_frames_missing_at_the_window_edges_count_as_lost(tmp_path: Path) -> None:
    ds = disks(tmp_path, 1)
    # The stream covers seconds 2000 and 2001 only; the window is [1999.5, 2002.5).
    _, s, run, d = record(
        tmp_path,
        dict(disks=[str(ds[0])], fps=FPS),
        dict(frames=20_000, fps=FPS, **START),
        scan=dict(name="edges", start="2026-07-01T00:33:19.5", stop="2026-07-01T00:33:22.5"),
    )
    # What lies between the window's edges and the first and last frame on disk is lost.
    _, sec, fnr = vdif_keys(frames_of(ds[0] / "edges.vdif"))
    first = (int(sec[0]) - 2000) * FPS + int(fnr[0])  # frames after second 2000 began
    last = (int(sec[-1]) - 2000) * FPS + int(fnr[-1])
    edges = (first + FPS // 2) + (2 * FPS + FPS // 2 - 1 - last)
    assert s.frames == 20_000 - d.kernel_drops
    assert s.frames_lost_at_edges == edges >= 10_000
    assert s.frames_lost == edges + len(set(range(first, last + 1)) - set(((sec - 2000) * FPS + fnr).tolist()))
    assert not s.ok


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["vbs", "mk6"])
def test_a_disk_that_fails_mid_scan_loses_nothing(tmp_path: Path, fmt: str) -> None:
    ds = disks(tmp_path, 3)
    sent_file = tmp_path / "sent.vdif"
    _, s, run, d = record(
        tmp_path,
        dict(disks=[str(x) for x in ds], format=fmt, chunk_size="1MiB", writers=2, disk_faults={str(ds[1]): "error@3MiB"}),
        dict(frames=15_000, fps=FPS, record_sent=sent_file, **START),
    )
    n = 15_000 - d.kernel_drops
    assert s.invariant_holds and s.bytes_dropped_disk == 0 and s.bytes_written == n * FS
    if fmt == "vbs":
        data = gather_vbs(ds, "kvn_scan1")
    else:
        blocks, _ = mk6_blocks(ds, "kvn_scan1")
        assert sorted(blocks) == list(range(s.chunks))
        data = b"".join(blocks[k] for k in sorted(blocks))
    assert len(left_out(frames_of(sent_file), frames_of(data))) == d.kernel_drops
    # The chunk the disk failed went to another disk; those written before to the failed disk
    # were written back without error, and its file's closing sync made them durable.
    assert_all_on_disk(s)
    failed = s.disks[1]
    assert failed.dropped is not None and "Input/output error" in failed.dropped
    assert failed.bytes <= 3 << 20 and s.disks[0].dropped is None and s.disks[2].dropped is None
    assert any(str(ds[1]) in note and "left the set" in note for note in s.notes)
    # Nothing half-written stays on the failed disk.
    if fmt == "vbs":
        assert all(p.stat().st_size % FS == 0 for p in (ds[1] / "kvn_scan1").glob("kvn_scan1.0*"))


@pytest.mark.slow
def test_when_every_disk_fills_the_scan_says_exactly_what_was_dropped(tmp_path: Path) -> None:
    ds = disks(tmp_path, 2)
    _, s, run, d = record(
        tmp_path,
        dict(disks=[str(x) for x in ds], chunk_size="1MiB", disk_faults={str(ds[0]): "full@2MiB", str(ds[1]): "full@3MiB"}),
        dict(frames=10_000, fps=FPS, **START),
    )
    n = 10_000 - d.kernel_drops
    on_disk = sum(p.stat().st_size for x in ds for p in (x / "kvn_scan1").glob("kvn_scan1.0*"))
    # With no disk left the scan closed by itself: what it took is written or dropped, and the
    # rest of the stream arrived outside any scan.
    assert s.bytes_written == on_disk and s.bytes_written + s.bytes_dropped_disk == s.bytes_buffered == s.frames * FS
    assert s.frames < n and run.bytes_buffered == n * FS == s.bytes_buffered + run.bytes_outside_scans
    assert any("scan kvn_scan1 closed: no disk is left in the set" in x for x in s.notes), s.notes
    assert 0 < s.bytes_written <= 5 << 20 and s.bytes_dropped_disk > 0
    assert all(x.dropped and "No space left" in x.dropped for x in s.disks)
    assert s.error is not None and "no disk is left" in s.error
    assert s.invariant_holds and run.invariant_holds and not run.ok
    # The chunks that did reach the disks are whole; those missing are what was dropped (with
    # two writers a chunk retried after a full disk can be the one lost, a later one kept).
    on_disk = vbs_chunks(ds, "kvn_scan1")
    assert set(on_disk) <= set(range(s.chunks)) and len(on_disk) < s.chunks
    assert all(p.stat().st_size % FS == 0 for p in on_disk.values())
    # What is known to be on disk is the chunks from 0 up to the first one dropped: a chunk
    # after that gap is on disk, but the scan is not whole up to it.
    gap = min(set(range(s.chunks)) - set(on_disk))
    prefix = sum(on_disk[k].stat().st_size for k in range(gap))
    assert s.durable_bytes == prefix == s.durable_frames * FS <= s.bytes_written
    assert (s.durable_up_to is None) == (gap == 0) and not s.ok


@pytest.mark.slow
def test_the_last_disk_keeps_the_whole_frames_that_fitted(tmp_path: Path) -> None:
    """The only disk fills in the middle of a chunk: the frames that fitted stay, as a shorter
    chunk cut at its last whole frame, synced, counted written and durable; the rest is
    dropped, and the scan on disk is what was sent, up to there."""
    ds = disks(tmp_path, 1)
    limit = (2 << 20) + (1 << 19)  # two chunks and half of a third
    sent_file = tmp_path / "sent.vdif"
    _, s, _, d = record(
        tmp_path,
        dict(disks=[str(ds[0])], format="vbs", chunk_size="1MiB", disk_faults={str(ds[0]): f"full@{limit}"}),
        dict(frames=6000, fps=FPS, record_sent=sent_file, **START),
    )
    chunks = vbs_chunks(ds, "kvn_scan1")
    sizes = [chunks[k].stat().st_size for k in sorted(chunks)]
    assert sorted(chunks) == [0, 1, 2] and sizes[2] == (limit - sizes[0] - sizes[1]) // FS * FS > 0, sizes
    assert s.bytes_written == sum(sizes) == s.durable_bytes == s.durable_frames * FS, s
    assert s.bytes_written + s.bytes_dropped_disk == s.bytes_buffered and s.chunks >= 3
    assert any("chunk 2 kept on" in n for n in s.notes), s.notes
    # What is on disk is the stream as sent, from the scan's first frame on, whole frames.
    data = gather_vbs(ds, "kvn_scan1")
    sent = sent_file.read_bytes()
    if d.kernel_drops == 0:
        assert data == sent[:len(data)]


@pytest.mark.slow
def test_a_summary_no_disk_takes_is_said_in_the_status(tmp_path: Path) -> None:
    """The only disk is full to the last byte: nothing of the scan fits, nor its summary; the
    summary's notes and /status say so. Needs the right to mount (root, CAP_SYS_ADMIN)."""
    import json
    import urllib.request

    ds = disks(tmp_path, 1)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(ds[0])], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        fd = os.open(ds[0] / "ballast", os.O_WRONLY | os.O_CREAT)
        try:
            for _ in range(1024):  # 1 MiB at most
                os.write(fd, bytes(1024))
        except OSError:
            pass  # full to the last byte
        finally:
            os.close(fd)
        rec = vdifrec.Recorder(port=0, ring="16MiB", frame_size=FS, disks=[str(ds[0])], format="vbs",
                               chunk_size="1MiB", status_listen="127.0.0.1:0")
        rec.start()
        try:
            rec.start_scan("kvn_scan1")
            vdifrec.send(rec.address, frames=300, fps=FPS, **START)
            s = rec.stop_scan() if rec.scan else rec.wait_scan(10)
            assert s is not None and s.bytes_written == 0 and s.frames > 0
            assert any(n.startswith("the scan's summary could not be written on any disk") for n in s.notes), s.notes
            assert rec.status_address is not None
            h, port = rec.status_address
            with urllib.request.urlopen(f"http://{h}:{port}/status", timeout=10) as r:
                doc = json.loads(r.read())
            assert "scan kvn_scan1: the scan's summary could not be written on any disk" in doc["scan_ended"], doc
        finally:
            rec.stop()
        # Nothing of it is on the disk (at most the directory its first chunk was to go in).
        assert not (ds[0] / "kvn_scan1").exists() or list((ds[0] / "kvn_scan1").iterdir()) == []
    finally:
        subprocess.run(["umount", str(ds[0])], check=False)


@pytest.mark.slow
def test_a_disk_that_really_fills_leaves_the_set(tmp_path: Path) -> None:
    """A small tmpfs as one of the disks: it fills for real (ENOSPC), leaves the set, and the
    scan goes on on the other disk. Needs the right to mount (root, CAP_SYS_ADMIN)."""
    ds = disks(tmp_path, 2)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(ds[0])], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        sent_file = tmp_path / "sent.vdif"
        _, s, run, d = record(
            tmp_path,
            dict(disks=[str(x) for x in ds], chunk_size="1MiB", writers=1, direct=False),
            dict(frames=6_000, fps=FPS, record_sent=sent_file, **START),
        )
        assert s.invariant_holds and s.bytes_dropped_disk == 0
        assert s.disks[0].dropped is not None and "No space left" in s.disks[0].dropped
        assert s.disks[1].dropped is None
        data = gather_vbs(ds, "kvn_scan1")
        assert len(left_out(frames_of(sent_file), frames_of(data))) == d.kernel_drops
    finally:
        subprocess.run(["umount", str(ds[0])], check=False)


def test_a_missing_last_chunk_is_a_gap_too(tmp_path: Path) -> None:
    """The recorder's summary beside the scan says how many chunks it wrote: a reader given
    disks without the last ones reports them missing rather than a shorter scan."""
    ds = disks(tmp_path, 2)
    _, s, _, _ = record(tmp_path, dict(disks=[str(x) for x in ds], chunk_size="1MiB"), dict(frames=3000, fps=FPS, **START))
    chunks = vbs_chunks(ds, "kvn_scan1")
    last = max(chunks)
    assert last + 1 == s.chunks
    chunks[last].unlink()
    with pytest.raises(vdifrec.GapError, match=f"chunk {last} missing"):
        vdifrec.open("kvn_scan1", disks=[str(x) for x in ds])
    listed = vdifrec.scans([str(x) for x in ds])
    assert [x["missing"] for x in listed if x["name"] == "kvn_scan1"] == [[last]]
    # The recorder closed it: its summary lies beside it (a lost chunk does not change that).
    assert [x["closed"] for x in listed if x["name"] == "kvn_scan1"] == [True]
    # With only the first chunk left, the error counts the scan's parts from its summary.
    for k in range(1, last):
        chunks[k].unlink()
    with pytest.raises(vdifrec.GapError, match=rf"^scan kvn_scan1 \(vbs.*\) lacks chunk\(s\) 1-{last} of 0-{last}: "):
        vdifrec.convert("kvn_scan1", tmp_path / "converted.vdif", disks=[str(x) for x in ds])
    assert not (tmp_path / "converted.vdif").exists()


FILE_PART_RE = re.compile(r"^kvn_scan1(?:\.([0-9]{4,}))?\.vdif$")


@pytest.mark.slow
def test_a_file_scan_rotates_by_size_and_reads_back_whole(tmp_path: Path) -> None:
    """`file_size` rotates a file scan: `<scan>.vdif`, `<scan>.0001.vdif`, ... each at most the
    size, of whole frames, together exactly the frames received; read back as one stream (baseband
    on the same bytes as the oracle); a part taken away is a named gap."""
    import astropy.units as u
    from baseband import vdif

    ds = disks(tmp_path, 1)
    sent_file = tmp_path / "sent.vdif"
    _, s, run, d = record(
        tmp_path,
        dict(disks=[str(ds[0])], file_size="3MiB"),
        dict(frames=3_000, fps=FPS, record_sent=sent_file, **START),
    )
    assert s.format == "file" and s.invariant_holds and run.invariant_holds
    # 3 MiB holds 382 frames; files hold whole aligned runs of 128: 256 frames.
    assert s.file_size == 256 * FS
    parts = {}
    for f in ds[0].iterdir():
        m = FILE_PART_RE.match(f.name)
        if m:
            parts[int(m.group(1) or 0)] = f
    assert sorted(parts) == list(range(len(parts))) and len(parts) == len(s.files) >= 2
    assert [f.path for f in s.files] == [str(parts[k]) for k in sorted(parts)]
    sizes = [parts[k].stat().st_size for k in sorted(parts)]
    assert all(x <= 3 << 20 and x % FS == 0 for x in sizes) and sum(sizes) == s.bytes_written
    # Each part's chunks are on disk once the next part's first chunk closed it, the last
    # part's when the scan closed.
    assert_all_on_disk(s)
    data = b"".join(parts[k].read_bytes() for k in sorted(parts))
    sent_frames = frames_of(sent_file)
    missing = left_out(sent_frames, frames_of(data))
    assert len(missing) == d.kernel_drops
    whole = tmp_path / "whole.vdif"
    whole.write_bytes(data)
    with open(whole, "rb") as f:
        spf = vdif.VDIFHeader.fromfile(f).samples_per_frame
    with warnings.catch_warnings():
        # Where the kernel dropped frames (a small socket buffer), baseband warns of each frame
        # set missing and gives it as invalid samples.
        if d.kernel_drops:
            warnings.filterwarnings("ignore", "problem loading frame set", UserWarning)
        with vdif.open(str(whole), "rs", sample_rate=FPS * spf * u.Hz) as bb:
            want = bb.read()
    if missing:
        # vdifrec reads the frames recorded one after the other; baseband gives each frame the
        # kernel dropped as invalid samples in its place: those come out to compare.
        first = min(set(range(len(sent_frames))) - set(missing))
        keep = np.ones(len(want), bool)
        for j in missing:
            if j > first:
                keep[(j - first) * spf:(j - first + 1) * spf] = False
        want = want[keep]
    with vdifrec.open("kvn_scan1", disks=[str(ds[0])], sample_rate=FPS * spf) as fh:
        assert len(fh.frames) == len(parts)
        np.testing.assert_array_equal(fh.read(), want)
    listed = vdifrec.scans([str(ds[0])])
    assert [(x["name"], x["format"], x["chunks"]) for x in listed] == [("kvn_scan1", "file", len(parts))]
    parts[1].unlink()
    with pytest.raises(vdifrec.GapError, match="file 1 missing"):
        vdifrec.open("kvn_scan1", disks=[str(ds[0])], sample_rate=FPS * spf)
    with pytest.raises(vdifrec.ArgumentError, match=r"^file_size: rotates file scans"):
        vdifrec.Recorder(disks=[str(ds[0])], format="vbs", file_size="3MiB")


def test_scan_names_are_checked_and_never_overwrite(tmp_path: Path) -> None:
    ds = disks(tmp_path, 2)
    (ds[1] / "taken").mkdir()
    with vdifrec.Recorder(port=0, ring="64MiB", frame_size=FS, disks=[str(x) for x in ds]) as rec:
        for bad in ["", "a.b", "a/b", "x" * 65, "white space"]:
            with pytest.raises(vdifrec.ArgumentError, match=r"^name: "):
                rec.start_scan(bad)
        assert rec.start_scan("taken") == "takena"
        with pytest.raises(vdifrec.RecorderError, match="takena is running"):
            rec.start_scan("other")
        rec.stop_scan()
        assert rec.start_scan("taken") == "takenb"
        rec.stop_scan()
        with pytest.raises(vdifrec.ArgumentError, match=r"^start: "):
            rec.start_scan("t", start="yesterday")
    with pytest.raises(vdifrec.ArgumentError, match=r"^disks: "):
        vdifrec.Recorder(disks=[str(tmp_path / "nothing*")])
    with pytest.raises(vdifrec.ArgumentError, match=r"^format: "):
        vdifrec.Recorder(disks=[str(x) for x in ds], format="file")


@pytest.mark.slow
def test_two_senders_into_one_port_are_one_stream(tmp_path: Path) -> None:
    ds = disks(tmp_path, 2)
    rec = vdifrec.Recorder(port=0, ring=ring_holding(10_000), frame_size=FS, disks=[str(x) for x in ds],
                           chunk_size="1MiB")
    rec.start()
    rec.start_scan("two")
    a = vdifrec.send(rec.address, frames=5_000, fps=FPS, record_sent=tmp_path / "a.vdif", station=1, **START)
    b = vdifrec.send(rec.address, frames=5_000, fps=FPS, record_sent=tmp_path / "b.vdif", station=2, **START)
    d = delivered(rec.address, a["frames_sent"] + b["frames_sent"], lambda: rec.stats().datagrams)
    s = rec.stop_scan()
    rec.stop()
    data = frames_of(gather_vbs(ds, "two"))
    station = np.ascontiguousarray(data[:, 12:16]).view("<u4")[:, 0] & 0xFFFF
    lost = len(left_out(frames_of(tmp_path / "a.vdif"), data[station == 1]))
    lost += len(left_out(frames_of(tmp_path / "b.vdif"), data[station == 2]))
    assert lost == d.kernel_drops and s.frames == 10_000 - d.kernel_drops and s.invariant_holds
    # Both senders' thread 0, of two stations: two threads, never duplicates of each other.
    assert s.frames_duplicate == 0 and s.frames_lost == d.kernel_drops
    assert sorted((t["station"], t["thread"]) for t in s.threads) == [("1", 0), ("2", 0)]


@pytest.mark.slow
def test_two_stations_in_one_port_are_counted_apart_and_named_in_the_table(tmp_path: Path) -> None:
    from vdifrec.cli.printing import HEADER, row_line

    rec = vdifrec.Recorder(port=0, ring="64MiB", frame_size=FS, fps=FPS)
    rec.start()
    # Both at once, as two stations' recorders would send: each second holds both.
    senders = [
        vdifrec.Sender(rec.address, frames=20_000, fps=FPS, station="Kv", **START),
        vdifrec.Sender(rec.address, frames=20_000, fps=FPS, station="Ku", drop="0:100-149", **START),
    ]
    sent = [x.wait(timeout=30) for x in senders]
    assert all(x is not None for x in sent)
    d = delivered(rec.address, sum(x["frames_sent"] for x in sent if x), lambda: rec.stats().datagrams)
    summary = rec.stop()
    rows = list(rec.seconds(timeout=0))
    assert summary.frames_duplicate == 0
    per = {(t["station"], t["thread"]): t for t in summary.threads}
    assert sorted(per) == [("Ku", 0), ("Kv", 0)]
    if d.kernel_drops == 0:
        assert (per[("Kv", 0)]["received"], per[("Kv", 0)]["lost"]) == (20_000, 0)
        assert (per[("Ku", 0)]["received"], per[("Ku", 0)]["lost"]) == (19_950, 50)
    assert HEADER.endswith("Station")
    assert rows and all(r.stations == ["Kv", "Ku"] or r.stations == ["Ku", "Kv"] for r in rows)
    assert all(row_line(r).split()[-1] in ("Kv+Ku", "Ku+Kv") for r in rows)


@pytest.mark.slow
def test_split_by_thread_writes_one_exact_scan_per_thread(tmp_path: Path) -> None:
    ds = disks(tmp_path, 3)
    sent_file = tmp_path / "sent.vdif"
    _, s, run, d = record(
        tmp_path,
        dict(disks=[str(x) for x in ds], split="thread", chunk_size="1MiB", fps=2500),
        dict(frames=20_000, fps=2500, threads=4, record_sent=sent_file, **START),
        scan=dict(name="kvn_scan1"),
    )
    sent = frames_of(sent_file)
    thread = vdif_keys(sent)[0]
    assert sorted(x["key"] for x in s.data_streams) == ["0", "1", "2", "3"]
    lost = 0
    for x in s.data_streams:
        assert x["name"] == f"kvn_scan1_ds{x['key']}"
        data = frames_of(gather_vbs(ds, x["name"]))
        assert (vdif_keys(data)[0] == int(x["key"])).all()
        lost += len(left_out(sent[thread == int(x["key"])], data))
        assert x["frames"] == len(data) and x["bytes_written"] == len(data) * FS
        # Each data stream's chunks are numbered, and known on disk, on their own.
        assert (x["durable_frames"], x["durable_bytes"]) == (x["frames"], x["bytes_written"])
        assert x["durable_up_to"] is not None
        # Each data stream has its summary beside it.
        assert any((disk / x["name"] / f"{x['name']}.summary.json").exists() for disk in ds)
    assert lost == d.kernel_drops and s.invariant_holds and run.invariant_holds
    # The scan is on disk up to where every data stream is.
    assert (s.durable_frames, s.durable_bytes) == (s.frames, s.bytes_written)
    assert s.durable_up_to == min(x["durable_up_to"] for x in s.data_streams)
    # A later scan of the same name gets the suffix: the data streams hold the name.
    with vdifrec.Recorder(port=0, ring="64MiB", frame_size=FS, disks=[str(x) for x in ds], split="thread") as rec:
        assert rec.start_scan("kvn_scan1") == "kvn_scan1a"


@pytest.mark.slow
def test_two_ports_are_two_streams_each_exact(tmp_path: Path) -> None:
    ds = disks(tmp_path, 2)
    # A ring each (64 MiB: 8064 frames): each holds its stream whole, however slow the disks.
    rec = vdifrec.Recorder(ports=[0, "0@127.0.0.1"], ring="64MiB", frame_size=FS, disks=[str(x) for x in ds], chunk_size="1MiB")
    rec.start()
    assert len(rec.addresses) == 2 and rec.addresses[0] != rec.addresses[1]
    rec.start_scan("two")
    drops = 0
    for k, address in enumerate(rec.addresses):
        vdifrec.send(address, frames=6000, fps=FPS, record_sent=tmp_path / f"s{k}.vdif", station=k + 1, **START)
    for address in rec.addresses:
        drops += delivered(address, 6000).kernel_drops
    s = rec.stop_scan()
    run = rec.stop()
    data = frames_of(gather_vbs(ds, "two"))
    station = np.ascontiguousarray(data[:, 12:16]).view("<u4")[:, 0] & 0xFFFF
    lost = sum(len(left_out(frames_of(tmp_path / f"s{k}.vdif"), data[station == k + 1])) for k in range(2))
    assert lost == drops == run.kernel_drops
    assert s.frames == 12_000 - drops and s.invariant_holds and run.invariant_holds
    assert [x["port"] for x in s.streams] == [a[1] for a in rec.addresses]
    assert [x["port"] for x in run.streams] == [a[1] for a in rec.addresses]
    assert run.frames_received == sum(x["frames_received"] for x in run.streams) == 12_000 - drops
    # One row per stream per second.
    for _, port in rec.addresses:
        assert sorted(r.vdif_seconds for r in run.seconds if r.stream == port) == [2000]


@pytest.mark.slow
def test_status_and_metrics_name_each_stream() -> None:
    import urllib.request

    with vdifrec.Recorder(port="0,0", ring="64MiB", frame_size=FS, status_listen="127.0.0.1:0") as rec:
        for k, address in enumerate(rec.addresses):
            vdifrec.send(address, frames=1000 * (k + 1), fps=FPS, **START)
        for k, address in enumerate(rec.addresses):
            delivered(address, 1000 * (k + 1))
        assert rec.status_address is not None
        host, port = rec.status_address
        status = json.loads(urllib.request.urlopen(f"http://{host}:{port}/status", timeout=5).read())
        metrics = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read().decode()
        stats = rec.stats()
    streams = status["stats"]["streams"] if "stats" in status else status["streams"]
    got = {x["port"]: x["frames_received"] + x["kernel_drops"] for x in streams}
    assert got == {rec.addresses[0][1]: 1000, rec.addresses[1][1]: 2000}
    assert stats.frames_received == sum(x["frames_received"] for x in stats.streams)
    for x in streams:
        assert f'vdifrec_stream_frames_received_total{{stream="{x["port"]}"}} {x["frames_received"]}' in metrics


def test_several_streams_need_scans_or_monitoring(tmp_path: Path) -> None:
    with pytest.raises(vdifrec.ArgumentError, match="^port: several streams are written as scans"):
        vdifrec.Recorder(port="0,0", path=tmp_path / "x.vdif")
    with pytest.raises(vdifrec.ArgumentError, match="^port: 46227 is given twice"):
        vdifrec.Recorder(port="46227,46227")
    with pytest.raises(vdifrec.ArgumentError, match="^ports: give port or ports"):
        vdifrec.Recorder(port=5, ports=[6])


@pytest.mark.slow
def test_split_by_sender_writes_one_exact_scan_per_sender(tmp_path: Path) -> None:
    ds = disks(tmp_path, 2)
    rec = vdifrec.Recorder(port=0, ring=ring_holding(9000), frame_size=FS, disks=[str(x) for x in ds], split="sender",
                           chunk_size="1MiB")
    rec.start()
    rec.start_scan("by")
    drops = 0
    # One sender after the other: the first to arrive is data stream 0.
    for k in range(2):
        sent = vdifrec.send(rec.address, frames=4000 + 1000 * k, fps=FPS, record_sent=tmp_path / f"s{k}.vdif", **START)
        # The socket's drops so far, both senders' (the kernel counts them per socket).
        drops = delivered(rec.address, sent["frames_sent"]).kernel_drops
    s = rec.stop_scan()
    rec.stop()
    lost = 0
    for k in range(2):
        data = frames_of(gather_vbs(ds, f"by_ds{k}"))
        lost += len(left_out(frames_of(tmp_path / f"s{k}.vdif"), data))
    assert lost == drops and s.invariant_holds
    assert sorted(x["name"] for x in s.data_streams) == ["by_ds0", "by_ds1"]
    assert any(n.startswith("data stream by_ds1: frames from 127.0.0.1:") for n in s.notes)


@pytest.mark.slow
def test_record_command_writes_a_scan(tmp_path: Path) -> None:
    ds = disks(tmp_path, 2)
    sent_file = tmp_path / "sent.vdif"
    port_file = tmp_path / "out.txt"
    with open(port_file, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vdifrec.cli", "record", "--port", "0", "--disk", str(tmp_path / "disk*"), "--scan", "kvn_scan1",
             "--format", "mk6", "--chunk-size", "1MiB", "--frames", "8000", "--frame-size", str(FS),
             "--ring", "64MiB", "--quiet", "--summary-json", str(tmp_path / "s.json")],
            stdout=out, stderr=subprocess.STDOUT, text=True,
        )
    try:
        port = int(output_line(port_file, r"listening on [0-9.]+:(\d+)", proc=proc).group(1))
        vdifrec.send(("127.0.0.1", port), frames=8000, fps=FPS, record_sent=sent_file, **START)
        # Ends by itself at 8000 frames; a kernel drop would leave it waiting: bounded.
        try:
            rc = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.terminate()
            rc = proc.wait(timeout=20)
    finally:
        proc.kill() if proc.poll() is None else None
    text = port_file.read_text()
    assert "scan kvn_scan1: recording" in text and "Scan kvn_scan1 (mk6)" in text, text
    s = json.loads((tmp_path / "s.json").read_text())
    blocks, _ = mk6_blocks(ds, "kvn_scan1")
    data = b"".join(blocks[k] for k in sorted(blocks))
    assert len(data) == s["scans"][0]["bytes_written"] == s["bytes_written"]
    assert len(left_out(frames_of(sent_file), frames_of(data))) == 8000 - s["frames_received"]
    if s["frames_received"] == 8000:
        assert rc == 0 and s["ok"] and s["scans"][0]["ok"]
    else:  # the kernel dropped frames: stopped by the bound above, not by --frames
        assert s["kernel_drops"] > 0


@pytest.mark.slow
def test_record_command_names_the_scan_flags() -> None:
    r = run_cli("record", "--port", "0", "--disk", "/tmp", "--scan", "a.b", "--frame-size", str(FS), "--ring", "64MiB")
    assert r.returncode == 2 and "--scan" in r.stderr, r.stderr
    r = run_cli("record", "--port", "0", "--disk", "/tmp")
    assert r.returncode == 2 and "--scan NAME" in r.stderr
    r = run_cli("record", "--port", "0", "--scan", "x")
    assert r.returncode == 2 and "--disk" in r.stderr
    r = run_cli("record", "--port", "0", "--disk", "/tmp", "--scan", "x", "--format", "vbs", "--file-size", "3MiB")
    assert r.returncode == 2 and "--file-size: rotates file scans" in r.stderr, r.stderr
