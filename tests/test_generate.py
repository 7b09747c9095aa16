"""The synthetic FILA10G-like source: deterministic, tone where asked, states as designed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from baseband import vdif

import vdifrec


def test_shipped_sample_is_what_generate_makes(tmp_path: Path) -> None:
    again = tmp_path / "again.vdif"
    vdifrec.generate(again, seconds=2, fps=25, ref_epoch=53, start_second=13046400, seed=1)
    assert again.read_bytes() == Path(vdifrec.SAMPLE_VDIF).read_bytes()


def test_tone_at_200_of_512_mhz_in_every_channel() -> None:
    with vdif.open(vdifrec.SAMPLE_VDIF, "rs") as fh:  # baseband decodes, numpy transforms
        x = fh.read(8192 * 8)
        rate = fh.sample_rate.to_value("Hz")
    nfft = 1024
    spec = np.abs(np.fft.rfft(x[: len(x) // nfft * nfft].reshape(-1, nfft, 4), axis=1)) ** 2
    power = spec.mean(axis=0)
    freq = np.fft.rfftfreq(nfft, 1 / rate)
    for ch in range(4):
        peak = freq[np.argmax(power[1:, ch]) + 1]
        assert peak == pytest.approx(0.390625 * rate / 2, abs=rate / nfft)
        floor = np.median(power[:, ch])
        assert power[:, ch].max() > 10 * floor


def test_two_bit_state_fractions_match_theory(tmp_path: Path) -> None:
    path = tmp_path / "noise.vdif"
    vdifrec.generate(path, seconds=1.5, fps=100, tone_amplitude=0.0, seed=9, ref_epoch=53, start_second=0)
    with vdifrec.open(path) as fh:
        x = fh.read()
    levels = np.array([-3.316505, -1, 1, 3.316505], np.float32)
    fractions = [(x == lv).mean() for lv in levels]
    theory = vdifrec._core.two_bit_state_fractions(vdifrec._core.TWO_BIT_THRESHOLD_SIGMA)
    assert fractions == pytest.approx(theory, abs=0.003)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(tone_mhz=600.0), "outside the band 0-512 MHz"),
        (dict(bits=3), "bits"),
        (dict(nchan=3), "^nchan: 3 is out of range: a power of two"),
        (dict(frame_size=8220), "^frame_size: 8220 bytes is not a VDIF frame size: give a multiple of 8"),
        (dict(correlation=1.5), "^correlation: 1.5 is out of range: 0 to 1"),
        (dict(seconds=0), "^seconds: 0 is not a positive duration"),
    ],
)
def test_bad_arguments_name_the_argument(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        vdifrec.generate(tmp_path / "x.vdif", **kwargs)


def test_cli_generate(tmp_path: Path, cli) -> None:
    out = tmp_path / "g.vdif"
    res = cli("generate", str(out), "--seconds", "2", "--fps", "10", "--threads", "2", "--nchan", "2", "--bits", "4")
    assert res.returncode == 0, res.stderr
    assert out.stat().st_size == 40 * 8224
    with vdifrec.open(out) as fh:
        assert fh.shape == (20 * 8192, 2, 2) and fh.bps == 4
    bad = cli("generate", str(out), "--tone-mhz", "9000")
    assert bad.returncode == 2 and "--tone-mhz: 9000 MHz lies outside the band 0-512 MHz" in bad.stderr
