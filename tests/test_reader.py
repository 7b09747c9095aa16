"""vdifrec.open(...).read() against baseband's vdif.open(path, 'rs').read(), sample for sample."""

from __future__ import annotations

import gc
import itertools
import weakref
from pathlib import Path

import astropy.units as u
import numpy as np
import pytest
from astropy.time import Time
from baseband import vdif
from baseband.data import (
    SAMPLE_AROCHIME_VDIF,
    SAMPLE_BPS1_VDIF,
    SAMPLE_DRAO_CORRUPT,
    SAMPLE_MWA_VDIF,
    SAMPLE_VDIF,
    SAMPLE_VLBI_VDIF,
)

import vdifrec

# baseband's shipped samples, with the sample rate baseband needs given (None: it learns it).
SHIPPED = [
    (SAMPLE_VDIF, None),
    (SAMPLE_VLBI_VDIF, None),
    (SAMPLE_BPS1_VDIF, 8 * u.MHz),
    (SAMPLE_AROCHIME_VDIF, 800 * u.MHz / 2048),
    (SAMPLE_MWA_VDIF, 1.28 * u.MHz),
]


def assert_same_stream(path: str | Path, sample_rate: object) -> None:
    with vdif.open(str(path), "rs", sample_rate=sample_rate) as bb, vdifrec.open(path, sample_rate=sample_rate) as fh:
        assert fh.shape == bb.shape
        assert fh.dtype == bb.dtype
        assert fh.sample_rate == pytest.approx(bb.sample_rate.to_value(u.Hz), rel=1e-12)
        assert fh.samples_per_frame == bb.samples_per_frame
        assert fh.thread_ids == list(range(bb._sample_shape[0])) or len(fh.thread_ids) == bb._sample_shape[0]
        ours = fh.read()
        theirs = bb.read()
        assert ours.shape == theirs.shape
        np.testing.assert_array_equal(ours, theirs)
        assert abs((fh.start_time - bb.start_time.datetime.replace(tzinfo=fh.start_time.tzinfo)).total_seconds()) < 1e-6


@pytest.mark.parametrize("path,sample_rate", SHIPPED, ids=lambda v: Path(str(v)).name if isinstance(v, str) else "")
def test_baseband_sample_files(path: str, sample_rate: object) -> None:
    assert_same_stream(path, sample_rate)


def test_short_file_without_rate_says_what_to_give() -> None:
    with pytest.raises(vdifrec.FormatError, match="pass sample_rate"):
        vdifrec.open(SAMPLE_MWA_VDIF)


def test_drao_corrupted_is_refused_by_open_and_found_by_check() -> None:
    with pytest.raises(vdifrec.FormatError, match="5 bits per sample with 8 channels"):
        vdifrec.open(SAMPLE_DRAO_CORRUPT)
    r = vdifrec.check(SAMPLE_DRAO_CORRUPT)
    assert not r["clean"]
    assert r["frames"] == 10
    assert r["header_warnings"]["edv0_nonzero_words"] == 10
    assert r["header_warnings"]["station_changes"] == 4
    assert "5 bits per sample with 8 channels" in r["header_warnings"]["first_header_problem"]
    # Threads 80, 134 and 50 each carry one frame number twice, once under station 0 and once
    # under station 1 (the station field changes 4 times, flagged above): a thread is a
    # station's thread, so those are two stations' frames, not duplicates.
    assert r["totals"]["duplicates"] == 0
    pairs = sorted((t["station"], t["thread"]) for t in r["per_thread"] if t["thread"] in (50, 80, 134))
    assert pairs == [("0", 50), ("0", 80), ("0", 134), ("1", 50), ("1", 80), ("1", 134)]


