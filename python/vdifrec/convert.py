"""A VDIF stream turned into another: threads kept, channels corner-turned into single-channel
threads, frames cut smaller (``vdifrec convert``). The engine's side is
``src/vdif/transform.rs`` (the rules) and ``src/vdif/convert.rs`` (the file written)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from . import _core
from .scans import Disks, expand_disks

__all__ = ["convert"]


def convert(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    threads: str | Sequence[int] | None = None,
    channels: str | Sequence[int] | None = None,
    payload: int | None = None,
    disks: Disks | None = None,
    format: str | None = None,  # noqa: A002
    force: bool = False,
) -> dict[str, Any]:
    """Writes a VDIF file, or a scan on several disks, into a new VDIF file, transformed.

    Parameters
    ----------
    path : str or os.PathLike
        The file; with ``disks``, the scan's name.
    out : str or os.PathLike
        The file to write. An existing file is replaced only with ``force``
        (``FileExistsError`` otherwise), and never when it is the input. The output is
        written beside it (``.NAME.part-PID``) and renamed to ``out`` once whole: a conversion
        that fails (``FormatError``, or ``OSError`` from a full disk, which says how far it got)
        leaves no file under the name, or with ``force`` the one it would have replaced.
    threads : str or sequence of int, optional
        Keep the frames of these VDIF thread IDs only: ``"0-3,7"`` or ``[0, 1, 2, 3, 7]``.
        Each must be one of the stream's (those of its first frames).
    channels : str or sequence of int, optional
        Corner-turn: each frame of C channels becomes one single-channel frame per channel
        listed, of 1/C of the payload (a multiple of 8 bytes), with the same time and frame
        number; channel c of thread t becomes thread t·C + c (jive5ab's numbering), its header
        EDV 0 with words 4–7 zero (a legacy header stays legacy).
    payload : int, optional
        Payload bytes of each output frame: each frame (after any corner turn) of Q bytes
        becomes Q/``payload`` frames, frame number f becoming f·k + i (k = Q/``payload``), so
        that the frame rate is k times the input's. It must divide Q and be a multiple of 8
        (and of a sample time of every channel where that is more).
    disks : str, os.PathLike or list of them, optional
        Read the scan ``path`` from these directories (or globs), its parts in order, in any
        layout; a scan with a missing part raises ``GapError``.
    format : {"file", "vbs", "mk6"}, optional
        The scan's layout; detected by default.
    force : bool, optional
        Replace ``out`` if it exists, once the new one is whole.

    Returns
    -------
    dict
        ``input``, ``format``, ``out``, ``frames_in``, ``frames_kept`` (of the threads kept),
        ``frames_out``, ``bytes_in``, ``bytes_out``, ``frame_size_in``, ``frame_size_out``,
        ``fan_out`` (output frames per frame kept), ``threads_in``, ``threads_out``,
        ``channels_in``, ``channels_out``, and ``torn`` and ``torn_bytes``: bytes at the ends of
        files that were not whole frames, left out (as :func:`vdifrec.scans` lists them).

    Raises
    ------
    ArgumentError
        An option that cannot be applied to this stream, named (``channels: the stream has 4
        channels ...``).
    FormatError
        A frame unlike the stream's first (its place is named); nothing is left at ``out``.
    """
    if disks is None and format is not None:
        raise _core.ArgumentError(f"format: {format!r} applies to a scan; give the scan's disks with it")
    return _core.convert(
        os.fspath(path),
        os.fspath(out),
        threads,
        channels,
        payload,
        None if disks is None else expand_disks(disks),
        format,
        force,
    )
