"""Recordings as Dask arrays, for checks over many files or scans on a laptop or a cluster.

Needs the ``dask`` extra (``pip install 'vdifrec[dask]'``: ``dask[array]``, ``distributed``,
``pandas``); ``import vdifrec`` alone never imports Dask.

Only the files' names and a few numbers travel through the scheduler: each chunk is read and
decoded by vdifrec's Rust reader in the worker that computes it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

try:
    import dask.array as da
    from dask.delayed import delayed
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("vdifrec.dask needs Dask: pip install 'vdifrec[dask]' (dask[array], distributed, pandas)") from exc

from ..analysis.bstate import LEVELS, BitStats, expected_fractions, frame_states
from ..analysis.check import check as check_file
from ..analysis.spectrum import Spectrum, frequencies, need_one_fft, segment_length
from ..analysis.tones import find_tones as find_tones_of
from ..reader import open as open_reader
from .fringe import fringe_test
from .tasks import Hosts, count_read, files_read, first_sample, host_table, placed, reading

__all__ = ["bstate", "check", "files_read", "fringe_test", "open", "session", "spectrum"]

#: Frame sets per chunk when none is asked for: a few MB of samples per chunk at the
#: reference rate (8192-byte payloads, 4 channels x 2 bits: 4096 samples a frame).
DEFAULT_CHUNK_FRAMES = 512


@dataclasses.dataclass(frozen=True)
class _Part:
    """One file (or scan) of the stream, as the client learned it when the array was made."""

    path: str
    samples: int
    start: _dt.datetime
    #: First sample on the absolute axis of `first_sample` (frame-exact).
    first: int
    #: What its reader left out as torn (`Reader.torn`).
    torn: list[dict[str, Any]]


def _read(path: str, open_kwargs: dict[str, Any], start: int, count: int) -> npt.NDArray[Any]:
    """One chunk, in the worker: samples ``start .. start + count`` of ``path``."""
    with reading(path, open_kwargs) as fh:
        fh.seek(start)
        out: npt.NDArray[Any] = fh.read(count)
    return out


def _whole(name: str, value: Any, default: int, what: str) -> int:
    """A count of ``what`` (frames, FFTs), 1 or more: ``default`` when None."""
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: {value!r} - give a whole number of {what}, 1 or more")
    return value


def _compute_per_file(plans: list[list[Any]]) -> list[tuple[Any, ...]]:
    """Every file's tasks in one compute (the scheduler sees them all at once); the results
    handed back file by file."""
    from dask.base import compute

    results = compute(*[t for tasks in plans for t in tasks])
    out = []
    at = 0
    for tasks in plans:
        out.append(results[at : at + len(tasks)])
        at += len(tasks)
    return out


def _names(paths_or_scans: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    if isinstance(paths_or_scans, (str, os.PathLike)):
        return [os.fspath(paths_or_scans)]
    return [os.fspath(p) for p in paths_or_scans]


def open(  # noqa: A001 - as vdifrec.open
    paths_or_scans: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    chunk_frames: int | None = None,
    **open_kwargs: Any,
) -> da.Array:
    """A lazy Dask array of one stream's samples, shaped exactly as ``vdifrec.open(...).read()``.

    Parameters
    ----------
    paths_or_scans : str, os.PathLike or a list of them
        VDIF files, or scan names with ``disks=``. Several are one stream: they are put in time
        order (by their first frame) and concatenated; they must share the sample shape, type
        and rate, and each must start where the one before ends (frame-exact), so that the
        time axis holds.
    chunk_frames : int, optional
        Frame sets per chunk (default 512). Chunks hold whole frames, so no frame is decoded
        twice; a file's last chunk may be shorter, and chunks never span two files.
    **open_kwargs
        Passed to :func:`vdifrec.open` in the client and in every worker: ``sample_rate``,
        ``disks``, ``format``, ``squeeze``.

    Returns
    -------
    dask.array.Array
        ``(time, thread, channel)`` with the same squeezing as ``read()``, ``float32`` (or
        ``complex64``). Attributes ``vdif_time`` (UTC ``datetime`` of the first sample),
        ``sample_rate`` (Hz per channel) and ``torn`` (what the readers left out as torn, as
        ``Reader.torn``: a scan a recorder stopped mid-write is read to the last whole frame of
        each file).
    """
    names = _names(paths_or_scans)
    if not names:
        raise ValueError("paths_or_scans: give at least one file or scan")
    chunk_frames = _whole("chunk_frames", chunk_frames, DEFAULT_CHUNK_FRAMES, "frame sets")
    parts: list[_Part] = []
    shape: tuple[int, ...] | None = None
    dtype: np.dtype[Any] | None = None
    rate = spf = 0.0
    for name in names:
        with open_reader(name, **open_kwargs) as fh:
            this = (fh.sample_shape, fh.dtype, fh.sample_rate, fh.samples_per_frame)
            if shape is None:
                shape, dtype, rate, spf = this
            elif this != (shape, dtype, rate, spf):
                raise ValueError(
                    f"paths_or_scans: {name} is not of the same stream as {names[0]} "
                    f"(sample shape, type, rate, samples per frame: {this} against {(shape, dtype, rate, spf)})"
                )
            parts.append(_Part(name, fh.shape[0], fh.start_time, first_sample(fh), fh.torn))
    if shape is None or dtype is None:
        raise ValueError("paths_or_scans: give at least one file or scan")
    parts.sort(key=lambda p: p.first)
    for a, b in zip(parts, parts[1:]):
        if b.first != a.first + a.samples:
            gap = (b.first - a.first - a.samples) / rate
            raise ValueError(
                f"paths_or_scans: {b.path} starts {gap:+.9f} s from where {a.path} ends "
                f"({'a gap' if gap > 0 else 'an overlap'}): these are not one stream; open them separately"
            )
    step = int(chunk_frames * spf)
    blocks = []
    for p in parts:
        for start in range(0, p.samples, step):
            count = min(step, p.samples - start)
            task = delayed(_read, pure=True)(p.path, open_kwargs, start, count)
            blocks.append(da.from_delayed(task, shape=(count, *shape), dtype=dtype))
    if blocks:
        array = da.concatenate(blocks, axis=0)
    else:
        array = da.zeros((0, *shape), dtype=dtype)
    array.vdif_time = parts[0].start
    array.sample_rate = rate
    array.torn = [t for p in parts for t in p.torn]
    return array


#: FFTs per task of `spectrum` when none is asked for.
DEFAULT_CHUNK_FFTS = 4096


def _spectrum_part(path: str, open_kwargs: dict[str, Any], nfft: int, start: int, ffts: int) -> tuple[npt.NDArray[np.float64], int]:
    """In the worker: the summed power of ``ffts`` FFTs from sample ``start`` of ``path``, and
    how many were taken (a sum, so that parts add up exactly to the whole file's mean)."""
    with reading(path, open_kwargs) as fh:
        power, taken = fh._core.spectrum(nfft, start, ffts)
    if taken != ffts:
        raise RuntimeError(f"{path}: {taken} FFTs where {ffts} were planned: the file changed while being read")
    return np.asarray(power, dtype=np.float64) * taken, int(taken)


def spectrum(
    paths_or_scans: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    nfft: int = 1024,
    chunk_ffts: int | None = None,
    hosts: Hosts | None = None,
    **open_kwargs: Any,
) -> list[Spectrum]:
    """The averaged power spectra of each file or scan (as :func:`vdifrec.spectrum` of
    ``vdifrec.open(path)``), computed as map-reduce over chunks of whole FFTs on the current
    Dask scheduler (threads, or a ``distributed.Client``): each task runs vdifrec's Rust
    spectrum over its chunk where the data lie; the partial sums are added exactly.

    Parameters
    ----------
    paths_or_scans : str, os.PathLike or a list of them
        Files, or scan names with ``disks=``; one Spectrum each, in the order given.
    nfft : int
        Spectral channels (FFTs of ``2 nfft`` real or ``nfft`` complex samples).
    chunk_ffts : int, optional
        FFTs per task (default 4096).
    hosts : mapping, optional
        ``{path or scan: host}``, where each file lies. Its tasks prefer the workers on that
        host: those started with a resource named after it (``dask worker SCHEDULER
        --resources "rec1=1"`` on the recorder ``rec1``), else those whose address is on it.
        A preference: when those workers are gone, or busy while another is idle (Dask's
        work stealing), a task runs elsewhere and its data cross the network.
    **open_kwargs
        Passed to :func:`vdifrec.open`: ``sample_rate``, ``disks``, ``format``.
    """
    if isinstance(nfft, bool) or not isinstance(nfft, int) or nfft <= 0:
        raise ValueError(f"nfft must be a positive whole number of spectral channels, got {nfft!r}")
    chunk_ffts = _whole("chunk_ffts", chunk_ffts, DEFAULT_CHUNK_FFTS, "FFTs")
    names = _names(paths_or_scans)
    table = host_table(hosts)
    plans = []
    for name in names:
        with open_reader(name, **open_kwargs) as fh, placed(table, name):
            cplx = fh.complex_data
            need_one_fft(fh.shape[0], nfft, cplx, "channel")
            seg = segment_length(nfft, cplx)
            total = fh.shape[0] // seg
            tasks = [
                delayed(_spectrum_part, pure=True)(name, open_kwargs, nfft, k * seg, min(chunk_ffts, total - k))
                for k in range(0, total, chunk_ffts)
            ]
            plans.append((tasks, list(fh.thread_ids), fh.header0.nchan, fh.sample_rate, cplx))
    out = []
    for parts, (_, threads, nchan, rate, cplx) in zip(_compute_per_file([p[0] for p in plans]), plans):
        taken = sum(n for _, n in parts)
        power = sum(p for p, _ in parts) / taken
        power = np.asarray(power).reshape(len(threads), nchan, nfft)
        out.append(Spectrum(frequencies(nfft, cplx, rate), power, nfft, taken, rate, cplx, threads))
    return out


def _bstate_part(path: str, open_kwargs: dict[str, Any], part: int, lo: int, hi: int) -> tuple[dict[int, npt.NDArray[np.int64]], int]:
    """In the worker: state counts per thread of frames ``lo .. hi`` of part ``part`` (a scan's
    chunk; the file itself for a file), counted from the raw bytes."""
    with reading(path, open_kwargs) as fh:
        threads, counts, bits = frame_states([fh.frame_parts[part][lo:hi]])
    return {t: counts[k] for k, t in enumerate(threads)}, bits


def bstate(
    paths_or_scans: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    chunk_frames: int | None = None,
    hosts: Hosts | None = None,
    **open_kwargs: Any,
) -> list[BitStats]:
    """The quantisation-state statistics of each file or scan (as :func:`vdifrec.bstate` of
    ``vdifrec.open(path)``: the same counts), counted as map-reduce over runs of whole frames
    (``chunk_frames``, default 4096 a task) on the current Dask scheduler; ``hosts`` as for
    :func:`spectrum`."""
    chunk_frames = _whole("chunk_frames", chunk_frames, 8 * DEFAULT_CHUNK_FRAMES, "frames")
    names = _names(paths_or_scans)
    table = host_table(hosts)
    plans = []
    for name in names:
        with open_reader(name, **open_kwargs) as fh:
            sizes = [len(p) for p in fh.frame_parts]
        with placed(table, name):
            plans.append([
                delayed(_bstate_part, pure=True)(name, open_kwargs, k, lo, min(lo + chunk_frames, n))
                for k, n in enumerate(sizes)
                for lo in range(0, n, chunk_frames)
            ])
    out = []
    for parts in _compute_per_file(plans):
        by_thread: dict[int, npt.NDArray[np.int64]] = {}
        bits = parts[0][1] if parts else 2
        for counts, _ in parts:
            for t, c in counts.items():
                by_thread[t] = by_thread[t] + c if t in by_thread else c
        threads = sorted(by_thread)
        total = np.stack([by_thread[t] for t in threads]) if threads else np.zeros((0, 0, len(LEVELS[bits])), np.int64)
        sums = total.sum(axis=-1, keepdims=True)
        levels = LEVELS[bits]
        out.append(BitStats(bits, levels, total, total / np.where(sums > 0, sums, 1), expected_fractions(bits, levels), threads))
    return out


def _check_one(path: str, open_kwargs: dict[str, Any]) -> dict[str, Any]:
    """In the worker: vdifrec's one-pass check of one file or scan."""
    count_read(path)
    kw = {k: v for k, v in open_kwargs.items() if k in ("disks", "format")}
    return check_file(path, **kw)


def check(
    paths_or_scans: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    hosts: Hosts | None = None,
    **open_kwargs: Any,
) -> list[dict[str, Any]]:
    """:func:`vdifrec.check` of each file or scan (``disks=``, ``format=`` pass through), a
    task each on the current Dask scheduler, in the order given; ``hosts`` as for
    :func:`spectrum`."""
    from dask.base import compute

    names = _names(paths_or_scans)
    table = host_table(hosts)
    tasks = []
    for name in names:
        with placed(table, name):
            tasks.append(delayed(_check_one, pure=True)(name, open_kwargs))
    return list(compute(*tasks))


def session(
    paths_or_scans: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    nfft: int = 1024,
    hosts: Hosts | None = None,
    **open_kwargs: Any,
) -> Any:
    """One row per file or scan, for a session's check before correlation: ``path``,
    ``frames``, ``lost``, ``clean`` (from the one-pass check, a task per file), ``tones`` (the
    strongest tone per thread and channel, ``[(thread, channel, Hz, power ratio), ...]``) and
    ``bstate_deviation`` (the largest difference, over threads, channels and states, between
    the measured state fractions and those of Gaussian noise). A pandas DataFrame; ``hosts``
    as for :func:`spectrum`."""
    import pandas as pd

    names = _names(paths_or_scans)
    checks = check(names, hosts=hosts, **open_kwargs)
    spectra = spectrum(names, nfft=nfft, hosts=hosts, **open_kwargs)
    states = bstate(names, hosts=hosts, **open_kwargs)
    rows = []
    for name, c, s, b in zip(names, checks, spectra, states):
        strongest: dict[tuple[int, int], Any] = {}
        for t in find_tones_of(s):
            strongest.setdefault((t.thread, t.channel), t)
        deviation = float(np.max(np.abs(b.fractions - np.asarray(b.expected)))) if b.thread_ids else float("nan")
        rows.append({
            "path": name,
            "frames": int(c["frames"]),
            "lost": int(c["totals"]["lost"]),
            "clean": bool(c["clean"]),
            "tones": [(t.thread, t.channel, t.frequency, t.power_ratio) for t in strongest.values()],
            "bstate_deviation": deviation,
        })
    return pd.DataFrame(rows)
