"""`vdifrec plan`: a station's recording plan from a VEX schedule: its scans in time order with
their names on disk, windows, expected frames and bytes, the totals, and what would keep the
observation from being recorded as scheduled (see :mod:`vdifrec.schedule.plan`)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any

from ..scans import expand_disks
from ..schedule import Plan, Schedule, ScheduleError, make_plan
from .args import OK, PROBLEMS, UsageError, os_error, path


def add_plan(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="a station's recording plan from a VEX schedule: scans, windows, names on disk, frames, bytes, disk space",
        description="Read a VEX 1.5 or 2.0 schedule and list, for one station, the scans it records in time order: "
        "the name each gets on disk (<experiment>_<station>_<scan>, as jive5ab names it), source, mode, recording "
        "window (start + data_good to start + data_stop, UTC), length, the VDIF frames and bytes it should bring; "
        "then the totals, and warnings: modes in which the station records no VDIF (Mark5B, Mark4), windows that "
        "overlap, disks (--disk) that would be full, names the recorder would refuse, scans already past. Exit "
        "status 0 when the plan is fine, 1 when a warning says the observation would not be recorded as "
        "scheduled (no VDIF, overlap, disks full, a bad name; past scans alone are no problem), 2 on usage errors "
        "and schedules that cannot be read (the error names the file, line and column, or the scan, mode or "
        "station at fault).",
    )
    p.add_argument("schedule", type=path, help="the VEX file (1.5 or 2.0)")
    p.add_argument("--station", required=True, help="the station's code as the schedule writes it (Ky; any case)")
    p.add_argument(
        "--disk",
        dest="disks",
        action="append",
        type=path,
        metavar="DIR",
        help="a directory (mount point) the scans will be recorded on, to check the free space; repeat it, or give "
        "a quoted glob such as '/mnt/disk*' (each file system counted once)",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--now", type=utc_time, metavar="TIME", help="plan as if it were this UTC time (ISO 8601, e.g. 2026-03-05T12:00:00)")
    p.set_defaults(func=_run_plan)


def utc_time(text: str) -> dt.datetime:
    """An ISO 8601 time, UTC unless it says otherwise (``2026-03-05T12:00:00``, ``...Z``)."""
    try:
        t = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time: write 2026-03-05T12:00:00") from None
    return t.replace(tzinfo=dt.timezone.utc) if t.tzinfo is None else t.astimezone(dt.timezone.utc)


def _run_plan(a: argparse.Namespace) -> int:
    try:
        schedule = Schedule.read(a.schedule)
        disks = expand_disks(a.disks) if a.disks else []
        plan = make_plan(schedule, a.station, disks=disks, now=a.now)
    except ScheduleError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(os_error(exc)) from None
    if a.json:
        print(json.dumps(plan.to_dict(), indent=1))
    else:
        print_plan(plan)
    return OK if plan.ok else PROBLEMS


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def _time(t: dt.datetime, day: bool = True) -> str:
    text = t.strftime("%Y-%m-%d %H:%M:%S" if day else "%H:%M:%S")
    return text + (f".{t.microsecond:06d}".rstrip("0") if t.microsecond else "")


def print_plan(plan: Plan) -> None:
    """The plan as a table, one line per scan, then the totals and the warnings."""
    st = plan.station
    n = len(plan.scans)
    print(f"plan of {st.code} ({st.name}) in {plan.experiment}, VEX {plan.version} ({plan.source}): "
          f"{n} scan{'' if n == 1 else 's'}, {len(plan.recorded)} recorded")
    if not plan.scans:
        print("no scans for this station")
    else:
        rows = []
        for r in plan.scans:
            s = r.scan
            stop_day = s.window_stop.date() != s.window_start.date()
            window = f"{_time(s.window_start)}-{_time(s.window_stop, day=stop_day)}"
            frames = "-" if s.expected_frames is None else f"{s.expected_frames:,}"
            size = _size(s.expected_bytes)
            if not s.record:
                frames, size = "not recorded", ""
            elif s.expected_frames is None:
                frames = s.format.kind if s.format is not None else "no format"
            note = "past" if r.past else ("disks full" if r.fits is False else "")
            rows.append((s.name, s.disk_name, s.source, s.mode, window, f"{s.seconds:g}", frames, size, note))
        head = ("scan", "disk name", "source", "mode", "window UTC", "length s", "frames", "size", "")
        widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
        right = {5, 6, 7}
        for row in [head, *rows]:
            cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
            print("  ".join(cells).rstrip())
    print(f"total        {len(plan.recorded)} recorded scans, {plan.total_seconds:g} s, {plan.total_frames:,} frames, "
          f"{_size(plan.total_bytes)} ({plan.total_bytes:,} bytes)")
    if plan.free_bytes is not None:
        print(f"disks        {_size(plan.free_bytes)} free on {', '.join(plan.disks)}; "
              f"{_size(plan.needed_bytes)} needed from {_time(plan.now)} UTC")
    for w in plan.warnings:
        print(f"warning: {w.message}")
