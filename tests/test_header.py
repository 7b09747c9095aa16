"""vdifrec.Header against baseband's VDIFHeader, field by field."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from baseband import vdif

import vdifrec

# Field names that mean the same thing in both libraries.
SAME = {
    "invalid": "invalid_data",
    "legacy": "legacy_mode",
    "seconds": "seconds",
    "ref_epoch": "ref_epoch",
    "frame_nr": "frame_nr",
    "version": "vdif_version",
    "log2_nchan": "lg2_nchan",
    "frame_length": "frame_length",
    "complex": "complex_data",
    "bits_per_sample": "bits_per_sample",
    "thread_id": "thread_id",
    "station_id": "station_id",
}


def random_baseband_header(rng: random.Random) -> vdif.VDIFHeader:
    edv = rng.choice([False, 0, 1, 3])
    kw = dict(
        invalid_data=rng.random() < 0.3,
        seconds=rng.randrange(1 << 30),
        ref_epoch=rng.randrange(40),
        frame_nr=rng.randrange(1 << 24),
        vdif_version=rng.randrange(8),
        thread_id=rng.randrange(1024),
        station_id=rng.randrange(1 << 16),
        bps=rng.choice([1, 2, 4, 8]),
        nchan=rng.choice([1, 2, 4, 8, 16]),
        complex_data=rng.random() < 0.5,
    )
    if edv == 3:
        kw["frame_nbytes"] = 5032
        kw["sampling_rate"] = rng.randrange(1, 1 << 23)
        kw["sampling_unit"] = rng.random() < 0.5
    elif edv == 1:
        kw["frame_nbytes"] = 8 * rng.randrange(5, 10000)
        kw["sampling_rate"] = rng.randrange(1, 1 << 23)
        kw["sampling_unit"] = rng.random() < 0.5
    else:
        kw["frame_nbytes"] = 8 * rng.randrange(5, 10000)
    return vdif.VDIFHeader.fromvalues(edv=edv, **kw)


def test_parse_agrees_with_baseband_on_random_headers() -> None:
    rng = random.Random(7)
    for _ in range(300):
        bb = random_baseband_header(rng)
        raw = bb.words
        data = b"".join(int(w).to_bytes(4, "little") for w in raw)
        h = vdifrec.Header.from_bytes(data)
        for ours, theirs in SAME.items():
            assert h[ours] == int(bb[theirs]), (ours, bb)
        assert h.edv == (None if bb.edv is False else bb.edv)
        assert h.frame_size == bb.frame_nbytes
        assert h.payload_size == bb.payload_nbytes
        assert h.samples_per_frame == bb.samples_per_frame
        assert h.nchan == bb.nchan and h.bits == bb.bps
        if bb.edv in (1, 3):
            assert h.sample_rate == pytest.approx(bb.sample_rate.to_value("Hz"))
        assert h.to_bytes() == data


def test_time_agrees_with_baseband() -> None:
    bb = vdif.VDIFHeader.fromvalues(
        edv=0, seconds=12_345_678, ref_epoch=49, frame_nr=62_500, frame_nbytes=8224, bps=2, nchan=4
    )
    data = b"".join(int(w).to_bytes(4, "little") for w in bb.words)
    h = vdifrec.Header.from_bytes(data)
    secs, frac = h.unix_time(125_000.0)
    ours = dt.datetime.fromtimestamp(secs, tz=dt.timezone.utc) + dt.timedelta(seconds=frac)
    import astropy.units as u

    theirs = bb.get_time(frame_rate=125_000 * u.Hz).datetime.replace(tzinfo=dt.timezone.utc)
    assert abs((ours - theirs).total_seconds()) < 1e-6
    with pytest.raises(vdifrec.HeaderError, match="frame rate"):
        h.unix_time()


def test_build_sets_every_field_and_round_trips() -> None:
    h = vdifrec.Header(
        edv=3, frame_size=5032, nchan=1, bits=2, seconds=100, ref_epoch=50, frame_nr=7,
        thread_id=1023, station_id=0x4B56, invalid=True, sample_rate=32e6,
    )
    back = vdifrec.Header.from_bytes(h.to_bytes())
    assert back == h
    assert back.station == "KV"
    assert back["thread_id"] == 1023 and back.invalid
    assert back.sample_rate == 32e6
    assert back["sync"] == 0xACABFEED
    legacy = vdifrec.Header(edv=None, frame_size=8224, nchan=4)
    assert len(legacy.to_bytes()) == 16 and legacy.legacy and legacy.edv is None


def test_bad_values_name_the_field() -> None:
    h = vdifrec.Header()
    with pytest.raises(vdifrec.HeaderError, match="thread_id = 1024"):
        h["thread_id"] = 1024
    with pytest.raises(KeyError, match="sample_rate is not part of an EDV 0 header"):
        h["sample_rate"]
    with pytest.raises(ValueError, match="not a multiple of 8"):
        vdifrec.Header(frame_size=8220)
    bad = bytearray(vdifrec.Header(edv=1, frame_size=1056).to_bytes())
    bad[20] = 0
    with pytest.raises(vdifrec.HeaderError, match="sync word 0xACABFEED"):
        vdifrec.Header.from_bytes(bytes(bad))
    assert vdifrec.Header.from_bytes(bytes(bad), verify=False).edv == 1
    with pytest.raises(vdifrec.HeaderError, match="too short"):
        vdifrec.Header.from_bytes(b"\x00" * 10)


def test_edv4_validity_mask() -> None:
    h = vdifrec.Header(edv=4, frame_size=8224, nchan=4)
    h["mask_length"] = 4
    h["validity_mask_low"] = 0b1011
    back = vdifrec.Header.from_bytes(h.to_bytes())
    assert back.validity_mask == 0b1011 and back["mask_length"] == 4
