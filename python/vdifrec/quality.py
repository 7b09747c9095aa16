"""The spectrum and fringe check: autospectra, bit-state statistics, cross-correlation, tones.

The original system proved its recordings with an FFT of the recorded data showing the 200 MHz
test tone in all four 512 MHz channels (mark5access' m5spec). These functions do that check on
files, on live views of the ring and on plain sample arrays; the FFTs run in Rust (realfft),
in chunks, on all CPUs, with the GIL released.

``x`` may be a :class:`vdifrec.Reader` (read in chunks from its current position, which is
left unchanged), a ``(n, frame_size)`` uint8 array of whole frames (a live view from a
Recorder, or ``reader.frames``), or a float/complex sample array shaped ``(time,)``,
``(time, channel)`` or ``(time, thread, channel)``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _core
from ._units import to_hz
from ._views import checks_views
from .reader import Reader

__all__ = ["BitStats", "Fringe", "Spectrum", "Tone", "bstate", "find_tones", "fringe", "spectrum"]

@dataclasses.dataclass(frozen=True)
class Tone:
    """A spectral line: where, and how far above the noise floor (the median)."""

    thread: int
    channel: int
    frequency: float
    power_ratio: float

    @property
    def snr_db(self) -> float:
        return 10 * math.log10(self.power_ratio)


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
        from ._plot import plot_spectrum

        return plot_spectrum(self, path=path, mark_tones=tones, title=title)


@dataclasses.dataclass(frozen=True)
class BitStats:
    """Fraction of samples in each quantisation state, per (thread, channel).

    ``expected`` holds the fractions Gaussian noise gives: for 2 bits at the optimal
    thresholds (±0.9816 σ: 16.3/33.7/33.7/16.3 %), for 4 and 8 bits at the encoding scale
    baseband assumes, for 1 bit 50/50.
    """

    bits: int
    levels: list[float]
    counts: npt.NDArray[np.int64]
    fractions: npt.NDArray[np.float64]
    expected: list[float]
    thread_ids: list[int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "bits": self.bits,
            "levels": self.levels,
            "counts": self.counts.tolist(),
            "fractions": self.fractions.tolist(),
            "expected": self.expected,
            "thread_ids": self.thread_ids,
        }


@dataclasses.dataclass(frozen=True)
class Fringe:
    """A cross-correlation of two streams.

    ``delay`` (seconds) and ``delay_samples``: how far b lags a (b[n] ≈ a[n − delay_samples]);
    ``amplitude``: normalised correlation coefficient at the peak (quantisation lowers it:
    2-bit data show about 0.88 of the analogue value); ``phase`` in radians; ``snr``: peak
    over the rms of the lag function elsewhere; ``detected``: ``snr >= snr_threshold``;
    ``lags`` and ``lag_amplitude`` the lag function; ``cross_spectrum`` the normalised cross
    spectrum at ``freq`` (Hz); ``excluded_channels``: spectral channels (indices into
    ``freq``) left out because a tone stood in them; ``fringe_rate`` (Hz, turns of the phase
    per second) when the search was over stretches of time, else None.
    """

    delay: float | None
    delay_samples: int
    amplitude: float
    phase: float
    snr: float
    lags: npt.NDArray[np.int64]
    lag_amplitude: npt.NDArray[np.float64]
    cross_spectrum: npt.NDArray[np.complex128]
    freq: npt.NDArray[np.float64]
    nint: int
    sample_rate: float | None
    detected: bool
    snr_threshold: float
    excluded_channels: npt.NDArray[np.int64]
    fringe_rate: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "delay": self.delay,
            "delay_samples": self.delay_samples,
            "amplitude": self.amplitude,
            "phase": self.phase,
            "snr": self.snr,
            "detected": self.detected,
            "snr_threshold": self.snr_threshold,
            "fringe_rate": self.fringe_rate,
            "excluded_channels": self.excluded_channels.tolist(),
            "nint": self.nint,
            "sample_rate": self.sample_rate,
            "lags": self.lags.tolist(),
            "lag_amplitude": self.lag_amplitude.tolist(),
        }

    def plot(self, path: str | None = None, title: str | None = None) -> Any:
        """Lag amplitude with the peak marked; needs matplotlib."""
        from ._plot import plot_fringe

        return plot_fringe(self, path=path, title=title)


# -- sources -------------------------------------------------------------------------------


def _kind(x: Any) -> str:
    """'reader' (a file: decoded in Rust segment by segment), 'frames' (whole frames, e.g. a
    live view: likewise) or 'samples' (a decoded or float array)."""
    if isinstance(x, Reader):
        return "reader"
    a = np.asarray(x)
    return "frames" if a.dtype == np.uint8 and a.ndim == 2 else "samples"


def _frames(x: Any) -> npt.NDArray[np.uint8]:
    return np.ascontiguousarray(_some_frames(np.asarray(x)), dtype=np.uint8)


def _some_frames(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A frames array that holds at least one frame (a view taken before any arrived holds none)."""
    if a.shape[0] == 0:
        raise ValueError("the frames array holds no frame, so there is nothing to analyse (a view taken before any frame arrived is empty)")
    return a


