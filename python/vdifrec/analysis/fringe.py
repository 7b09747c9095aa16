"""The fringe check: two streams (or two inputs of one) cross-correlated, the delay, amplitude,
phase and SNR of the peak, and whether it is a fringe. :func:`search_options` and
:func:`fringe_of` are shared with the station-to-station fringe test of ``vdifrec.dask``."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..units import to_hz
from ..views import checks_views
from .inputs import as_frames, as_samples, frames_sample_rate, is_complex, kind
from .spectrum import at_most, frequencies, need_one_fft

__all__ = ["DEFAULT_SNR_THRESHOLD", "Fringe", "fringe", "fringe_of", "search_options"]


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
        from .plot import plot_fringe

        return plot_fringe(self, path=path, title=title)


#: The SNR at which a fringe counts as detected: noise alone stays far below it (the lag
#: function's peak over its rms exceeds 7 by chance with odds of about e^-49 per lag).
DEFAULT_SNR_THRESHOLD = 7.0


def search_options(max_delay: Any, snr_threshold: Any) -> tuple[int | None, float]:
    """``max_delay`` (samples) and ``snr_threshold`` checked, as the fringe search takes them."""
    if max_delay is not None and (isinstance(max_delay, bool) or not isinstance(max_delay, int) or max_delay < 0):
        raise ValueError(f"max_delay: {max_delay!r} - give the largest |delay| to search, a whole number of samples >= 0")
    if isinstance(snr_threshold, bool) or not isinstance(snr_threshold, (int, float)) or not snr_threshold > 0:
        raise ValueError(f"snr_threshold: {snr_threshold!r} - give a positive number (default {DEFAULT_SNR_THRESHOLD:g})")
    return max_delay, float(snr_threshold)


def fringe_of(
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
        freq=frequencies(nfft, cplx, rate),
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
    max_delay, snr_threshold = search_options(max_delay, snr_threshold)
    tones_out = bool(exclude_tones)
    i, j = pair if pair is not None else ((0, 1) if b is None else (0, 0))
    cplx = is_complex(a)
    source = kind(a)
    if b is not None and (kind(b) != source or is_complex(b) != cplx):
        raise ValueError("a and b must be alike: two Readers, two frame arrays or two sample arrays, both real or both complex")
    if b is None and i == j:
        raise ValueError(f"pair: {i},{j} names the same input twice: choose two different inputs")

    def inputs(x: Any) -> int:
        if source == "reader":
            return int(len(x.thread_ids) * x.header0.nchan)
        if source == "frames":
            f = as_frames(x)
            words = f[:, 12:16].copy().view("<u4")[:, 0]
            nthread = len(np.unique((words >> 16) & 0x3FF))
            return nthread * _core.Header.from_bytes(bytes(f[0, :32]), verify=False).nchan
        _, _, nthread, nchan, _ = as_samples(x)
        return nthread * nchan

    for name, src, k in (("pair[0]", a, i), ("pair[1]", a if b is None else b, j)):
        n = inputs(src)
        if not 0 <= k < n:
            raise ValueError(f"pair: {name} = {k} is not an input of the source: give 0..{n - 1} (thread * nchan + channel)")
    sr = to_hz(sample_rate)
    if source == "reader":
        samples = min(x.shape[0] - x.tell() for x in ((a,) if b is None else (a, b)))
        need_one_fft(samples, nfft, cplx, "input")
        result = a._core.cross(None if b is None else b._core, i, j, nfft, a.tell(), at_most(nint, samples, nfft, cplx),
                               exclude_tones=tones_out, max_lag=max_delay)
        rate = sr or a.sample_rate
    elif source == "frames":
        fa = as_frames(a)
        fb = None if b is None else as_frames(b)
        # All frames in one thread: an upper bound on the samples of any input.
        samples = min(len(f) * _core.Header.from_bytes(bytes(f[0, :32]), verify=False).samples_per_frame
                      for f in ((fa,) if fb is None else (fa, fb)))
        need_one_fft(samples, nfft, cplx, "input")
        result = _core.cross_frames(fa, fb, i, j, nfft, at_most(nint, samples, nfft, cplx),
                                    exclude_tones=tones_out, max_lag=max_delay)
        rate = sr or frames_sample_rate(fa)
    else:
        flat_a, na, ta, ca, _ = as_samples(a)
        flat_b, nb, tb, cb, _ = (flat_a, na, ta, ca, cplx) if b is None else as_samples(b)
        vals = 2 if cplx else 1
        need_one_fft(min(na, nb), nfft, cplx, "input")
        acc = _core.CrossAccumulator(nfft, cplx)
        n = min(na, nb)
        if nint is not None:
            n = min(n, nint * acc.segment_len)
        acc.add(flat_a, i * vals, ta * ca * vals, flat_b, j * vals, tb * cb * vals, n)
        result = acc.fringe(exclude_tones=tones_out, max_lag=max_delay)
        rate = sr
    return fringe_of(result, nfft, cplx, rate, snr_threshold)
