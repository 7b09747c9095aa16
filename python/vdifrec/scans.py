"""Scans recorded over several disks (``file``, FlexBuff ``vbs``, Mark6 ``mk6``): which scans
a set of disks holds, one gathered back into a single VDIF file, and one left torn by a
recorder stopped mid-write repaired. Reading a scan's samples is :func:`vdifrec.open` with
``disks=``; checking it, :func:`vdifrec.check` with ``disks=``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from . import _core

__all__ = ["expand_disks", "gather", "repair", "scans"]

Disks = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]


def expand_disks(disks: Disks) -> list[str]:
    """The directories ``disks`` names: each a directory, or a glob such as ``"/mnt/disk*"``
    (expanded to the directories it matches, sorted; each disk once). A glob that matches no
    directory is an ``ArgumentError`` naming it. The engine expands them, as for a Recorder."""
    items = [disks] if isinstance(disks, (str, os.PathLike)) else list(disks)
    return _core.expand_disks([os.fspath(x) for x in items])


def scans(
    disks: Disks, *, name: str | None = None, format: str | None = None, progress: bool = False
) -> list[dict[str, Any]]:
    """Every scan on ``disks``, by name then format.

    Each disk is read once, all of them side by side, and only the scans listed have their
    files opened: the listing takes time in proportion to the files on the disks.

    Parameters
    ----------
    disks : str, os.PathLike or list of them
        Directories (mount points), or globs such as ``"/mnt/disk*"``.
    name : str, optional
        A shell-style pattern (``"r1*"``, ``"*_ds?"``, ``"no00[0-3]*"``): only the scans whose
        names match it.
    format : {"file", "vbs", "mk6"}, optional
        Only the scans in this layout.
    progress : bool
        Say how far the listing is on standard error, when that is a terminal and the listing
        takes more than a second.

    Returns
    -------
    list of dict
        One per scan: ``name``, ``format`` (``"file"``, ``"vbs"`` or ``"mk6"``), ``disks``
        (those holding a part), ``bytes`` (of frames, all parts), ``chunks`` (vbs chunks, Mark6
        blocks; 1 for a file), ``missing`` (part numbers absent between 0 and the highest),
        ``frame_size``, ``first`` and ``last`` (the first frame of the first part and the last
        frame of the last part: ``ref_epoch``, ``seconds``, ``frame``, ``thread`` and ``time``,
        ISO 8601 UTC, to the nanosecond where the header tells the frame's time, else its whole
        second), ``torn_bytes`` and ``torn`` (what a recorder stopped mid-write left at the ends
        of files: never read, see below), ``closed`` (the recorder's summary, or the report of
        :func:`repair`, lies beside the scan; False for a scan a recorder stopped mid-scan never
        closed, or one another program wrote) and ``error`` (why the scan cannot be read as it
        is, else None). ``bytes``, ``chunks``, ``first`` and ``last`` count whole frames only.

    Notes
    -----
    A torn piece is a dict: ``path``, ``part`` (the chunk, block or file part; None where not
    known), ``kind`` (``empty``, ``partial_frame``, ``block_past_end``,
    ``partial_block_header``, ``partial_file_header``), ``offset`` (the file byte where the
    torn bytes start), ``bytes``, ``frames`` (whole frames of that part before them, which are
    read), ``after`` and ``before`` (the frames on either side, as ``first``; ``before`` None at
    the end of the scan) and ``description``. :func:`repair` cuts them away.
    """
    listed: list[dict[str, Any]] = json.loads(
        _core.scans(expand_disks(disks), name=name, format=format, progress=progress)
    )
    return listed


def find_scan(name: str, disks: Disks, *, format: str | None = None) -> dict[str, Any] | None:  # noqa: A002
    """Scan ``name`` as :func:`scans` lists it, found by its name alone (only its own files
    are read, however many scans the disks hold); None where no disk holds it. A scan that
    cannot be read as it is comes with its ``error`` and ``closed`` False."""
    try:
        found: dict[str, Any] = json.loads(_core.scan_info(name, expand_disks(disks), format))
    except FileNotFoundError:
        return None
    except (_core.FormatError, _core.ArgumentError) as exc:
        return {"name": name, "error": str(exc), "closed": False, "first": None, "last": None,
                "missing": [], "torn": []}
    return found


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
        ``description``), ``complete``, and ``torn`` and ``torn_bytes``: the torn pieces left
        out (as :func:`scans` lists them), which are no reason to refuse the scan.
    """
    report: dict[str, Any] = json.loads(_core.gather(scan, expand_disks(disks), os.fspath(out), format, allow_gaps))
    return report


def repair(scan: str, disks: Disks, *, format: str | None = None) -> dict[str, Any]:  # noqa: A002
    """Cuts what a recorder stopped mid-write left of ``scan`` back to whole frames, so that
    every reader (jive5ab's and DiFX's too) sees a clean scan.

    Only the torn pieces :func:`scans` lists are cut, each at a file's end: a vbs chunk or
    ``file`` part is truncated to its whole frames (removed when it holds none); a Mark6 file is
    truncated after the last whole frame of its torn block and that block's header given its
    new size (a block with no whole frame is cut away whole; a file left with no block is
    removed). A second repair cuts nothing. Run it only on a scan no recorder is writing: a
    file that grows while it is repaired is left alone (``FormatError``).

    Parameters
    ----------
    scan : str
        The scan's name.
    disks : str, os.PathLike or list of them
        Directories or globs, as for :func:`scans`: every disk the scan was recorded on.
    format : {"file", "vbs", "mk6"}, optional
        The layout; detected from what is on the disks by default.

    Returns
    -------
    dict
        ``scan``, ``format``, ``disks``; ``cut``, one per torn piece cut (``path``, ``part``,
        ``kind``, ``offset``, ``bytes``, ``frames_kept``, ``action``: what was done, in words,
        and ``description``: the piece as it was reported); ``bytes_cut``; the scan after the
        repair: ``bytes`` (whole frames), ``parts`` and ``missing``; ``emptied`` (the parts
        removed because they held no whole frame, by this repair and any before it: readers
        take them as having held nothing, not as missing); ``notes``; and ``written``: where
        this report was left beside the scan (``<scan>.repair.json`` in a vbs scan's
        directories, ``.vdifrec/<scan>.repair.json`` on the disks of the other layouts), which
        marks the scan closed: a recorder started on the disks no longer names it as left by
        a crash. A repair that cuts nothing leaves an earlier report as it is (``written``
        is then empty).
    """
    report: dict[str, Any] = json.loads(_core.repair(scan, expand_disks(disks), format))
    return report
