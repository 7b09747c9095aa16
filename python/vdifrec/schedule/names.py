"""A scheduled scan's name on disk, as jive5ab gives it, and whether vdifrec can record under it.

jive5ab, told ``record=on:<scan>:<experiment>:<station>``, names the scan
``<experiment>_<station>_<scan>`` (``e26k1_Kv_kvn_s1``), each part as the VEX writes it.
"""

from __future__ import annotations

from .._core import scan_name_problem

__all__ = ["disk_name", "scan_name_problem"]


def disk_name(experiment: str, station: str, scan: str) -> str:
    """``<experiment>_<station>_<scan>``: the name jive5ab's ``record=on:<scan>:<experiment>:
    <station>`` gives the scan on disk. Whether the recorder takes it is the engine's rule,
    :func:`scan_name_problem`."""
    return f"{experiment}_{station}_{scan}"
