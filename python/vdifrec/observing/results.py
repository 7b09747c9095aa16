"""What became of each scan of a session, and of the session: the lines ``vdifrec observe``
prints, its ``--summary-json``, and the ``observation`` document the status serves."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from ..reports import ScanSummary
from ..schedule import ScheduledScan
from ..schedule.model import iso

#: What became of a scan.
RECORDED, NOT_OK, MISSED, BEFORE, WAITING, RECORDING, INTERRUPTED = (
    "OK",
    "NOT OK",
    "missed",
    "recorded before",
    "waiting",
    "recording",
    "interrupted",
)


@dataclasses.dataclass
class ScanResult:
    """One scan of the schedule for this station, as the session left it.

    ``state`` is ``OK`` (every frame of the window is on disk), ``NOT OK`` (recorded, frames
    lost or not as scheduled: ``why``), ``missed`` (not recorded: ``why``), ``recorded before``
    (a complete scan of that name was on the disks already), ``interrupted`` (the session was
    stopped before or while it recorded), ``waiting`` or ``recording``.
    """

    scan: ScheduledScan
    """The scan as the schedule has it (window, mode, expected format)."""
    state: str = WAITING
    """What became of it: ``OK``, ``NOT OK``, ``missed``, ``recorded before``,
    ``interrupted``; ``waiting`` or ``recording`` during the session."""
    why: str = ""
    """Why it is not OK or was missed, and what else the operator should know of it."""
    #: The name on disk (the planned one, or with jive5ab's suffix).
    disk_name: str = ""
    #: Joined under way: recorded from this UTC instant, not from the window's start.
    joined_at: str | None = None
    frames_expected: int | None = None
    """Frames its window holds by the schedule's mode (from the first frame, for a scan joined
    under way); None where the mode does not say."""
    summary: ScanSummary | None = None
    """The recorder's summary of the scan on disk (None if it was not recorded)."""
    #: How the arriving stream differed from the schedule's mode when the scan was queued.
    mismatch: list[str] = dataclasses.field(default_factory=list)
    #: Whether the stream has been checked against the mode (``mismatch`` is final).
    checked: bool = False
    #: ``queued``, ``sending``, ``verified``, ``failed: ...``; empty when not shipped.
    shipped: str = ""

    @property
    def frames(self) -> int | None:
        """Frames recorded: those on disk, whole (None if it was not recorded). Frames the
        scan took that no disk took are not recorded: ``lost`` counts them under ``disk``."""
        s = self.summary
        if s is None:
            return None
        return s.bytes_written // s.frame_size if s.frame_size else s.frames

    @property
    def lost(self) -> dict[str, int]:
        """Frames lost, by cause (only causes that lost any)."""
        s = self.summary
        if s is None:
            return {}
        fs = max(s.frame_size, 1)
        # The frames missing from the window (`frames_lost`, its edges included) by cause: the
        # kernel's and the ring's counts run to the scan's close, a moment past its window, so
        # they are capped by what the window lacks; the rest was lost on the network.
        inside = max(0, s.frames_lost - s.frames_lost_at_edges)
        kernel = min(s.kernel_drops, inside)
        ring = min(s.ring_overflows, inside - kernel)
        causes = {
            "network": inside - kernel - ring,
            "kernel": kernel,
            "ring": ring,
            "edges": s.frames_lost_at_edges,
            "disk": s.bytes_dropped_disk // fs,
        }
        return {k: v for k, v in causes.items() if v > 0}

    def line(self) -> str:
        """The scan's line: name, frames expected and recorded, lost by cause, the verdict."""
        expected = "?" if self.frames_expected is None else str(self.frames_expected)
        got = "-" if self.frames is None else str(self.frames)
        lost = ", ".join(f"{k} {v}" for k, v in self.lost.items()) or "none"
        text = f"{self.scan.name:<10} {self.disk_name or self.scan.disk_name:<24} frames {got}/{expected}  lost: {lost}  {self.state}"
        if self.why:
            text += f": {self.why}"
        if self.mismatch:
            text += f"  MISMATCH: {'; '.join(self.mismatch)}"
        if self.shipped:
            text += f"  shipped: {self.shipped}"
        return text

    def to_status(self, now: float | None = None) -> dict[str, Any]:
        """The scan as the status's ``observation`` document has it."""
        s = self.scan
        start, stop = s.window_start.timestamp(), s.window_stop.timestamp()
        progress = None
        if self.state == RECORDING and now is not None and stop > start:
            progress = min(max((now - start) / (stop - start), 0.0), 1.0)
        return {
            "name": s.name,
            "disk_name": self.disk_name or s.disk_name,
            "source": s.source,
            "mode": s.mode,
            "window_start": iso(s.window_start),
            "window_stop": iso(s.window_stop),
            "window_start_unix": start,
            "window_stop_unix": stop,
            "frames_expected": self.frames_expected,
            "frames_recorded": self.frames,
            "frames_lost": sum(self.lost.values()) if self.summary is not None else None,
            "progress": progress,
            "result": self.state if self.state not in (WAITING, RECORDING) else "",
            "why": self.why,
            "mismatch": self.mismatch,
            "shipped": self.shipped,
        }

    def to_dict(self) -> dict[str, Any]:
        """The scan's result as JSON-ready dict (``--summary-json``): its status fields, the
        state, where it was joined, loss by cause and the recorder's summary."""
        d = self.to_status()
        d.update(
            state=self.state,
            joined_at=self.joined_at,
            lost=self.lost,
            summary=None if self.summary is None else self.summary.to_dict(),
        )
        return d


