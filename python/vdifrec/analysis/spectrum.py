"""Averaged power spectra of every thread and channel, as mark5access' m5spec computes them.

The original system proved its recordings with an FFT of the recorded data showing the 200 MHz
test tone in all four 512 MHz channels. :func:`spectrum` does that check on files, on live views
of the ring and on plain sample arrays; the FFTs run in Rust (realfft), in chunks, on all CPUs,
with the GIL released. The helpers below it (:func:`frequencies`, :func:`segment_length`,
:func:`need_one_fft`) are shared with ``vdifrec.dask``, which sums the same spectra over many
files."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..units import to_hz
from ..views import checks_views
from .inputs import as_frames, as_samples, is_complex, kind
from .tones import Tone, find_tones

__all__ = ["Spectrum", "at_most", "frequencies", "need_one_fft", "segment_length", "spectrum"]


@dataclasses.dataclass(frozen=True)
class Spectrum:
    """Averaged power spectra.

    Attributes
    ----------
    freq : ndarray
        Frequency of each spectral channel in Hz (baseband: 0 .. fs/2 for real data,
        −fs/2 .. fs/2 for complex data); in cycles per sample when no sample rate is known.
    power : ndarray
        Mean ``|X|²`` per (thread, channel, spectral channel), unnormalised FFT (no window).
    nfft : int
        Spectral channels across the band.
    nint : int
        FFTs averaged.
    sample_rate : float or None
        Samples per second per channel (Hz).
    """

    freq: npt.NDArray[np.float64]
    power: npt.NDArray[np.float64]
    nfft: int
    nint: int
    sample_rate: float | None
    complex_data: bool
    thread_ids: list[int]

    def normalised(self) -> npt.NDArray[np.float64]:
        """Power of each input scaled to mean 1, as m5spec prints it."""
        mean = self.power.mean(axis=-1, keepdims=True)
        return self.power / np.where(mean > 0, mean, 1)

    def tones(self, threshold: float = 10.0) -> list[Tone]:
        """Tones more than ``threshold`` times the noise floor (see :func:`find_tones`)."""
        return find_tones(self, threshold)

    def to_dict(self) -> dict[str, Any]:
        return {
            "freq": self.freq.tolist(),
            "power": self.power.tolist(),
            "nfft": self.nfft,
            "nint": self.nint,
            "sample_rate": self.sample_rate,
            "complex": self.complex_data,
            "thread_ids": self.thread_ids,
        }

    def plot(self, path: str | None = None, tones: bool = True, title: str | None = None) -> Any:
        """One panel per channel (per thread), the tones marked; returns the figure (saved to
        ``path`` when given). Needs matplotlib (``pip install 'vdifrec[plot]'``)."""
        from .plot import plot_spectrum

        return plot_spectrum(self, path=path, mark_tones=tones, title=title)


def frequencies(nfft: int, complex_data: bool, sample_rate: float | None) -> npt.NDArray[np.float64]:
    fs = sample_rate or 1.0
    k = np.arange(nfft, dtype=np.float64)
    return (k - nfft // 2) * fs / nfft if complex_data else k * fs / (2 * nfft)


def segment_length(nfft: int, complex_data: bool) -> int:
    """Samples per FFT: ``2 nfft`` real or ``nfft`` complex."""
    return nfft if complex_data else 2 * nfft


def need_one_fft(samples: int, nfft: int, complex_data: bool, per: str) -> None:
    """Refuses an nfft longer than the data before any work (or memory) is spent on it."""
    if samples < segment_length(nfft, complex_data):
        raise ValueError(
            f"nfft: the data hold {samples} samples per {per}, fewer than one FFT of "
            f"{segment_length(nfft, complex_data)}: give a smaller nfft or more data"
        )


def at_most(nint: int | None, samples: int, nfft: int, complex_data: bool) -> int | None:
    """``nint``, no more than the FFTs that ``samples`` hold: a larger count means all of them."""
    return None if nint is None else min(nint, max(samples // segment_length(nfft, complex_data), 1))


@checks_views("spectrum")
def spectrum(x: Any, nfft: int = 1024, nint: int | None = None, sample_rate: Any = None) -> Spectrum:
    """Averaged power spectra of every thread and channel (like m5spec).

    Parameters
    ----------
    x : Reader, frames array, or sample array
        See the module description.
    nfft : int
        Spectral channels across the band: FFTs of ``2 nfft`` real or ``nfft`` complex samples.
    nint : int, optional
        FFTs to average (all the data hold by default).
    sample_rate : float or astropy Quantity, optional
        Hz per channel; taken from the reader (or an EDV 1/3 header) when not given.
    """
    if not isinstance(nfft, int) or nfft <= 0:
        raise ValueError(f"nfft must be a positive whole number of spectral channels, got {nfft!r}")
    if nint is not None and (not isinstance(nint, int) or nint <= 0):
        raise ValueError(f"nint must be a positive number of FFTs, got {nint!r}")
    sr = to_hz(sample_rate)
    source = kind(x)
    cplx = is_complex(x)
    if source == "reader":
        samples = x.shape[0] - x.tell()
        need_one_fft(samples, nfft, cplx, "channel")
        power, segments = x._core.spectrum(nfft, x.tell(), at_most(nint, samples, nfft, cplx))
        threads, nchan, rate = list(x.thread_ids), x.header0.nchan, sr or x.sample_rate
    elif source == "frames":
        frames = as_frames(x)
        h = _core.Header.from_bytes(bytes(frames[0, :32]), verify=False)
        most = len(frames) * h.samples_per_frame  # all frames in one thread: an upper bound
        need_one_fft(most, nfft, cplx, "channel")
        power, segments, threads = _core.spectrum_frames(frames, nfft, at_most(nint, most, nfft, cplx))
        nchan, rate = h.nchan, sr or h.sample_rate
        samples = len(frames) * h.samples_per_frame // max(len(threads), 1)
    else:
        flat, samples, nthread, nchan, cplx = as_samples(x)
        need_one_fft(samples, nfft, cplx, "channel")
        acc = _core.SpectrumAccumulator(nfft, nthread * nchan, cplx)
        acc.add(flat, samples, at_most(nint, samples, nfft, cplx))
        power, segments, threads, rate = acc.power(), acc.segments, list(range(nthread)), sr
    if segments == 0:
        need_one_fft(samples, nfft, cplx, "channel")
        raise ValueError(f"nfft: no whole FFT of {segment_length(nfft, cplx)} samples in the data: give a smaller nfft or more data")
    power = np.asarray(power).reshape(len(threads), nchan, nfft)
    return Spectrum(frequencies(nfft, cplx, rate), power, nfft, int(segments), rate, cplx, list(threads))
