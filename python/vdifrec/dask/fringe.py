"""The station-to-station fringe test on Dask (``vdifrec.dask.fringe_test``): every baseline of
a set of station recordings, aligned by VDIF time, cross-correlated where the data lie, and
searched over delay and fringe rate.

Each task sums the cross and auto spectra of one stretch of one baseline with vdifrec's Rust
code in the worker; only those sums (a few spectra) come back, and the search over them runs
in the client.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from dask.base import compute
from dask.delayed import delayed

from .. import _core
from ..analysis.fringe import DEFAULT_SNR_THRESHOLD, Fringe, fringe_of, search_options
from ..analysis.spectrum import segment_length
from ..reader import Reader
from ..reader import open as open_reader
from .tasks import Hosts, first_sample, host_table, placed, reading, set_time

#: Stretches of time a baseline is cut into for the fringe-rate search, when the overlap holds
#: that many FFTs: fringe rates up to ±8 turns over the time correlated are searched.
DEFAULT_STRETCHES = 16


@dataclasses.dataclass(frozen=True)
class _Station:
    """One station's recording as the fringe test sees it. Times are samples on the absolute
    axis of `first_sample` (since the POSIX epoch, at the sample rate)."""

    name: str
    path: str
    #: The station's clock offset in samples: its stamp for true time t reads t + shift.
    shift: int
    #: First sample and just after the last, true time (by the first and last headers, so
    #: that frames lost in between do not move the end).
    start: int
    stop: int
    rate: float
    inputs: int
    complex: bool


def _station(name: str, path: str, clock_offset: float, open_kwargs: dict[str, Any]) -> _Station:
    with open_reader(path, **open_kwargs) as fh:
        rate = fh.sample_rate
        shift = round(clock_offset * rate)
        sets = fh.shape[0] // int(fh.samples_per_frame)
        return _Station(
            name=name,
            path=path,
            shift=shift,
            start=first_sample(fh) - shift,
            stop=set_time(fh, sets - 1) + int(fh.samples_per_frame) - shift,
            rate=rate,
            inputs=len(fh.thread_ids) * fh.header0.nchan,
            complex=fh.complex_data,
        )


def _sample_at(fh: Reader, at: int) -> int | None:
    """Where time ``at`` is in the reader's samples, found by the frames' VDIF time (a binary
    search over the frame sets' headers, which rise in time), so that frames lost before it
    move nothing; None when no frame holds it."""
    spf = int(fh.samples_per_frame)
    frame_time, within = at - at % spf, at % spf
    lo, hi = 0, fh.shape[0] // spf
    while lo < hi:
        mid = (lo + hi) // 2
        if set_time(fh, mid) < frame_time:
            lo = mid + 1
        else:
            hi = mid
    if lo == fh.shape[0] // spf or set_time(fh, lo) != frame_time:
        return None
    return lo * spf + within


def _window(fh: Reader, at: int, n: int) -> int | None:
    """The first of ``n`` samples from time ``at``, if the reader holds all of them without a
    gap: the last is as far from the first in the file as in time."""
    first, last = _sample_at(fh, at), _sample_at(fh, at + n - 1)
    return first if first is not None and last == first + n - 1 else None


def _cross_part(
    path_a: str, path_b: str, open_kwargs: dict[str, Any], ia: int, ib: int, nfft: int, at_a: int, at_b: int, ffts: int
) -> _core._Sums | None:
    """In the worker: one stretch of one baseline, from time ``at_a`` of a's stamps and
    ``at_b`` of b's, as summed cross and auto spectra; None when a frame of it is missing."""
    with reading(path_a, open_kwargs) as a, reading(path_b, open_kwargs) as b:
        n = ffts * segment_length(nfft, a.complex_data)
        start_a, start_b = _window(a, at_a, n), _window(b, at_b, n)
        if start_a is None or start_b is None:
            return None
        return a._core.cross_sums(b._core, ia, ib, nfft, start_a, start_b, ffts)


def _checked_stations(stations: Any) -> dict[str, str]:
    if not isinstance(stations, Mapping) or len(stations) < 2:
        raise ValueError(f"stations: {stations!r} - give a mapping of two or more {{station: file or scan}}, "
                         "e.g. {'Kv': 'kv.vdif', 'Ku': 'ku.vdif'}")
    return {str(k): os.fspath(v) for k, v in stations.items()}


def _checked_offsets(clock_offset: Any, names: dict[str, str]) -> dict[str, float]:
    if clock_offset is None:
        return {}
    if not isinstance(clock_offset, Mapping):
        raise ValueError(f"clock_offset: {clock_offset!r} - give a mapping {{station: seconds}}")
    out = {}
    for k, v in clock_offset.items():
        if k not in names:
            raise ValueError(f"clock_offset: {k!r} is not one of the stations ({', '.join(names)})")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"clock_offset: {k}: {v!r} - give the station clock's offset in seconds")
        out[str(k)] = float(v)
    return out


