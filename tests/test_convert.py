"""`vdifrec convert` (threads kept, channels corner-turned into single-channel threads, frames
cut smaller) and `_core.corner_turn`. baseband (from PyPI) reads input and output and is the
oracle: each output thread holds its channel's samples, sample for sample; the frame numbers
count as they should, and `vdifrec check` passes the output."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import astropy.units as u
import numpy as np
import pytest
from astropy.time import Time
from baseband import vdif

import vdifrec
from conftest import frames_of, vdif_keys
from vdifrec import _core

FPS = 125  # an EDV 1 header's sample rate (whole kHz) holds these streams' rates
SECONDS = 2  # baseband learns the frame rate from the frame number's wrap into the second second
FS = 8224


def generated(tmp_path: Path, nchan: int, bits: int, threads: int = 1, name: str = "in.vdif", edv: int = 0) -> Path:
    path = tmp_path / name
    vdifrec.generate(path, seconds=SECONDS, fps=FPS, frame_size=FS, nchan=nchan, bits=bits, threads=threads,
                     edv=edv, ref_epoch=53, start_second=1000, seed=5)
    return path


def samples(path: Path, **kw: object) -> tuple[np.ndarray, list[int]]:
    """Every sample, (time, thread, channel), as baseband decodes them; and the thread IDs."""
    with vdif.open(str(path), "rs", squeeze=False, **kw) as fh:
        return fh.read(), list(fh._thread_ids)


def keys(path: Path, frame_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(thread, seconds, frame number) of each frame of the file, in file order."""
    return vdif_keys(frames_of(path, frame_size))


