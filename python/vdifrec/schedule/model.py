"""A VEX schedule as a recorder sees it: the experiment, its stations, and for one station the
scans it takes part in, each with its recording window, its name on disk and the frames and
bytes it should bring.

>>> sched = Schedule.read("tests/data/vex/three_stations.vex")    # doctest: +SKIP
>>> [s.disk_name for s in sched.scans("Ky")][:1]                  # doctest: +SKIP
['VR26A_Ky_No0001']
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from .errors import ScheduleError
from .formats import RecordingFormat, recording_format
from .names import disk_name, scan_name_problem
from .values import parse_duration, parse_time
from .vex import Def, Statement, VexFile, decode, parse_vex, read_vex

if TYPE_CHECKING:
    import pandas

__all__ = ["Schedule", "ScheduledScan", "Station"]


@dataclasses.dataclass(frozen=True)
class Station:
    """A station of the schedule: ``code`` as ``$STATION`` and ``$SCHED`` write it (``Ky``),
    ``name`` its ``$SITE`` ``site_name`` (``KVNYS``; the code where there is none)."""

    code: str
    name: str


@dataclasses.dataclass(frozen=True)
class ScheduledScan:
    """One scan of one station.

    Attributes
    ----------
    name : str
        The scan's name in the VEX (``No0001``).
    station : str
        The station's code.
    disk_name : str
        ``<experiment>_<station>_<scan>``, the name jive5ab records it under.
    sources : tuple of str
        Its ``source=`` names, in order.
    mode : str
        Its ``mode=``.
    start : datetime.datetime
        The scan's ``start=``, UTC.
    data_good, data_stop : float
        Seconds after ``start`` at which the station's data become good and stop.
    record : bool
        The station records it (the ``station=`` line's last field is 1 or left out; 0 is no
        recording).
    format : RecordingFormat or None
        What the station records in this mode; None when the mode gives it none.
    line : int
        The line of the scan's ``scan`` statement.
    name_problem : str or None
        Why the recorder would refuse ``disk_name``; None when it takes it.
    """

    name: str
    station: str
    disk_name: str
    sources: tuple[str, ...]
    mode: str
    start: dt.datetime
    data_good: float
    data_stop: float
    record: bool
    format: RecordingFormat | None
    line: int
    name_problem: str | None = None

    @property
    def source(self) -> str:
        """The first source (``""`` when the scan names none)."""
        return self.sources[0] if self.sources else ""

    @property
    def window_start(self) -> dt.datetime:
        """``start + data_good``: the first instant to record."""
        return self.start + dt.timedelta(seconds=self.data_good)

    @property
    def window_stop(self) -> dt.datetime:
        """``start + data_stop``: the recording ends before it."""
        return self.start + dt.timedelta(seconds=self.data_stop)

    @property
    def seconds(self) -> float:
        """Length of the recording window, ``data_stop - data_good``."""
        return self.data_stop - self.data_good

    @property
    def expected_frames(self) -> int | None:
        """Frames the window holds, all threads: frames per second x threads x seconds (whole
        frames); 0 when the station does not record the scan; None when the format is not VDIF
        or not known."""
        if not self.record:
            return 0
        f = self.format
        if f is None or f.frames_per_second is None:
            return None
        # The recorder keeps each thread's frames that start at or after the window's start and
        # before its stop (start= lies on a whole second, as schedules write it).
        fps = f.frames_per_second
        per_thread = math.ceil(Fraction(repr(self.data_stop)) * fps) - math.ceil(Fraction(repr(self.data_good)) * fps)
        return per_thread * max(len(f.threads), 1)

    @property
    def expected_bytes(self) -> int | None:
        """Bytes the window holds: ``expected_frames`` x frame size."""
        frames = self.expected_frames
        if frames is None:
            return None
        return frames * (self.format.frame_size or 0) if self.format is not None else 0

    def to_dict(self) -> dict[str, Any]:
        """The scan as a JSON-ready dict: times in ISO 8601 UTC, the format as a dict."""
        return {
            "scan": self.name,
            "station": self.station,
            "disk_name": self.disk_name,
            "source": self.source,
            "sources": list(self.sources),
            "mode": self.mode,
            "start": iso(self.start),
            "data_good": self.data_good,
            "data_stop": self.data_stop,
            "window_start": iso(self.window_start),
            "window_stop": iso(self.window_stop),
            "seconds": self.seconds,
            "record": self.record,
            "format": None if self.format is None else self.format.to_dict(),
            "frames": self.expected_frames,
            "bytes": self.expected_bytes,
            "line": self.line,
            "name_problem": self.name_problem,
        }


def iso(t: dt.datetime) -> str:
    """``2026-03-05T12:00:01Z`` (fractions of a second where there are any)."""
    return t.astimezone(dt.timezone.utc).replace(tzinfo=None).isoformat() + "Z"


@dataclasses.dataclass(frozen=True)
class _Take:
    """One ``station=`` line of a scan."""

    code: str
    data_good: Fraction
    data_stop: Fraction
    record: bool


@dataclasses.dataclass(frozen=True)
class _Scan:
    """A ``$SCHED`` scan, checked."""

    name: str
    start: dt.datetime
    mode: str
    sources: tuple[str, ...]
    takes: tuple[_Take, ...]
    line: int
    order: int


def _in_range(start: dt.datetime, seconds: Fraction) -> bool:
    """Whether ``start`` plus ``seconds`` is a time a datetime holds (a VEX file may write any
    number: ``1e300 sec``, or a start in the year 9999)."""
    try:
        start + dt.timedelta(seconds=float(seconds))
    except (OverflowError, ValueError):
        return False
    return True


def _seconds(seconds: Fraction) -> str:
    """A duration as written back to the operator: ``1e+300`` rather than 301 digits (and a
    number no float holds as well)."""
    try:
        return f"{float(seconds):g}"
    except OverflowError:
        return f"{(Decimal(seconds.numerator) / Decimal(seconds.denominator)).normalize():e}"


class Schedule:
    """A VEX 1.5 or 2.0 schedule.

    Read one with :meth:`read` (a file) or :meth:`parse` (text). Text that is not VEX raises
    :class:`~vdifrec.VexError` naming the line and column; a scan without a start or with a
    mode ``$MODE`` does not define raises :class:`~vdifrec.ScheduleError` naming it.

    Attributes
    ----------
    source : str
        The file read (``"<string>"`` for text).
    version : str
        ``"1.5"`` or ``"2.0"``.
    experiment : str
        ``exper_name`` of ``$EXPER`` (the name alone).
    segment : str or None
        What follows the name in ``exper_name = N17C3 : C;``.
    stations : dict of str to Station
        By code, in the order ``$STATION`` defines them (then any only ``$SCHED`` names).
    modes : tuple of str
        The ``$MODE`` definitions.
    vex : VexFile
        The file as parsed.
    """

    def __init__(self, vex: VexFile) -> None:
        self.vex = vex
        self.source = vex.source
        self.version = vex.version
        self.experiment, self.segment = self._experiment()
        self.modes: tuple[str, ...] = tuple(vex.blocks["MODE"].defs) if "MODE" in vex.blocks else ()
        self._scans = self._read_scans()
        self.stations: dict[str, Station] = self._stations()
        self._codes = {code.lower(): code for code in self.stations}
        self._formats: dict[tuple[str, str], RecordingFormat | None] = {}

    # -- reading ---------------------------------------------------------------------------

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Schedule:
        """Reads the VEX file at ``path`` (1.5 or 2.0; OSError if it cannot be read)."""
        return cls(read_vex(path))

    @classmethod
    def parse(cls, text: str | bytes, source: str = "<string>") -> Schedule:
        """Reads VEX text (bytes are read as UTF-8, else Latin-1); ``source`` names it in errors."""
        return cls(parse_vex(decode(text) if isinstance(text, bytes) else text, source=source))

    def _where(self, line: int) -> str:
        return f"{self.source}:{line}"

    def _experiment(self) -> tuple[str, str | None]:
        exper = self.vex.blocks.get("EXPER")
        if exper is None or not exper.defs:
            raise ScheduleError(f"{self.source}: no $EXPER block: the scans' names on disk start with the experiment's name")
        chosen: Def | None = None
        glob = self.vex.blocks.get("GLOBAL")
        if glob is not None:
            for r in glob.refs:
                if r.block == "EXPER":
                    chosen = exper.defs.get(r.name)
                    if chosen is None:
                        raise ScheduleError(f"{self._where(r.line)}: $GLOBAL refers to $EXPER {r.name}, which $EXPER does not define")
                    break
        if chosen is None:
            chosen = next(iter(exper.defs.values()))
        name = chosen.get("exper_name")
        if name is None or not name.value(0):
            return chosen.name, None
        return name.value(0), (name.value(1) or None)

    def _stations(self) -> dict[str, Station]:
        stations: dict[str, Station] = {}
        block = self.vex.blocks.get("STATION")
        for code, d in (block.defs.items() if block is not None else ()):
            name = code
            site_ref = d.ref("SITE", code)
            site = None if site_ref is None else self.vex.find("SITE", site_ref.name)
            if site is not None:
                s = site.get("site_name")
                name = s.value(0) if s is not None and s.value(0) else site.name
            stations[code] = Station(code, name)
        known = {c.lower() for c in stations}
        for scan in self._scans:
            for take in scan.takes:
                if take.code.lower() not in known:
                    stations[take.code] = Station(take.code, take.code)
                    known.add(take.code.lower())
        return stations

    def _read_scans(self) -> list[_Scan]:
        block = self.vex.blocks.get("SCHED")
        scans: list[_Scan] = []
        for order, d in enumerate(block.defs.values() if block is not None else ()):
            if d.kind != "scan":
                continue
            start = d.get("start")
            if start is None or not start.value(0):
                raise ScheduleError(f"{self._where(d.line)}: scan {d.name} has no start (write start=2026y064d12h00m00s;)")
            try:
                when = parse_time(start.value(0))
            except ValueError as exc:
                raise ScheduleError(f"{self._where(start.line)}: scan {d.name}: {exc}") from None
            mode = d.get("mode")
            if mode is None or not mode.value(0):
                raise ScheduleError(f"{self._where(d.line)}: scan {d.name} has no mode (write mode=NAME;)")
            if mode.value(0) not in self.modes:
                known = ", ".join(self.modes) or "none"
                raise ScheduleError(f"{self._where(mode.line)}: scan {d.name} uses mode {mode.value(0)}, "
                                    f"which $MODE does not define (modes there: {known})")
            sources = tuple(s.value(0) for s in d.all("source") if s.value(0))
            takes = tuple(self._take(d, s, when) for s in d.all("station"))
            scans.append(_Scan(d.name, when, mode.value(0), sources, takes, d.line, order))
        return scans

    def _take(self, scan: Def, s: Statement, start: dt.datetime) -> _Take:
        """``station=Br: 6 sec: 180 sec: 1.449 GB: : &ccw : 1;``: code : data_good : data_stop :
        position : pass : sector : record flag (1 or left out: record; 0: no recording)."""
        code = s.value(0).strip()
        if not code:
            raise ScheduleError(f"{self._where(s.line)}: scan {scan.name}: a station= line names no station")
        try:
            good = parse_duration(s.value(1)) if s.value(1).strip() else Fraction(0)
            stop = parse_duration(s.value(2))
        except ValueError as exc:
            raise ScheduleError(f"{self._where(s.line)}: scan {scan.name}, station {code}: {exc}") from None
        if stop < good:
            raise ScheduleError(f"{self._where(s.line)}: scan {scan.name}, station {code}: data_stop "
                                f"{_seconds(stop)} sec is before data_good {_seconds(good)} sec")
        if not _in_range(start, stop):
            raise ScheduleError(f"{self._where(s.line)}: scan {scan.name}, station {code}: data_stop "
                                f"{_seconds(stop)} sec after the start {iso(start)} is past the last time "
                                f"a date can hold (9999-12-31)")
        flag = s.value(6).strip()
        return _Take(code, good, stop, flag != "0")

    # -- asking ----------------------------------------------------------------------------

    def station(self, code: str) -> Station:
        """The station ``code`` names, in any case (``ky`` finds ``Ky``); ScheduleError naming the
        stations there are if none."""
        found = self._codes.get(code.strip().lower())
        if found is None:
            there = ", ".join(self.stations) or "none"
            raise ScheduleError(f"station {code} is not in the schedule of {self.experiment} ({self.source}): "
                                f"its stations are {there}")
        return self.stations[found]

    def format(self, station: str, mode: str) -> RecordingFormat | None:
        """What ``station`` records in ``mode``; None when the mode gives it no format.
        ScheduleError for a station or mode the schedule does not have."""
        code = self.station(station).code
        key = (code, mode)
        if key not in self._formats:
            d = self.vex.find("MODE", mode)
            if d is None:
                raise ScheduleError(f"mode {mode} is not in $MODE of {self.source} (modes there: {', '.join(self.modes) or 'none'})")
            self._formats[key] = recording_format(self.vex, d, code)
        return self._formats[key]

    def scans(self, station: str) -> list[ScheduledScan]:
        """The scans ``station`` takes part in (those it does not record too, with ``record``
        False), in time order of their recording windows."""
        code = self.station(station).code
        found: list[tuple[dt.datetime, dt.datetime, int, ScheduledScan]] = []
        for scan in self._scans:
            for take in scan.takes:
                if take.code.lower() != code.lower():
                    continue
                name = disk_name(self.experiment, code, scan.name)
                s = ScheduledScan(
                    name=scan.name,
                    station=code,
                    disk_name=name,
                    sources=scan.sources,
                    mode=scan.mode,
                    start=scan.start,
                    data_good=float(take.data_good),
                    data_stop=float(take.data_stop),
                    record=take.record,
                    format=self.format(code, scan.mode),
                    line=scan.line,
                    name_problem=scan_name_problem(name),
                )
                found.append((s.window_start, s.start, scan.order, s))
                break
        return [s for *_, s in sorted(found, key=lambda x: x[:3])]

    def table(self, station: str) -> pandas.DataFrame:
        """:meth:`scans` as a pandas DataFrame, one row per scan: ``scan``, ``disk_name``,
        ``source``, ``mode``, ``start``, ``window_start``, ``window_stop`` (UTC), ``seconds``,
        ``record``, ``format`` (the kind), ``frames_per_second`` (per thread), ``threads``,
        ``frames``, ``bytes``. ImportError when pandas is not installed."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Schedule.table needs pandas: pip install pandas (or use Schedule.scans)") from None
        rows = [
            {
                "scan": s.name,
                "disk_name": s.disk_name,
                "source": s.source,
                "mode": s.mode,
                "start": s.start,
                "window_start": s.window_start,
                "window_stop": s.window_stop,
                "seconds": s.seconds,
                "record": s.record,
                "format": None if s.format is None else s.format.kind,
                "frames_per_second": None if s.format is None else s.format.frames_per_second,
                "threads": 0 if s.format is None else len(s.format.threads),
                "frames": s.expected_frames,
                "bytes": s.expected_bytes,
            }
            for s in self.scans(station)
        ]
        return pd.DataFrame(rows, columns=["scan", "disk_name", "source", "mode", "start", "window_start", "window_stop",
                                           "seconds", "record", "format", "frames_per_second", "threads", "frames", "bytes"])

    def __repr__(self) -> str:
        return (f"<Schedule {self.experiment} (VEX {self.version}, {self.source}): {len(self.stations)} stations, "
                f"{len(self._scans)} scans>")
