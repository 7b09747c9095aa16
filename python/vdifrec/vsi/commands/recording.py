"""Scans recorded and what they count: ``record`` (``on`` with the scan's name, ``off``, ``mk6``
and the query), ``evlbi?`` (frames received, lost and out of order since ``record=on``),
``rtime?`` (the time left on the chosen disks at the mode's rate) and ``stats?`` (the engine's
counters, how much of the running scan is known to be on disk, and the ``mem2net``
destination's counters). ``record=off`` answers at
once (code 1) and the station writes the scan's tail in the background."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ... import _core
from ...units import iso_utc
from ..common import Problem, ScanPointer, ostream_num, query_only, reply, vex_time
from ..protocol import Code, Command, Reply
from . import forwarding

if TYPE_CHECKING:
    from ..station import Station


def record(st: Station, c: Command) -> Reply:
    if c.query:
        if c.param(0) == "mk6":
            return reply(c, int(st.format == "mk6"))
        if st.recording and st.session:
            assert st.recorder is not None and st.at_on is not None
            got = st.recorder.stats().bytes_received - st.at_on.bytes_received
            return reply(c, "on", len(st.session), st.session[-1], got)
        return reply(c, "off")
    sub = c.param(0)
    if sub == "on":
        return _record_on(st, c)
    if sub == "off":
        if st.recorder is None or st.recorder.scan is None or st.stopping is not None:
            raise Problem(Code.CONFLICT, "Not doing record")
        # The scan is set at once, as jive5ab does: scan_check? right after record=off
        # waits for the tail (`Station.await_drain`) and then checks it.
        st.pointer = ScanPointer(st.session[-1], 0, 0) if st.session else None
        st.end_scan()
        return reply(c, code=Code.STARTED)
    if sub == "mk6":
        try:
            on = int(c.param(1), 0) != 0
        except ValueError:
            raise Problem(Code.BAD_PARAMETER, f"mk6 '{c.param(1)}' - give 1 (Mark6 scatter-gather) or 0 (FlexBuff vbs)") from None
        fmt = "mk6" if on else "vbs"
        if fmt != st.format:
            if st.recording:
                st.format, st.dirty = fmt, True  # from the next scan on, as jive5ab
            else:
                st.reconfigure(format=fmt)
        return reply(c)
    raise Problem(Code.NOT_NOW, f"{sub} does not apply to record - give on (then the scan name), off or mk6 (then 1 or 0)")


def _record_on(st: Station, c: Command) -> Reply:
    if st.stopping is not None:
        raise Problem(Code.BUSY, "the last scan's tail is still being written - try again")
    if st.recording:
        raise Problem(Code.CONFLICT, f"Already doing record (scan {st.session[-1] if st.session else '?'})")
    if st.d2f is not None and st.d2f.active:
        raise Problem(Code.CONFLICT, "not whilst disk2file is in progress")
    scan = c.param(1)
    if not scan:
        raise Problem(Code.CONFLICT, "must provide a scan name - record=on, then the scan name (and the experiment and station, optionally)")
    if c.param(2) and c.param(3):
        # As a Mark5 or Mark6 names a scan of an experiment and station.
        scan = f"{c.param(2)}_{c.param(3)}_{scan}"
    if st.recorder is None:
        raise Problem(Code.CONFLICT, "no data port - set one with net_port=<port> (or serve --port)")
    if st.dirty:
        st.rebuild()
    assert st.recorder is not None
    before = st.recorder.stats()
    try:
        name = st.recorder.start_scan(scan)
    except _core.ArgumentError as exc:
        raise Problem(Code.BAD_PARAMETER, str(exc)) from None
    except _core.RecorderError as exc:
        raise Problem(Code.ERROR, str(exc)) from None
    st.at_on = before
    st.session.append(name)
    st.pointer = None
    if name != scan:
        return reply(c, name)
    return reply(c)


def evlbi(st: Station, c: Command) -> Reply:
    if st.recorder is None:
        received = lost = ooo = 0
    else:
        now = st.recorder.stats()
        base = st.at_on
        received = now.frames_received - (base.frames_received if base else 0)
        lost = now.frames_lost - (base.frames_lost if base else 0)
        ooo = now.frames_out_of_order - (base.frames_out_of_order if base else 0)
    whole = received + lost

    def pct(n: int) -> str:
        return f"({100.0 * n / whole if whole else 0.0:5.2f}%)"

    return reply(c, "total", received, "loss", f"{lost} {pct(lost)}", "out-of-order", f"{ooo} {pct(ooo)}", "extent", "0seqnr/pkt")


def rtime(st: Station, c: Command) -> Reply:
    query_only(c)
    seen: set[int] = set()
    size = free = 0
    for d in st.disks:
        sv = os.statvfs(d)
        if sv.f_fsid in seen:
            continue  # directories on one file system share its space
        seen.add(sv.f_fsid)
        size += sv.f_blocks * sv.f_frsize
        free += sv.f_bavail * sv.f_frsize
    pct = f"{100.0 * free / size if size else 0.0:g}%"
    m = st.mode
    if m is None:
        return reply(c, "<unkown> (no mode set yet)", f"{ostream_num(free / 1e9)}GB", pct, "<unknown>", 0, 0, "<unknown> Mbps")
    total = m.mbps * 1e6 * m.frame_size / m.payload
    return reply(c, f"{ostream_num(free / (total / 8))}s", f"{ostream_num(free / 1e9)}GB", pct, m.format_name, m.tracks, "0MHz", f"{ostream_num(total / 1e6)}Mbps")


def stats(st: Station, c: Command) -> Reply:
    query_only(c)
    if st.recorder is None:
        return reply(c, "state=not receiving")
    s = st.recorder.stats().to_dict()
    if s["scan_durable_up_to"] is not None:
        # As jive5ab writes times: an ISO time's ':' would split the field.
        s["scan_durable_up_to"] = vex_time(iso_utc(s["scan_durable_up_to"]))
    fields = [f"{k}={v}" for k, v in s.items() if isinstance(v, (int, float, str)) or v is None]
    fields += forwarding.stats_fields(st)
    return reply(c, *(f.replace(":", "_").replace(";", ",") for f in fields))
