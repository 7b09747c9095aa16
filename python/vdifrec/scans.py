"""Scans recorded over several disks (``file``, FlexBuff ``vbs``, Mark6 ``mk6``): which scans
a set of disks holds, and one gathered back into a single VDIF file. Reading a scan's samples
is :func:`vdifrec.open` with ``disks=``; checking it, :func:`vdifrec.check` with ``disks=``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from . import _core

__all__ = ["expand_disks", "gather", "scans"]

Disks = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]


def expand_disks(disks: Disks) -> list[str]:
    """The directories ``disks`` names: each a directory, or a glob such as ``"/mnt/disk*"``
    (expanded to the directories it matches, sorted; each disk once). A glob that matches no
    directory is an ``ArgumentError`` naming it. The engine expands them, as for a Recorder."""
    items = [disks] if isinstance(disks, (str, os.PathLike)) else list(disks)
    return _core.expand_disks([os.fspath(x) for x in items])


def scans(disks: Disks) -> list[dict[str, Any]]:
    """Every scan on ``disks``, by name then format.

    Parameters
    ----------
    disks : str, os.PathLike or list of them
        Directories (mount points), or globs such as ``"/mnt/disk*"``.

    Returns
    -------
    list of dict
        One per scan: ``name``, ``format`` (``"file"``, ``"vbs"`` or ``"mk6"``), ``disks``
        (those holding a part), ``bytes`` (of frames, all parts), ``chunks`` (vbs chunks, Mark6
        blocks; 1 for a file), ``missing`` (part numbers absent between 0 and the highest),
        ``frame_size``, ``first`` and ``last`` (the first frame of the first part and the last
        frame of the last part: ``ref_epoch``, ``seconds``, ``frame``, ``thread`` and ``time``,
        ISO 8601 UTC, to the nanosecond where the header tells the frame's time, else its whole
        second), and ``error`` (why the scan cannot be read as it is, else None).
    """
    listed: list[dict[str, Any]] = json.loads(_core.scans(expand_disks(disks)))
    return listed


def gather(
    scan: str,
    disks: Disks,
    out: str | os.PathLike[str],
    *,
    format: str | None = None,  # noqa: A002
    allow_gaps: bool = False,
) -> dict[str, Any]:
    """Writes the frames of ``scan`` in order into the new file ``out``.

    Parameters
    ----------
    scan : str
        The scan's name.
    disks : str, os.PathLike or list of them
        Directories or globs, as for :func:`scans`.
    out : str or os.PathLike
        The file to write; an existing file is never overwritten (``FileExistsError``).
    format : {"file", "vbs", "mk6"}, optional
        The layout; detected from what is on the disks by default.
    allow_gaps : bool, optional
        Write the parts that exist when some are missing, instead of raising ``GapError``.

    Returns
    -------
    dict
        ``scan``, ``format``, ``out``, ``bytes`` (written), ``parts``, ``missing`` (part
        numbers), ``gaps`` (each ``first``, ``last``, ``after``, ``before``,
        ``description``) and ``complete``.
    """
    report: dict[str, Any] = json.loads(_core.gather(scan, expand_disks(disks), os.fspath(out), format, allow_gaps))
    return report
