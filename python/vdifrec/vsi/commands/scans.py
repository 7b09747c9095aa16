"""A recorded scan chosen, checked and copied out: ``scan_set`` (the scan and the byte range the
others work on; ``record=off`` sets it too), ``scan_check?`` (what the scan holds, read back from
the disks), ``disk2file`` (the range copied into a file under the gather directory) and
``reset=abort`` (that copy stopped). Each waits, bounded, for a scan just stopped to be on disk."""

from __future__ import annotations

import datetime as _dt
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import _core
from ...units import iso_utc
from ..common import Problem, ScanPointer, one_field, ostream_num, query_only, reply, vex_time
from ..disk2file import Disk2File
from ..protocol import Code, Command, Reply

if TYPE_CHECKING:
    from ...reports import ScanSummary
    from ..station import Station


def scan_set(st: Station, c: Command) -> Reply:
    if c.query:
        p = st.pointer
        if p is None:
            return reply(c, -1, "", 0, 0)
        return reply(c, _session_index(st, p.name), p.name, p.start, p.end)
    st.await_drain()
    st.idle_only(c)
    name = _choose(st, c.param(0))
    found = _scan_on_disk(st, name)
    length = int(found["bytes"])
    clock = _ScanClock(st, name, found)
    start = _offset(c.param(1), 0, length, length, "start", clock)
    end = _offset(c.param(2), start, length, length, "stop", clock) if c.param(2) else length
    if not 0 <= start <= end <= length:
        raise Problem(Code.BAD_PARAMETER, "scan pointer offset(s) are out of bound")
    st.pointer = ScanPointer(name, start, end)
    return reply(c)


def _choose(st: Station, which: str) -> str:
    """The scan ``scan_set=<which>`` names, as jive5ab 3.1 chooses it on FlexBuff and Mark6:
    nothing (the session's last scan), ``inc``/``dec`` (the next or previous of the session's,
    round), a number (the session's scans counted from 1, oldest first), ``next`` (the next scan
    the last search matches, after the one set), text found in a session scan's name (ignoring
    case, oldest first), else a scan on the disks by its exact name or a shell-style pattern
    (``r41*``: the first match by name; a vdifrec addition, jive5ab takes the text literally).
    Only the catalogue of the disks is asked, never a walk."""
    if not which:
        if not st.session:
            raise Problem(Code.CONFLICT, "there are no scans recorded in this session")
        return st.session[-1]
    if which in ("inc", "dec"):
        k = _session_index(st, st.pointer.name) if st.pointer else -1
        if k < 0:
            raise Problem(Code.CONFLICT, f"there is no recorded scan to {'increment' if which == 'inc' else 'decrement'} from")
        return st.session[(k + (1 if which == "inc" else -1)) % len(st.session)]
    number = _session_number(which)
    if number is not None and 1 <= number <= len(st.session):
        return st.session[number - 1]
    if which == "next":
        if st.last_search is None:
            raise Problem(Code.ERROR, "no search string given yet")
        return _search(st, st.last_search, after=st.pointer.name if st.pointer else None)
    st.last_search = which
    return _search(st, which, after=None)


def _session_number(text: str) -> int | None:
    """``text`` as a whole number (``3``, ``+2``, ``007``), as C's strtol reads it whole."""
    return int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else None


def _is_pattern(text: str) -> bool:
    return any(ch in text for ch in "*?[")


def _search(st: Station, text: str, after: str | None) -> str:
    """The first scan that search ``text`` finds, after scan ``after`` when it is one of the
    session's (round to the start): in the session's scans by the text in their names, else on
    the disks by a pattern, else the text as a scan's name."""
    hits = [s for s in st.session if text.lower() in s.lower()]
    if hits and after in st.session:
        # On from the scan set, in the session's order, as jive5ab goes on.
        k = st.session.index(after)
        order = st.session[k + 1:] + st.session[:k + 1]
        return next(s for s in order if s in hits)
    if not hits and _is_pattern(text):
        hits = json.loads(_core.scan_names(st.all_disks, text))["names"]
        if hits and after in hits:
            return str(hits[(hits.index(after) + 1) % len(hits)])
    return str(hits[0]) if hits else text


