"""What each VSI-S command does to a station recorder: the state a FlexBuff running jive5ab keeps
(mode, network protocol, ports, disks, data streams, the session's scans, the scan set for
``scan_check``/``disk2file``), over one vdifrec ``Recorder`` that receives and counts all the
time and writes only between ``record=on`` and ``record=off``.

Replies follow jive5ab 3.1 in FlexBuff mode, field for field (REFERENCE.md "VSI-S"). Where they
differ it is said in docs/reference/formats/vsi.md. A failing command changes nothing: a
new configuration is checked by the engine before the running recorder is touched, and commands
that would disturb a scan in progress are refused with code 6.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import fnmatch
import json
import os
import re
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import _core
from ..recorder import Recorder
from ..reports import ScanSummary, Stats
from ..scans import expand_disks
from .protocol import Code, Command, Reply, SyntaxProblem, parse, split_line

#: jive5ab's port for data when `net_port=0` resets it.
DEFAULT_DATA_PORT = 2630
#: Chunk (vbs) sizes jive5ab shows in `net_protocol?` before any is set.
DEFAULT_WORKBUF = 256 << 20
DEFAULT_NBUF = 4
DEFAULT_MTU = 1500
#: Seconds scan_check?, scan_set= and disk2file= wait for a stopped scan's tail to reach disk.
DRAIN_WAIT_S = 10.0


class Problem(Exception):
    """A command that cannot be done: its VSI-S code, what to tell the operator, and any
    fields jive5ab puts before the message."""

    def __init__(self, code: Code, why: str, *fields: object) -> None:
        super().__init__(why)
        self.code = code
        self.why = why
        self.fields = tuple(str(f) for f in fields)


def vsi_size(name: str, text: str) -> int:
    """A size as jive5ab reads it: a number (decimal, or 0x hex) with an optional binary suffix,
    k (1024), M (1024**2) or G (1024**3)."""
    m = re.fullmatch(r"(0x[0-9a-fA-F]+|[0-9]+)([kMG]?)", text.strip())
    if not m:
        raise Problem(Code.BAD_PARAMETER, f"{name} '{text}' is not a size - give bytes, or with k, M or G (binary, 32M = 33554432)")
    return int(m.group(1), 0) << {"": 0, "k": 10, "M": 20, "G": 30}[m.group(2)]


@dataclasses.dataclass(frozen=True)
class Mode:
    """A VDIF mode as jive5ab writes it: ``VDIF_<payload bytes>-<Mbps>-<channels>-<bits>``
    (``VDIFL`` legacy 16-byte headers, ``VDIFC`` complex samples)."""

    text: str
    payload: int
    mbps: float
    nchan: int
    bits: int
    legacy: bool
    complex: bool

    PATTERN = re.compile(r"^(VDIF[LC]{0,2})_([0-9]+)-([0-9]+(?:\.[0-9]+)?)-([0-9]+)-([0-9]+)(?:/[0-9]+)?$", re.I)

    @classmethod
    def parse(cls, text: str) -> Mode:
        m = cls.PATTERN.match(text)
        if not m:
            if re.match(r"^VDIF[LC]{0,2}-", text, re.I):
                raise Problem(Code.ERROR, f"Mode '{text}' lacks the VDIF payload size - write VDIF_<payload bytes>-<Mbps>-<channels>-<bits>, e.g. VDIF_8192-8192-4-2")
            raise Problem(Code.ERROR, f"Mode '{text}' is not a valid mode - vdifrec records VDIF_<payload bytes>-<Mbps>-<channels>-<bits>, e.g. VDIF_8192-8192-4-2")
        kind = m.group(1).upper()
        payload, mbps, nchan, bits = int(m.group(2)), float(m.group(3)), int(m.group(4)), int(m.group(5))
        if payload <= 0 or payload % 8 or mbps <= 0 or nchan <= 0 or nchan & (nchan - 1) or not 1 <= bits <= 32:
            raise Problem(
                Code.BAD_PARAMETER,
                f"Mode '{text}': the payload must be a positive multiple of 8 bytes, the rate above 0, "
                "the channels a power of 2 and the bits 1 to 32",
            )
        return cls(text, payload, mbps, nchan, bits, "L" in kind[4:], "C" in kind[4:])

    @property
    def frame_size(self) -> int:
        return self.payload + (16 if self.legacy else 32)

    @property
    def tracks(self) -> int:
        return self.nchan * self.bits * (2 if self.complex else 1)

    @property
    def track_rate(self) -> float:
        """Bits per second per track."""
        return self.mbps * 1e6 / self.tracks

    @property
    def frames_per_second(self) -> int | None:
        """Frames per second per thread, when the rate holds a whole number of frames."""
        fps = self.mbps * 1e6 / 8 / self.payload
        return int(fps) if fps == int(fps) else None

    @property
    def format_name(self) -> str:
        extra = [w for w, on in (("legacy", self.legacy), ("complex", self.complex)) if on]
        return "VDIF" + (f" ({', '.join(extra)})" if extra else "")


def vex_time(t: _dt.datetime) -> str:
    """``2026y334d22h48m47.0000s``, as jive5ab writes times."""
    sec = t.second + t.microsecond / 1e6
    return f"{t.year:04d}y{t.timetuple().tm_yday:03d}d{t.hour:02d}h{t.minute:02d}m{sec:07.4f}s"


def _iso(text: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(text.rstrip("Z")[:26]).replace(tzinfo=_dt.timezone.utc)


def _g(x: float) -> str:
    """A number as C++'s ostream writes a double (6 significant digits), as jive5ab's replies do."""
    return f"{x:g}"


@dataclasses.dataclass
class ScanPointer:
    """The scan `scan_set=` chose and the byte range in it (`scan_check`, `disk2file`)."""

    name: str
    start: int
    end: int


class Disk2File:
    """A scan's bytes (a range of them) copied into one flat file, in a thread of its own."""

    def __init__(self, scan: str, disks: list[str], path: Path, start: int, end: int, mode: str) -> None:
        self.scan, self.disks, self.path = scan, disks, path
        self.start, self.end, self.mode = start, end, mode
        self.done = start
        self.error: str | None = None
        self._stop = threading.Event()
        flags = {"n": os.O_CREAT | os.O_EXCL, "w": os.O_CREAT | os.O_TRUNC, "a": os.O_CREAT | os.O_APPEND, "resume": os.O_CREAT}[mode]
        # Opened here, so that a target that cannot be written is the command's error (code 4).
        self._fd = os.open(path, os.O_WRONLY | flags, 0o644)
        if mode == "resume":
            # Resume: what the file holds already is the start of the range.
            self.done = min(end, start + os.fstat(self._fd).st_size)
            os.lseek(self._fd, 0, os.SEEK_END)
        self._file = os.fdopen(self._fd, "wb")
        self.thread = threading.Thread(target=self._run, name="vsi-disk2file", daemon=True)
        self.thread.start()

    @property
    def active(self) -> bool:
        return self.thread.is_alive()

    def abort(self) -> None:
        self._stop.set()
        self.thread.join(timeout=10)

    def _run(self) -> None:
        from ..reader import open as open_scan

        try:
            # Only the frames' bytes are read, never their time: any rate serves.
            with open_scan(self.scan, disks=self.disks, sample_rate=1.0) as fh:
                parts = fh.frames
                parts = parts if isinstance(parts, list) else [parts]
                at = 0
                for p in parts:
                    flat = p.reshape(-1)
                    lo, hi = max(self.done - at, 0), min(self.end - at, flat.size)
                    k = lo
                    while k < hi and not self._stop.is_set():
                        step = min(hi - k, 16 << 20)
                        self._file.write(flat[k : k + step].data)
                        k += step
                        self.done = at + k
                    at += flat.size
                    if at >= self.end or self._stop.is_set():
                        break
        except Exception as exc:  # the copy's failure is told by disk2file?, never raised
            self.error = str(exc)
        finally:
            self._file.close()


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
        self.ports: list[tuple[str | None, int]] = self._ports_of(str(port)) if port is not None else []
        self.base.pop("ports", None)
        self.all_disks = expand_disks(disks)
        self.disks = list(self.all_disks)
        self.format: str = self.base.pop("format", None) or "vbs"
        self.split: str | None = self.base.pop("split", None)
        self.datastreams: dict[str, list[str]] = {}
        self.mode: Mode | None = None
        # What the command line gave (offset, psn) holds until net_protocol= says otherwise.
        self.protocol = "udps" if self.base.get("offset", 0) == 8 else "pudp"
        self.protocol_set = False
        self.sockbuf = _bytes("rcvbuf", self.base.pop("rcvbuf", None) or _core.defaults()["recorder"]["rcvbuf"])
        chunk = self.base.pop("chunk_size", None)
        self.workbuf: int | None = _bytes("chunk_size", chunk) if chunk is not None else None
        self.nbuf = DEFAULT_NBUF
        self.mtu = DEFAULT_MTU
        self.gather_dir = Path(gather_dir).resolve()
        self.note = note
        self.recorder: Recorder | None = None
        self._running_options: dict[str, Any] | None = None
        self.session: list[str] = []
        self.summaries: dict[str, ScanSummary] = {}
        self.at_on: Stats | None = None
        self.stopping: threading.Thread | None = None
        self.pointer: ScanPointer | None = None
        self.d2f: Disk2File | None = None
        self.last_d2f: str | None = None
        self.dirty = False
        self._drained = threading.Event()
        self._drained.set()
        # Commands and the end of a scan (record=off's second half) change the state one at a time.
        self._lock = threading.RLock()
        self._handlers: dict[str, Callable[[Command], Reply]] = {
            "version": self._version,
            "dts_id": self._dts_id,
            "os_rev": self._os_rev,
            "status": self._status,
            "mode": self._mode,
            "net_protocol": self._net_protocol,
            "mtu": self._mtu,
            "net_port": self._net_port,
            "set_disks": self._set_disks,
            "record": self._record,
            "datastream": self._datastream,
            "scan_set": self._scan_set,
            "scan_check": self._scan_check,
            "evlbi": self._evlbi,
            "rtime": self._rtime,
            "disk2file": self._disk2file,
            "reset": self._reset,
            "stats": self._stats,
        }

    # -- the recorder -------------------------------------------------------------------------
    def start(self) -> None:
        """Starts receiving (when a port is known)."""
        self._rebuild()

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
            o["offset"] = 8 if self.protocol in ("udps", "udpsnor") else 0
            # Sequence numbers count one sender's packets: not over several senders (udpsnor).
            o["psn"] = self.protocol == "udps"
        if self.mode is not None:
            o["frame_size"] = self.mode.frame_size
            if self.mode.frames_per_second:
                o["fps"] = self.mode.frames_per_second
        return o

    def _rebuild(self) -> None:
        """Receives with the configuration as it is now (stops the old recorder first). While a
        scan records, waits until it is on disk (`dirty`)."""
        if self.recording:
            self.dirty = True
            return
        self.dirty = False
        if not self.ports:
            if self.recorder is not None:
                self.recorder.stop()
                self.recorder = None
            self._running_options = None
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
            raise
        self.recorder = new
        self._running_options = options
        self.note(f"receiving on {new.listening} ({self.format} scans on {len(self.disks)} disk(s))")

    def _reconfigure(self, **changes: Any) -> None:
        """Sets attributes and receives with them; on failure puts them back (and receives as
        before) and raises the failure as a Problem."""
        old = {k: getattr(self, k) for k in changes}
        for k, v in changes.items():
            setattr(self, k, v)
        try:
            self._rebuild()
        except Exception as exc:
            for k, v in old.items():
                setattr(self, k, v)
            # A configuration the engine refused never touched the recorder; one that failed
            # to start has had the previous one started again by _rebuild.
            if isinstance(exc, _core.ArgumentError):
                raise Problem(Code.BAD_PARAMETER, str(exc)) from None
            raise Problem(Code.ERROR, f"cannot receive so - {exc}") from None

    def _idle_only(self, c: Command) -> None:
        if self.recording:
            raise Problem(Code.CONFLICT, "not whilst record is in progress")
        if self.stopping is not None:
            raise Problem(Code.BUSY, "the last scan's tail is still being written - try again")
        if self.d2f is not None and self.d2f.active and c.keyword != "disk2file":
            raise Problem(Code.CONFLICT, "not whilst disk2file is in progress")

    # -- dispatch ------------------------------------------------------------------------------
    def handle(self, line: str) -> list[Reply]:
        """One reply per command of ``line``."""
        return [self.answer(text) for text in split_line(line)]

    def answer(self, text: str) -> Reply:
        try:
            c = parse(text)
        except SyntaxProblem as exc:
            return Reply(exc.keyword, exc.query, Code.SYNTAX, (_one_field(exc.why),))
        handler = self._handlers.get(c.keyword)
        if handler is None:
            return Reply(c.keyword, c.query, Code.NO_SUCH_KEYWORD, ("ENOSYS - not implemented",))
        try:
            with self._lock:
                self._collect_ended()
                return handler(c)
        except Problem as exc:
            return Reply(c.keyword, c.query, exc.code, (*exc.fields, _one_field(exc.why)))
        except Exception as exc:  # a command's failure is its reply; the recording goes on
            return Reply(c.keyword, c.query, Code.ERROR, (_one_field(f"{type(exc).__name__} - {exc}"),))

    @staticmethod
    def _reply(c: Command, *fields: object, code: Code = Code.DONE) -> Reply:
        # A ';' would end the reply early (a path or a kernel's name may hold one).
        return Reply(c.keyword, c.query, code, tuple(str(f).replace(";", ",") for f in fields))

    @staticmethod
    def _query_only(c: Command) -> None:
        if not c.query:
            raise Problem(Code.NOT_NOW, "only available as query")

    # -- identity --------------------------------------------------------------------------------
    def _build_time(self) -> _dt.datetime:
        return _dt.datetime.fromtimestamp(os.path.getmtime(_core.__file__), tz=_dt.timezone.utc)

    def _version(self, c: Command) -> Reply:
        if not c.query:
            raise Problem(Code.NOT_NOW, "query only")
        t = self._build_time()
        return self._reply(c, "vdifrec", _core.__version__, "64bit", "Release", socket.gethostname(), t.strftime("%d-%b-%Y"), t.strftime("%Hh%Mm%Ss"), "nossapi", "")

    def _dts_id(self, c: Command) -> Reply:
        self._query_only(c)
        t = self._build_time().strftime("%d-%b-%Y %Hh%Mm%Ss")
        return self._reply(c, "-", t, 1, socket.gethostname().split(".")[0], 0, 0, "-", "-", "-")

    def _os_rev(self, c: Command) -> Reply:
        self._query_only(c)
        try:
            with open("/proc/version") as fh:
                return self._reply(c, fh.readline().strip())
        except OSError:
            raise Problem(Code.ERROR, "failed to open /proc/version") from None

    def _status(self, c: Command) -> Reply:
        self._query_only(c)
        word = 0x1  # ready
        if self.recording:
            word |= 0x18 | 0x40  # a transfer, and it is a recording
        elif self.d2f is not None and self.d2f.active:
            word |= 0x18 | 0x100 | 0x1000  # a transfer, playback, disk2file
        return self._reply(c, f"0x{word:08x}")

    # -- what is received --------------------------------------------------------------------
    def _mode(self, c: Command) -> Reply:
        if c.query:
            m = self.mode
            if m is None:
                return self._reply(c, "", "<unknown>", 0, "0.000")
            return self._reply(c, m.text, m.format_name, m.tracks, f"{m.track_rate:.3f}", m.payload)
        self._idle_only(c)
        text = c.param(0)
        if not text:
            raise Problem(Code.ERROR, "Not a mode - give VDIF_<payload bytes>-<Mbps>-<channels>-<bits>, e.g. VDIF_8192-8192-4-2")
        self._reconfigure(mode=Mode.parse(text))
        return self._reply(c)

    def _net_protocol(self, c: Command) -> Reply:
        if c.query:
            return self._reply(c, self.protocol, self.sockbuf, self.workbuf or DEFAULT_WORKBUF, self.nbuf)
        self._idle_only(c)
        proto = c.param(0, self.protocol)
        shown = {"udp": "udps", "udps": "udps", "pudp": "pudp", "udpsnor": "udpsnor"}
        if proto not in shown:
            raise Problem(
                Code.BAD_PARAMETER,
                f"the protocol '{proto}' is not one vdifrec receives: udps (or udp: an 8-byte sequence number before each frame), pudp (plain frames) or udpsnor (several senders, each with sequence numbers)",
            )
        sockbuf = vsi_size("socket buffer", c.param(1)) if c.param(1) else self.sockbuf
        if not 0 < sockbuf <= 2**31 - 1:
            raise Problem(Code.BAD_PARAMETER, f"socket buffer {sockbuf} out of range - give 1 to 2G")
        workbuf = vsi_size("work buffer", c.param(2)) if c.param(2) else self.workbuf
        if workbuf is not None and not 0 < workbuf <= 1 << 30:
            raise Problem(Code.BAD_PARAMETER, f"work buffer {workbuf} out of range - give 1 to 1G (the vbs chunk or mk6 block size)")
        nbuf = self.nbuf
        if c.param(3):
            try:
                nbuf = int(c.param(3), 0)
            except ValueError:
                raise Problem(Code.BAD_PARAMETER, f"number of buffers '{c.param(3)}' is not a number") from None
            if not 0 < nbuf <= 1024:
                raise Problem(Code.BAD_PARAMETER, f"number of buffers {nbuf} out of range - give 1 to 1024")
        self._reconfigure(protocol=shown[proto], protocol_set=True, sockbuf=sockbuf, workbuf=workbuf, nbuf=nbuf)
        return self._reply(c)

    def _mtu(self, c: Command) -> Reply:
        if c.query:
            return self._reply(c, self.mtu)
        self._idle_only(c)
        if not c.param(0):
            raise Problem(Code.BAD_PARAMETER, "Missing argument to command - give the MTU, 64 to 9000")
        try:
            mtu = int(c.param(0), 0)
        except ValueError:
            mtu = -1
        if not 64 <= mtu <= 9000:
            raise Problem(Code.BAD_PARAMETER, f"invalid value for the MTU '{c.param(0)}' - give 64 to 9000")
        self.mtu = mtu
        return self._reply(c)

    @staticmethod
    def _ports_of(text: str) -> list[tuple[str | None, int]]:
        """`46227`, `46227,46228` or vdifrec's `46227@10.0.1.1` (from --port)."""
        out: list[tuple[str | None, int]] = []
        for item in text.split(","):
            port, _, host = item.strip().partition("@")
            out.append((host or None, int(port)))
        return out

    def _net_port(self, c: Command) -> Reply:
        if c.query:
            if not self.ports:
                return self._reply(c, "none")
            return self._reply(c, *(f"{h}@{p}" if h else str(p) for h, p in self.ports))
        self._idle_only(c)
        items = [p for p in c.params if p]
        if not items:
            raise Problem(Code.BAD_PARAMETER, "Missing argument to command - give [<host>@]<port>, several separated by colons")
        ports: list[tuple[str | None, int]] = []
        for item in items:
            host, at, port_s = item.rpartition("@")
            if at and not host:
                raise Problem(Code.BAD_PARAMETER, f"'{item}' - write <host>@<port> or <port>")
            try:
                port = int(port_s, 0)
            except ValueError:
                port = -1
            if not 0 <= port <= 65535:
                raise Problem(Code.BAD_PARAMETER, f"port '{port_s}' not a number/out of range (range: 0-65535)")
            ports.append((host or None, port or DEFAULT_DATA_PORT))
        if len(set(p for _, p in ports)) != len(ports):
            raise Problem(Code.BAD_PARAMETER, "a port is given twice - each stream needs a port of its own")
        self._reconfigure(ports=ports)
        return self._reply(c)

    def _set_disks(self, c: Command) -> Reply:
        if c.query:
            return self._reply(c, len(self.disks), *self.disks)
        self._idle_only(c)
        patterns = [p for p in c.params if p]
        if not patterns:
            raise Problem(Code.BAD_PARAMETER, "give the disks - paths or globs among " + ", ".join(self.all_disks))
        chosen = sorted(
            {d for d in self.all_disks for p in patterns if fnmatch.fnmatchcase(d.rstrip("/"), p.rstrip("/")) or _same_dir(d, p)}
        )
        if not chosen:
            raise Problem(
                Code.BAD_PARAMETER,
                f"no mountpoints matched your selection criteria (vdifrec serves {', '.join(self.all_disks)}, its --disk)",
                0,
            )
        self._reconfigure(disks=chosen)
        return self._reply(c, len(chosen))

    def _datastream(self, c: Command) -> Reply:
        if c.query:
            if c.param(0):
                if c.param(0) not in self.datastreams:
                    raise Problem(Code.BAD_PARAMETER, f"The stream '{c.param(0)}' is not defined")
                return self._reply(c, c.param(0), *self.datastreams[c.param(0)])
            return self._reply(c, len(self.datastreams), *self.datastreams)
        self._idle_only(c)
        sub = c.param(0)
        if sub in ("clear", "reset"):
            self._reconfigure(datastreams={}, split=None)
            return self._reply(c)
        if sub == "remove":
            if c.param(1) not in self.datastreams:
                raise Problem(Code.ERROR, f"The data stream '{c.param(1)}' was not defined so cannot remove it")
            self._reconfigure(datastreams={}, split=None)
            return self._reply(c)
        if sub != "add":
            raise Problem(Code.BAD_PARAMETER, f"subcommand '{sub}' - choose add, remove or clear")
        name, specs = c.param(1), [s for s in c.params[2:] if s]
        if not name:
            raise Problem(Code.BAD_PARAMETER, "Missing data stream name")
        if not specs:
            raise Problem(Code.BAD_PARAMETER, "Missing data stream match specification(s)")
        if name in self.datastreams:
            raise Problem(Code.ERROR, f"The data stream '{name}' already has a definition")
        split = {"{thread}": "thread", "{station}": "station", "{sender}": "sender"}.get(name)
        if split is None or specs != ["*"] or self.datastreams:
            raise Problem(
                Code.BAD_PARAMETER,
                f"datastream '{name}' matching {' '.join(specs)} - vdifrec splits a scan by thread, station or sender, "
                "so add {thread}, {station} or {sender} matching * (scans <scan>_ds<thread number, station code or sender index>)",
            )
        self._reconfigure(datastreams={name: specs}, split=split)
        return self._reply(c)

    # -- recording ---------------------------------------------------------------------------------
    def _record(self, c: Command) -> Reply:
        if c.query:
            if c.param(0) == "mk6":
                return self._reply(c, int(self.format == "mk6"))
            if self.recording and self.session:
                assert self.recorder is not None and self.at_on is not None
                got = self.recorder.stats().bytes_received - self.at_on.bytes_received
                return self._reply(c, "on", len(self.session), self.session[-1], got)
            return self._reply(c, "off")
        sub = c.param(0)
        if sub == "on":
            return self._record_on(c)
        if sub == "off":
            if self.recorder is None or self.recorder.scan is None or self.stopping is not None:
                raise Problem(Code.CONFLICT, "Not doing record")
            # The scan is set at once, as jive5ab does: scan_check? right after record=off
            # waits for the tail (`_drained`) and then checks it.
            self.pointer = ScanPointer(self.session[-1], 0, 0) if self.session else None
            self._drained.clear()
            self.stopping = threading.Thread(target=self._finish_scan, name="vsi-record-off", daemon=True)
            self.stopping.start()
            return self._reply(c, code=Code.STARTED)
        if sub == "mk6":
            try:
                on = int(c.param(1), 0) != 0
            except ValueError:
                raise Problem(Code.BAD_PARAMETER, f"mk6 '{c.param(1)}' - give 1 (Mark6 scatter-gather) or 0 (FlexBuff vbs)") from None
            fmt = "mk6" if on else "vbs"
            if fmt != self.format:
                if self.recording:
                    self.format, self.dirty = fmt, True  # from the next scan on, as jive5ab
                else:
                    self._reconfigure(format=fmt)
            return self._reply(c)
        raise Problem(Code.NOT_NOW, f"{sub} does not apply to record - give on (then the scan name), off or mk6 (then 1 or 0)")

    def _record_on(self, c: Command) -> Reply:
        if self.stopping is not None:
            raise Problem(Code.BUSY, "the last scan's tail is still being written - try again")
        if self.recording:
            raise Problem(Code.CONFLICT, f"Already doing record (scan {self.session[-1] if self.session else '?'})")
        if self.d2f is not None and self.d2f.active:
            raise Problem(Code.CONFLICT, "not whilst disk2file is in progress")
        scan = c.param(1)
        if not scan:
            raise Problem(Code.CONFLICT, "must provide a scan name - record=on, then the scan name (and the experiment and station, optionally)")
        if c.param(2) and c.param(3):
            # As a Mark5 or Mark6 names a scan of an experiment and station.
            scan = f"{c.param(2)}_{c.param(3)}_{scan}"
        if self.recorder is None:
            raise Problem(Code.CONFLICT, "no data port - set one with net_port=<port> (or serve --port)")
        if self.dirty:
            self._rebuild()
        assert self.recorder is not None
        before = self.recorder.stats()
        try:
            name = self.recorder.start_scan(scan)
        except _core.ArgumentError as exc:
            raise Problem(Code.BAD_PARAMETER, str(exc)) from None
        except _core.RecorderError as exc:
            raise Problem(Code.ERROR, str(exc)) from None
        self.at_on = before
        self.session.append(name)
        self.pointer = None
        if name != scan:
            return self._reply(c, name)
        return self._reply(c)

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
                    self._rebuild()
                except Exception as exc:
                    self.note(f"cannot receive with the new configuration: {exc}")

    def _collected(self, s: ScanSummary) -> None:
        """A scan is on disk: its summary kept, and told in the log."""
        self.summaries[s.name] = s
        self.note(
            f"scan {s.name}: {s.frames} frames, {s.bytes_written} bytes on {sum(1 for d in s.disks if d.bytes)} disk(s), "
            f"lost {s.frames_lost}, {'ok' if s.ok else 'NOT OK - ' + str(s.error or 'frames lost')}"
        )

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

    def _await_drain(self) -> None:
        """Commands that read the scan just stopped wait (bounded) until its tail is on disk."""
        if self.stopping is not None and not self._drained.wait(DRAIN_WAIT_S):
            raise Problem(Code.BUSY, "the last scan's tail is still being written - try again")

    def _session_index(self, name: str) -> int:
        return self.session.index(name) if name in self.session else -1

    def _scan_on_disk(self, name: str) -> dict[str, Any]:
        """Scan ``name`` as ``vdifrec scans`` lists it, looked up by its name alone (a full
        FlexBuff holds thousands of scans; listing them all would hold every client up)."""
        try:
            found: dict[str, Any] = json.loads(_core.scan_info(name, self.all_disks))
        except FileNotFoundError:
            raise Problem(Code.ERROR, f"'{name}' does not exist in Mk6/VBS format") from None
        except _core.ArgumentError:
            raise Problem(Code.ERROR, f"'{name}' exists in both Mk6/VBS formats") from None
        except (_core.FormatError, _core.GapError, OSError) as exc:
            raise Problem(Code.ERROR, f"'{name}' cannot be read - {exc}") from None
        return found

    def _scan_set(self, c: Command) -> Reply:
        if c.query:
            p = self.pointer
            if p is None:
                return self._reply(c, -1, "", 0, 0)
            return self._reply(c, self._session_index(p.name), p.name, p.start, p.end)
        self._await_drain()
        self._idle_only(c)
        which = c.param(0)
        if not which:
            if not self.session:
                raise Problem(Code.CONFLICT, "there are no scans recorded in this session")
            name = self.session[-1]
        elif which.isdigit() and 1 <= int(which) <= len(self.session):
            name = self.session[int(which) - 1]
        elif which in ("inc", "dec"):
            if not self.session:
                raise Problem(Code.CONFLICT, f"there is no recorded scan to {'increment' if which == 'inc' else 'decrement'} from")
            k = self._session_index(self.pointer.name) if self.pointer else -1
            name = self.session[(k + (1 if which == "inc" else -1)) % len(self.session)]
        else:
            hits = [s for s in self.session if which.lower() in s.lower()]
            name = hits[0] if hits else which
        length = int(self._scan_on_disk(name)["bytes"])
        start = self._offset(c.param(1), 0, length, length, "start")
        end = self._offset(c.param(2), start, length, length, "stop") if c.param(2) else length
        if not 0 <= start <= end <= length:
            raise Problem(Code.BAD_PARAMETER, "scan pointer offset(s) are out of bound")
        self.pointer = ScanPointer(name, start, end)
        return self._reply(c)

    @staticmethod
    def _offset(text: str, base: int, length: int, default: int, what: str) -> int:
        """A byte offset of scan_set: `s` (start), `c` (middle), `e` (end less 1 MB), `+N`
        (after ``base``) or `-N` (before the end); a plain number is refused, as by jive5ab."""
        if not text:
            return default if what == "stop" else 0
        fixed = {"s": 0, "c": length // 2, "e": max(length - 1_000_000, 0), "s+": 65536}
        if text in fixed:
            return fixed[text]
        if text[0] in "+-" and text[1:].isdigit():
            n = int(text[1:])
            return base + n if text[0] == "+" else length - n
        if text.isdigit():
            raise Problem(Code.BAD_PARAMETER, "only relative byte numbers allowed in this command - +N from the start, -N from the end")
        raise Problem(Code.BAD_PARAMETER, f"{what} '{text}' - give s, c, e, +<bytes> or -<bytes>")

    def _scan_check(self, c: Command) -> Reply:
        self._query_only(c)
        self._await_drain()
        if self.pointer is None:
            raise Problem(Code.BAD_PARAMETER, "no scan name given - record a scan or choose one with scan_set=<scan>")
        name = self.pointer.name
        found = self._scan_on_disk(name)
        if found.get("error"):
            raise Problem(Code.ERROR, f"'{name}' cannot be read - {found['error']}")
        fs = int(found["frame_size"])
        first, last = found.get("first"), found.get("last")
        if not fs or not first or not last:
            return self._reply(c, "?", name, "?")
        summary = self.summaries.get(name)
        # Frames per second per thread: as the recording learned it, or from the mode.
        fps = (summary.seconds[0]["frames_per_second"] if summary and summary.seconds else 0) or (self.mode.frames_per_second if self.mode else 0)
        threads = len(summary.threads) if summary and summary.threads else 1
        t0, t1 = _iso(first["time"]), _iso(last["time"])
        tracks = (self.mode.tracks if self.mode else 0) * threads
        fields: list[object] = ["?", name, "VDIF", tracks or "?"]
        frames = int(found["bytes"]) // fs
        if fps:
            t0 = t0 + _dt.timedelta(seconds=int(first["frame"]) / fps) if t0.microsecond == 0 else t0
            duration = frames / (fps * threads)
            payload_bits = frames * (self.mode.payload if self.mode else fs - 32) * 8
            rate = f"{_g(payload_bits / duration / tracks / 1e6)}Mbps" if tracks and duration > 0 else "?"
            fields += [vex_time(t0), f"{_g(duration)}s", rate]
        else:
            fields += [f"{t0:%Y}y{t0.timetuple().tm_yday:03d}d{t0:%Hh%Mm%S}.***s", f"{int((t1 - t0).total_seconds())}.****s", "?"]
        fields.append(summary.frames_lost * fs if summary else "?")
        fields.append(fs)
        return self._reply(c, *fields)

    def _evlbi(self, c: Command) -> Reply:
        if self.recorder is None:
            received = lost = ooo = 0
        else:
            now = self.recorder.stats()
            base = self.at_on
            received = now.frames_received - (base.frames_received if base else 0)
            lost = now.frames_lost - (base.frames_lost if base else 0)
            ooo = now.frames_out_of_order - (base.frames_out_of_order if base else 0)
        whole = received + lost

        def pct(n: int) -> str:
            return f"({100.0 * n / whole if whole else 0.0:5.2f}%)"

        return self._reply(c, "total", received, "loss", f"{lost} {pct(lost)}", "out-of-order", f"{ooo} {pct(ooo)}", "extent", "0seqnr/pkt")

    def _rtime(self, c: Command) -> Reply:
        self._query_only(c)
        seen: set[int] = set()
        size = free = 0
        for d in self.disks:
            st = os.statvfs(d)
            if st.f_fsid in seen:
                continue  # directories on one file system share its space
            seen.add(st.f_fsid)
            size += st.f_blocks * st.f_frsize
            free += st.f_bavail * st.f_frsize
        pct = f"{100.0 * free / size if size else 0.0:g}%"
        m = self.mode
        if m is None:
            return self._reply(c, "<unkown> (no mode set yet)", f"{_g(free / 1e9)}GB", pct, "<unknown>", 0, 0, "<unknown> Mbps")
        total = m.mbps * 1e6 * m.frame_size / m.payload
        return self._reply(c, f"{_g(free / (total / 8))}s", f"{_g(free / 1e9)}GB", pct, m.format_name, m.tracks, "0MHz", f"{_g(total / 1e6)}Mbps")

    def _disk2file(self, c: Command) -> Reply:
        if c.query:
            d = self.d2f
            if d is not None and d.active:
                return self._reply(c, "active", d.path, d.start, d.done, d.end, d.mode)
            if d is not None and d.error:
                return self._reply(c, "inactive", d.path, _one_field(f"failed - {d.error}"))
            return self._reply(c, "inactive", *([self.last_d2f] if self.last_d2f else []))
        self._await_drain()
        self._idle_only(c)
        if self.d2f is not None and self.d2f.active:
            raise Problem(Code.CONFLICT, "not whilst disk2file is in progress")
        if self.pointer is None:
            raise Problem(Code.CONFLICT, "no scan was set using scan_set= (or recorded)")
        p = self.pointer
        length = int(self._scan_on_disk(p.name)["bytes"])
        target = self._target(c.param(0) or f"{p.name}.vdif")
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
            self.d2f = Disk2File(p.name, self.all_disks, target, start, end, mode)
        except OSError as exc:
            raise Problem(Code.ERROR, f"cannot open {target} - {exc.strerror or exc}") from None
        self.last_d2f = str(target)
        return self._reply(c, code=Code.STARTED)

    def _target(self, text: str) -> Path:
        """A disk2file target: relative to the gather directory, and never outside it."""
        path = (self.gather_dir / text).resolve()
        if path != self.gather_dir and self.gather_dir not in path.parents:
            raise Problem(Code.BAD_PARAMETER, f"{text} is outside the gather directory {self.gather_dir} (serve --gather-dir)")
        if not path.parent.is_dir():
            raise Problem(Code.BAD_PARAMETER, f"{path.parent} is not a directory")
        return path

    def _reset(self, c: Command) -> Reply:
        if c.query:
            raise Problem(Code.NOT_NOW, "only implemented as command")
        if c.param(0) != "abort":
            raise Problem(Code.BAD_PARAMETER, f"reset '{c.param(0)}' - vdifrec takes reset=abort (stops disk2file)")
        if self.d2f is not None and self.d2f.active:
            self.d2f.abort()
        return self._reply(c)

    def _stats(self, c: Command) -> Reply:
        self._query_only(c)
        if self.recorder is None:
            return self._reply(c, "state=not receiving")
        s = self.recorder.stats().to_dict()
        fields = [f"{k}={v}" for k, v in s.items() if isinstance(v, (int, float, str)) or v is None]
        return self._reply(c, *(f.replace(":", "_").replace(";", ",") for f in fields))


def _one_field(text: str) -> str:
    """A message as one reply field: VSI-S separates fields by ':' and ends replies at ';'
    (engine messages such as "ring: ..." carry them)."""
    return text.replace(": ", " - ").replace(":", " ").replace(";", ",")


def _bytes(name: str, value: object) -> int:
    """A size option as the command line gives it (bytes, or text such as "256MiB")."""
    return value if isinstance(value, int) else _core.parse_size_arg(name, str(value))


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
