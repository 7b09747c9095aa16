"""Spectrum, bit statistics, fringe and tones against numpy.fft and statistical theory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import vdifrec
from conftest import delivered


def gaussian(n: int, shape: tuple[int, ...] = (), seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n,) + shape).astype(np.float32)


def numpy_spectrum(x: np.ndarray, nfft: int) -> np.ndarray:
    """m5spec's definition with numpy: mean |FFT|² of consecutive segments, per input."""
    x = np.asarray(x)
    if np.iscomplexobj(x):
        seg = nfft
        n = len(x) // seg * seg
        f = np.fft.fftshift(np.fft.fft(x[:n].reshape(-1, seg, *x.shape[1:]).astype(np.complex128), axis=1), axes=1)
        p = (np.abs(f) ** 2).mean(axis=0)
    else:
        seg = 2 * nfft
        n = len(x) // seg * seg
        f = np.fft.rfft(x[:n].reshape(-1, seg, *x.shape[1:]).astype(np.float64), axis=1)[:, :nfft]
        p = (np.abs(f) ** 2).mean(axis=0)
    return np.moveaxis(p, 0, -1)


@pytest.mark.parametrize("shape", [(), (3,), (2, 4)])
def test_real_spectra_equal_numpy(shape: tuple[int, ...]) -> None:
    x = gaussian(2048 * 37 + 100, shape, seed=len(shape))
    s = vdifrec.spectrum(x, nfft=1024, sample_rate=2e6)
    ref = numpy_spectrum(x, 1024)
    assert s.power.reshape(ref.shape).shape == ref.shape
    np.testing.assert_allclose(s.power.reshape(ref.shape), ref, rtol=1e-5)
    assert s.nint == 37
    np.testing.assert_allclose(s.freq, np.arange(1024) * 1e6 / 1024)


def test_complex_spectra_equal_numpy() -> None:
    rng = np.random.default_rng(5)
    x = (rng.normal(size=(512 * 50, 2)) + 1j * rng.normal(size=(512 * 50, 2))).astype(np.complex64)
    s = vdifrec.spectrum(x, nfft=512, sample_rate=1e6)
    ref = numpy_spectrum(x, 512)
    np.testing.assert_allclose(s.power.reshape(ref.shape), ref, rtol=1e-5)
    np.testing.assert_allclose(s.freq, (np.arange(512) - 256) * 1e6 / 512)


def test_file_spectrum_equals_numpy_on_the_decoded_samples(tmp_path: Path) -> None:
    path = tmp_path / "f.vdif"
    vdifrec.generate(path, seconds=1.5, fps=50, threads=2, ref_epoch=53, start_second=0)
    with vdifrec.open(path) as fh:
        fh.seek(100)
        s = vdifrec.spectrum(fh, nfft=512, nint=150)
        assert fh.tell() == 100  # the reader's position is left alone
        x = fh.read(150 * 1024)
    ref = numpy_spectrum(x, 512)  # (thread, channel, nfft)
    np.testing.assert_allclose(s.power, ref, rtol=1e-5)
    assert s.nint == 150 and s.thread_ids == [0, 1]
    assert s.sample_rate == 50 * 8192


def test_tone_is_found_within_one_channel(tmp_path: Path) -> None:
    path = tmp_path / "tone.vdif"
    # 8192 samples per frame at 100 frames/s: 819.2 kHz per channel, a 409.6 kHz band.
    vdifrec.generate(path, seconds=1.5, fps=100, tone_mhz=0.123456, ref_epoch=53, start_second=0)
    with vdifrec.open(path) as fh:
        s = vdifrec.spectrum(fh, nfft=1024)
    tones = vdifrec.find_tones(s)
    per_channel = {t.channel: t for t in tones if t.power_ratio > 10}
    assert sorted(per_channel) == [0, 1, 2, 3]
    resolution = s.sample_rate / 2 / 1024
    for t in per_channel.values():
        assert abs(t.frequency - 123456.0) < resolution
        assert t.snr_db > 10


def test_white_noise_is_flat_within_the_statistical_error() -> None:
    nint, nfft = 400, 256
    s = vdifrec.spectrum(gaussian(2 * nfft * nint, seed=11), nfft=nfft)
    p = s.power[0, 0, 1:]  # the DC channel of a real FFT has twice the variance
    expected = 2 * nfft  # E|X|² for unit variance
    rel = (p - expected) / expected
    assert abs(rel.mean()) < 4 / np.sqrt(nint * len(p))
    # Each channel: an average of nint exponentials, relative error 1/sqrt(nint).
    assert np.abs(rel).max() < 5 / np.sqrt(nint)
    assert 0.8 < rel.std() * np.sqrt(nint) < 1.2


