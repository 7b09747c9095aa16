"""An observation run from its schedule: the recorder receives all the time; each scan of the
station is queued into it shortly before its window, as a scan gated by VDIF time that holds
exactly the frames of ``[start + data_good, start + data_stop)``. Two scans are queued at a
time, so that scans back to back lose no frame between them. Before each scan the arriving
stream is checked against the scan's mode and the host clock; each finished scan is reported
(and shipped, when asked) while the next one records.

A session restarted with the same schedule and disks leaves the scans already on the disks
alone, records the rest, and joins a scan under way from now on (under jive5ab's suffix rule
when part of it is on the disks), saying so.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from .._core import ArgumentError
from ..recorder import Recorder
from ..reports import SUMMARY_NOWHERE, ScanSummary
from ..scans import expand_disks
from ..scans import find_scan
from ..schedule import Schedule, ScheduleError, make_plan
from ..schedule.model import iso
from ..schedule.plan import EMPTY_WINDOW
from ..units import iso_utc
from .checks import CLOCK_LIMIT_S, clock_warning, mismatches, newest_frame_time, stream_seen
from .results import BEFORE, INTERRUPTED, MISSED, NOT_OK, RECORDED, RECORDING, WAITING, ScanResult, SessionSummary
from .shipping import Shipper

#: A scan is queued into the recorder this long before its window starts (the stream is
#: checked against its mode then).
LEAD_S = 5.0
#: Scans in the recorder at once: the one recording and the next.
QUEUE_DEPTH = 2
#: A scan whose window ended this long ago and that has not closed (no frame past its stop
#: arrives: the stream stopped) is closed with what it has.
STALL_S = 5.0
#: A scan on the disks whose frames reach this close to its window's ends (its first frame at
#: the start, its last one frame period before the stop) is complete.
EDGE_S = 0.002
#: The clock offset is sampled this often, and judged on the median of this many samples.
CLOCK_EVERY_S, CLOCK_SAMPLES = 0.2, 5
#: The status's observation document is renewed this often (seconds).
STATUS_EVERY_S = 0.5


def _unix(t: dt.datetime) -> float:
    return t.timestamp()


def _covers(found: dict[str, Any], s: Any) -> bool:
    """Whether a scan found on the disks is complete: closed, whole (no part missing, nothing
    torn), from the window's first frame to its last (within ``EDGE_S``; to the second where the
    disks do not tell the frame rate). Frames lost inside a closed scan are not looked for: its
    summary beside it says so."""
    first, last = found.get("first"), found.get("last")
    if not found.get("closed") or not first or not last or found.get("missing") or found.get("torn"):
        return False
    t0 = iso_utc(first["time"]).timestamp()
    # A time to the second only (the reader did not learn the frame rate): the whole second.
    t1 = iso_utc(last["time"]).timestamp() + (0.0 if "." in last["time"] else 1.0)
    return t0 <= _unix(s.window_start) + EDGE_S and t1 >= _unix(s.window_stop) - EDGE_S


class Session:
    """One run of a schedule at one station (see :func:`observe`)."""

    def __init__(
        self,
        schedule: Schedule,
        station: str,
        recorder_options: dict[str, Any],
        disks: list[str],
        from_scan: str | None = None,
        shipper: Shipper | None = None,
        on_line: Callable[[str], None] | None = None,
        clock_limit_s: float = CLOCK_LIMIT_S,
        lead_s: float = LEAD_S,
    ) -> None:
        self.schedule, self.disks = schedule, disks
        self.options = recorder_options
        self.shipper = shipper
        self.say = on_line or (lambda _line: None)
        self.clock_limit_s, self.lead_s = clock_limit_s, lead_s
        planned = [s for s in schedule.scans(station) if s.record]
        if from_scan is not None:
            names = [s.name.lower() for s in planned]
            if from_scan.lower() not in names:
                listed = ", ".join(s.name for s in planned) or "none"
                raise ScheduleError(f"from_scan: no scan {from_scan} for {station} in {schedule.source}; its scans: {listed}")
            planned = planned[names.index(from_scan.lower()) :]
        code = schedule.station(station).code
        self.summary = SessionSummary(
            schedule=os.fspath(schedule.source),
            experiment=schedule.experiment,
            station=code,
            scans=[ScanResult(s, disk_name=s.disk_name, frames_expected=s.expected_frames) for s in planned],
        )
        self.recorder: Recorder | None = None
        self.queued: list[ScanResult] = []
        self._status_at = 0.0
        self._clock_warned: float | None = None
        self._offsets: collections.deque[float] = collections.deque(maxlen=CLOCK_SAMPLES)
        self._offset_at = 0.0

    # -- before the first scan ---------------------------------------------------------
    def _sort_out(self, now: float) -> None:
        """Scans the session cannot or need not record, said before it starts."""
        # Each scheduled scan looked up by its name alone: the disks may hold a season.
        for r in self.summary.scans:
            s, found = r.scan, find_scan(r.scan.disk_name, self.disks)
            if s.format is None or not s.format.is_vdif:
                kind = "no recording format" if s.format is None else f"{s.format.kind}: not VDIF"
                r.state, r.why = MISSED, f"mode {s.mode}: {kind}, vdifrec records VDIF only"
            elif s.name_problem:
                r.state, r.why = MISSED, s.name_problem
            elif found is not None and _covers(found, s):
                r.state, r.why = BEFORE, f"{s.disk_name} is on the disks, closed, over its whole window: left alone"
            elif s.seconds <= 0:
                r.state, r.why = MISSED, EMPTY_WINDOW
                self.summary.warnings.append(f"{s.name}: {EMPTY_WINDOW}")
            elif _unix(s.window_stop) <= now:
                r.state = MISSED
                r.why = "its window had passed when the session started"
                if found is not None and found["closed"]:
                    r.why += f"; part of it is on the disks as {s.disk_name}"
                elif found is not None:
                    r.why += f"; part of it is on the disks as {s.disk_name}, never closed (see vdifrec scans --repair)"
            if r.state != WAITING:
                self.say(r.line())

    # -- the session ---------------------------------------------------------------------
    def run(self) -> SessionSummary:
        # What the plan foresees (disks that will fill, windows that overlap), said first.
        for w in make_plan(self.schedule, self.summary.station, disks=self.disks).warnings:
            if w.blocks and w.kind not in ("format", "name"):  # those are each scan's line
                self.summary.warnings.append(f"plan: {w.message}")
                self.say(f"WARNING plan: {w.message}")
        self._sort_out(time.time())
        if not any(r.state == WAITING for r in self.summary.scans):
            self.summary.ended = iso(dt.datetime.now(dt.timezone.utc))
            return self.summary
        rec = Recorder(**self.options, disks=list[str | os.PathLike[str]](self.disks))
        rec.start()
        self.recorder = rec
        self.say(f"listening on {rec.listening}")
        if rec.status_address is not None:
            host, port = rec.status_address
            self.say(f"status on http://{host}:{port}/status and /metrics")
        try:
            self._follow(rec)
        except KeyboardInterrupt:
            self.summary.interrupted = True
            self._interrupt(rec)
        finally:
            self._finish_shipping()
            self._show(rec, force=True)
            rec.stop()
            self.summary.ended = iso(dt.datetime.now(dt.timezone.utc))
        return self.summary

    def _follow(self, rec: Recorder) -> None:
        waiting = [r for r in self.summary.scans if r.state == WAITING]
        while waiting or self.queued:
            # The stream's time where it flows (a stream that runs behind the host clock is
            # recorded by its own time all the same), else the host clock.
            now = self._stream_now(rec)
            # Two scans whose windows have not ended are in the recorder at a time (one still
            # being written out does not count): the one recording and the next.
            while (waiting and sum(_unix(q.scan.window_stop) > now for q in self.queued) < QUEUE_DEPTH
                   and _unix(waiting[0].scan.window_start) - now <= self.lead_s):
                if not self._queue(rec, waiting[0], now):
                    break  # to be tried again (the stream has not shown its frame rate yet)
                waiting.pop(0)
            self._sample_clock(rec)
            for r in self.queued:
                if r.state == WAITING and now >= _unix(r.scan.window_start):
                    r.state = RECORDING
                self._check_stream(rec, r)
            if self.queued:
                head = self.queued[0]
                got = rec.wait_scan(timeout=0.0, name=head.disk_name)
                if got is None and min(now, time.time()) > _unix(head.scan.window_stop) + STALL_S:
                    # No frame past its stop arrives: the stream stopped. What it has is kept.
                    got = rec.stop_scan(name=head.disk_name)
                    head.why = "no frame past the window's stop arrived: closed with what had arrived"
                if got is not None:
                    self.queued.pop(0)
                    self._done(head, got, rec)
            self._show(rec)
            time.sleep(0.05)

    def _stream_now(self, rec: Recorder) -> float:
        """VDIF time of the newest frame, if one arrived within the last second; else the host
        clock."""
        stats = rec.stats()
        newest, since = newest_frame_time(stats), stats.seconds_since_datagram
        if newest is None or since is None or since > 1.0 or not stats.frames_per_second_known:
            return time.time()
        return newest + since

    def _queue(self, rec: Recorder, r: ScanResult, now: float) -> bool:
        """Scan ``r`` into the recorder; False when it must wait (a window that starts within a
        second, before the stream has shown its frame rate)."""
        s = r.scan
        start: float | None = _unix(s.window_start)
        stop = _unix(s.window_stop)
        if self.queued:
            before = self.queued[-1].scan
            if _unix(before.window_stop) > (start or 0.0):
                # Each frame goes to one scan: the earlier one keeps its window.
                r.why = f"its window overlaps {before.name}'s: recorded from {iso(before.window_stop)}"
                start = _unix(before.window_stop)
        if start is not None and start >= stop:
            inside = f"inside {self.queued[-1].scan.name}'s, which the recorder takes first" if self.queued else "empty"
            r.state, r.why = MISSED, f"its window is {inside}"
            self.say(r.line())
            return True
        if stop <= now:
            r.state, r.why = MISSED, "its window passed before it could be queued"
            self.say(r.line())
            return True
        joined = not self.queued and start is not None and start < now
        if joined:
            # Under way: from now on (frames before now have gone by).
            start = None
        try:
            r.disk_name = rec.start_scan(s.disk_name, start=start, stop=stop)
        except ArgumentError as exc:
            if "needs the frame rate" in str(exc) and (start or now) > now:
                return False
            r.state, r.why = MISSED, f"the recorder refused it: {exc}"
            self.say(r.line())
            return True
        if joined:
            r.joined_at = iso(dt.datetime.now(dt.timezone.utc))
            r.state = RECORDING
            r.why = f"joined under way: recorded from {r.joined_at}, the window's start is not on disk"
        if r.disk_name != s.disk_name:
            r.why = f"{r.why}; " if r.why else ""
            r.why += f"recorded as {r.disk_name} ({s.disk_name} is on the disks already)"
        self.queued.append(r)
        self.say(f"queued {s.name} as {r.disk_name}: {iso(s.window_start)} to {iso(s.window_stop)}")
        return True

    def _check_stream(self, rec: Recorder, r: ScanResult, final: bool = False) -> None:
        """The arriving stream against scan ``r``'s mode, until a check is conclusive: frames
        have arrived for a whole second (the frame rate is known), or ``final`` (the scan ended)."""
        if r.checked or (not final and r.state != RECORDING):
            return
        seen = stream_seen(rec)
        if not final and (seen is None or seen.frames_per_second == 0):
            return
        assert r.scan.format is not None
        r.checked = True
        # No stream at all is no mismatch: the scan's frames say it.
        r.mismatch = [] if seen is None else mismatches(r.scan.format, seen)
        if r.mismatch:
            what = "; ".join(r.mismatch)
            self.summary.warnings.append(f"{r.scan.name}: the stream is NOT the schedule's mode {r.scan.mode}: {what} (recorded all the same)")
            self.say(f"MISMATCH {r.scan.name}: the stream is NOT the schedule's mode {r.scan.mode}: {what}")

    def _sample_clock(self, rec: Recorder) -> None:
        """The stream's VDIF time against the host clock, every ``CLOCK_EVERY_S`` while frames
        arrive (once the frame rate is known: the time is then to the frame). Warns when it
        stays past the limit: the median of the last ``CLOCK_SAMPLES`` (a sender or host that
        stalls for a moment is no clock fault)."""
        now = time.monotonic()
        if now - self._offset_at < CLOCK_EVERY_S:
            return
        self._offset_at = now
        seen = stream_seen(rec)
        if seen is None or not seen.frames_per_second or seen.arrived_unix < time.time() - 1.0:
            return
        self._offsets.append(seen.clock_offset)
        offset = statistics.median(self._offsets)
        self._check_clock(offset)

    def _check_clock(self, offset: float) -> None:
        self.summary.clock_offset_s = round(offset, 6)
        if len(self._offsets) < CLOCK_SAMPLES:
            return
        warning = clock_warning(offset, self.clock_limit_s)
        if warning is not None and (self._clock_warned is None or abs(offset - self._clock_warned) > self.clock_limit_s):
            self._clock_warned = offset
            self.summary.warnings.append(warning)
            self.say(f"WARNING {warning}")

    def _done(self, r: ScanResult, got: ScanSummary, rec: Recorder) -> None:
        """Scan ``r`` is closed and on disk: its verdict, its line, its shipping."""
        r.summary = got
        self._check_stream(rec, r, final=True)
        if r.joined_at is not None and got.first_frame and r.scan.format is not None:
            f = r.scan.format
            seconds = _unix(r.scan.window_stop) - iso_utc(got.first_frame).timestamp()
            r.frames_expected = round(seconds * (f.frames_per_second or 0)) * max(len(f.threads), 1)
        on_disk = r.frames or 0
        whole = on_disk > 0 and (r.frames_expected is None or on_disk >= r.frames_expected)
        if r.state == INTERRUPTED:
            pass
        elif got.ok and whole and r.joined_at is None:
            r.state = RECORDED
        else:
            r.state = NOT_OK
            causes = ", ".join(f"{k} {v}" for k, v in r.lost.items())
            if got.frames == 0:
                detail = "no frame of its window arrived"
            elif on_disk == 0:
                detail = f"none of its {got.frames} frames reached a disk: {got.error or 'the disks refused them'}"
            elif not got.ok:
                detail = got.error or (f"frames lost ({causes})" if causes else "not all of it is known to be on disk")
            elif not whole:
                detail = f"{on_disk} of {r.frames_expected} frames"
            else:
                detail = ""
            if detail:
                r.why = f"{r.why}; {detail}" if r.why else detail
        nowhere = [n for n in got.notes if n.startswith(SUMMARY_NOWHERE)]
        if nowhere:
            r.why = f"{r.why}; {nowhere[0]}" if r.why else nowhere[0]
        self.say(r.line())
        if self.shipper is not None and on_disk > 0:
            r.shipped = "queued"
            self.shipper.ship(r.disk_name)

    def _interrupt(self, rec: Recorder) -> None:
        """Ctrl-C or SIGTERM: the scan recording is closed cleanly, the rest are not recorded."""
        for r in self.queued:
            began = r.state == RECORDING
            got = rec.stop_scan(name=r.disk_name)
            r.state = INTERRUPTED
            if began:
                r.why = f"the session was stopped while it recorded: {got.frames} frames on disk, closed cleanly"
                self._done(r, got, rec)
            else:
                r.summary = got
                r.why = "the session was stopped before it began"
                self.say(r.line())
        self.queued = []
        for r in self.summary.scans:
            if r.state == WAITING:
                r.state, r.why = INTERRUPTED, "the session was stopped before it began"

    def _finish_shipping(self) -> None:
        if self.shipper is None:
            return
        self.say("waiting for the scans being shipped")
        try:
            self.shipper.finish()
        except KeyboardInterrupt:
            pass
        for r in self.summary.scans:
            if r.shipped:
                r.shipped = self.shipper.state(r.disk_name) or r.shipped
                if r.shipped != "verified":
                    self.say(f"{r.scan.name}: shipping {r.shipped}")

    def _show(self, rec: Recorder, force: bool = False) -> None:
        """The status's observation document, renewed every ``STATUS_EVERY_S``."""
        now = time.time()
        if not force and now - self._status_at < STATUS_EVERY_S:
            return
        self._status_at = now
        if self.shipper is not None:
            for r in self.summary.scans:
                if r.shipped:
                    r.shipped = self.shipper.state(r.disk_name) or r.shipped
        rec.set_observation(self.summary.to_status(now))


