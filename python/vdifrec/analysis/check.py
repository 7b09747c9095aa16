"""The integrity check of a VDIF file or of a scan on several disks, in one pass and constant memory,
counted by the same code as a live recording."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from .. import _core
from ..scans import Disks, expand_disks

if TYPE_CHECKING:
    from .._core import CheckOptions

__all__ = ["check"]


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
        (``missing`` part numbers, ``gaps`` with the frames on either side); what a recorder
        stopped mid-write left torn at the ends of files is read to the last whole frame and
        listed under ``scan`` (``torn``, ``torn_bytes``). Either makes the scan not ``clean``.
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