def assert_split(inp: Path, out: Path, report: dict, channels: list[int], threads: list[int] | None = None,
                 k: int = 1, **kw: object) -> None:
    """The output holds, as thread t·C + c, channel c of input thread t, sample for sample, its
    frame numbers counting k times as fast; and `vdifrec check` finds it clean at k times the rate."""
    channels = sorted(channels)  # threads go out in ascending order, whatever the list's
    x, tin = samples(inp, **kw)
    y, tout = samples(out, **kw)
    nchan = x.shape[2]
    kept = threads if threads is not None else tin
    want = [(t, c) for t in kept for c in channels]
    assert tout == [t * nchan + c for t, c in want]
    assert y.shape == (x.shape[0], len(want), 1)
    for j, (t, c) in enumerate(want):
        assert np.array_equal(y[:, j, 0], x[:, tin.index(t), c]), f"thread {tout[j]}: channel {c} of thread {t}"
    assert report["threads_out"] == tout
    assert report["frames_out"] == report["frames_kept"] * len(channels) * k
    # Frame by frame: each time's frames together, numbered f·k + i in each second, every thread.
    thread, second, fnr = keys(out, report["frame_size_out"])
    per_time = len(want)
    assert (thread.reshape(-1, per_time) == tout).all()
    n_sets = len(thread) // per_time
    assert list(zip(second[::per_time].tolist(), fnr[::per_time].tolist())) == [
        (1000 + s // (FPS * k), s % (FPS * k)) for s in range(n_sets)]
    report_check = vdifrec.check(out)
    assert report_check["clean"] and report_check["frames_per_second"] == FPS * k, report_check["totals"]


def test_sixteen_channels_of_two_bits_become_sixteen_threads(tmp_path: Path, cli) -> None:
    inp = generated(tmp_path, nchan=16, bits=2)
    out = tmp_path / "out.vdif"
    res = cli("convert", str(inp), str(out), "--channels", "0-15")
    assert res.returncode == 0, res.stderr
    assert f"wrote {out}: 4,000 frames of 544 bytes" in res.stdout
    assert "threads      0 in, 0-15 out" in res.stdout
    report = {"threads_out": list(range(16)), "frames_out": 4000, "frames_kept": 250, "frame_size_out": 544}
    assert_split(inp, out, report, list(range(16)))
    res = cli("check", str(out))
    assert res.returncode == 0 and "CLEAN" in res.stdout, res.stdout + res.stderr
    # Each frame: EDV 0, words 4-7 zero, one channel, the input's time.
    words = frames_of(out, 544)[:, :32].copy().view("<u4")
    assert (words[:, 4:] == 0).all() and ((words[:, 2] >> 24) & 0x1F == 0).all()


@pytest.mark.parametrize(("nchan", "bits", "channels", "payload", "k"), [
    (4, 2, [0, 2, 3], 512, 4),
    (8, 8, [7, 1], None, 1),
    (32, 1, [0, 5, 31], 64, 4),
    (2, 4, [1], 1024, 4),
])
def test_other_layouts_split_and_cut(tmp_path: Path, nchan: int, bits: int, channels: list[int],
                                     payload: int | None, k: int) -> None:
    inp = generated(tmp_path, nchan=nchan, bits=bits, edv=1)  # whose sample rate the corner turn drops
    out = tmp_path / "out.vdif"
    r = vdifrec.convert(inp, out, channels=channels, payload=payload)
    assert (r["frames_in"], r["frame_size_in"], r["channels_in"], r["channels_out"]) == (250, FS, nchan, 1)
    assert r["frame_size_out"] == 32 + (payload or 8192 // nchan) and r["fan_out"] == len(channels) * k
    assert out.stat().st_size == r["bytes_out"] == r["frames_out"] * r["frame_size_out"]
    assert_split(inp, out, r, channels, k=k)


def test_threads_kept_and_frames_cut_without_a_corner_turn(tmp_path: Path) -> None:
    inp = generated(tmp_path, nchan=4, bits=2, threads=3)
    x, tin = samples(inp)
    assert tin == [0, 1, 2]
    out = tmp_path / "out.vdif"
    r = vdifrec.convert(inp, out, threads="0,2", payload=2048)
    assert (r["threads_in"], r["threads_out"], r["frames_kept"], r["frames_out"]) == ([0, 1, 2], [0, 2], 500, 2000)
    y, tout = samples(out)
    assert tout == [0, 2] and np.array_equal(y, x[:, [0, 2]])
    thread, second, fnr = keys(out, 32 + 2048)
    assert thread.tolist() == [0, 2] * 1000
    assert fnr[::2].tolist() == list(range(500)) * 2 and second[::2].tolist() == [1000] * 500 + [1001] * 500
    check = vdifrec.check(out)
    assert check["clean"] and check["frames_per_second"] == 4 * FPS
    # The threads kept, corner-turned too.
    out2 = tmp_path / "out2.vdif"
    r = vdifrec.convert(inp, out2, threads=[1, 2], channels="1,3")
    assert_split(inp, out2, r, [1, 3], threads=[1, 2])


def test_complex_samples_move_whole(tmp_path: Path) -> None:
    # baseband writes the input: 4 channels of complex 2-bit samples, 256 a frame.
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(4096, 4)) + 1j * rng.normal(size=(4096, 4))).astype("c8")
    inp = tmp_path / "complex.vdif"
    with vdif.open(str(inp), "ws", sample_rate=1 * u.kHz, samples_per_frame=256, nchan=4, bps=2,
                   complex_data=True, edv=0, time=Time("2020-01-01"), nthread=1) as fw:
        fw.write(x)
    out = tmp_path / "out.vdif"
    r = vdifrec.convert(inp, out, channels="0-3")
    assert r["frame_size_out"] == 32 + 128  # 256 samples of 4 bits
    y, _ = samples(out, sample_rate=1 * u.kHz)
    z, _ = samples(inp, sample_rate=1 * u.kHz)
    assert y.dtype == np.complex64 and np.array_equal(y[:, :, 0], z[:, 0, :])


def test_a_vbs_scan_converts_as_its_file_does(tmp_path: Path, cli) -> None:
    inp = generated(tmp_path, nchan=16, bits=2, threads=2)
    data = inp.read_bytes()
    disks = [tmp_path / f"disk{i}" for i in range(3)]
    cuts = [0, 131, 400, 500]  # frames per chunk: 131, 269, 100
    for n in range(3):
        d = disks[(n + 1) % 3] / "scan1"
        d.mkdir(parents=True)
        (d / f"scan1.{n:08d}").write_bytes(data[cuts[n] * FS:cuts[n + 1] * FS])
    from_file = tmp_path / "from_file.vdif"
    vdifrec.convert(inp, from_file, channels="3,12", payload=128)
    out = tmp_path / "from_scan.vdif"
    res = cli("convert", "scan1", str(out), "--disk", str(tmp_path / "disk*"), "--channels", "3,12", "--payload", "128")
    assert res.returncode == 0, res.stderr
    assert "of scan1 (vbs" in res.stdout
    assert out.read_bytes() == from_file.read_bytes()
    r = vdifrec.convert("scan1", tmp_path / "again.vdif", disks=[str(d) for d in disks], channels="3,12", payload=128)
    assert r["format"] == "vbs" and r["threads_out"] == [3, 12, 19, 28]
    assert_split(inp, out, r, [3, 12], k=4)


def test_bad_options_are_named_and_nothing_is_written(tmp_path: Path, cli) -> None:
    inp = generated(tmp_path, nchan=4, bits=2, threads=2)
    out = tmp_path / "out.vdif"
    for args, says in [
        (["--channels", "4"], "--channels: the stream has 4 channels, numbered 0 to 3: there is no channel 4"),
        (["--channels", "0-3", "--payload", "1000"], "--payload: 1000 bytes cannot be a frame's payload: it does not "
                                                     "divide the 2048-byte payload; give a multiple of 8 that divides "
                                                     "2048, such as 256, 512, 1024, 2048"),
        (["--threads", "2"], "--threads: thread 2 is not in"),
        (["--threads", "2-1"], "--threads: \"2-1\": a range runs upwards, such as 1-2"),
    ]:
        res = cli("convert", str(inp), str(out), *args)
        assert res.returncode == 2, res.stdout + res.stderr
        assert res.stderr.startswith("vdifrec convert: error: " + says), res.stderr
        assert "its threads are 0-1" in res.stderr or "thread 2" not in says
        assert not out.exists()
    with pytest.raises(vdifrec.ArgumentError, match=r"^channels: the stream has 4 channels"):
        vdifrec.convert(inp, out, channels=[9])
    with pytest.raises(vdifrec.ArgumentError, match=r"^threads: -1 is not an index"):
        vdifrec.convert(inp, out, threads=[-1])
    with pytest.raises(vdifrec.ArgumentError, match=r"^payload: -8 bytes"):
        vdifrec.convert(inp, out, payload=-8)
    # An output that exists is overwritten only with force, and never when it is the input.
    out.write_bytes(b"old")
    with pytest.raises(FileExistsError, match="--force"):
        vdifrec.convert(inp, out)
    assert out.read_bytes() == b"old"
    assert vdifrec.convert(inp, out, force=True)["bytes_out"] == inp.stat().st_size
    res = cli("convert", str(inp), str(inp), "--force")
    assert res.returncode == 2 and f"OUT: {inp} is the input" in res.stderr, res.stderr
    assert out.read_bytes() == inp.read_bytes()


def test_a_frame_unlike_the_first_stops_it_and_leaves_nothing(tmp_path: Path, cli) -> None:
    inp = generated(tmp_path, nchan=4, bits=2)
    raw = bytearray(inp.read_bytes())
    raw[5 * FS + 11] ^= 0x01  # frame 5: 8 channels
    inp.write_bytes(bytes(raw))
    out = tmp_path / "out.vdif"
    res = cli("convert", str(inp), str(out), "--channels", "0")
    assert res.returncode == 1
    assert f"frame 5 (byte {5 * FS} of {inp}): a frame of thread 0 has 8 channels" in res.stderr, res.stderr
    assert not out.exists()


def test_a_failed_conversion_leaves_the_file_it_would_replace(tmp_path: Path, cli) -> None:
    """--force replaces OUT only once the new one is whole: a corrupt input leaves the old file
    as it was, and nothing beside it."""
    good = generated(tmp_path, nchan=4, bits=2)
    bad = tmp_path / "bad.vdif"
    raw = bytearray(good.read_bytes())
    raw[5 * FS + 11] ^= 0x01  # frame 5: 8 channels
    bad.write_bytes(bytes(raw))
    out = tmp_path / "out.vdif"
    assert vdifrec.convert(good, out, channels=[0])["frames_out"] > 0
    before = out.read_bytes()
    res = cli("convert", str(bad), str(out), "--channels", "0", "--force")
    assert res.returncode == 1 and "frame 5" in res.stderr, res.stderr
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.vdif", "in.vdif", "out.vdif"]


def _file_size_limit(limit: int) -> Callable[[], None]:
    """A child's files held to `limit` bytes (writes past it fail with EFBIG, as on a disk that
    is full for this output): the way to fill a disk that needs no right to mount one."""
    def limit_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel's signal ends the child
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return limit_files


def test_a_full_disk_exits_1_with_what_was_written_and_keeps_the_old_output(tmp_path: Path) -> None:
    inp = generated(tmp_path, nchan=4, bits=2, threads=2)
    out = tmp_path / "out.vdif"
    out.write_bytes(b"the previous conversion")
    limit = 10 * FS + 100
    cmd = [sys.executable, "-m", "vdifrec.cli", "convert", str(inp), str(out), "--force"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, preexec_fn=_file_size_limit(limit))
    assert res.returncode == 1, res.stdout + res.stderr
    # The output is written 8 MiB at a time: what reached the part before the limit is the
    # whole frames under it.
    assert res.stderr == (f"vdifrec convert: cannot write {out}: File too large (os error 27), after 10 frames "
                          f"({10 * FS} bytes) of the conversion; the file of that name is as it was\n"), res.stderr
    assert out.read_bytes() == b"the previous conversion"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.vdif", "out.vdif"]
    # Without --force and no file before: nothing is left under the name.
    out.unlink()
    res = subprocess.run(cmd[:-1], capture_output=True, text=True, timeout=120, preexec_fn=_file_size_limit(limit))
    assert res.returncode == 1 and res.stderr.endswith("; nothing was left under that name\n"), res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.vdif"]


def numpy_corner_turn(payload: np.ndarray, nchan: int, bits: int, channel: int) -> np.ndarray:
    """Channel `channel` of each payload (rows), by the VDIF rule, one value at a time."""
    per_word = 32 // bits
    words = payload.copy().view("<u4")
    values = (words[:, :, None] >> (np.arange(per_word, dtype=np.uint32) * bits)) & ((1 << bits) - 1)
    mine = values.reshape(len(payload), -1)[:, channel::nchan].reshape(len(payload), -1, per_word)
    packed = (mine << (np.arange(per_word, dtype=np.uint32) * bits)).sum(axis=2, dtype=np.uint32)
    return packed.astype("<u4").view(np.uint8)


@pytest.mark.parametrize(("nchan", "bits"), [(16, 2), (8, 2), (4, 2), (16, 1), (4, 8), (16, 8), (64, 2), (2, 16)])
def test_corner_turn_of_frames_in_memory(nchan: int, bits: int) -> None:
    payload = 64 * nchan
    h = vdifrec.Header(edv=0, frame_size=32 + payload, nchan=nchan, bits=bits, frame_nr=9)
    rng = np.random.default_rng(nchan * bits)
    frames = np.tile(np.frombuffer(h.to_bytes(), np.uint8), (5, 1))
    frames = np.concatenate([frames, rng.integers(0, 256, (5, payload), dtype=np.uint8)], axis=1)
    given = list(dict.fromkeys([nchan - 1, 0, 1]))
    chans = sorted(given)  # out in ascending order
    out = _core.corner_turn(frames.reshape(-1), given).reshape(5, len(chans), 32 + payload // nchan)
    for j, c in enumerate(chans):
        assert np.array_equal(out[:, j, 32:], numpy_corner_turn(frames[:, 32:], nchan, bits, c)), c
    words = out[:, :, :16].copy().view("<u4")
    assert ((words[..., 3] >> 16) & 0x3FF).tolist() == [chans] * 5  # thread 0: thread IDs are the channels
    assert ((words[..., 1] & 0xFFFFFF) == 9).all()
    buf = np.empty(out.size, np.uint8)  # a buffer used again: filled, returned
    assert _core.corner_turn(frames.reshape(-1), given, out=buf) is buf and np.array_equal(buf, out.reshape(-1))
    with pytest.raises(vdifrec.ArgumentError, match=f"out: {out.size - 1} bytes, but the output is {out.size}"):
        _core.corner_turn(frames.reshape(-1), given, out=buf[1:])
    with pytest.raises(vdifrec.ArgumentError, match=f"channels: the stream has {nchan} channels"):
        _core.corner_turn(frames.reshape(-1), [nchan])
    with pytest.raises(vdifrec.ArgumentError, match="frames: .* not whole frames"):
        _core.corner_turn(frames.reshape(-1)[:-8], [0])