#: A time code of scan_set, as jive5ab reads one: ``[+-][<n>y][<n>d][<n>h][<n>m][<x>s]``.
_TIME_CODE = re.compile(r"^([+-]?)(?:(\d+)y)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d*\.?\d*)s)?$")


def _unparsed(text: str) -> Problem:
    return Problem(Code.ERROR, f"failed to parse byte offset or time code from '{text}' - give s, c, e, s+ (start only), "
                               "+<bytes>, -<bytes> (0x for hexadecimal) or a time (+10s, -1m30s, 10h05m30s)")


class _ScanClock:
    """A scan's first frame time and data rate (bytes per second), for the time offsets of
    scan_set."""

    def __init__(self, st: Station, name: str, found: dict[str, Any]) -> None:
        self.found = found
        self.frame_size = int(found.get("frame_size") or 0)
        summary = st.summaries.get(name)
        fps = scan_rate(summary)
        threads = len(summary.threads) if summary and summary.threads else 1
        self.rate = float(int(fps or 0) * threads * self.frame_size)
        if not self.rate and st.mode is not None:
            # The mode's rate is the stream's, every thread together, of payload bytes.
            self.rate = st.mode.mbps * 1e6 / 8 / st.mode.payload * self.frame_size
        # The rate as the recording learned it, or from the mode (mode=): from the frames on disk
        # alone it is not known (the threads' frames share their times).
        first = found.get("first")
        self.start = iso_utc(first["time"]) if first else None

    def bytes_after_start(self, seconds: float, text: str) -> int:
        if not self.rate or not self.frame_size:
            raise Problem(Code.CONFLICT, f"'{text}' - could not deduce recorded data rate for time based scan_set")
        # Whole frames: an offset in time lands on a frame's start.
        return int(seconds * self.rate) // self.frame_size * self.frame_size


