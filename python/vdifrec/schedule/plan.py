"""A station's recording plan: its scans in time order with their windows and the frames and
bytes each should bring, the totals, the disks' free space, and what would keep the observation
from being recorded as scheduled.

Warnings, each with ``blocks`` True when the observation would not be recorded as scheduled:

- ``format`` (blocks): a mode in which the station records no VDIF (Mark5B, Mark4), or one the
  schedule leaves incomplete: its scans are not planned;
- ``overlap`` (blocks): two recording windows of the station overlap (one recorder records one
  scan at a time; back to back is fine);
- ``disk_full`` (blocks): the disks would be full during a scan;
- ``name`` (blocks): a scan's name on disk the recorder would refuse;
- ``past``: scans whose window has ended (they are left out of the disk space needed);
- ``started``: a scan whose window has begun.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Iterable, Sequence
from typing import Any

from .model import Schedule, ScheduledScan, Station, iso

__all__ = ["Plan", "PlanRow", "PlanWarning", "free_bytes", "make_plan"]


@dataclasses.dataclass(frozen=True)
class PlanWarning:
    """Something the operator should know: ``kind`` (``format``, ``overlap``, ``disk_full``,
    ``name``, ``empty``, ``past``, ``started``), the ``message``, the ``scans`` it is about, and whether it
    ``blocks`` the observation from being recorded as scheduled."""

    kind: str
    message: str
    blocks: bool
    scans: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"kind": self.kind, "message": self.message, "blocks": self.blocks, "scans": list(self.scans)}


@dataclasses.dataclass(frozen=True)
class PlanRow:
    """One scan of the plan.

    Attributes
    ----------
    scan : ScheduledScan
        The scan.
    past : bool
        Its window ended before the plan's ``now``.
    needed_bytes : int or None
        Bytes the recorded scans from now up to this one need (past scans and those of unknown
        size left out); None for a past scan.
    fits : bool or None
        Whether ``needed_bytes`` fits the disks' free space; None when no disks were given or
        the scan is past.
    """

    scan: ScheduledScan
    past: bool
    needed_bytes: int | None
    fits: bool | None

    def to_dict(self) -> dict[str, Any]:
        """The scan's dict (:meth:`ScheduledScan.to_dict`) with ``past``, ``needed_bytes``, ``fits``."""
        d = self.scan.to_dict()
        d.update(past=self.past, needed_bytes=self.needed_bytes, fits=self.fits)
        return d