def _checked_channels(channels: Any, inputs: int) -> list[int]:
    if channels is None:
        return [0]
    if isinstance(channels, int) and not isinstance(channels, bool):
        channels = [channels]
    if not isinstance(channels, Sequence) or not channels:
        raise ValueError(f"channels: {channels!r} - give a list of inputs (thread * nchan + channel), e.g. [0, 1]")
    for c in channels:
        if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < inputs:
            raise ValueError(f"channels: {c!r} is not an input every station has: give 0..{inputs - 1} "
                             "(thread * nchan + channel)")
    return list(dict.fromkeys(channels))


def _positive(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
        raise ValueError(f"{name}: {value!r} - give a positive number of seconds, or None for the whole overlap")
    return float(value)


def fringe_test(
    stations: Mapping[str, str | os.PathLike[str]],
    seconds: float | None = None,
    nfft: int = 1024,
    *,
    channels: int | Sequence[int] | None = None,
    max_delay: int | None = None,
    clock_offset: Mapping[str, float] | None = None,
    stretches: int | None = None,
    exclude_tones: bool = True,
    snr_threshold: float = DEFAULT_SNR_THRESHOLD,
    hosts: Hosts | None = None,
    **open_kwargs: Any,
) -> Any:
    """The fringe test of a session: every baseline between ``stations``, one row each.

    Parameters
    ----------
    stations : mapping
        ``{station: file or scan}``, e.g. ``{"Kv": "kv.vdif", "Ku": "ku.vdif"}``; scans with
        ``disks=``. Two or more, all at one sample rate.
    seconds : float, optional
        Seconds to correlate from the start of each baseline's overlap (None: the whole
        overlap). Recordings may start and stop at different times: each baseline is aligned
        by VDIF time, frame-exactly.
    nfft : int
        Spectral channels (FFTs of ``2 nfft`` real or ``nfft`` complex samples); the delays
        searched are ±nfft samples (±nfft/2 for complex data).
    channels : int or list of int, optional
        The inputs (``thread * nchan + channel``) to correlate, the same input of each station
        (default 0). With several, each is searched and the row gives the one with the highest
        SNR (``channel``; ``snr_by_channel`` has them all).
    max_delay : int, optional
        The largest ``|delay|`` searched, in samples (after the clock offsets).
    clock_offset : mapping, optional
        ``{station: seconds}``: how far each station's VDIF time stamps are ahead of true time
        (a correlator's clock model), applied to the nearest sample before the search; the
        delays found are what remains.
    stretches : int, optional
        Stretches of time for the fringe-rate search (default 16, fewer when the overlap
        holds fewer FFTs; 1 searches delay alone). A phase that turns during the time
        correlated, which a plain sum would wash out, is followed: ``fringe_rate`` in Hz.
    exclude_tones : bool
        Leave out the spectral channels holding tones in either station (default True):
        phase-cal and test tones are common to both and fake a flat lag function.
    snr_threshold : float
        ``detected`` is ``snr >= snr_threshold`` (default 7).
    hosts : mapping, optional
        ``{file or scan: host}``: each baseline's tasks prefer the workers on the host of its
        first station's data (see :func:`vdifrec.dask.spectrum`).
    **open_kwargs
        Passed to :func:`vdifrec.open`: ``sample_rate``, ``disks``, ``format``.

    Returns
    -------
    pandas.DataFrame
        One row per baseline (``"Kv-Ku"``, station pairs in the order given): ``baseline``,
        ``station_a``, ``station_b``, ``delay_samples``, ``delay_seconds`` (b behind a),
        ``amplitude``, ``phase`` (radians), ``snr``, ``detected``, ``fringe_rate`` (Hz, None
        for one stretch), ``channel``, ``snr_by_channel``, ``start`` (POSIX seconds of the
        first sample correlated, true time), ``seconds`` (time correlated), ``tones_excluded``
        (spectral channels left out) and ``fringe`` (the :class:`vdifrec.Fringe`, with
        ``.plot()``; None when nothing could be correlated), ``note`` (why: no overlap in
        time, or stretches left out because frames were missing).

    Each stretch of time is found in each file by its frames' VDIF time, so frames lost
    before it shift nothing; a stretch in which either station lacks a frame is left out
    (the fringe-rate search sees a hole in time there) and counted in ``note``.
    """
    import pandas as pd

    paths = _checked_stations(stations)
    offsets = _checked_offsets(clock_offset, paths)
    if isinstance(nfft, bool) or not isinstance(nfft, int) or nfft < 2:
        raise ValueError(f"nfft: {nfft!r} is not a number of spectral channels: give a whole number >= 2")
    max_delay, snr_threshold = search_options(max_delay, snr_threshold)
    want = _positive("seconds", seconds)
    if stretches is not None and (isinstance(stretches, bool) or not isinstance(stretches, int) or stretches < 1):
        raise ValueError(f"stretches: {stretches!r} - give a whole number of stretches of time, 1 or more")
    table = host_table(hosts)
    st = [_station(name, path, offsets.get(name, 0.0), open_kwargs) for name, path in paths.items()]
    first = st[0]
    for s in st[1:]:
        if (s.rate, s.complex) != (first.rate, first.complex):
            raise ValueError(f"stations: {s.name} ({s.rate:g} Hz, {'complex' if s.complex else 'real'}) and "
                             f"{first.name} ({first.rate:g} Hz, {'complex' if first.complex else 'real'}) differ: "
                             "correlate stations at one sample rate and sample type")
    inputs = min(s.inputs for s in st)
    chans = _checked_channels(channels, inputs)
    rate, cplx = first.rate, first.complex
    seg = segment_length(nfft, cplx)

    plans = []  # (a, b, t0, ffts per stretch, stretch count, tasks per channel)
    for a, b in itertools.combinations(st, 2):
        t0 = max(a.start, b.start)
        n = min(a.stop, b.stop) - t0
        if want is not None:
            n = min(n, round(want * rate))
        ffts = max(n, 0) // seg
        k = min(stretches or DEFAULT_STRETCHES, ffts)
        per = ffts // k if k else 0
        with placed(table, a.path):
            # Each stretch is placed by time in each file (the stamps: true time + shift).
            tasks = {
                c: [delayed(_cross_part, pure=True)(a.path, b.path, open_kwargs, c, c, nfft,
                                                    t0 + j * per * seg + a.shift, t0 + j * per * seg + b.shift, per)
                    for j in range(k)]
                for c in chans
            }
        plans.append((a, b, t0, per, k, tasks))
    sums = compute([p[5] for p in plans])[0]

    rows = []
    for (a, b, t0, per, k, _), by_channel in zip(plans, sums):
        row: dict[str, Any] = {"baseline": f"{a.name}-{b.name}", "station_a": a.name, "station_b": b.name,
                               "start": t0 / round(rate)}
        lost = sum(p is None for p in by_channel[chans[0]]) if k else 0
        if k == 0 or lost == k:
            rows.append({**row, **_no_fringe(snr_threshold), "seconds": 0.0, "note": (
                f"no overlap in time (less than one FFT of {seg} samples)" if k == 0
                else f"every stretch of the overlap lacks frames of {a.name} or {b.name}")})
            continue
        found: dict[int, Fringe] = {}
        for c, parts in by_channel.items():
            empty = (np.zeros(nfft, np.complex128), np.zeros(nfft), np.zeros(nfft), 0)
            if any(p is not None and p[3] != per for p in parts):
                raise RuntimeError(f"{a.name}-{b.name}: a stretch came back short: the recordings changed while read?")
            result = _core.fringe_of_parts([empty if p is None else p for p in parts], cplx,
                                           exclude_tones=bool(exclude_tones), max_lag=max_delay)
            found[c] = fringe_of(result, nfft, cplx, rate, snr_threshold, per * seg / rate if k > 1 else None)
        best = max(found, key=lambda c: found[c].snr)
        f = found[best]
        rows.append({
            **row,
            "delay_samples": f.delay_samples,
            "delay_seconds": f.delay,
            "amplitude": f.amplitude,
            "phase": f.phase,
            "snr": f.snr,
            "detected": f.detected,
            "fringe_rate": f.fringe_rate,
            "channel": best,
            "snr_by_channel": {c: found[c].snr for c in found},
            "seconds": per * (k - lost) * seg / rate,
            "tones_excluded": len(f.excluded_channels),
            "note": f"{lost} of {k} stretches left out: frames missing" if lost else "",
            "fringe": f,
        })
    columns = ["baseline", "station_a", "station_b", "delay_samples", "delay_seconds", "amplitude", "phase", "snr",
               "detected", "fringe_rate", "channel", "snr_by_channel", "start", "seconds", "tones_excluded", "note",
               "fringe"]
    return pd.DataFrame(rows, columns=columns)


def _no_fringe(snr_threshold: float) -> dict[str, Any]:
    """A baseline's row when there was nothing to correlate."""
    nan = math.nan
    return {"delay_samples": None, "delay_seconds": None, "amplitude": nan, "phase": nan, "snr": nan,
            "detected": False, "fringe_rate": None, "channel": None, "snr_by_channel": {}, "tones_excluded": 0,
            "fringe": None}