def observe(
    schedule: Schedule | str | os.PathLike[str],
    station: str,
    *,
    disks: str | os.PathLike[str] | list[str | os.PathLike[str]],
    format: str | None = None,
    from_scan: str | None = None,
    ship_to: str | None = None,
    token_file: str | os.PathLike[str] | None = None,
    ship_rate: str | None = None,
    summary_json: str | os.PathLike[str] | None = None,
    on_line: Callable[[str], None] | None = None,
    clock_limit_s: float = CLOCK_LIMIT_S,
    **recorder_options: Any,
) -> SessionSummary:
    """Runs the station's part of an observation from its VEX schedule, and returns the
    session's summary.

    Parameters
    ----------
    schedule : Schedule, str or os.PathLike
        The schedule, or the path of a VEX file (1.5 or 2.0).
    station : str
        The station's code (``Ky``, any case), as the schedule's ``$STATION`` names it.
    disks : str, os.PathLike or list of them
        Directories (mount points) to record the scans to, or a glob such as ``"/mnt/disk*"``.
    format : str, optional
        The scans' layout on disk: ``file``, ``vbs`` or ``mk6`` (default: vbs with several
        disks, else file).
    from_scan : str, optional
        Start at this scan of the schedule (those before it are not recorded).
    ship_to : str, optional
        Push each finished scan to a receiver (``vdifrec receive``) at ``HOST:PORT`` while the
        next records, at low priority; the summary says per scan whether it arrived verified.
    token_file : str or os.PathLike, optional
        The receiver's shared token (needed with ``ship_to``).
    ship_rate : str, optional
        A cap on shipping's rate: ``"2Gbps"`` (bits) or ``"250MB/s"`` (bytes).
    summary_json : str or os.PathLike, optional
        Also write the session summary there, as JSON.
    on_line : callable, optional
        Called with each line for the operator (a scan queued, its result, a warning).
    clock_limit_s : float
        Flag a stream whose VDIF time stays further than this from the host clock (seconds).
    **recorder_options
        How the stream is received, as :class:`~vdifrec.Recorder` takes them (``port``,
        ``bind``, ``ring``, ``status_listen``, ...).

    Returns
    -------
    SessionSummary
        Every scan of the station with what became of it (``OK``, ``NOT OK``, ``missed``,
        ``recorded before``, ``interrupted``), its frames expected and recorded, frames lost
        by cause, any mismatch with the mode, and its shipping; the warnings; ``ok``.

    Ctrl-C (or SIGTERM, in ``vdifrec observe``) closes the scan recording cleanly and returns
    the summary so far.
    """
    sched = schedule if isinstance(schedule, Schedule) else Schedule.read(schedule)
    disk_list = expand_disks(disks)
    options = dict(recorder_options)
    if format is not None:
        options["format"] = format
    shipper = None
    if ship_to is not None:
        if token_file is None:
            raise ScheduleError("token_file: shipping needs the receiver's token: give token_file (--token-file)")
        told = on_line or (lambda _line: None)
        shipper = Shipper(ship_to, token_file, disk_list, rate=ship_rate,
                          on_done=lambda scan, state: told(f"shipped {scan}: {state}"))
    session = Session(sched, station, options, disk_list, from_scan=from_scan, shipper=shipper, on_line=on_line, clock_limit_s=clock_limit_s)
    summary = session.run()
    if summary_json is not None:
        with open(summary_json, "w") as f:
            json.dump(summary.to_dict(), f, indent=1)
            f.write("\n")
    return summary
