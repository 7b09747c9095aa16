"""Typed records of what a recording saw: per-second rows, live statistics, the summary."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Any, TypeVar

__all__ = [
    "SecondRow",
    "Stats",
    "Summary",
    "ScanSummary",
    "DiskRecord",
    "ThreadSecond",
    "FileRecord",
    "ForwardStats",
    "ForwardSecond",
]

T = TypeVar("T", bound="_Record")


class _Record:
    """Dataclass helpers: build from the engine's dicts (unknown keys ignored), back to dicts."""

    @classmethod
    def from_dict(cls: type[T], d: dict[str, Any]) -> T:
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-ready) of every field."""
        return dataclasses.asdict(self)  # type: ignore[call-overload, no-any-return]


@dataclasses.dataclass(frozen=True)
class ThreadSecond(_Record):
    """One VDIF thread's frames in one second."""

    thread: int
    received: int
    expected: int
    lost: int
    out_of_order: int
    duplicates: int
    invalid: int
    ring_overflow: int
    first_frame: int
    last_frame: int
    first_seen: float = 0.0
    last_seen: float = 0.0
    station: str = ""
    """The thread's station: its two-character code where printable (``Kv``), else the number.
    A thread is a (station, thread id): two stations' thread 0 in one stream are two threads."""


@dataclasses.dataclass(frozen=True)
class ForwardSecond(_Record):
    """What one forwarding destination did since the previous per-second row: input frames
    sent on and skipped (the destination slower than the stream, or down), bytes on the wire,
    reconnections, and the rate over that interval (Gbit/s)."""

    id: int
    destination: str
    frames: int
    skipped: int
    bytes: int
    reconnects: int
    gbps: float


@dataclasses.dataclass(frozen=True)
class ForwardStats(_Record):
    """One forwarding destination's counters (``Recorder.forwards()``, ``Stats.forward``,
    ``Summary.forward``).

    ``frames`` counts input frames sent on (each may become several frames after
    ``channels=``/``payload=``: ``frames_out``); ``skipped`` the frames passed over while the
    destination was slower than the stream or down (never while paused); ``bytes`` what went
    on the wire (``udps`` sequence numbers included); ``reconnects`` the connections made again
    after it went away, ``connect_failures`` the attempts that failed; ``torn`` frames the
    capture overwrote while they were being sent (0 unless the forwarder fell a whole ring
    behind within one batch); ``refused`` frames unlike the stream's first, which the shaping
    could not take. ``state`` is ``connecting``, ``sending``, ``paused``, ``down``,
    ``refused`` (the shaping asked for does not fit the stream: ``error`` says why) or
    ``closed``.
    """

    id: int
    destination: str
    given: str
    scheme: str
    enabled: bool
    state: str
    error: str | None
    frames: int
    skipped: int
    frames_out: int
    bytes: int
    reconnects: int
    connect_failures: int
    torn: int
    refused: int
    gbps: float
    cpu_s: float = 0.0
    """CPU seconds the destination's thread has used."""


