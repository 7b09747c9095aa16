"""Whole-file tools: ``check`` (a VDIF file's or a scan's integrity) and ``generate`` (a synthetic recording)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from . import _core
from .scans import Disks, expand_disks

if TYPE_CHECKING:
    # typing.Unpack is 3.11+; the checker's own typing_extensions has it for 3.10 (never imported at run time).
    from typing_extensions import Unpack

    from ._core import CheckOptions, GenerateOptions, SignalOptions

__all__ = ["check", "generate"]


def check(
    path: str | os.PathLike[str],
    fps: int | None = None,
    frame_size: int | None = None,
    *,
    disks: Disks | None = None,
    format: str | None = None,  # noqa: A002
) -> dict[str, Any]:
    """Checks a VDIF file, or a scan on several disks, in one pass and returns the report (its
    keys are documented in the reference, ``docs/reference/formats/check.md``).

    Parameters
    ----------
    path : str or os.PathLike
        The file; with ``disks``, the scan's name.
    fps : int, optional
        Frames per second per thread; learned from the frame numbers if not given.
    frame_size : int, optional
        Frame size in bytes; taken from the first header if not given.
    disks : str, os.PathLike or list of them, optional
        Check the scan ``path`` on these directories (or globs), its parts in order as one
        stream: a missing part shows as the frames it held counted lost, and under ``scan``
        (``missing`` part numbers, ``gaps`` with the frames on either side).
    format : {"file", "vbs", "mk6"}, optional
        The scan's layout; detected by default.

    Returns
    -------
    dict
        ``frames``, ``threads``, ``totals`` (received, expected, lost, out_of_order,
        duplicates, invalid, ...), ``per_thread``, ``seconds`` (per-second, per-thread counts),
        ``gaps``, ``corrupt``, ``corrupt_bytes``, ``trailing_bytes``, ``clean`` and more.
    """
    options: CheckOptions = {}
    if fps is not None:
        options["fps"] = fps
    if frame_size is not None:
        options["frame_size"] = frame_size
    if disks is not None:
        text = _core.check_scan(os.fspath(path), expand_disks(disks), format, options)
    elif format is not None:
        raise _core.ArgumentError(f"format: {format!r} applies to a scan; give the scan's disks with it")
    else:
        text = _core.check(os.fspath(path), options)
    report: dict[str, Any] = json.loads(text)
    return report


def generate(
    path: str | os.PathLike[str], *, seconds: float | None = None, **signal: Unpack[SignalOptions]
) -> _core.Header:
    """Writes a synthetic FILA10G-like recording: Gaussian noise plus a tone, 2-bit by default.

    Every setting is checked before the file is created (``vdifrec.ArgumentError`` names a
    bad one); the defaults are ``vdifrec.defaults["signal"]`` (the reference 8.224 Gbit/s
    stream) and ``["generate"]``.

    Parameters
    ----------
    seconds : float
        Length in seconds of data (``seconds * fps`` frame sets; default 1).
    fps : int
        Frames per second per thread (125000 for the reference 8.224 Gbps stream).
    frame_size : int
        Bytes per frame, 32-byte header included (8224).
    nchan, bits, threads : int
        Channels per frame, bits per sample (1, 2, 4, 8), threads.
    tone_mhz : float, optional
        Tone frequency in MHz within the band (sample rate / 2); by default 0.390625 of the
        band (200 MHz of 512 MHz).
    tone_amplitude : float
        Tone amplitude in units of the noise's standard deviation.
    correlation, delay : float, int
        Correlation of a noise component common to all inputs (channel ``c`` of thread ``t`` is
        input ``t * nchan + c``), lagged by ``delay`` samples per input.
    seed : int
        Random seed (same seed, same bytes): with ``sky_seed``, the station's own noise.
    sky_seed : int, optional
        A sky shared by several "stations": the common noise becomes a function of time alone,
        the same at the same VDIF time in every file made with this sky seed, whatever its
        start; each input of this station sees it ``delay`` samples late. Two stations with
        ``correlation`` ρa and ρb then correlate by sqrt(ρa ρb) at the difference of their delays.
    ref_epoch, start_second : int, optional
        Time of the first frame; now by default.

    Returns
    -------
    Header
        The header of the first frame.
    """
    options: GenerateOptions = {"signal": signal}
    if seconds is not None:
        options["seconds"] = seconds
    return _core.generate(os.fspath(path), options)
