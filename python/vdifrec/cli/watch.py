"""`vdifrec watch HOST:PORT [HOST:PORT ...]`: the control room's view of its recorders, every
few seconds.

One recorder: one line per poll, as the original system's client printed it (VDIF time, total
frames, stream capacity, file name, file capacity), plus the scan and the disk fill where there
are, the loss and the rate.

Several recorders (a station network): one line per recorder per poll, in the order given,

  HH:MM:SS  HOST:PORT  STATE  scan NAME  R.RR Gbit/s  lost network N kernel N ring N malformed N  disk FILL%

with `-` where there is none: the scan being written (none between scans or for a continuous
recording), the fill of the fullest of the recording's disks (none when monitoring).
A recorder that does not answer says `!!! NO ANSWER: why !!!` in its line, every poll, while
the others are still polled; a line says when it answers again.

Where a schedule drives the recorder (`vdifrec observe`), each line also says the scan
recording and how far through its window it is, or the next scan and how long until it starts
(`sched s2 45%` or `sched next s3 in 12 s`); a line tells of each scan that finishes, with its
result, and a loud one of a scan not OK or missed, and of each new schedule warning (a stream
not in the schedule's mode, a clock off).

Where the recorder forwards the stream (e-VLBI: --forward, mem2net), a line follows its own for
each destination, with the time (and the recorder, for several):

  HH:MM:SS  fwdID SCHEME://HOST:PORT  STATE  frames N  skipped N  R.RR Gbit/s  reconnects N

loud, with the reason, while the destination is down or refused; a destination that has closed
(removed, disconnected, the recording ended) has its line once, with its last counts. Skipped
frames are the forwarding's, never loss of the recording: --fail-on-loss does not count them.

Either way, a loud line tells of new loss (by cause), of a stream that stopped, of a recorder
that does not answer or that was restarted. --count bounds the polls; Ctrl-C or SIGTERM ends
the watch. With --fail-on-loss the last line sums up the loss that appeared during the watch,
by recorder and cause, and the exit status is 1 if there was any, or if a recorder never
answered (it cannot show that it lost nothing); 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.parse
from typing import Any, TextIO

from ..remote import RemoteStatuses
from ..reports import ForwardStats
from .args import UsageError, positive, sigterm_as_interrupt

#: The causes of loss, as /metrics labels them (vdifrec_frames_lost_total{cause=...}).
CAUSES = ("network", "kernel", "ring", "malformed")
#: /status's name of the scan being written and fill (0..1) of the fullest disk; null when
#: there is none (no scan; monitoring), shown as `-`.
SCAN_FIELD, DISK_FILL_FIELD = "scan", "disk_fill"
#: The states of a forwarding destination that need the operator, shown loudly: it went away
#: (retried), or its shaping does not fit the stream (nothing is sent there).
FORWARD_TROUBLE = ("down", "refused")


def add_watch(sub: Any) -> None:
    p = sub.add_parser("watch", help="poll recorders' status endpoints and print a line per recorder every few seconds",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("address", type=status_address, nargs="+",
                   help="HOST:PORT of a recorder's --status-listen; give several to watch a station network")
    p.add_argument("--every", type=positive(), default=3.0, help="seconds between polls (default 3)")
    p.add_argument("--count", type=positive(int), default=None, help="stop after this many polls")
    p.add_argument("--stalled-after", type=positive(), default=5.0,
                   help="call the stream stopped after this many seconds without packets (default 5)")
    p.add_argument("--fail-on-loss", action="store_true",
                   help="end with a line summing up the loss seen during the watch; exit status 1 if any, "
                        "or if a recorder never answered")
    p.set_defaults(func=run_watch)


def status_address(text: str) -> str:
    """HOST:PORT (or http://HOST:PORT), as a recorder's --status-listen serves it: the form
    only; whether anyone answers there is what watch reports, poll by poll."""
    url = text if "://" in text else "http://" + text
    problem = argparse.ArgumentTypeError(f"expected HOST:PORT (a port 1..65535) such as 127.0.0.1:8089, got {text!r}")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is no number, or out of 0..65535
        raise problem from None
    if parts.scheme != "http":
        raise argparse.ArgumentTypeError(f"the status endpoint speaks plain http: give HOST:PORT, got {text!r}")
    if not parts.hostname or port is None or not 1 <= port <= 65535:
        raise problem
    return text


def _loud(text: str, out: TextIO) -> str:
    # Red and bold on a terminal; plain (but unmistakable) in a log.
    return f"\033[1;31m{text}\033[0m" if out.isatty() else text


def loss_by_cause(stats: dict[str, Any]) -> dict[str, int]:
    """Frames lost by cause, as /metrics counts them: sequence gaps the kernel's drops do not
    explain (network), the kernel's drops, the ring's overflows and malformed datagrams."""
    return {
        "network": max(stats["frames_lost"] - stats["kernel_drops"], 0),
        "kernel": stats["kernel_drops"],
        "ring": stats["ring_overflows"],
        "malformed": stats["datagrams_malformed"],
    }


def _by_cause(loss: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in loss.items() if v)


class _Watched:
    """What watch remembers of one recorder between polls."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.start_unix: float | None = None
        """The run last seen (a new value: the recorder was restarted, its counters began again)."""
        self.baseline: dict[str, int] | None = None
        """Loss by cause when the watch first saw this run (zero for a run begun during the watch)."""
        self.previous: dict[str, int] | None = None
        """Loss by cause at the last answer."""
        self.earlier = dict.fromkeys(CAUSES, 0)
        """Loss of earlier runs during the watch."""
        self.silent = 0
        """Polls in a row without an answer."""
        self.scans_told: set[str] | None = None
        """The schedule's finished scans already told of (None before the first answer)."""
        self.warnings_told: set[str] | None = None
        """The schedule's warnings already told of."""
        self.closed_told: set[int] = set()
        """The forwarding destinations (ids) of this run whose closing was shown."""

    def schedule_news(self, doc: dict[str, Any], now: str, at: str, out: TextIO) -> list[str]:
        """Lines for the scans that finished and the warnings that appeared since the last
        answer (the first answer only sets what was there already)."""
        o = doc.get("observation")
        if not o:
            return []
        finished = {f["disk_name"]: f for f in o.get("finished", [])}
        first = self.scans_told is None
        told, warned = self.scans_told or set(), self.warnings_told or set()
        lines: list[str] = []
        if not first:
            for name, f in finished.items():
                if name in told:
                    continue
                text = (f"{now} scan {f['name']} ({name}){at}: {f['result']}"
                        f"{': ' + f['why'] if f.get('why') else ''}, frames {f.get('frames_recorded')}/{f.get('frames_expected')}")
                lines.append(text if f["result"] in ("OK", "recorded before") else _loud(f"{now} !!! SCAN {f['result'].upper()}{at}: {text[len(now) + 1:]} !!!", out))
            for w in o.get("warnings", []):
                if w not in warned:
                    lines.append(_loud(f"{now} !!! SCHEDULE{at}: {w} !!!", out))
        self.scans_told = told | set(finished)
        self.warnings_told = warned | set(o.get("warnings", []))
        return lines

    def new_loss(self) -> dict[str, int]:
        """The loss that appeared during the watch, by cause."""
        if self.previous is None or self.baseline is None:
            return dict(self.earlier)
        return {k: self.earlier[k] + max(self.previous[k] - self.baseline[k], 0) for k in CAUSES}

    def answered(self, doc: dict[str, Any]) -> tuple[dict[str, int], dict[str, int] | None, bool]:
        """Takes an answer: (loss by cause now, its growth since the last answer or None on the
        first, whether the recorder was restarted since)."""
        causes = loss_by_cause(doc["stats"])
        restarted = self.start_unix is not None and doc["start_unix"] != self.start_unix
        if restarted:
            # Everything a run begun during the watch lost, it lost during the watch.
            self.earlier = self.new_loss()
            self.baseline = self.previous = dict.fromkeys(CAUSES, 0)
            self.closed_told = set()  # a new run numbers its destinations afresh
        elif self.baseline is None:
            self.baseline = causes
        new = None if self.previous is None else {k: causes[k] - self.previous[k] for k in CAUSES}
        self.previous, self.start_unix = causes, doc["start_unix"]
        return causes, new, restarted


def _stalled(doc: dict[str, Any], after: float) -> float | None:
    """Seconds without packets, if the recorder waits for or records a stream that stopped."""
    st = doc["stats"]
    idle = st.get("seconds_since_datagram")
    if idle is None:
        # Nothing yet: a stall only once the recorder has waited that long.
        idle = st["elapsed_s"] if st["elapsed_s"] >= after else None
    elif idle < after:
        idle = None
    return idle if doc["state"] in ("recording", "waiting") else None


def _schedule(doc: dict[str, Any]) -> str:
    """The schedule's part of a line: the scan recording and its progress, or the next one and
    when it starts; empty without a schedule."""
    o = doc.get("observation")
    if not o:
        return ""
    if o.get("recording"):
        r = o["recording"]
        progress = r.get("progress")
        return f"sched {r['name']} {100 * progress:.0f}%  " if progress is not None else f"sched {r['name']}  "
    if o.get("next"):
        left = max(0.0, o["next"]["window_start_unix"] - time.time())
        return f"sched next {o['next']['name']} in {left:.0f} s  "
    return "sched done  "


def _disk(doc: dict[str, Any]) -> str | None:
    """The fullest disk's fill as a percentage, if /status has one."""
    fill = doc.get(DISK_FILL_FIELD)
    return None if fill is None else f"{100 * fill:.0f}%"


def _classic_line(now: str, doc: dict[str, Any], causes: dict[str, int]) -> str:
    """The one-recorder line: the original client's fields, the scan and the disk fill where
    there are, the loss, the rate, the state."""
    st = doc["stats"]
    file_name = (doc["current_file"] or "-").rsplit("/", 1)[-1]
    scan, disk = doc.get(SCAN_FIELD), _disk(doc)
    station = (f"scan {scan}  " if scan else "") + (f"disk {disk}  " if disk else "") + _schedule(doc)
    return (f"{now}  VDIF {doc['vdif_time'] or '-'}  frames {st['frames_received']}  "
            f"stream {st['bytes_buffered']} B  file {file_name} {doc['current_file_bytes']} B  {station}"
            f"lost {sum(causes.values())}  {doc['rates']['receive_gbps']:.2f} Gbit/s  [{doc['state']}]")


def _network_line(now: str, address: str, width: int, doc: dict[str, Any], causes: dict[str, int]) -> str:
    """A station network's line for one recorder."""
    scan = doc.get(SCAN_FIELD) or "-"
    disk = _disk(doc) or "-"
    lost = " ".join(f"{k} {v}" for k, v in causes.items())
    return (f"{now}  {address:<{width}}  {doc['state']:<9}  scan {scan}  {doc['rates']['receive_gbps']:.2f} Gbit/s  "
            f"lost {lost}  disk {disk}" + (f"  {_schedule(doc).strip()}" if doc.get("observation") else ""))


def _forward_lines(doc: dict[str, Any], who: str, w: _Watched, out: TextIO) -> list[str]:
    """A line per forwarding destination in /status's `stats.forward` (none without): its
    state, input frames sent on and skipped, its rate on the wire and its reconnections, loud
    with the reason while it is down or refused. `who` starts each line (the time, and the
    recorder for several). A closed destination has its line once, its last counts."""
    lines: list[str] = []
    for f in (ForwardStats.from_dict(d) for d in doc["stats"].get("forward", [])):
        if f.state == "closed":
            if f.id in w.closed_told:
                continue
            w.closed_told.add(f.id)
        line = (f"{who}  fwd{f.id} {f.destination}  {f.state}  frames {f.frames}  skipped {f.skipped}  "
                f"{f.gbps:.2f} Gbit/s  reconnects {f.reconnects}")
        if f.state in FORWARD_TROUBLE:
            lines.append(_loud(f"{line}  !!! {f.error or f.state} !!!", out))
        else:
            lines.append(f"{line}  ({f.error})" if f.error else line)
    return lines


def _summary(now: str, watched: list[_Watched], polls: int, out: TextIO) -> tuple[str, int]:
    """--fail-on-loss's last line and exit status."""
    lossy = [(w.address, w.new_loss()) for w in watched if any(w.new_loss().values())]
    never = [w.address for w in watched if w.start_unix is None]
    unheard = f"; never answered: {', '.join(never)}" if never else ""
    if lossy:
        which = "; ".join(f"{a} {sum(n.values())} frames ({_by_cause(n)})" for a, n in lossy)
        return _loud(f"{now} !!! FAIL: new loss during the watch: {which}{unheard} !!!", out), 1
    if never:
        # A recorder that never answered cannot show that it lost nothing.
        return _loud(f"{now} !!! FAIL: no new loss seen, but never answered: {', '.join(never)} !!!", out), 1
    n = len(watched)
    return f"{now} no new loss during the watch ({n} recorder{'s' * (n > 1)}, {polls} polls)", 0


def run_watch(a: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    addresses: list[str] = a.address
    try:
        station = RemoteStatuses(addresses)
    except ValueError as exc:  # a recorder named twice
        raise UsageError("argument address: " + str(exc).removeprefix("urls: ")) from None
    watched = [_Watched(address) for address in addresses]
    network = len(watched) > 1
    width = max(len(address) for address in addresses)

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    polls = 0
    with sigterm_as_interrupt():
        try:
            while a.count is None or polls < a.count:
                if polls:
                    time.sleep(a.every)
                polls += 1
                answers = station.status()
                now = time.strftime("%H:%M:%S")
                alerts: list[str] = []
                for w in watched:
                    doc = answers[w.address]
                    at = f" at {w.address}" if network else ""
                    if isinstance(doc, ConnectionError):
                        w.silent += 1
                        if network:
                            say(_loud(f"{now}  {w.address:<{width}}  !!! NO ANSWER: {doc} !!!", out))
                        else:
                            say(_loud(f"{now} !!! NO ANSWER from {w.address}: {doc} !!!", out))
                        continue
                    causes, new, restarted = w.answered(doc)
                    say(_network_line(now, w.address, width, doc, causes) if network else _classic_line(now, doc, causes))
                    for line in _forward_lines(doc, f"{now}  {w.address:<{width}}" if network else now, w, out):
                        say(line)
                    if w.silent:
                        alerts.append(f"{now} {w.address} answers again, after {w.silent} poll{'s' * (w.silent > 1)} without an answer")
                        w.silent = 0
                    if restarted:
                        alerts.append(_loud(f"{now} !!! RESTARTED{at}: a new run since {doc['start_time']}, its counters begin again !!!", out))
                    if new is not None and any(v > 0 for v in new.values()):
                        alerts.append(_loud(f"{now} !!! LOSS{at}: {sum(new.values())} frames since the last poll "
                                            f"({_by_cause(new)}) !!!", out))
                    alerts.extend(w.schedule_news(doc, now, at, out))
                    idle = _stalled(doc, a.stalled_after)
                    if idle is not None:
                        alerts.append(_loud(f"{now} !!! STREAM STOPPED{at}: no packets for {idle:.0f} s !!!", out))
                for line in alerts:
                    say(line)
        except KeyboardInterrupt:
            pass
    if not a.fail_on_loss:
        return 0
    line, code = _summary(time.strftime("%H:%M:%S"), watched, polls, out)
    say(line)
    return code