@dataclasses.dataclass(frozen=True)
class SecondRow(_Record):
    """One completed VDIF second, all threads, with the recording's totals when it completed.

    ``received``/``expected`` are frames of this second; ``lost`` the expected frames never seen
    (network or sender, kernel drops included); ``ring_overflow`` frames seen but dropped
    because the ring was full; ``malformed`` and ``kernel_drops`` count datagrams since the
    previous row. ``total_frames``, ``bytes_buffered``, ``bytes_written`` are running totals.
    ``first_seen``/``last_seen`` are the arrival times (POSIX seconds) of its first and last
    frame (0 for a file check).
    """

    unix_second: int
    ref_epoch: int
    vdif_seconds: int
    frames_per_second: int
    received: int
    expected: int
    lost: int
    out_of_order: int
    duplicates: int
    invalid: int
    ring_overflow: int
    threads: list[ThreadSecond]
    first_seen: float = 0.0
    last_seen: float = 0.0
    total_frames: int = 0
    bytes_buffered: int = 0
    bytes_written: int = 0
    malformed: int = 0
    kernel_drops: int = 0
    forward: list[ForwardSecond] = dataclasses.field(default_factory=list)
    """What each forwarding destination did since the previous row (empty: none)."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SecondRow:
        d = dict(d)
        d["threads"] = [ThreadSecond.from_dict(t) for t in d.get("threads", [])]
        d["forward"] = [ForwardSecond.from_dict(f) for f in d.get("forward", [])]
        return super().from_dict(d)

    @property
    def time(self) -> _dt.datetime:
        """UTC start of this second (epoch start + seconds, as used for keys)."""
        return _dt.datetime.fromtimestamp(self.unix_second, tz=_dt.timezone.utc)

    @property
    def stations(self) -> list[str]:
        """The stations whose frames this second holds, in order of their threads."""
        return list(dict.fromkeys(t.station for t in self.threads))
    stream: int = 0
    """The stream (its port) this second is of."""


@dataclasses.dataclass(frozen=True)
class FileRecord(_Record):
    """A file written, and its size in bytes."""

    path: str
    bytes: int


@dataclasses.dataclass(frozen=True)
class Stats(_Record):
    """A snapshot of a running recording (``Recorder.stats()``).

    Counts are frames unless named otherwise; byte counts are bytes; ``ring_fill`` is the
    fraction of ring slots holding frames not yet on disk.
    """

    state: str
    elapsed_s: float
    datagrams: int
    frames_received: int
    frames_lost: int
    frames_expected: int
    frames_out_of_order: int
    frames_duplicate: int
    frames_invalid: int
    frames_out_of_window: int
    frames_late: int
    time_jumps: int
    threads: int
    datagrams_malformed: int
    datagrams_malformed_by_kind: dict[str, int]
    kernel_drops: int
    ring_overflows: int
    psn_lost: int
    psn_out_of_order: int
    frame_size: int
    frames_per_second: int
    bytes_received: int
    bytes_buffered: int
    bytes_written: int
    ring_frames: int
    ring_slots: int
    ring_fill: float
    current_file: str | None
    current_file_bytes: int
    files_closed: int
    latest_frame: dict[str, int] | None
    seconds_since_datagram: float | None
    socket_errors: int
    last_socket_error: str | None
    capture_cpu_s: float
    capture_setup_cpu_s: float
    error: str | None
    frames_per_second_known: bool = False
    """Whether ``frames_per_second`` is known for sure (given, or learned from the frame number's
    wrap at a second); until then it is the highest frame number seen plus one, a lower bound."""
    scan_durable_frames: int = 0
    """Frames of the running scan known to be on disk (synced), from its start without a gap:
    what a crash now would leave of it; 0 between scans."""
    scan_durable_bytes: int = 0
    """The bytes of those frames; 0 between scans."""
    scan_durable_up_to: str | None = None
    """The VDIF time of the last of them (ISO UTC); None between scans and while nothing of the
    scan is on disk."""
    streams: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Each stream (``port``, ``frames_received``, ``frames_lost``, ``datagrams``,
    ``datagrams_malformed``, ``kernel_drops``, ``ring_overflows``, ``ring_fill``); the counters
    above are their sums."""
    forward: list[ForwardStats] = dataclasses.field(default_factory=list)
    """Each forwarding destination's counters now (empty: none)."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Stats:
        d = dict(d)
        d["forward"] = [ForwardStats.from_dict(f) for f in d.get("forward", [])]
        return super().from_dict(d)


@dataclasses.dataclass(frozen=True)
class DiskRecord(_Record):
    """One disk's part in a scan: bytes of frames, chunks (vbs; 1 for a file or Mark6 file),
    and why the disk left the set, if it did."""

    path: str
    bytes: int
    chunks: int
    dropped: str | None


#: How a scan's summary note begins when no disk took the summary (the engine's words:
#: `SUMMARY_NOWHERE` in src/record/scan/gate.rs).
SUMMARY_NOWHERE = "the scan's summary could not be written on any disk"


@dataclasses.dataclass(frozen=True)
class ScanSummary(_Record):
    """One scan (``Recorder.stop_scan()``; also in ``Summary.scans`` and written as JSON beside
    the scan on each disk that holds part of it).

    ``frames`` are the frames whose VDIF time lay in ``[start, stop)`` (the whole scan when
    those are open); ``frames_lost`` counts the gaps between them and, with a window, the frames
    missing between ``start`` and each thread's first frame and between its last frame and
    ``stop`` (``frames_lost_at_edges``). ``bytes_buffered == bytes_written + bytes_dropped_disk``
    and the files' sizes add up to ``bytes_written + bytes_headers`` (``invariant_holds``).
    ``ok``: every frame of the window was received and written, and is known to be on disk
    (``durable_bytes == bytes_written``).
    """

    name: str
    requested_name: str
    format: str
    start: str | None
    stop: str | None
    first_frame: str | None
    last_frame: str | None
    frames: int
    frame_size: int
    chunk_size: int
    file_size: int | None
    """A ``file`` scan rotated by size: the most bytes in one file (whole chunks of
    ``chunk_size``); None: one file."""
    chunks: int
    data_streams: list[dict[str, Any]]
    """Each data stream (``name``, ``key``, ``frames``, ``chunks``, ``bytes_written``,
    ``durable_frames``, ``durable_bytes``, ``durable_up_to``): one per thread or station of a
    split scan, else the scan itself."""
    writers: int
    frames_lost: int
    frames_out_of_order: int
    frames_duplicate: int
    frames_invalid: int
    frames_out_of_window: int
    frames_late: int
    time_jumps: int
    frames_lost_at_edges: int
    ring_overflows: int
    kernel_drops: int
    bytes_buffered: int
    bytes_written: int
    bytes_dropped_disk: int
    bytes_headers: int
    files: list[FileRecord]
    disks: list[DiskRecord]
    streams: list[dict[str, Any]]
    invariant_holds: bool
    error: str | None
    seconds: list[dict[str, Any]]
    threads: list[dict[str, Any]]
    notes: list[str]
    ok: bool
    durable_frames: int = 0
    """The frames known to be on disk (synced) when the scan ended, from its start without a
    gap: all of them for a scan whose files all closed well (``ok`` asks for it)."""
    durable_bytes: int = 0
    """The bytes of those frames: ``bytes_written`` when all is on disk."""
    durable_up_to: str | None = None
    """The VDIF time of the last of them (ISO UTC; ``last_frame`` when all is on disk; with a
    split, the earliest of the data streams'); None when nothing is."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ScanSummary:
        d = dict(d)
        d["files"] = [FileRecord.from_dict(f) for f in d.get("files", [])]
        d["disks"] = [DiskRecord.from_dict(x) for x in d.get("disks", [])]
        return super().from_dict(d)


@dataclasses.dataclass(frozen=True)
class Summary(_Record):
    """Everything a recording did, at its end (``Recorder.stop()``).

    The invariant ``bytes_buffered == bytes_written + bytes_dropped_disk + bytes_outside_scans``
    and ``bytes_written == sum of file sizes`` (less the Mark6 headers of mk6 scans) holds at
    every stop (``invariant_holds``); ``bytes_outside_scans`` is 0 unless the recorder writes
    scans, when it counts what arrived between them (received and counted, never written);
    ``ok`` is true when, in addition, nothing buffered was lost on the way to disk. The fields
    are the engine's summary as it serialised it; nothing is recomputed here.
    """

    frames_received: int
    frames_lost: int
    frames_lost_network: int
    frames_out_of_order: int
    frames_duplicate: int
    frames_invalid: int
    frames_out_of_window: int
    frames_late: int
    time_jumps: int
    datagrams: int
    datagrams_malformed: int
    datagrams_malformed_by_kind: dict[str, int]
    kernel_drops: int
    ring_overflows: int
    psn_lost: int | None
    psn_out_of_order: int | None
    frame_size: int
    frames_per_second: int
    bytes_buffered: int
    bytes_written: int
    bytes_dropped_disk: int
    bytes_outside_scans: int
    files: list[FileRecord]
    scans: list[ScanSummary]
    streams: list[dict[str, Any]]
    """Each stream (``port``, its counters, ``threads``); the counters above are their sums."""
    invariant_holds: bool
    error: str | None
    duration_s: float
    capture_cpu_s: float
    writer_cpu_s: float
    threads: list[dict[str, Any]]
    gaps: list[dict[str, Any]]
    seconds: list[SecondRow]
    notes: list[str]
    ok: bool
    """Everything buffered reached the disk (network loss is reported, not an error), as the
    engine judged it."""
    latency: dict[str, Any] | None = None
    """With ``latency=True``: ``{"sample_every", "stages": {stage: {count, p50, p99, p999, max,
    mean, negative, buckets}}, "traces"}``, seconds; stages ``kernel``, ``capture``, ``write``,
    ``durable``, ``off`` (see ``vdifrec record --latency``)."""
    live_computed: int | None = None
    live_skips: int | None = None
    live_cpu_s: float | None = None
    """The live monitor's looks computed and skipped, and the CPU seconds it used (None: it did
    not run)."""
    forward: list[ForwardStats] = dataclasses.field(default_factory=list)
    """What each forwarding destination did over the run (empty: none). Forwarding never
    decides ``ok``: the recording is judged by what reached the disk."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Summary:
        d = dict(d)
        d["forward"] = [ForwardStats.from_dict(f) for f in d.get("forward", [])]
        d["files"] = [FileRecord.from_dict(f) for f in d.get("files", [])]
        d["seconds"] = [SecondRow.from_dict(r) for r in d.get("seconds", [])]
        d["scans"] = [ScanSummary.from_dict(x) for x in d.get("scans", [])]
        return super().from_dict(d)