def _samples(x: Any) -> tuple[npt.NDArray[np.float32], int, int, int, bool]:
    """A sample array as flat float32 (time, input, value): (flat, n, threads, nchan, complex)."""
    a = np.asarray(x)
    if a.ndim == 0 or a.ndim > 3:
        raise ValueError(f"samples must be shaped (time,), (time, channel) or (time, thread, channel); got {a.shape}")
    cplx = bool(np.iscomplexobj(a))
    if a.ndim == 1:
        a = a[:, None, None]
    elif a.ndim == 2:
        a = a[:, None, :]
    a = np.ascontiguousarray(a, dtype=np.complex64 if cplx else np.float32)
    return a.reshape(-1).view(np.float32), a.shape[0], a.shape[1], a.shape[2], cplx


def _frames_rate(frames: npt.NDArray[np.uint8]) -> float | None:
    return _core.Header.from_bytes(bytes(frames[0, :32]), verify=False).sample_rate


def _is_complex(x: Any) -> bool:
    if isinstance(x, Reader):
        return x.complex_data
    a = np.asarray(x)
    if a.dtype == np.uint8 and a.ndim == 2:
        return _core.Header.from_bytes(bytes(_some_frames(a)[0, :32]), verify=False).complex
    return bool(np.iscomplexobj(a))