@dataclasses.dataclass
class SessionSummary:
    """The session: every scan of the schedule for the station, what became of it, and what
    the operator must know (a clock off, a stream not as scheduled)."""

    schedule: str
    experiment: str
    station: str
    scans: list[ScanResult]
    warnings: list[str] = dataclasses.field(default_factory=list)
    clock_offset_s: float | None = None
    started: str = dataclasses.field(default_factory=lambda: iso(dt.datetime.now(dt.timezone.utc)))
    ended: str | None = None
    interrupted: bool = False

    @property
    def planned(self) -> int:
        """Scans of the schedule for this station that it records."""
        return len(self.scans)

    @property
    def recorded(self) -> int:
        """Scans recorded whole, as scheduled, in this session."""
        return sum(r.state == RECORDED for r in self.scans)

    @property
    def missed(self) -> list[ScanResult]:
        """Scans not recorded whole as scheduled (missed, not OK, interrupted)."""
        return [r for r in self.scans if r.state not in (RECORDED, BEFORE)]

    @property
    def mismatched(self) -> int:
        """Scans during which the stream was not the schedule's mode."""
        return sum(bool(r.mismatch) for r in self.scans)

    @property
    def shipped_verified(self) -> int:
        """Scans shipped that arrived verified."""
        return sum(r.shipped == "verified" for r in self.scans)

    @property
    def ok(self) -> bool:
        """Every scan on disk whole (now or before), as scheduled (the stream in the mode, its
        time on the host clock: a clock off puts every window off), and shipped verified where
        shipping was asked for."""
        clock_off = any(w.startswith("clock:") for w in self.warnings)
        return not clock_off and all(
            r.state in (RECORDED, BEFORE) and not r.mismatch and r.shipped in ("", "verified")
            for r in self.scans
        )

    def lines(self) -> list[str]:
        """The session summary for the operator."""
        out = [
            f"session {self.experiment} at {self.station}: {self.planned} scan(s) planned, {self.recorded} recorded OK, "
            f"{sum(r.state == BEFORE for r in self.scans)} recorded before, {len(self.missed)} missed or not OK"
        ]
        for r in self.missed:
            out.append(f"  {r.scan.name}: {r.state}{': ' + r.why if r.why else ''}")
        if self.mismatched:
            out.append(f"  {self.mismatched} scan(s) where the stream was NOT the schedule's mode")
        if any(r.shipped for r in self.scans):
            out.append(f"  shipped: {self.shipped_verified} of {sum(bool(r.shipped) for r in self.scans)} arrived verified")
            out.extend(f"  {r.scan.name}: shipping {r.shipped}" for r in self.scans if r.shipped not in ("", "verified"))
        if self.clock_offset_s is not None:
            out.append(f"  clock: the stream's VDIF time minus the host clock: {self.clock_offset_s:+.3f} s")
        out.extend(f"  warning: {w}" for w in self.warnings)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The session as a JSON-ready dict (``--summary-json``): counts, warnings, every scan."""
        return {
            "schedule": self.schedule,
            "experiment": self.experiment,
            "station": self.station,
            "started": self.started,
            "ended": self.ended,
            "interrupted": self.interrupted,
            "ok": self.ok,
            "scans_planned": self.planned,
            "scans_recorded": self.recorded,
            "scans_missed": len(self.missed),
            "scans_mismatched": self.mismatched,
            "scans_shipped_verified": self.shipped_verified,
            "clock_offset_s": self.clock_offset_s,
            "warnings": self.warnings,
            "scans": [r.to_dict() for r in self.scans],
        }

    def to_status(self, now: float) -> dict[str, Any]:
        """The ``observation`` document the recorder serves in ``/status``."""
        recording = next((r for r in self.scans if r.state == RECORDING), None)
        waiting = [r for r in self.scans if r.state == WAITING]
        finished = [r for r in self.scans if r.state not in (WAITING, RECORDING)]
        return {
            "schedule": self.schedule,
            "experiment": self.experiment,
            "station": self.station,
            "recording": None if recording is None else recording.to_status(now),
            "next": waiting[0].to_status(now) if waiting else None,
            "finished": [r.to_status(now) for r in finished],
            "scans_planned": self.planned,
            "scans_recorded": self.recorded,
            "scans_missed": sum(r.state in (MISSED, NOT_OK, INTERRUPTED) for r in finished),
            "scans_mismatched": self.mismatched,
            "clock_offset_s": self.clock_offset_s,
            "warnings": self.warnings[-8:],
        }
