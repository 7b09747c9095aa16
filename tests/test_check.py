"""`vdifrec check` on files with injected faults: exact counts, exit codes, JSON keys."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import vdifrec

FS = 32 + 1024  # frame size used here: small frames keep the files small
FPS = 50


def frames_of(tmp_path: Path, threads: int = 1, seconds: float = 4.0) -> np.ndarray:
    path = tmp_path / "clean.vdif"
    vdifrec.generate(path, seconds=seconds, fps=FPS, frame_size=FS, threads=threads, ref_epoch=53, start_second=1000)
    return np.fromfile(path, dtype=np.uint8).reshape(-1, FS)


def write(path: Path, rows: list[np.ndarray] | np.ndarray, extra: bytes = b"") -> Path:
    path.write_bytes(b"".join(bytes(r) for r in rows) + extra)
    return path


def test_clean_file(tmp_path: Path, cli) -> None:
    f = frames_of(tmp_path, threads=2)
    path = write(tmp_path / "a.vdif", f)
    r = vdifrec.check(path)
    assert r["clean"] and r["frames"] == 400 and r["threads"] == [0, 1]
    assert r["frames_per_second"] == FPS and r["frames_per_second_source"] == "learned"
    assert [s["received"] for s in r["seconds"]] == [100, 100, 100, 100]
    assert all(th["received"] == 50 and th["expected"] == 50 for s in r["seconds"] for th in s["threads"])
    assert r["first_frame_time"].endswith("00:16:40.000000000")
    out = cli("check", str(path))
    assert out.returncode == 0 and "CLEAN" in out.stdout


def test_gaps_duplicates_reorder_garbage_counted_exactly(tmp_path: Path, cli) -> None:
    rows = list(frames_of(tmp_path))  # 200 frames, one thread, seconds 1000..1003
    dropped = set(range(60, 73)) | {130}  # 13 frames from second 1001, 1 from 1002
    out = [r for i, r in enumerate(rows) if i not in dropped]
    # Duplicate frame 20 right after itself; move frame 150 after frame 155.
    i20 = next(i for i, r in enumerate(out) if r is rows[20])
    out.insert(i20 + 1, rows[20])
    i150 = next(i for i, r in enumerate(out) if r is rows[150])
    moved = out.pop(i150)
    out.insert(i150 + 5, moved)
    garbage = np.frombuffer(np.random.default_rng(3).bytes(777), np.uint8)
    out.insert(100, garbage)
    path = write(tmp_path / "bad.vdif", out, extra=b"\x01\x02\x03\x04\x05")
    r = vdifrec.check(path)
    t = r["totals"]
    assert not r["clean"]
    assert t["lost"] == 14
    assert t["duplicates"] == 1
    assert t["out_of_order"] == 1
    assert r["frames"] == 200 - 14 + 1
    assert r["corrupt_bytes"] == 777 and r["corrupt_stretches"] == 1
    assert r["corrupt"][0]["offset"] == 100 * FS
    assert r["trailing_bytes"] == 5
    lost_per_second = {s["vdif_seconds"]: s["lost"] for s in r["seconds"]}
    assert lost_per_second == {1000: 0, 1001: 13, 1002: 1, 1003: 0}
    gaps = [(g["missing"], g["first_missing"][1], g["last_missing"][1]) for g in r["gaps"]]
    assert gaps == [(13, 10, 22), (1, 30, 30)]
    res = cli("check", str(path))
    assert res.returncode == 1
    assert "13 frames missing" in res.stdout and "777 bytes at offset" in res.stdout
    js = cli("check", "--json", str(path))
    assert js.returncode == 1
    assert json.loads(js.stdout)["totals"]["lost"] == 14


def test_invalid_frames_and_fps_given(tmp_path: Path) -> None:
    f = frames_of(tmp_path).copy()
    words = f[:, :4].view("<u4")
    words[[5, 6, 7], 0] |= np.uint32(1 << 31)
    path = write(tmp_path / "inv.vdif", f)
    r = vdifrec.check(path, fps=FPS)
    assert r["totals"]["invalid"] == 3 and r["totals"]["lost"] == 0 and not r["clean"]
    assert r["frames_per_second_source"] == "given"


def test_file_larger_than_one_read_chunk(tmp_path: Path) -> None:
    # 12 MiB crosses the 8 MiB read chunk; the fault straddles the boundary region.
    path = tmp_path / "big.vdif"
    vdifrec.generate(path, seconds=1.5, fps=1000, frame_size=8224, ref_epoch=53, start_second=5)
    f = np.fromfile(path, dtype=np.uint8).reshape(-1, 8224)
    keep = np.ones(len(f), bool)
    keep[1019:1021] = False  # around byte 8.38 MB
    path2 = write(tmp_path / "big2.vdif", f[keep])
    r = vdifrec.check(path2)
    assert r["totals"]["lost"] == 2 and r["frames"] == 1498 and r["corrupt_bytes"] == 0


def test_not_vdif_and_usage_errors(tmp_path: Path, cli) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 100)
    with pytest.raises(vdifrec.FormatError, match="no VDIF frame found"):
        vdifrec.check(junk)
    assert cli("check", str(junk)).returncode == 1
    missing = cli("check", str(tmp_path / "nope.vdif"))
    assert missing.returncode == 2 and "No such file" in missing.stderr
    bad = cli("check", "--fps", "-3", str(junk))
    assert bad.returncode == 2 and "--fps: -3 is not a frame rate: give 1 to 16777216" in bad.stderr