def write_with_baseband(path: Path, *, bps: int, nchan: int, nthread: int, complex_data: bool,
                        samples_per_frame: int, sample_rate: u.Quantity, nframesets: int, edv: int = 0,
                        seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    shape = (samples_per_frame * nframesets, nthread, nchan)
    data = rng.normal(0, 1.2, shape).astype(np.float32)
    if complex_data:
        data = (data + 1j * rng.normal(0, 1.2, shape)).astype(np.complex64)
    with vdif.open(str(path), "ws", sample_rate=sample_rate, samples_per_frame=samples_per_frame, nchan=nchan,
                   bps=bps, complex_data=complex_data, nthread=nthread, edv=edv, squeeze=False,
                   time=Time("2026-11-29T12:00:00", precision=9)) as fw:
        fw.write(data)


COMBOS = [
    (bps, nchan, nthread, cplx)
    for bps, nchan, nthread, cplx in itertools.product([1, 2, 4, 8], [1, 2, 8], [1, 3], [False, True])
    if not (cplx and bps == 1)
]


@pytest.mark.parametrize("bps,nchan,nthread,cplx", COMBOS)
def test_files_baseband_writes(tmp_path: Path, bps: int, nchan: int, nthread: int, cplx: bool) -> None:
    path = tmp_path / "bb.vdif"
    spf = 256 // nchan if bps < 8 else 128 // nchan
    # 2.5 seconds at 20 frames per second: the reader learns the rate from the wrap.
    write_with_baseband(path, bps=bps, nchan=nchan, nthread=nthread, complex_data=cplx, samples_per_frame=spf,
                        sample_rate=20 * spf * u.Hz, nframesets=50, seed=bps * 100 + nchan)
    assert_same_stream(path, None)
    with vdifrec.open(path) as fh:
        assert fh.sample_rate == 20 * spf


def test_rate_that_is_not_whole_frames_per_second(tmp_path: Path) -> None:
    path = tmp_path / "odd.vdif"
    # 12.5 kHz with 32 samples per frame: 390.625 frames per second.
    write_with_baseband(path, bps=2, nchan=2, nthread=2, complex_data=False, samples_per_frame=32,
                        sample_rate=12.5 * u.kHz, nframesets=128)
    assert_same_stream(path, 12.5 * u.kHz)
    with vdifrec.open(path, sample_rate=12500.0) as fh:
        assert fh.frame_rate == pytest.approx(390.625)


def test_edv3_rate_from_header(tmp_path: Path) -> None:
    path = tmp_path / "edv3.vdif"
    write_with_baseband(path, bps=2, nchan=1, nthread=2, complex_data=False, samples_per_frame=20000,
                        sample_rate=32 * u.MHz, nframesets=4, edv=3)
    assert_same_stream(path, None)
    with vdifrec.open(path) as fh:
        assert fh._core.sample_rate_source == "header"


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    path = tmp_path / "gen.vdif"
    vdifrec.generate(path, seconds=2.0, fps=40, frame_size=32 + 1024, threads=2, ref_epoch=52, start_second=100)
    return path


def test_frames_are_a_zero_copy_readonly_view(sample: Path) -> None:
    fh = vdifrec.open(sample)
    frames = fh.frames
    raw = np.fromfile(sample, dtype=np.uint8).reshape(-1, 1056)
    np.testing.assert_array_equal(frames, raw)
    assert frames.shape == (160, 1056)
    assert not frames.flags.owndata and not frames.flags.writeable
    with pytest.raises(ValueError):
        frames[0, 0] = 1
    # Two views share the map; the view keeps it alive after the reader is gone.
    other = fh.frames
    assert np.shares_memory(frames, other)
    ref = weakref.ref(fh)
    del fh, other
    gc.collect()
    assert ref() is None
    np.testing.assert_array_equal(frames[-1], raw[-1])


def test_seek_tell_and_read_into(sample: Path) -> None:
    with vdifrec.open(sample) as fh:
        everything = fh.read()
        assert fh.tell() == fh.shape[0]
        fh.seek(1000)
        part = fh.read(333)
        np.testing.assert_array_equal(part, everything[1000:1333])
        fh.seek(-10, "end")
        out = np.empty((10,) + fh.sample_shape, fh.dtype)
        assert fh.read(out=out) is out
        np.testing.assert_array_equal(out, everything[-10:])
        with pytest.raises(EOFError, match="only 0 remain"):
            fh.read(1)
        with pytest.raises(ValueError, match="out must be"):
            fh.seek(0)
            fh.read(out=np.empty((10, 3), np.float32))
        with pytest.raises(ValueError, match="before the start"):
            fh.seek(-1)
    assert fh.closed
    with pytest.raises(ValueError, match="closed"):
        fh.read(1)


def test_invalid_frames_read_as_zeros_like_baseband(tmp_path: Path, sample: Path) -> None:
    data = bytearray(sample.read_bytes())
    # Flag the 5th frame (thread 0 of frame set 2) invalid.
    word0 = int.from_bytes(data[4 * 1056 : 4 * 1056 + 4], "little") | (1 << 31)
    data[4 * 1056 : 4 * 1056 + 4] = word0.to_bytes(4, "little")
    path = tmp_path / "inv.vdif"
    path.write_bytes(bytes(data))
    assert_same_stream(path, None)
    with vdifrec.open(path) as fh:
        x = fh.read()
        spf = fh.samples_per_frame
        assert np.all(x[2 * spf : 3 * spf, 0] == 0)
        assert np.any(x[2 * spf : 3 * spf, 1] != 0)


def test_decode_of_frames_matches_read(sample: Path) -> None:
    with vdifrec.open(sample) as fh:
        np.testing.assert_array_equal(vdifrec.decode(fh.frames), fh.read())
    with pytest.raises(ValueError, match="2-d uint8"):
        vdifrec.decode(np.zeros(10, np.uint8))


def test_astropy_quantity_and_bad_rates(sample: Path) -> None:
    with vdifrec.open(sample, sample_rate=1.6384 * u.MHz / 100) as fh:
        assert fh.sample_rate == pytest.approx(16384.0)
    with pytest.raises(ValueError, match="must be a frequency"):
        vdifrec.open(sample, sample_rate=3 * u.m)
    with pytest.raises(ValueError, match="positive"):
        vdifrec.open(sample, sample_rate=-5)
    with pytest.raises(FileNotFoundError):
        vdifrec.open(sample.parent / "missing.vdif")