def _time_offset(text: str, base: int, length: int, clock: _ScanClock) -> int | None:
    """A time code as a byte offset: ``+T`` after ``base``, ``-T`` before the end, or a time of
    day from the scan's start (fields left out are the first frame's; a time before the first
    frame is the next one the scan reaches: ``30s`` is the first half minute in it); None if
    ``text`` is no time code."""
    m = _TIME_CODE.match(text)
    if not m or not any(m.groups()[1:]) or m.group(6) in (".",):
        return None
    sign, years, days, hours, minutes, seconds = m.groups()
    h, mi, sec = int(hours or 0), int(minutes or 0), float(seconds or 0)
    if h >= 24 or mi >= 60 or sec >= 60:
        raise _unparsed(text)
    if sign:
        if years:
            raise _unparsed(text)
        span = int(days or 0) * 86400 + h * 3600 + mi * 60 + sec
        n = clock.bytes_after_start(span, text)
        return base + n if sign == "+" else length - n
    if clock.start is None:
        raise Problem(Code.CONFLICT, f"'{text}' - the scan holds no frame to count a time from")
    t0 = clock.start
    year = int(years) if years else t0.year
    doy = int(days) if days else t0.timetuple().tm_yday
    day = _dt.datetime(year, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(days=doy - 1)
    at = day + _dt.timedelta(hours=h if hours else t0.hour, minutes=mi if minutes else t0.minute,
                             seconds=sec if seconds else t0.second + t0.microsecond / 1e6)
    # The unit above the largest field given: what rolls on to reach the scan.
    step = {"s": _dt.timedelta(minutes=1), "m": _dt.timedelta(hours=1), "h": _dt.timedelta(days=1)}
    coarsest = "y" if years else "d" if days else "h" if hours else "m" if minutes else "s"
    if at < t0 and coarsest in step:
        at += step[coarsest]
    return clock.bytes_after_start((at - t0).total_seconds(), text)


def _offset(text: str, base: int, length: int, default: int, what: str, clock: _ScanClock) -> int:
    """An offset of scan_set: `s` (start), `c` (middle), `e` (end less 1 MB), `s+` (64 kB in;
    these for the start only), `+N` bytes (after ``base``), `-N` bytes (before the end), or a
    time (`+30s`, `-1m`, `2026y341d10h05m30s`, as jive5ab reads them); anything else without a
    sign is refused with 8 and a sign with no number after it with 4, as jive5ab 3.1 answers."""
    if not text:
        return default if what == "stop" else 0
    fixed = {"s": 0, "c": length // 2, "e": length - 1_000_000, "s+": 65536}
    if text in fixed and what == "start":
        return fixed[text]
    timed = _time_offset(text, base, length, clock)
    if timed is not None:
        return timed
    if text[0] not in "+-":
        # As jive5ab answers anything else without a sign (a plain number, a word, `e` as the
        # stop).
        raise Problem(Code.BAD_PARAMETER, "only relative byte numbers allowed in this command - +N from the start, "
                                          "-N from the end, s, c, e or s+ for the start, or a time (+10s, 10h05m30s)")
    n = _byte_count(text[1:])
    if n is None:
        raise _unparsed(text)
    return base + n if text[0] == "+" else length - n


def _byte_count(text: str) -> int | None:
    """A byte count as C's strtoll reads it whole with base 0: ``4096``, ``0x1000``, ``010``."""
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", text):
        return int(text[2:], 16)
    if re.fullmatch(r"0[0-7]+", text):
        return int(text[1:], 8)
    if re.fullmatch(r"[0-9]+", text):
        return int(text, 10)
    return None


def scan_rate(summary: ScanSummary | None) -> int:
    """Frames per second per thread as the scan's own seconds counted them (0: not known):
    the highest any of its seconds showed, since the first of a scan may have been counted
    before its frame numbers wrapped."""
    if summary is None:
        return 0
    return max((int(s.get("frames_per_second") or 0) for s in summary.seconds), default=0)


def scan_check(st: Station, c: Command) -> Reply:
    query_only(c)
    st.await_drain()
    if st.pointer is None:
        raise Problem(Code.BAD_PARAMETER, "no scan name given - record a scan or choose one with scan_set=<scan>")
    name = st.pointer.name
    found = _scan_on_disk(st, name)
    if found.get("error"):
        raise Problem(Code.ERROR, f"'{name}' cannot be read - {found['error']}")
    fs = int(found["frame_size"])
    first, last = found.get("first"), found.get("last")
    if not fs or not first or not last:
        return reply(c, "?", name, "?")
    summary = st.summaries.get(name)
    # Frames per second per thread: as the scan's own frames showed it, or from the mode.
    fps = scan_rate(summary) or (st.mode.frames_per_second if st.mode else 0)
    threads = len(summary.threads) if summary and summary.threads else 1
    t0, t1 = iso_utc(first["time"]), iso_utc(last["time"])
    tracks = (st.mode.tracks if st.mode else 0) * threads
    fields: list[object] = ["?", name, "VDIF", tracks or "?"]
    frames = int(found["bytes"]) // fs
    if fps:
        t0 = t0 + _dt.timedelta(seconds=int(first["frame"]) / fps) if t0.microsecond == 0 else t0
        duration = frames / (fps * threads)
        payload_bits = frames * (st.mode.payload if st.mode else fs - 32) * 8
        rate = f"{ostream_num(payload_bits / duration / tracks / 1e6)}Mbps" if tracks and duration > 0 else "?"
        fields += [vex_time(t0), f"{ostream_num(duration)}s", rate]
    else:
        fields += [f"{t0:%Y}y{t0.timetuple().tm_yday:03d}d{t0:%Hh%Mm%S}.***s", f"{int((t1 - t0).total_seconds())}.****s", "?"]
    fields.append(summary.frames_lost * fs if summary else "?")
    fields.append(fs)
    return reply(c, *fields)


def disk2file(st: Station, c: Command) -> Reply:
    if c.query:
        d = st.d2f
        if d is not None and d.active:
            return reply(c, "active", d.path, d.start, d.done, d.end, d.mode)
        if d is not None and d.error:
            return reply(c, "inactive", d.path, one_field(f"failed - {d.error}"))
        return reply(c, "inactive", *([st.last_d2f] if st.last_d2f else []))
    st.await_drain()
    st.idle_only(c)
    if st.d2f is not None and st.d2f.active:
        raise Problem(Code.CONFLICT, "not whilst disk2file is in progress")
    if st.pointer is None:
        raise Problem(Code.CONFLICT, "no scan was set using scan_set= (or recorded)")
    p = st.pointer
    length = int(_scan_on_disk(st, p.name)["bytes"])
    target = _target(st, c.param(0) or f"{p.name}.vdif")
    start_s, end_s = c.param(1), c.param(2)
    if start_s[:1] in ("+", "-"):
        raise Problem(Code.BAD_PARAMETER, "relative byteoffsets not allowed here - give the start byte")
    start = int(start_s) if start_s.isdigit() else p.start
    if end_s.startswith("+") and end_s[1:].isdigit():
        end = start + int(end_s[1:])
    elif end_s.isdigit():
        end = int(end_s)
    elif end_s:
        raise Problem(Code.BAD_PARAMETER, f"end '{end_s}' - give a byte number or +<bytes>")
    else:
        end = p.end or length
    if start_s and not start_s.isdigit():
        raise Problem(Code.BAD_PARAMETER, f"start '{start_s}' - give a byte number")
    if not 0 <= start <= end <= length:
        raise Problem(Code.BAD_PARAMETER, f"bytes {start}..{end} are outside the scan (0..{length})")
    mode = c.param(3, "n")
    if mode not in ("n", "w", "a", "resume"):
        raise Problem(Code.BAD_PARAMETER, "open mode must be n, w, a or resume")
    try:
        st.d2f = Disk2File(p.name, st.all_disks, target, start, end, mode)
    except OSError as exc:
        raise Problem(Code.ERROR, f"cannot open {target} - {exc.strerror or exc}") from None
    st.last_d2f = str(target)
    return reply(c, code=Code.STARTED)


def _target(st: Station, text: str) -> Path:
    """A disk2file target: relative to the gather directory, and never outside it."""
    path = (st.gather_dir / text).resolve()
    if path != st.gather_dir and st.gather_dir not in path.parents:
        raise Problem(Code.BAD_PARAMETER, f"{text} is outside the gather directory {st.gather_dir} (serve --gather-dir)")
    if not path.parent.is_dir():
        raise Problem(Code.BAD_PARAMETER, f"{path.parent} is not a directory")
    return path


def reset(st: Station, c: Command) -> Reply:
    if c.query:
        raise Problem(Code.NOT_NOW, "only implemented as command")
    if c.param(0) != "abort":
        raise Problem(Code.BAD_PARAMETER, f"reset '{c.param(0)}' - vdifrec takes reset=abort (stops disk2file)")
    if st.d2f is not None and st.d2f.active:
        st.d2f.abort()
    return reply(c)


def _session_index(st: Station, name: str) -> int:
    return st.session.index(name) if name in st.session else -1


def _scan_on_disk(st: Station, name: str) -> dict[str, Any]:
    """Scan ``name`` as ``vdifrec scans`` lists it, looked up by its name alone (a full
    FlexBuff holds thousands of scans; listing them all would hold every client up)."""
    try:
        found: dict[str, Any] = json.loads(_core.scan_info(name, st.all_disks))
    except FileNotFoundError:
        raise Problem(Code.ERROR, f"'{name}' does not exist in Mk6/VBS format") from None
    except _core.ArgumentError:
        raise Problem(Code.ERROR, f"'{name}' exists in both Mk6/VBS formats") from None
    except (_core.FormatError, _core.GapError, OSError) as exc:
        raise Problem(Code.ERROR, f"'{name}' cannot be read - {exc}") from None
    return found

