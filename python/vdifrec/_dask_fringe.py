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

from dask.base import compute
from dask.delayed import delayed

from . import _core
from ._dask_tasks import Hosts, _host_table, _placed, _reading
from .quality import DEFAULT_SNR_THRESHOLD, Fringe, _fringe_of, _search_options, _segment
from .reader import open as open_reader

#: Stretches of time a baseline is cut into for the fringe-rate search, when the overlap holds
#: that many FFTs: fringe rates up to ±8 turns over the time correlated are searched.
DEFAULT_STRETCHES = 16


@dataclasses.dataclass(frozen=True)
class _Station:
    """One station's recording as the fringe test sees it."""

    name: str
    path: str
    #: Its first sample on a common axis: samples since the POSIX epoch at the sample rate,
    #: with the station's clock offset taken off (true time, not the station's stamps).
    start: int
    samples: int
    rate: float
    inputs: int
    complex: bool


def _station(name: str, path: str, clock_offset: float, open_kwargs: dict[str, Any]) -> _Station:
    with open_reader(path, **open_kwargs) as fh:
        rate = fh.sample_rate
        whole, _ = fh.header0.unix_time(fh.frame_rate)
        # Frame-exact: whole seconds and the frame number, no floating-point time.
        first = whole * round(rate) + fh.header0.frame_nr * int(fh.samples_per_frame)
        return _Station(
            name=name,
            path=path,
            start=first - round(clock_offset * rate),
            samples=int(fh.shape[0]),
            rate=rate,
            inputs=len(fh.thread_ids) * fh.header0.nchan,
            complex=fh.complex_data,
        )


def _cross_part(
    path_a: str, path_b: str, open_kwargs: dict[str, Any], ia: int, ib: int, nfft: int, start_a: int, start_b: int, ffts: int
) -> _core._Sums:
    """In the worker: one stretch of one baseline, as summed cross and auto spectra."""
    with _reading(path_a, open_kwargs) as a, _reading(path_b, open_kwargs) as b:
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
        The largest |delay| searched, in samples (after the clock offsets).
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
        ``.plot()``).
    """
    import pandas as pd

    paths = _checked_stations(stations)
    offsets = _checked_offsets(clock_offset, paths)
    if isinstance(nfft, bool) or not isinstance(nfft, int) or nfft < 2:
        raise ValueError(f"nfft: {nfft!r} is not a number of spectral channels: give a whole number >= 2")
    max_delay, snr_threshold = _search_options(max_delay, snr_threshold)
    want = _positive("seconds", seconds)
    if stretches is not None and (isinstance(stretches, bool) or not isinstance(stretches, int) or stretches < 1):
        raise ValueError(f"stretches: {stretches!r} - give a whole number of stretches of time, 1 or more")
    table = _host_table(hosts)
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
    seg = _segment(nfft, cplx)

    plans = []  # (a, b, t0, ffts per stretch, stretch count, tasks per channel)
    for a, b in itertools.combinations(st, 2):
        t0 = max(a.start, b.start)
        n = min(a.start + a.samples, b.start + b.samples) - t0
        if want is not None:
            n = min(n, round(want * rate))
        ffts = max(n, 0) // seg
        if ffts < 1:
            raise ValueError(f"stations: {a.name} and {b.name} overlap by {max(n, 0) / rate:.9f} s, less than one "
                             f"FFT of {seg} samples: give recordings of the same time (or the right clock_offset)")
        k = min(stretches or DEFAULT_STRETCHES, ffts)
        per = ffts // k
        with _placed(table, a.path):
            tasks = {
                c: [delayed(_cross_part, pure=True)(a.path, b.path, open_kwargs, c, c, nfft,
                                                    t0 - a.start + j * per * seg, t0 - b.start + j * per * seg, per)
                    for j in range(k)]
                for c in chans
            }
        plans.append((a, b, t0, per, k, tasks))
    sums = compute([p[5] for p in plans])[0]

    rows = []
    for (a, b, t0, per, k, _), by_channel in zip(plans, sums):
        found: dict[int, Fringe] = {}
        for c, parts in by_channel.items():
            if any(p[3] != per for p in parts):
                raise RuntimeError(f"{a.name}-{b.name}: a stretch came back short: the recordings changed while read?")
            result = _core.fringe_of_parts(list(parts), cplx, exclude_tones=bool(exclude_tones), max_lag=max_delay)
            found[c] = _fringe_of(result, nfft, cplx, rate, snr_threshold, per * seg / rate if k > 1 else None)
        best = max(found, key=lambda c: found[c].snr)
        f = found[best]
        rows.append({
            "baseline": f"{a.name}-{b.name}",
            "station_a": a.name,
            "station_b": b.name,
            "delay_samples": f.delay_samples,
            "delay_seconds": f.delay,
            "amplitude": f.amplitude,
            "phase": f.phase,
            "snr": f.snr,
            "detected": f.detected,
            "fringe_rate": f.fringe_rate,
            "channel": best,
            "snr_by_channel": {c: found[c].snr for c in found},
            "start": t0 / round(rate),
            "seconds": per * k * seg / rate,
            "tones_excluded": len(f.excluded_channels),
            "fringe": f,
        })
    return pd.DataFrame(rows)