def test_bit_statistics_of_generated_2bit_data(tmp_path: Path) -> None:
    path = tmp_path / "b.vdif"
    vdifrec.generate(path, seconds=2, fps=50, threads=2, tone_amplitude=0.0, seed=4, ref_epoch=53, start_second=0)
    theory = vdifrec._core.two_bit_state_fractions(vdifrec._core.TWO_BIT_THRESHOLD_SIGMA)
    with vdifrec.open(path) as fh:
        b = vdifrec.bstate(fh)
        x = fh.read()
    assert b.fractions.shape == (2, 4, 4)
    assert np.abs(b.fractions - np.asarray(theory)).max() < 0.003
    assert b.expected == pytest.approx(theory)
    # The raw-byte counts agree with counting the decoded values.
    for t in range(2):
        for c in range(4):
            vals, counts = np.unique(x[:, t, c], return_counts=True)
            assert list(counts) == list(b.counts[t, c])
    # Decoded arrays work too.
    assert np.array_equal(vdifrec.bstate(x).counts, b.counts)


def test_known_delay_and_correlation_are_recovered() -> None:
    n, rho, delay = 1 << 19, 0.3, 17
    rng = np.random.default_rng(8)
    common = rng.normal(size=n + delay)
    a = (np.sqrt(rho) * common[delay:] + np.sqrt(1 - rho) * rng.normal(size=n)).astype(np.float32)
    b = (np.sqrt(rho) * common[:n] + np.sqrt(1 - rho) * rng.normal(size=n)).astype(np.float32)
    f = vdifrec.fringe(a, b, nfft=1024, sample_rate=64e6)
    assert f.delay_samples == delay
    assert f.delay == pytest.approx(delay / 64e6)
    noise = 1 / np.sqrt(n)
    assert abs(f.amplitude - rho) < 5 * noise
    assert abs(f.phase) < 0.05
    assert f.snr > 50
    assert f.lags[np.argmax(f.lag_amplitude)] == delay
    # Swapped, the delay changes sign.
    assert vdifrec.fringe(b, a, nfft=1024).delay_samples == -delay


def test_fringe_between_two_channels_of_a_2bit_file(tmp_path: Path, cli) -> None:
    path = tmp_path / "corr.vdif"
    vdifrec.generate(path, seconds=1.5, fps=100, correlation=0.3, delay=17, tone_amplitude=0.0,
                     ref_epoch=53, start_second=0)
    with vdifrec.open(path) as fh:
        f = vdifrec.fringe(fh, pair=(0, 1), nfft=1024)
        f13 = vdifrec.fringe(fh, pair=(1, 3), nfft=1024)
    assert f.delay_samples == 17 and f13.delay_samples == 34
    # 2-bit quantisation lowers a small correlation by about 0.88 (Van Vleck).
    assert 0.85 * 0.3 < f.amplitude < 0.92 * 0.3
    assert f.snr > 30
    r = cli("fringe", str(path), "--pair", "0,1", "--nfft", "512", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["delay_samples"] == 17
    r = cli("fringe", str(path), str(path), "--pair", "2,0")
    assert r.returncode == 0 and "delay -34 samples" in r.stdout


def test_live_view_spectrum_equals_the_file(tmp_path: Path) -> None:
    out = tmp_path / "live.vdif"
    with vdifrec.Recorder(port=0, ring="32MiB", path=out) as rec:
        assert rec.address is not None
        vdifrec.send(rec.address, frames=1000, fps=5000, ref_epoch=53, start_second=0)
        # Every frame received: all 1000, less any the kernel dropped (a small socket buffer).
        n = 1000 - delivered(rec.address, 1000, lambda: rec.stats().datagrams).kernel_drops
        view = rec.latest(n)
        s_live = vdifrec.spectrum(view, nfft=512, sample_rate=5000 * 8192)
    with vdifrec.open(out, sample_rate=5000 * 8192) as fh:
        s_file = vdifrec.spectrum(fh, nfft=512)
    np.testing.assert_array_equal(s_live.power, s_file.power)
    assert s_live.nint == s_file.nint == n * 8192 // 1024
    assert np.array_equal(vdifrec.bstate(view).counts, vdifrec.bstate(vdifrec.open(out, sample_rate=4.096e7)).counts)


@pytest.mark.slow
def test_cli_spectrum_bstate_and_bad_arguments(tmp_path: Path, cli) -> None:
    sample = vdifrec.SAMPLE_VDIF
    png, m5 = tmp_path / "s.png", tmp_path / "s.txt"
    r = cli("spectrum", sample, "--nfft", "256", "--json", "--plot", str(png), "--m5spec", str(m5))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["nfft"] == 256 and len(d["tones"]) >= 4
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = np.loadtxt(m5)
    assert rows.shape == (256, 5)
    np.testing.assert_allclose(rows[:, 1:].mean(axis=0), 1.0, rtol=1e-5)
    r = cli("bstate", sample)
    assert r.returncode == 0 and "Gaussian:" in r.stdout
    r = cli("bstate", sample, "--json")
    assert json.loads(r.stdout)["bits"] == 2
    r = cli("spectrum", sample, "--nfft", "0")
    assert r.returncode == 2 and "--nfft: expected a whole number above 0" in r.stderr
    r = cli("spectrum", sample, "--nfft", "1000000")
    assert r.returncode == 2 and "fewer than one FFT" in r.stderr
    r = cli("fringe", sample, "--pair", "0,9")
    assert r.returncode == 2 and "pair[1] = 9" in r.stderr
    with pytest.raises(ValueError, match="nfft must be"):
        vdifrec.spectrum(np.zeros(100, np.float32), nfft=-1)
