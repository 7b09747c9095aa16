"""Scans on several disks read back: layouts written here by hand (an independent writer,
following docs/reference/formats/layouts.md) from a file `vdifrec.generate` made; baseband
reading that file is the oracle for samples, its bytes the oracle for `gather`."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from baseband import vdif

import vdifrec

FS = 32 + 1024  # small frames keep the files small
FPS = 50
THREADS = 2
# 400 frames (200 frame sets of 2 threads, 4 seconds) in parts of varying size, first and
# last short as a recorder's often are.
PARTS = [37, 100, 64, 99, 50, 50]
STARTS = np.cumsum([0] + PARTS)
MK6_SYNC = 0xFEED6666


def original(tmp_path: Path, edv: int = 0, name: str = "original.vdif", fps: int = FPS) -> Path:
    path = tmp_path / name
    vdifrec.generate(path, seconds=200 / fps, fps=fps, frame_size=FS, threads=THREADS, nchan=2, edv=edv,
                     ref_epoch=53, start_second=1000, seed=7)
    assert path.stat().st_size == 400 * FS
    return path


def make_disks(tmp_path: Path, n: int = 3) -> list[Path]:
    disks = [tmp_path / f"disk{i}" for i in range(n)]
    for d in disks:
        d.mkdir()
    return disks


def part_bytes(data: bytes, k: int) -> bytes:
    return data[STARTS[k] * FS:STARTS[k + 1] * FS]


def write_vbs(data: bytes, disks: list[Path], scan: str, order: list[int]) -> None:
    """Chunk k as <disk>/<scan>/<scan>.<k, 8 digits> on disk order[k]."""
    for k in range(len(PARTS)):
        d = disks[order[k]] / scan
        d.mkdir(exist_ok=True)
        (d / f"{scan}.{k:08d}").write_bytes(part_bytes(data, k))


def write_mk6(data: bytes, disks: list[Path], scan: str, order: list[int]) -> list[Path]:
    """Block k on disk order[k]: <disk>/<scan> holds a 20-byte file header, then each block's
    [i32 blocknum, i32 wb_size] and frames. A disk that gets no block gets no file."""
    block_size = 8 + max(PARTS) * FS
    files: dict[int, bytearray] = {}
    for k in range(len(PARTS)):
        f = files.setdefault(order[k], bytearray(struct.pack("<Iiiii", MK6_SYNC, 2, block_size, 0, FS)))
        payload = part_bytes(data, k)
        f += struct.pack("<ii", k, 8 + len(payload)) + payload
    paths = []
    for i, content in sorted(files.items()):
        (disks[i] / scan).write_bytes(bytes(content))
        paths.append(disks[i] / scan)
    return paths


def baseband_samples(path: Path) -> np.ndarray:
    with vdif.open(str(path), "rs") as bb:
        return bb.read()


# Chunks rotate over the disks out of order; Mark6 blocks go to disks 1 and 2 in a shuffled
# order (disk 0 gets none, so has no file).
VBS_ORDER = [2, 0, 1, 1, 2, 0]
MK6_ORDER = [2, 1, 1, 2, 1, 2]


@pytest.mark.parametrize("fmt", ["vbs", "mk6"])
def test_scan_reads_as_the_file_does(tmp_path: Path, fmt: str) -> None:
    orig = original(tmp_path)
    data = orig.read_bytes()
    disks = make_disks(tmp_path)
    if fmt == "vbs":
        write_vbs(data, disks, "kvn_scan1", VBS_ORDER)
        # Not the scan's: its summary, a stray file, a chunk number of 7 digits.
        (disks[0] / "kvn_scan1" / "kvn_scan1.summary.json").write_text("{}")
        (disks[0] / "kvn_scan1" / "notes.txt").write_text("x")
        (disks[1] / "kvn_scan1" / "kvn_scan1.0000009").write_bytes(data[:FS])
    else:
        write_mk6(data, disks, "kvn_scan1", MK6_ORDER)
        (disks[1] / "kvn_scan1.summary.json").write_text("{}")
    want = baseband_samples(orig)
    with vdifrec.open("kvn_scan1", disks=[str(d) for d in disks]) as fh, vdifrec.open(orig) as ff:
        assert fh.name == "kvn_scan1" and fh.disks == [str(d) for d in disks]
        assert fh.shape == ff.shape == want.shape
        assert fh.sample_rate == ff.sample_rate == FPS * fh.samples_per_frame
        assert fh.start_time == ff.start_time
        np.testing.assert_array_equal(fh.read(), want)
        # Reads that cross part boundaries (chunk 0 ends inside frame set 18).
        spf = fh.samples_per_frame
        fh.seek(17 * spf + 3)
        np.testing.assert_array_equal(fh.read(2 * spf), want[17 * spf + 3:19 * spf + 3])
        parts = fh.frames
        assert isinstance(parts, list)
        assert [len(p) for p in parts] == PARTS
        assert all(not p.flags.writeable for p in parts)
        assert np.concatenate(parts).tobytes() == data
        # Spectrum, fringe and bit states decode the same frames as the file's.
        fh.seek(0)
        s_scan, s_file = vdifrec.spectrum(fh, nfft=64), vdifrec.spectrum(ff, nfft=64)
        np.testing.assert_array_equal(s_scan.power, s_file.power)
        f_scan, f_file = vdifrec.fringe(fh, fh, nfft=64, pair=(0, 2)), vdifrec.fringe(ff, ff, nfft=64, pair=(0, 2))
        assert (f_scan.delay_samples, f_scan.amplitude) == (f_file.delay_samples, f_file.amplitude)
        np.testing.assert_array_equal(vdifrec.bstate(fh).counts, vdifrec.bstate(ff).counts)
    # The format forced gives the same; the other format finds nothing.
    with vdifrec.open("kvn_scan1", disks=[str(d) for d in disks], format=fmt) as fh:
        assert fh.shape == want.shape
    other = "mk6" if fmt == "vbs" else "vbs"
    with pytest.raises(FileNotFoundError, match=f"no scan kvn_scan1 in format {other}"):
        vdifrec.open("kvn_scan1", disks=[str(d) for d in disks], format=other)


@pytest.mark.parametrize("fmt", ["vbs", "mk6"])
def test_gather_is_byte_identical(tmp_path: Path, fmt: str, cli) -> None:
    orig = original(tmp_path)
    data = orig.read_bytes()
    disks = make_disks(tmp_path)
    (write_vbs if fmt == "vbs" else write_mk6)(data, disks, "s1", VBS_ORDER if fmt == "vbs" else MK6_ORDER)
    out = tmp_path / "out.vdif"
    r = vdifrec.gather("s1", [str(tmp_path / "disk*")], out)
    assert out.read_bytes() == data
    assert (r["bytes"], r["parts"], r["missing"], r["complete"], r["format"]) == (len(data), 6, [], True, fmt)
    # The command line, with a glob for the disks; it never overwrites.
    out2 = tmp_path / "out2.vdif"
    res = cli("gather", "s1", "--disk", str(tmp_path / "disk*"), "-o", str(out2))
    assert res.returncode == 0, res.stderr
    assert out2.read_bytes() == data
    assert f"wrote {out2}: {len(data)} bytes from 6 part(s) of scan s1 ({fmt})" in res.stdout
    res = cli("gather", "s1", "--disk", str(tmp_path / "disk*"), "-o", str(out2))
    assert res.returncode == 2
    assert "exists: gather never overwrites" in res.stderr
    with pytest.raises(FileExistsError):
        vdifrec.gather("s1", [str(d) for d in disks], out)


def test_scans_lists_exact_sizes_counts_and_times(tmp_path: Path, cli) -> None:
    data = original(tmp_path).read_bytes()
    # EDV 3 headers carry the rate in whole kHz: 250 frames/s of 2048 samples is 512 kHz.
    edv3 = original(tmp_path, edv=3, name="edv3.vdif", fps=250).read_bytes()
    disks = make_disks(tmp_path, 4)
    write_vbs(data, disks, "a_vbs", VBS_ORDER)
    write_mk6(edv3, disks, "b_mk6", MK6_ORDER)
    (disks[3] / "c_file.vdif").write_bytes(data[:10 * FS])
    (disks[3] / "c_file.summary.json").write_text("{}")
    (disks[3] / "README").write_text("not a scan")
    found = vdifrec.scans(str(tmp_path / "disk*"))
    assert [(s["name"], s["format"]) for s in found] == [("a_vbs", "vbs"), ("b_mk6", "mk6"), ("c_file", "file")]
    a, b, c = found
    assert a["disks"] == [str(d) for d in disks[:3]]
    assert b["disks"] == [str(disks[1]), str(disks[2])]
    assert c["disks"] == [str(disks[3])]
    assert [(s["bytes"], s["chunks"], s["missing"], s["frame_size"], s["error"]) for s in found] == [
        (400 * FS, 6, [], FS, None),
        (400 * FS, 6, [], FS, None),
        (10 * FS, 1, [], FS, None),
    ]
    # Epoch 53 starts 2026-07-01; second 1000 is 00:16:40. Frame 199 at 250 frames/s is
    # 0.796 s in, known from an EDV 3 header (which carries the rate); from EDV 0 only the
    # second is.
    assert a["first"] == {"ref_epoch": 53, "seconds": 1000, "frame": 0, "thread": 0,
                          "time": "2026-07-01T00:16:40.000000000"}
    assert a["last"] == {"ref_epoch": 53, "seconds": 1003, "frame": 49, "thread": 1, "time": "2026-07-01T00:16:43"}
    assert b["last"] == {"ref_epoch": 53, "seconds": 1000, "frame": 199, "thread": 1,
                         "time": "2026-07-01T00:16:40.796000000"}
    assert (c["last"]["seconds"], c["last"]["frame"], c["last"]["thread"]) == (1000, 4, 1)
    res = cli("scans", "--disk", str(tmp_path / "disk*"))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:4] == ["name", "format", "size", "chunks"]
    assert lines[1].split() == ["a_vbs", "vbs", "422.40", "kB", "6", "2026-07-01T00:16:40.000000000",
                                "2026-07-01T00:16:43", "-"]
    # Written here, not by a recorder: no summary beside them, so never closed, and said so.
    assert [x["closed"] for x in found] == [False] * len(found)
    assert lines[2].strip() == ("never closed: no summary beside it (a recorder stopped mid-scan, or another "
                                "program wrote it)")
    js = cli("scans", "--disk", str(tmp_path / "disk*"), "--json")
    assert json.loads(js.stdout) == found


def test_a_missing_chunk_is_a_gap_not_garbage(tmp_path: Path, cli) -> None:
    data = original(tmp_path).read_bytes()
    disks = make_disks(tmp_path)
    write_vbs(data, disks, "s1", VBS_ORDER)
    (disks[VBS_ORDER[2]] / "s1" / "s1.00000002").unlink()
    d = [str(x) for x in disks]
    # Chunk 2 held frames 137..200: after frame 136 (second 1001, frame 18, thread 0), before
    # frame 201 (second 1002, frame 0, thread 1).
    with pytest.raises(vdifrec.GapError) as e:
        vdifrec.open("s1", disks=d)
    msg = str(e.value)
    assert "lacks chunk(s) 2 of 0-5" in msg
    assert "no frames after VDIF epoch 53 second 1001 frame 18 thread 0" in msg
    assert "until VDIF epoch 53 second 1002 frame 0 thread 1" in msg
    assert "look for them on more disks" in msg
    assert isinstance(e.value, vdifrec.FormatError)
    listed = vdifrec.scans(d)
    assert (listed[0]["chunks"], listed[0]["missing"], listed[0]["bytes"]) == (5, [2], 336 * FS)

    # check: the 64 frames of chunk 2 are lost (32 per thread), and the chunk is named.
    r = vdifrec.check("s1", disks=d)
    assert not r["clean"]
    assert r["frames"] == 336 and r["totals"]["lost"] == 64
    assert [t["lost"] for t in r["per_thread"]] == [32, 32]
    assert r["scan"]["missing"] == [2] and r["scan"]["part_word"] == "chunk"
    assert r["scan"]["gaps"][0]["after"]["frame"] == 18
    res = cli("check", "s1", "--disk", str(tmp_path / "disk*"))
    assert res.returncode == 1
    assert "missing      chunk 2 missing: no frames after VDIF epoch 53 second 1001 frame 18" in res.stdout

    # gather: refused without --allow-gaps (nothing written); with it, exactly the other chunks.
    out = tmp_path / "out.vdif"
    res = cli("gather", "s1", "--disk", str(tmp_path / "disk*"), "-o", str(out))
    assert res.returncode == 1 and "lacks chunk(s) 2" in res.stderr and "--allow-gaps" in res.stderr
    assert not out.exists()
    res = cli("gather", "s1", "--disk", str(tmp_path / "disk*"), "-o", str(out), "--allow-gaps")
    assert res.returncode == 1
    assert out.read_bytes() == b"".join(part_bytes(data, k) for k in (0, 1, 3, 4, 5))
    assert "missing      chunk 2 missing" in res.stdout
    assert f"incomplete   {out} lacks the frames of part(s) 2" in res.stdout


def test_broken_mark6_files_are_named_errors(tmp_path: Path, cli) -> None:
    data = original(tmp_path).read_bytes()
    disks = make_disks(tmp_path)
    paths = write_mk6(data, disks, "s1", MK6_ORDER)
    d = [str(x) for x in disks]
    # A block running past the end of its file (the last 10 bytes of disk 2's file cut): what a
    # writer stopped mid-block leaves, read to its last whole frame and named as torn.
    whole = paths[1].read_bytes()
    paths[1].write_bytes(whole[:-10])
    with vdifrec.open("s1", disks=d) as fh:
        (t,) = fh.torn
        assert (t["path"], t["part"], t["kind"], t["bytes"], t["frames"]) == (str(paths[1]), 5, "block_past_end", FS - 10, 49)
        assert re.search(r"block 5 of .*: its header claims 52,808 bytes, the file holds 49 whole frames of it, then", t["description"])
        assert np.concatenate(fh.frames).tobytes() == data[:399 * FS]
    # A block inside its file that is not whole frames is no torn write: the file is broken.
    # (Block 0, first in disk 2's file, 10 bytes short of its 37 frames, its size to match.)
    broken = bytearray(whole)
    del broken[20 + 8 + 37 * FS - 10:20 + 8 + 37 * FS]
    broken[24:28] = struct.pack("<i", 8 + 37 * FS - 10)
    paths[1].write_bytes(bytes(broken))
    with pytest.raises(vdifrec.FormatError, match=re.escape(f"{paths[1]}: block 0 holds {37 * FS - 10} bytes from byte 28, not whole frames of {FS} bytes")):
        vdifrec.open("s1", disks=d)
    paths[1].write_bytes(whole)
    # A corrupted sync word.
    bad = bytearray(paths[0].read_bytes())
    bad[0] ^= 0xFF
    paths[0].write_bytes(bytes(bad))
    with pytest.raises(vdifrec.FormatError, match=re.escape(f"{paths[0]}: bad Mark6 file header: not a Mark6 scatter-gather file: sync word")):
        vdifrec.open("s1", disks=d, format="mk6")
    # The listing names the broken scan instead of failing.
    listed = vdifrec.scans(d)
    assert len(listed) == 1 and "sync word" in listed[0]["error"]
    res = cli("scans", "--disk", d[0], "--disk", d[1], "--disk", d[2])
    assert res.returncode == 1 and "error: " in res.stdout
    res = cli("check", "s1", "--disk", d[0], "--disk", d[1], "--disk", d[2])
    assert res.returncode == 1 and "sync word" in res.stderr


def test_disk_arguments_and_names(tmp_path: Path, cli) -> None:
    data = original(tmp_path).read_bytes()
    disks = make_disks(tmp_path)
    write_vbs(data, disks, "s1", VBS_ORDER)
    nowhere = str(tmp_path / "nothing*")
    with pytest.raises(vdifrec.ArgumentError, match=re.escape(f'disks: "{nowhere}" matches no directory')):
        vdifrec.open("s1", disks=[nowhere])
    res = cli("scans", "--disk", nowhere)
    assert res.returncode == 2
    assert res.stderr.strip() == f'vdifrec scans: error: --disk: "{nowhere}" matches no directory: ' \
        "mount the disks, or check the pattern (quote it so the shell leaves it alone)"
    # A disk named twice (itself and through a glob) counts once.
    with vdifrec.open("s1", disks=[str(disks[1]), str(tmp_path / "disk*")]) as fh:
        assert fh.disks == [str(disks[1]), str(disks[0]), str(disks[2])]
        assert fh.shape[0] == 200 * fh.samples_per_frame
    with pytest.raises(vdifrec.ArgumentError, match="is not a directory"):
        vdifrec.scans([str(tmp_path / "original.vdif")])
    with pytest.raises(FileNotFoundError, match="no scan s2 on"):
        vdifrec.open("s2", disks=[str(d) for d in disks])
    res = cli("gather", "s2", "--disk", str(disks[0]), "-o", str(tmp_path / "o.vdif"))
    assert res.returncode == 2 and "no scan s2" in res.stderr
    with pytest.raises(vdifrec.ArgumentError, match='format: "vdif" is not a scan layout; use file, vbs or mk6'):
        vdifrec.open("s1", disks=[str(d) for d in disks], format="vdif")
    with pytest.raises(vdifrec.ArgumentError, match="format: 'vbs' applies to a scan"):
        vdifrec.open(tmp_path / "original.vdif", format="vbs")
    # A chunk cut short ends in part of a frame: torn (its writer stopped), read to its last
    # whole frame; a chunk in two places is a duplicate.
    chunk = disks[VBS_ORDER[4]] / "s1" / "s1.00000004"
    chunk.write_bytes(part_bytes(data, 4)[:-5])
    with vdifrec.open("s1", disks=[str(d) for d in disks]) as fh:
        (t,) = fh.torn
        assert (t["path"], t["part"], t["offset"], t["bytes"]) == (str(chunk), 4, 49 * FS, FS - 5)
        assert t["description"].startswith(f"chunk 4 of {chunk}: {FS - 5:,} bytes from byte {49 * FS:,} are part of a frame")
    chunk.write_bytes(part_bytes(data, 4))
    twin = disks[(VBS_ORDER[4] + 1) % 3] / "s1" / "s1.00000004"
    twin.write_bytes(part_bytes(data, 4))
    with pytest.raises(vdifrec.FormatError, match="chunk 4 of scan s1 is in two files"):
        vdifrec.open("s1", disks=[str(d) for d in disks])