@dataclasses.dataclass(frozen=True)
class Plan:
    """A station's plan of an observation (see :func:`make_plan`).

    Attributes
    ----------
    station : Station
        The station.
    experiment, version, source : str
        The schedule's experiment, VEX version and file.
    now : datetime.datetime
        The time the plan was made for (UTC).
    scans : tuple of PlanRow
        The station's scans in time order.
    disks : tuple of str
        The disk directories given.
    free_bytes : int or None
        Their free space together (each file system once); None when no disks were given.
    full_at : str or None
        The scan during which the disks would be full; None when all fits or no disks were given.
    warnings : tuple of PlanWarning
        What the operator should know, in the order of the checks.
    """

    station: Station
    experiment: str
    version: str
    source: str
    now: dt.datetime
    scans: tuple[PlanRow, ...]
    disks: tuple[str, ...]
    free_bytes: int | None
    full_at: str | None
    warnings: tuple[PlanWarning, ...]

    @property
    def ok(self) -> bool:
        """No warning says the observation would not be recorded as scheduled."""
        return not any(w.blocks for w in self.warnings)

    @property
    def recorded(self) -> list[ScheduledScan]:
        """The scans the station records (``record`` True)."""
        return [r.scan for r in self.scans if r.scan.record]

    @property
    def total_seconds(self) -> float:
        """Seconds of recording windows of the recorded scans."""
        return sum(s.seconds for s in self.recorded)

    @property
    def total_frames(self) -> int:
        """Frames of the recorded scans whose format is known."""
        return sum(s.expected_frames or 0 for s in self.recorded)

    @property
    def total_bytes(self) -> int:
        """Bytes of the recorded scans whose format is known."""
        return sum(s.expected_bytes or 0 for s in self.recorded)

    @property
    def needed_bytes(self) -> int:
        """Bytes of the recorded scans not yet past: what the disks must hold from now."""
        return max((r.needed_bytes or 0 for r in self.scans), default=0)

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready dicts."""
        return {
            "experiment": self.experiment,
            "version": self.version,
            "schedule": self.source,
            "station": self.station.code,
            "station_name": self.station.name,
            "now": iso(self.now),
            "scans": [r.to_dict() for r in self.scans],
            "totals": {
                "scans": len(self.scans),
                "recorded": len(self.recorded),
                "seconds": self.total_seconds,
                "frames": self.total_frames,
                "bytes": self.total_bytes,
                "needed_bytes": self.needed_bytes,
            },
            "disks": list(self.disks),
            "free_bytes": self.free_bytes,
            "full_at": self.full_at,
            "warnings": [w.to_dict() for w in self.warnings],
            "ok": self.ok,
        }


def free_bytes(disks: Iterable[str | os.PathLike[str]]) -> int:
    """Bytes free to an unprivileged writer on ``disks`` together, each file system counted
    once (OSError for a directory that cannot be read)."""
    seen: set[int] = set()
    total = 0
    for d in disks:
        device = os.stat(d).st_dev
        if device in seen:
            continue
        seen.add(device)
        st = os.statvfs(d)
        total += st.f_bavail * st.f_frsize
    return total


def make_plan(
    schedule: Schedule,
    station: str,
    *,
    disks: Sequence[str | os.PathLike[str]] = (),
    now: dt.datetime | None = None,
    free: int | None = None,
) -> Plan:
    """The plan of ``station`` in ``schedule``.

    Parameters
    ----------
    schedule : Schedule
        The schedule.
    station : str
        The station's code, in any case (ScheduleError naming the stations there are if it is
        not one of them).
    disks : list of str or os.PathLike
        Directories the scans will be recorded on: their free space (:func:`free_bytes`) is
        checked against the bytes the scans need.
    now : datetime.datetime, optional
        Plan as if it were this time (UTC where it has no time zone; default: now).
    free : int, optional
        Free bytes to plan with instead of asking the disks.

    Returns
    -------
    Plan
    """
    st = schedule.station(station)
    when = _utc(now) if now is not None else dt.datetime.now(dt.timezone.utc)
    scans = schedule.scans(st.code)
    space = free if free is not None else (free_bytes(disks) if disks else None)

    rows: list[PlanRow] = []
    needed = 0
    full_at = None
    for s in scans:
        past = s.window_stop <= when
        if past:
            rows.append(PlanRow(s, True, None, None))
            continue
        if s.record:
            needed += s.expected_bytes or 0
        fits = None if space is None else needed <= space
        if fits is False and full_at is None:
            full_at = s.name
        rows.append(PlanRow(s, False, needed, fits))

    warnings = [*_format_warnings(st, scans), *_overlaps(scans), *_name_warnings(scans), *_empty_warnings(scans)]
    if full_at is not None and space is not None:
        need = next(r.needed_bytes for r in rows if r.scan.name == full_at)
        warnings.append(PlanWarning(
            "disk_full",
            f"disks full at scan {full_at}: the scans from now to its end need {_size(need or 0)}, "
            f"the disks have {_size(space)} free ({', '.join(os.fspath(d) for d in disks) or 'as given'})",
            True,
            (full_at,),
        ))
    warnings.extend(_time_warnings(rows, when))
    return Plan(
        station=st,
        experiment=schedule.experiment,
        version=schedule.version,
        source=schedule.source,
        now=when,
        scans=tuple(rows),
        disks=tuple(os.fspath(d) for d in disks),
        free_bytes=space,
        full_at=full_at,
        warnings=tuple(warnings),
    )


def _utc(t: dt.datetime) -> dt.datetime:
    return t.replace(tzinfo=dt.timezone.utc) if t.tzinfo is None else t.astimezone(dt.timezone.utc)


def _names(scans: Iterable[ScheduledScan]) -> str:
    return ", ".join(s.name for s in scans)


def _format_warnings(station: Station, scans: list[ScheduledScan]) -> list[PlanWarning]:
    out = []
    for mode in dict.fromkeys(s.mode for s in scans if s.record):
        these = [s for s in scans if s.record and s.mode == mode]
        f = these[0].format
        if f is None:
            why = (f"mode {mode} gives station {station.code} no recording format ($DATASTREAMS, $THREADS, $TRACKS "
                   f"or $BITSTREAMS)")
        elif not f.is_vdif:
            why = f"mode {mode}: station {station.code} records {f.kind}: not VDIF, vdifrec records VDIF only"
        elif f.frames_per_second is None:
            why = f"mode {mode}: {f.problem} ({f.source})"
        else:
            continue
        out.append(PlanWarning("format", f"{why}; not planned: scan{'' if len(these) == 1 else 's'} {_names(these)}",
                               True, tuple(s.name for s in these)))
    return out


def _overlaps(scans: list[ScheduledScan]) -> list[PlanWarning]:
    out = []
    latest: ScheduledScan | None = None
    for s in (s for s in scans if s.record):
        if latest is not None and s.window_start < latest.window_stop:
            by = (min(latest.window_stop, s.window_stop) - s.window_start).total_seconds()
            out.append(PlanWarning(
                "overlap",
                f"scans {latest.name} ({_span(latest)}) and {s.name} ({_span(s)}) overlap by {by:g} s: "
                "one recorder records one scan at a time",
                True,
                (latest.name, s.name),
            ))
        if latest is None or s.window_stop > latest.window_stop:
            latest = s
    return out


def _name_warnings(scans: list[ScheduledScan]) -> list[PlanWarning]:
    return [
        PlanWarning("name", f"scan {s.name}: its name on disk cannot be used: {s.name_problem}", True, (s.name,))
        for s in scans
        if s.record and s.name_problem
    ]


#: What an empty window is said to be, by ``plan`` and ``observe`` alike.
EMPTY_WINDOW = "its window is empty (data_stop = data_good): there is nothing to record"


def _empty_warnings(scans: list[ScheduledScan]) -> list[PlanWarning]:
    return [PlanWarning("empty", f"scan {s.name}: {EMPTY_WINDOW}", False, (s.name,)) for s in scans if s.record and s.seconds <= 0]


def _time_warnings(rows: list[PlanRow], now: dt.datetime) -> list[PlanWarning]:
    out = []
    past = [r.scan for r in rows if r.past and r.scan.record]
    if past:
        n = len(past)
        out.append(PlanWarning(
            "past",
            f"{n} scan{'' if n == 1 else 's'} already past at {iso(now)} (window ended): {_names(past)}",
            False,
            tuple(s.name for s in past),
        ))
    for r in rows:
        s = r.scan
        if not r.past and s.record and s.window_start < now:
            late = (now - s.window_start).total_seconds()
            out.append(PlanWarning(
                "started",
                f"scan {s.name} started at {iso(s.window_start)}: the first {late:g} s of its window are past",
                False,
                (s.name,),
            ))
    return out


def _span(s: ScheduledScan) -> str:
    return f"{_clock(s.window_start)}-{_clock(s.window_stop)}"


def _clock(t: dt.datetime) -> str:
    return t.strftime("%H:%M:%S") + (f".{t.microsecond:06d}".rstrip("0") if t.microsecond else "")


def _size(n: int) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit} ({n:,} bytes)"
    return f"{n:,} bytes"
