"""VEX schedules (1.5 and 2.0) as a recorder reads them: which scans a station records, when,
under what name, in what format, and what they will need of the disks.

- :mod:`~vdifrec.schedule.vex`: the VEX text: blocks, defs, scans, statements, refs;
- :mod:`~vdifrec.schedule.values`: VEX times, durations and sample rates;
- :mod:`~vdifrec.schedule.formats`: what a station records in a mode (:class:`RecordingFormat`);
- :mod:`~vdifrec.schedule.names`: a scan's name on disk, and whether the recorder takes it;
- :mod:`~vdifrec.schedule.model`: :class:`Schedule`, :class:`Station`, :class:`ScheduledScan`;
- :mod:`~vdifrec.schedule.plan`: a station's :class:`Plan` (``vdifrec plan``).

Only the rule for scan names comes from the engine (``vdifrec._core``), which owns it.
"""

from __future__ import annotations

from .errors import ScheduleError, VexError
from .formats import RecordingFormat
from .model import Schedule, ScheduledScan, Station
from .plan import Plan, PlanRow, PlanWarning, make_plan

__all__ = [
    "Plan",
    "PlanRow",
    "PlanWarning",
    "RecordingFormat",
    "Schedule",
    "ScheduleError",
    "ScheduledScan",
    "Station",
    "VexError",
    "make_plan",
]
