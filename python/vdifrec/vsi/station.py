"""A station recorder driven by VSI-S: the state a FlexBuff running jive5ab keeps (mode, network
protocol, ports, disks, data streams, the session's scans, the scan set for
``scan_check``/``disk2file``, the ``mem2net`` destination and its ``ipd``), over one vdifrec ``Recorder`` that receives and counts all the
time and writes only between ``record=on`` and ``record=off``, and the table that hands each
command to its handler. What each command does is in ``vsi.commands``, one module per family.

Replies follow jive5ab 3.1 in FlexBuff mode, field for field; where they differ
docs/reference/formats/vsi.md says so. A failing command changes
nothing: a new configuration is checked by the engine before the running recorder is touched,
and commands that would disturb a scan in progress are refused with code 6.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import _core
from ..recorder import Recorder
from ..reports import SUMMARY_NOWHERE, ScanSummary, Stats
from ..scans import expand_disks
from .commands import configure, forwarding, identity, recording, scans
from .common import Mode, Problem, ScanPointer, one_field
from .protocol import Code, Command, Reply, SyntaxProblem, parse, split_line

if TYPE_CHECKING:
    from .disk2file import Disk2File

#: The number of buffers `net_protocol?` shows before any is set.
DEFAULT_NBUF = 4
DEFAULT_MTU = 1500
#: Seconds scan_check?, scan_set= and disk2file= wait for a stopped scan's tail to reach disk.
DRAIN_WAIT_S = 10.0

#: What a command does: the station and the command in, its reply out (or a Problem raised).
Handler = Callable[["Station", Command], Reply]

#: Every keyword the station answers, and its handler; any other is answered with code 7.
HANDLERS: dict[str, Handler] = {
    "version": identity.version,
    "dts_id": identity.dts_id,
    "os_rev": identity.os_rev,
    "status": identity.status,
    "mode": configure.mode,
    "net_protocol": configure.net_protocol,
    "mtu": configure.mtu,
    "net_port": configure.net_port,
    "datastream": configure.datastream,
    "set_disks": configure.set_disks,
    "record": recording.record,
    "evlbi": recording.evlbi,
    "rtime": recording.rtime,
    "stats": recording.stats,
    "scan_set": scans.scan_set,
    "scan_check": scans.scan_check,
    "disk2file": scans.disk2file,
    "reset": scans.reset,
    "mem2net": forwarding.mem2net,
    "ipd": forwarding.ipd,
}


class Station:
    """The recorder and everything the commands set. ``handle(line)`` answers a line of commands;
    call it from one thread at a time (the control server serialises lines)."""

    def __init__(
        self,
        options: dict[str, Any],
        disks: list[str],
        gather_dir: str | os.PathLike[str],
        note: Callable[[str], None] = lambda s: None,
    ) -> None:
        self.base = dict(options)
        port = self.base.pop("port", None)
        self.ports: list[tuple[str | None, int]] = _ports_of(str(port)) if port is not None else []
        self.base.pop("ports", None)
        self.all_disks = expand_disks(disks)
        self.disks = list(self.all_disks)
        self.format: str = self.base.pop("format", None) or "vbs"
        self.split: str | None = self.base.pop("split", None)
        self.datastreams: dict[str, list[str]] = {}
        self.mode: Mode | None = None
        # What the command line gave (offset, psn) holds until net_protocol= says otherwise.
        # `protocol` is what net_protocol? shows and mem2net sends with; `receive_protocol` the
        # UDP framing received (net_protocol=tcp sets only the sending: vdifrec receives UDP).
        self.receive_protocol = "udps" if self.base.get("offset", 0) == 8 else "pudp"
        self.protocol = self.receive_protocol
        self.protocol_set = False
        self.sockbuf = _bytes("rcvbuf", self.base.pop("rcvbuf", None) or _core.defaults()["recorder"]["rcvbuf"])
        chunk = self.base.pop("chunk_size", None)
        self.workbuf: int | None = _bytes("chunk_size", chunk) if chunk is not None else None
        self.nbuf = DEFAULT_NBUF
        self.mtu = DEFAULT_MTU
        self.mem2net: forwarding.Mem2Net | None = None
        #: The host of the last mem2net=connect (a connect without one uses it again).
        self.mem2net_host = ""
        #: ipd= in nanoseconds (negative: auto, the theoretical gap computed at connect).
        self.ipd_ns = 0
        self.ipd_theory_ns = 0
        self.gather_dir = Path(gather_dir).resolve()
        self.note = note
        self.recorder: Recorder | None = None
        self._noted: set[str] = set()
        self._running_options: dict[str, Any] | None = None
        self.session: list[str] = []
        self.summaries: dict[str, ScanSummary] = {}
        self.at_on: Stats | None = None
        self.stopping: threading.Thread | None = None
        self.pointer: ScanPointer | None = None
        #: The text of the last ``scan_set=`` that searched (``scan_set=next`` searches on).
        self.last_search: str | None = None
        self.d2f: Disk2File | None = None
        self.last_d2f: str | None = None
        self.dirty = False
        self._drained = threading.Event()
        self._drained.set()
        # Commands and the end of a scan (record=off's second half) change the state one at a time.
        self._lock = threading.RLock()

    # -- the recorder -------------------------------------------------------------------------
    def start(self) -> None:
        """Starts receiving (when a port is known)."""
        self.rebuild()

    def close(self) -> ScanSummary | None:
        """Ends any scan cleanly (its tail on disk), stops a copy, stops receiving."""
        last = None
        stopping = self.stopping
        if stopping is not None:
            stopping.join()
        elif self.recorder is not None and self.recorder.scan is not None:
            last = self.recorder.stop_scan()
            self.summaries[last.name] = last
        if self.d2f is not None:
            self.d2f.abort()
        if self.recorder is not None:
            self.recorder.stop()
            self.recorder = None
        return last

    @property
    def recording(self) -> bool:
        """A scan is open or its tail is still being written."""
        return self.recorder is not None and self.recorder.scan is not None

    def _options(self) -> dict[str, Any]:
        o = dict(self.base)
        o["port"] = ",".join(f"{p}@{h}" if h else str(p) for h, p in self.ports)
        o["disks"] = list(self.disks)
        o["format"] = self.format
        if self.split:
            o["split"] = self.split
        if self.workbuf is not None:
            o["chunk_size"] = self.workbuf
        o["rcvbuf"] = self.sockbuf
        if self.protocol_set:
            o["offset"] = 8 if self.receive_protocol in ("udps", "udpsnor") else 0
            # Sequence numbers count one sender's packets: not over several senders (udpsnor).
            o["psn"] = self.receive_protocol == "udps"
        if self.mode is not None:
            o["frame_size"] = self.mode.frame_size
            if self.mode.frames_per_second:
                o["fps"] = self.mode.frames_per_second
        return o

    def rebuild(self) -> None:
        """Receives with the configuration as it is now (stops the old recorder first), and
        sends to the mem2net destination again. While a scan records, waits until it is on
        disk (`dirty`)."""
        if self.recording:
            self.dirty = True
            return
        self.dirty = False
        if not self.ports:
            if self.recorder is not None:
                self.recorder.stop()
                self.recorder = None
            self._running_options = None
            forwarding.reattach(self)
            return
        options = self._options()
        new = Recorder(**options)  # checked here, before the running one is touched
        if self.recorder is not None:
            self.recorder.stop()
            self.recorder = None
        # Counts since record=on belong to the recorder that counted them.
        self.at_on = None
        try:
            new.start()
        except Exception:
            if self._running_options is not None:
                # Receive as before rather than not at all (a port taken meanwhile, say).
                try:
                    old = Recorder(**self._running_options)
                    old.start()
                    self.recorder = old
                except Exception as again:
                    self.note(f"cannot receive with the previous configuration either: {again}")
            forwarding.reattach(self)
            raise
        self.recorder = new
        forwarding.reattach(self)
        self._running_options = options
        self.note(f"receiving on {new.listening} ({self.format} scans on {len(self.disks)} disk(s))")
        if new.status_address is not None:
            h, p = new.status_address
            self.note(f"status on http://{h}:{p}/status and /metrics")
        # What the recorder found on start (a disk that is no mount point, a scan a crash left
        # unclosed: also in /status, `unclosed_scans`), once per session however often it is
        # rebuilt.
        for n in new.notes:
            if n not in self._noted:
                self._noted.add(n)
                self.note(n)

    def reconfigure(self, **changes: Any) -> None:
        """Sets attributes and receives with them; on failure puts them back (and receives as
        before) and raises the failure as a Problem."""
        old = {k: getattr(self, k) for k in changes}
        for k, v in changes.items():
            setattr(self, k, v)
        try:
            self.rebuild()
        except Exception as exc:
            for k, v in old.items():
                setattr(self, k, v)
            # A configuration the engine refused never touched the recorder; one that failed
            # to start has had the previous one started again by rebuild.
            if isinstance(exc, _core.ArgumentError):
                raise Problem(Code.BAD_PARAMETER, str(exc)) from None
            raise Problem(Code.ERROR, f"cannot receive so - {exc}") from None

    def idle_only(self, c: Command) -> None:
        """Refuses a command that would disturb a scan being recorded, written or copied."""
        if self.recording:
            raise Problem(Code.CONFLICT, "not whilst record is in progress")
        if self.stopping is not None:
            raise Problem(Code.BUSY, "the last scan's tail is still being written - try again")
        if self.d2f is not None and self.d2f.active and c.keyword != "disk2file":
            raise Problem(Code.CONFLICT, "not whilst disk2file is in progress")

    # -- the end of a scan ---------------------------------------------------------------------
    def end_scan(self) -> None:
        """record=off: the scan's tail goes to disk in a thread of its own (``stopping``), and
        commands that read the scan wait for it (``await_drain``)."""
        self._drained.clear()
        self.stopping = threading.Thread(target=self._finish_scan, name="vsi-record-off", daemon=True)
        self.stopping.start()

    def _finish_scan(self) -> None:
        """record=off's second half: the scan's tail goes to disk, then the scan is set (as
        jive5ab's implicit scan_set) and any configuration changed meanwhile takes effect."""
        assert self.recorder is not None
        try:
            self._collected(self.recorder.stop_scan())
        except Exception as exc:  # told in the log; the station goes on
            self.note(f"record=off: the scan could not be closed: {exc}")
        finally:
            self._drained.set()
            self.stopping = None
        with self._lock:
            if self.dirty:
                try:
                    self.rebuild()
                except Exception as exc:
                    self.note(f"cannot receive with the new configuration: {exc}")

    def _collected(self, s: ScanSummary) -> None:
        """A scan is on disk: its summary kept, and told in the log."""
        self.summaries[s.name] = s
        on_disk = s.bytes_written // s.frame_size if s.frame_size else s.frames
        self.note(
            f"scan {s.name}: {on_disk} frames, {s.bytes_written} bytes on {sum(1 for d in s.disks if d.bytes)} disk(s), "
            f"lost {s.frames_lost}, {'ok' if s.ok else 'NOT OK - ' + str(s.error or 'frames lost')}"
        )
        for n in s.notes:
            if n.startswith(SUMMARY_NOWHERE):
                self.note(f"scan {s.name}: {n}")

    def _collect_ended(self) -> None:
        """A scan that ended by itself (every disk failed or full) is collected as record=off
        would have: its summary, the log line, the scan set."""
        if self.recorder is None or self.stopping is not None or not self.session:
            return
        name = self.session[-1]
        if name in self.summaries or self.recorder.scan is not None:
            return
        s = self.recorder.wait_scan(0)
        if s is not None and s.name == name:
            self._collected(s)
            self.pointer = ScanPointer(name, 0, 0)

    def poll(self) -> None:
        """Between commands (serve calls it every half second): a scan that ended by itself
        is collected and logged when it ends, not at the next command."""
        with self._lock:
            self._collect_ended()

    def await_drain(self) -> None:
        """Commands that read the scan just stopped wait (bounded) until its tail is on disk."""
        if self.stopping is not None and not self._drained.wait(DRAIN_WAIT_S):
            raise Problem(Code.BUSY, "the last scan's tail is still being written - try again")

    # -- dispatch ------------------------------------------------------------------------------
    def handle(self, line: str) -> list[Reply]:
        """One reply per command of ``line``."""
        return [self.answer(text) for text in split_line(line)]

    def answer(self, text: str) -> Reply:
        try:
            c = parse(text)
        except SyntaxProblem as exc:
            return Reply(exc.keyword, exc.query, Code.SYNTAX, (one_field(exc.why),))
        handler = HANDLERS.get(c.keyword)
        if handler is None:
            return Reply(c.keyword, c.query, Code.NO_SUCH_KEYWORD, ("ENOSYS - not implemented",))
        try:
            with self._lock:
                self._collect_ended()
                return handler(self, c)
        except Problem as exc:
            return Reply(c.keyword, c.query, exc.code, (*exc.fields, one_field(exc.why)))
        except Exception as exc:  # a command's failure is its reply; the recording goes on
            return Reply(c.keyword, c.query, Code.ERROR, (one_field(f"{type(exc).__name__} - {exc}"),))


def _ports_of(text: str) -> list[tuple[str | None, int]]:
    """`46227`, `46227,46228` or vdifrec's `46227@10.0.1.1` (from --port)."""
    out: list[tuple[str | None, int]] = []
    for item in text.split(","):
        port, _, host = item.strip().partition("@")
        out.append((host or None, int(port)))
    return out


def _bytes(name: str, value: object) -> int:
    """A size option as the command line gives it (bytes, or text such as "256MiB")."""
    return value if isinstance(value, int) else _core.parse_size_arg(name, str(value))
