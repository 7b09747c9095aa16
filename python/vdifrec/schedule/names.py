"""A scheduled scan's name on disk, as jive5ab gives it, and whether vdifrec can record under it.

jive5ab, told ``record=on:<scan>:<experiment>:<station>``, names the scan
``<experiment>_<station>_<scan>`` (``e26k1_Kv_kvn_s1``), each part as the VEX writes it.
"""

from __future__ import annotations

__all__ = ["MAX_SCAN_NAME", "disk_name", "scan_name_problem"]

#: The longest scan name the recorder takes, in bytes (``MAX_SCAN_NAME`` of src/vdif/layout.rs).
MAX_SCAN_NAME = 64


def disk_name(experiment: str, station: str, scan: str) -> str:
    """``<experiment>_<station>_<scan>``: the name jive5ab's ``record=on:<scan>:<experiment>:
    <station>`` gives the scan on disk."""
    return f"{experiment}_{station}_{scan}"


def scan_name_problem(name: str) -> str | None:
    """Why the recorder would refuse ``name`` for a scan, in its words (the rule of
    ``scan_name_problem`` in src/vdif/layout.rs: letters, digits, ``_`` and ``-``, at most 64
    bytes), or None when it takes it."""
    if not name:
        return "a scan needs a name"
    size = len(name.encode("utf-8"))
    if size > MAX_SCAN_NAME:
        return f'"{name}" has {size} characters; at most {MAX_SCAN_NAME}'
    for c in name:
        if not (c.isascii() and (c.isalnum() or c in "_-")):
            return f"\"{name}\" holds '{c}'; use letters, digits, '_' and '-' only (no '.', no path separators)"
    return None