def _freq(nfft: int, complex_data: bool, sample_rate: float | None) -> npt.NDArray[np.float64]:
    fs = sample_rate or 1.0
    k = np.arange(nfft, dtype=np.float64)
    return (k - nfft // 2) * fs / nfft if complex_data else k * fs / (2 * nfft)


def _segment(nfft: int, complex_data: bool) -> int:
    """Samples per FFT: ``2 nfft`` real or ``nfft`` complex."""
    return nfft if complex_data else 2 * nfft


def _need_one_fft(samples: int, nfft: int, complex_data: bool, per: str) -> None:
    """Refuses an nfft longer than the data before any work (or memory) is spent on it."""
    if samples < _segment(nfft, complex_data):
        raise ValueError(
            f"nfft: the data hold {samples} samples per {per}, fewer than one FFT of "
            f"{_segment(nfft, complex_data)}: give a smaller nfft or more data"
        )


def _at_most(nint: int | None, samples: int, nfft: int, complex_data: bool) -> int | None:
    """``nint``, no more than the FFTs that ``samples`` hold: a larger count means all of them."""
    return None if nint is None else min(nint, max(samples // _segment(nfft, complex_data), 1))


# -- the checks ----------------------------------------------------------------------------


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
    kind = _kind(x)
    cplx = _is_complex(x)
    if kind == "reader":
        samples = x.shape[0] - x.tell()
        _need_one_fft(samples, nfft, cplx, "channel")
        power, segments = x._core.spectrum(nfft, x.tell(), _at_most(nint, samples, nfft, cplx))
        threads, nchan, rate = list(x.thread_ids), x.header0.nchan, sr or x.sample_rate
    elif kind == "frames":
        frames = _frames(x)
        h = _core.Header.from_bytes(bytes(frames[0, :32]), verify=False)
        most = len(frames) * h.samples_per_frame  # all frames in one thread: an upper bound
        _need_one_fft(most, nfft, cplx, "channel")
        power, segments, threads = _core.spectrum_frames(frames, nfft, _at_most(nint, most, nfft, cplx))
        nchan, rate = h.nchan, sr or h.sample_rate
        samples = len(frames) * h.samples_per_frame // max(len(threads), 1)
    else:
        flat, samples, nthread, nchan, cplx = _samples(x)
        _need_one_fft(samples, nfft, cplx, "channel")
        acc = _core.SpectrumAccumulator(nfft, nthread * nchan, cplx)
        acc.add(flat, samples, _at_most(nint, samples, nfft, cplx))
        power, segments, threads, rate = acc.power(), acc.segments, list(range(nthread)), sr
    if segments == 0:
        _need_one_fft(samples, nfft, cplx, "channel")
        raise ValueError(f"nfft: no whole FFT of {_segment(nfft, cplx)} samples in the data: give a smaller nfft or more data")
    power = np.asarray(power).reshape(len(threads), nchan, nfft)
    return Spectrum(_freq(nfft, cplx, rate), power, nfft, int(segments), rate, cplx, list(threads))


def find_tones(s: Spectrum, threshold: float = 10.0) -> list[Tone]:
    """Tones in every spectrum: local maxima more than ``threshold`` times the median power,
    the frequency refined between channels; strongest first within each (thread, channel)."""
    out = []
    for ti, thread in enumerate(s.thread_ids):
        for ch in range(s.power.shape[1]):
            p = np.ascontiguousarray(s.power[ti, ch], dtype=np.float64)
            for chan, ratio in _core.find_tones(p, threshold):
                step = float(s.freq[1] - s.freq[0]) if len(s.freq) > 1 else 1.0
                out.append(Tone(thread, ch, float(s.freq[0] + chan * step), float(ratio)))
    return out


def _expected_fractions(bits: int, levels: list[float]) -> list[float]:
    cdf = np.vectorize(lambda v: 0.5 * math.erfc(-v / math.sqrt(2)))
    if bits == 2:
        return list(_core.two_bit_state_fractions(_core.TWO_BIT_THRESHOLD_SIGMA))
    lv = np.asarray(levels, dtype=np.float64)
    edges = np.concatenate([[-np.inf], (lv[1:] + lv[:-1]) / 2, [np.inf]])
    c = cdf(edges)
    return [float(v) for v in np.diff(c)]


_LEVELS = {
    1: [-1.0, 1.0],
    2: [-3.316505, -1.0, 1.0, 3.316505],
    4: [(v - 8) / 2.95 for v in range(16)],
    8: [(v - 127.5) / 35.5 for v in range(256)],
}


def _frame_states(parts: list[npt.NDArray[np.uint8]]) -> tuple[list[int], npt.NDArray[np.int64], int]:
    """State counts per thread of whole frames given in parts (a scan's chunks): (threads,
    counts (thread, channel, state), bits)."""
    h = _core.Header.from_bytes(bytes(parts[0][0, :32]), verify=False)
    by_thread: dict[int, npt.NDArray[np.int64]] = {}
    for frames in parts:
        words = np.ascontiguousarray(frames[:, :16]).view("<u4")
        tid = (words[:, 3] >> 16) & 0x3FF
        for t in np.unique(tid).tolist():
            rows = np.ascontiguousarray(frames[tid == t])
            c = _core.bit_states(rows, h.header_size, h.bits, h.nchan, h.complex).astype(np.int64)
            by_thread[t] = by_thread[t] + c if t in by_thread else c
    threads = sorted(by_thread)
    return threads, np.stack([by_thread[t] for t in threads]), h.bits


@checks_views("bstate")
def bstate(x: Any, bits: int | None = None) -> BitStats:
    """Fraction of samples in each quantisation state per (thread, channel), like m5bstate.

    Counted from the raw bytes for a Reader or a frames array (fast, whole data); for a float
    array, the values must be decoded levels and ``bits`` says which (default: guessed).
    """
    if isinstance(x, Reader):
        parts = x.frame_parts
    else:
        frames = np.asarray(x)
        parts = [_some_frames(frames)] if frames.dtype == np.uint8 and frames.ndim == 2 else []
    if parts:
        threads, counts, b = _frame_states(parts)
    else:
        a = np.asarray(x, dtype=np.float32)
        if a.ndim == 1:
            a = a[:, None, None]
        elif a.ndim == 2:
            a = a[:, None, :]
        b = bits or next((k for k in (1, 2, 4, 8) if np.isin(a[:64], np.asarray(_LEVELS[k], np.float32)).all()), 0)
        if b not in _LEVELS:
            raise ValueError("bstate needs decoded samples of 1, 2, 4 or 8 bits (give bits=...), a Reader, or frames")
        lv = np.asarray(_LEVELS[b], np.float32)
        idx = np.searchsorted((lv[1:] + lv[:-1]) / 2, a)
        counts = np.stack([
            np.stack([np.bincount(idx[:, t, c].ravel(), minlength=len(lv)) for c in range(a.shape[2])])
            for t in range(a.shape[1])
        ]).astype(np.int64)
        threads = list(range(a.shape[1]))
    totals = counts.sum(axis=-1, keepdims=True)
    fractions = counts / np.where(totals > 0, totals, 1)
    levels = _LEVELS[b]
    return BitStats(b, levels, counts, fractions, _expected_fractions(b, levels), threads)


#: The SNR at which a fringe counts as detected: noise alone stays far below it (the lag
#: function's peak over its rms exceeds 7 by chance with odds of about e^-49 per lag).
DEFAULT_SNR_THRESHOLD = 7.0


def _search_options(max_delay: Any, snr_threshold: Any) -> tuple[int | None, float]:
    """``max_delay`` (samples) and ``snr_threshold`` checked, as the fringe search takes them."""
    if max_delay is not None and (isinstance(max_delay, bool) or not isinstance(max_delay, int) or max_delay < 0):
        raise ValueError(f"max_delay: {max_delay!r} - give the largest |delay| to search, a whole number of samples >= 0")
    if isinstance(snr_threshold, bool) or not isinstance(snr_threshold, (int, float)) or not snr_threshold > 0:
        raise ValueError(f"snr_threshold: {snr_threshold!r} - give a positive number (default {DEFAULT_SNR_THRESHOLD:g})")
    return max_delay, float(snr_threshold)


def _fringe_of(
    result: _core._Fringe,
    nfft: int,
    cplx: bool,
    rate: float | None,
    snr_threshold: float,
    stretch_seconds: float | None = None,
) -> Fringe:
    """A Fringe from the engine's result; ``stretch_seconds`` turns a rate per stretch into Hz."""
    delay_samples, amplitude, phase, snr, lags, lag_amp, cross, segments, rate_per_part, excluded = result
    return Fringe(
        delay=(delay_samples / rate) if rate else None,
        delay_samples=int(delay_samples),
        amplitude=float(amplitude),
        phase=float(phase),
        snr=float(snr),
        lags=lags,
        lag_amplitude=lag_amp,
        cross_spectrum=cross[:, 0] + 1j * cross[:, 1],
        freq=_freq(nfft, cplx, rate),
        nint=int(segments),
        sample_rate=rate,
        detected=bool(snr >= snr_threshold),
        snr_threshold=snr_threshold,
        excluded_channels=np.asarray(excluded, dtype=np.int64),
        fringe_rate=(rate_per_part / stretch_seconds) if stretch_seconds else None,
    )


@checks_views("fringe")
def fringe(
    a: Any,
    b: Any = None,
    nfft: int = 1024,
    sample_rate: Any = None,
    pair: tuple[int, int] | None = None,
    nint: int | None = None,
    exclude_tones: bool = True,
    max_delay: int | None = None,
    snr_threshold: float = DEFAULT_SNR_THRESHOLD,
) -> Fringe:
    """Cross-correlates two streams and finds the fringe (delay, amplitude, phase, SNR) and
    says whether it is one (``detected``: SNR at or above ``snr_threshold``).

    ``a`` and ``b``: two sample sources (input ``pair[0]`` of a against input ``pair[1]`` of
    b, default (0, 0); an input is channel ``c`` of thread ``t`` at ``t * nchan + c``), or
    ``b=None`` for two inputs of the one source ``a`` (default (0, 1): two channels or two
    threads of a file or view).

    ``exclude_tones`` (default True) leaves out the spectral channels where either input's
    spectrum holds a tone (phase-cal, test tones): a tone common to both would otherwise make
    a flat lag function with a false peak. ``max_delay`` (samples) bounds the delays searched.
    """
    if not isinstance(nfft, int) or nfft < 2:
        raise ValueError(f"nfft: {nfft!r} is not a number of spectral channels: give a whole number >= 2")
    max_delay, snr_threshold = _search_options(max_delay, snr_threshold)
    tones_out = bool(exclude_tones)
    i, j = pair if pair is not None else ((0, 1) if b is None else (0, 0))
    cplx = _is_complex(a)
    kind = _kind(a)
    if b is not None and (_kind(b) != kind or _is_complex(b) != cplx):
        raise ValueError("a and b must be alike: two Readers, two frame arrays or two sample arrays, both real or both complex")
    if b is None and i == j:
        raise ValueError(f"pair: {i},{j} names the same input twice: choose two different inputs")

    def inputs(x: Any) -> int:
        if kind == "reader":
            return int(len(x.thread_ids) * x.header0.nchan)
        if kind == "frames":
            f = _frames(x)
            words = f[:, 12:16].copy().view("<u4")[:, 0]
            nthread = len(np.unique((words >> 16) & 0x3FF))
            return nthread * _core.Header.from_bytes(bytes(f[0, :32]), verify=False).nchan
        _, _, nthread, nchan, _ = _samples(x)
        return nthread * nchan

    for name, src, k in (("pair[0]", a, i), ("pair[1]", a if b is None else b, j)):
        n = inputs(src)
        if not 0 <= k < n:
            raise ValueError(f"pair: {name} = {k} is not an input of the source: give 0..{n - 1} (thread * nchan + channel)")
    sr = to_hz(sample_rate)
    if kind == "reader":
        samples = min(x.shape[0] - x.tell() for x in ((a,) if b is None else (a, b)))
        _need_one_fft(samples, nfft, cplx, "input")
        result = a._core.cross(None if b is None else b._core, i, j, nfft, a.tell(), _at_most(nint, samples, nfft, cplx),
                               exclude_tones=tones_out, max_lag=max_delay)
        rate = sr or a.sample_rate
    elif kind == "frames":
        fa = _frames(a)
        fb = None if b is None else _frames(b)
        # All frames in one thread: an upper bound on the samples of any input.
        samples = min(len(f) * _core.Header.from_bytes(bytes(f[0, :32]), verify=False).samples_per_frame
                      for f in ((fa,) if fb is None else (fa, fb)))
        _need_one_fft(samples, nfft, cplx, "input")
        result = _core.cross_frames(fa, fb, i, j, nfft, _at_most(nint, samples, nfft, cplx),
                                    exclude_tones=tones_out, max_lag=max_delay)
        rate = sr or _frames_rate(fa)
    else:
        flat_a, na, ta, ca, _ = _samples(a)
        flat_b, nb, tb, cb, _ = (flat_a, na, ta, ca, cplx) if b is None else _samples(b)
        vals = 2 if cplx else 1
        _need_one_fft(min(na, nb), nfft, cplx, "input")
        acc = _core.CrossAccumulator(nfft, cplx)
        n = min(na, nb)
        if nint is not None:
            n = min(n, nint * acc.segment_len)
        acc.add(flat_a, i * vals, ta * ca * vals, flat_b, j * vals, tb * cb * vals, n)
        result = acc.fringe(exclude_tones=tones_out, max_lag=max_delay)
        rate = sr
    return _fringe_of(result, nfft, cplx, rate, snr_threshold)
