"""Recording from Python: ``Recorder``, the engine that receives, counts and writes a stream."""

from __future__ import annotations

import datetime as _dt
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import _core
from .live import LiveLook
from .reports import ForwardStats, ScanSummary, SecondRow, Stats, Summary
from .units import plain_options
from .views import RingFrames, frames_of

if TYPE_CHECKING:
    # typing.Unpack is 3.11+; the checker's own typing_extensions has it for 3.10 (never imported at run time).
    from typing_extensions import Unpack

    from ._core import RecorderOptions

__all__ = ["Recorder"]

# How long one blocking call into the engine waits before Python looks at signals again.
_SLICE = 0.1


def _utc_text(name: str, value: Any) -> str | None:
    """A scan boundary as the engine parses it: ISO text for a datetime (naive means UTC),
    the number for POSIX seconds, text as given."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, _dt.datetime):
        when: _dt.datetime = value
        if when.tzinfo is not None:
            when = when.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        return when.isoformat()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value)) if isinstance(value, float) else str(value)
    if isinstance(value, tuple) and len(value) == 2:
        # VDIF time: (reference epoch, seconds since it).
        return f"{value[0]}:{value[1]!r}" if isinstance(value[1], float) else f"{value[0]}:{value[1]}"
    raise _core.ArgumentError(f"{name}: {value!r} is not a time: give a datetime, UTC text, POSIX seconds or (ref_epoch, seconds)")


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if value < low or (high is not None and value > high):
        span = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be in {span}, got {value}")
    return value


class Recorder:
    """Records (or only monitors) a VDIF stream arriving on a UDP port.

    Parameters mirror ``vdifrec record``. Sizes may be bytes or strings such as ``"8GiB"``.
    Every option is checked by the engine when the Recorder is made: a bad one raises
    ``vdifrec.ArgumentError`` (a ``ValueError``) whose message starts with its name. A name
    left out takes the engine's default, listed in ``vdifrec.defaults["recorder"]``.

    Parameters
    ----------
    port : int or str
        UDP port (0: any free port; ``address`` then tells which). Several streams as text:
        ``"46227,46228"``; a port may carry its own address, ``"46227@10.0.1.1"`` (hosts with
        two NICs).
    ports : list of int or str, optional
        The same as a list: ``ports=[46227, "46228@10.0.2.1"]``. Each stream gets its own
        capture thread and ring (``ring`` each), pinned where there are cores; several senders
        into one port are one stream. Several streams are monitored or recorded as scans
        (``disks``); the summary's counters are their sums and ``streams`` lists each; the
        per-second rows say their ``stream`` (port). Views show the first stream.
    bind : str
        Address to listen on. ``"127.0.0.1"`` (default) hears only this host; give
        ``"0.0.0.0"`` or the 10 GbE interface's address to receive from the network.
    path : str or os.PathLike, optional
        Write to this file (rotated files get ``_0001``, ... before the extension).
    directory, prefix : str, optional
        Write ``{prefix}_{YYYY}y{DOY}d{HH}h{MM}m{SS}s.vdif`` files (UTC of each file's first
        frame) into ``directory``. With neither ``path`` nor ``directory`` nothing is written:
        the stream is monitored and the views still work.
    ring : int or str
        Ring buffer size (default 1 GiB); rounded down to whole 4 KiB-aligned runs. It is
        allocated, mapped and (where permitted) locked by ``start()``, before the socket is
        bound; more than the machine has available (``MemAvailable``) is refused.
    frame_size : int, optional
        Bytes per frame, header included; learned from the first valid frame if not given.
    offset : int
        Bytes to strip before each frame (8 for a packet sequence number).
    psn : bool
        Count gaps in the 8-byte packet sequence numbers (needs ``offset=8``).
    fps : int, optional
        Frames per second per thread; learned from the frame numbers if not given.
    file_size : int or str, optional
        Start a new file after this many bytes (``path``/``directory``: ``name_0001.vdif``, ...;
        ``file`` scans: ``<scan>.0001.vdif``, ...).
    capture_cpu, writer_cpu : int, optional
        CPUs to pin the capture and writer threads to (reported, never fatal, if impossible).
    direct : bool
        Use O_DIRECT where the file system allows it (default True).
    backend : str
        ``"udp"`` (a UDP socket; the default, no privileges needed), ``"afpacket"`` (a
        TPACKET_V3 ring on ``interface``; needs CAP_NET_RAW) or ``"pfring"`` (PF_RING on
        ``interface``, ``libpfring.so`` loaded at run time; ``pfring_library`` overrides which).
    interface : str, optional
        The network interface for the afpacket and pfring backends.
    pfring_library : str or path, optional
        The ``libpfring.so`` to load (default: the loader's ``libpfring.so``, ``.so.8``, ``.so.1``).
    pfring_check_module : bool
        Refuse to start when the ``pf_ring`` kernel module is not loaded (default True: a
        clearer error than PF_RING's own; off only for a stand-in library in tests).
    multicast : str, optional
        Multicast group to join.
    rcvbuf : int or str
        Socket receive buffer to ask for (default 256 MiB; the kernel may grant less, and the
        notes say so).
    max_frames : int, optional
        Stop capturing after this many frames.
    big_endian : bool
        The sender writes headers with each 32-bit word byte-swapped (recorded as received).
    huge_pages, mlock : bool
        Back the ring with huge pages when reserved and ``frame_size`` is given (the ring is
        laid out in runs that are whole huge pages, which only a known frame size can tell
        fit), and lock it in memory when permitted
        (both default True; a refusal is a note, never an error).
    throttle : int or str, optional
        Test aid: limit the writer to this many bytes per second (``"2MB"``), a slow disk.
    disk_limit : int or str, optional
        Test aid: the writer behaves as if the disk were full after this many bytes.
    status_listen : str, optional
        Serve the control-room page (``GET /``), ``GET /status`` (JSON), ``GET /history`` and
        ``GET /metrics`` (Prometheus) at ``"HOST:PORT"`` (``"8089"`` alone means
        127.0.0.1:8089; port 0 picks a free one, see ``status_address``). Off by default;
        never on the network unless an address says so.
    live : bool, optional
        The live quality monitor: once a second a lowest-priority thread analyses part of the
        newest frames (spectra, bit statistics, tones) for ``live()``, the page, ``/status``
        and ``/metrics``. On whenever ``status_listen`` is given (None); False turns it off,
        True runs it without the status endpoint. It pins nothing and never costs a frame: a
        look the capture overtakes, or one without spare CPU, is skipped and counted.
    live_fraction : float, optional
        Share of each second the monitor analyses, in (0, 1], at most an eighth of the ring
        (default: it paces itself, starting at 1/16 of a second, then as much as its CPU budget
        allows and it can read in half a second).
    live_nfft : int
        Spectral channels of the live spectra (default 1024).
    latency : bool
        Per-stage latency stamps (kernel receive → capture → ring → write → on disk, and the
        frames' VDIF time against their arrival), one frame in 64: histograms in the summary's
        ``latency``, ``/status`` and ``/metrics`` (default False).
    disks : list of str or os.PathLike, optional
        Record *scans* to these directories, one per disk (globs such as ``"/mnt/disk*"`` are
        expanded). The recorder then receives and counts all the time and writes only between
        ``start_scan`` and ``stop_scan``. Not with ``path``/``directory``.
    format : str, optional
        Layout of scans: ``"file"`` (``<disk>/<scan>.vdif``, one disk; the default with one
        disk), ``"vbs"`` (FlexBuff chunks ``<disk>/<scan>/<scan>.NNNNNNNN`` spread over the
        disks; the default with several) or ``"mk6"`` (Mark6 scatter-gather, ``<disk>/<scan>``).
    chunk_size : int or str, optional
        vbs chunk or Mark6 block size (default 256 MiB and 8 MiB), rounded to whole runs of
        128 frames (O_DIRECT-aligned).
    writers : int, optional
        Scan writer threads (default: one per 5 Gbit/s of the stream plus one, at most one per
        disk). A chunk goes to whichever disk is ready next: a slow disk gets fewer.
    split : str, optional
        ``"thread"``, ``"station"`` or ``"sender"``: each VDIF thread (station, sender) of a
        scan is written as a scan of its own, ``<scan>_ds<key>`` (key: the thread number, the
        station's two-character code where printable, or the sender's index in order of first
        arrival, over all streams), as jive5ab names data streams.
    disk_faults : dict, optional
        Test aid: ``{disk: "full@64MiB"}`` or ``"error@1GiB"`` makes that disk fill or fail
        after so many bytes (it then leaves the set; its chunk goes to another disk).
    forward : list of str, optional
        Forward the stream live to these destinations while recording it (e-VLBI):
        ``"udp://HOST:PORT"`` (a VDIF frame per datagram), ``"udps://HOST:PORT"`` (each
        datagram a 64-bit packet sequence number, then the frame, as jive5ab sends) or
        ``"tcp://HOST:PORT"`` (frames back to back), each optionally shaped and paced:
        ``?threads=0,1`` (only these VDIF threads), ``channels=0-15`` (corner-turn: each
        channel its own single-channel thread), ``payload=1024`` (re-frame to smaller frames
        that fit the path's MTU), ``rate=2Gbps`` or ``ipd=10`` (microseconds between
        datagrams; ``2500ns``). A destination is one more reader of the ring: it never costs a
        recorded frame. When it is slower than the stream it skips ahead by whole frames; when
        it goes away it is retried with a backoff (0.1 s doubling to 5 s). Each one's counters
        are in ``stats().forward``, the per-second rows and the summary; ``add_forward``,
        ``set_forward`` and ``remove_forward`` change them while recording.

    Notes
    -----
    Zero-copy views: ``latest(n)``, ``frames(first, n)`` and ``with view(n) as frames:`` return read-only
    ``(n, frame_size)`` uint8 arrays (``RingFrames``) whose memory is the ring itself: nothing is
    copied, two overlapping views share memory, and a view stays usable after the Recorder is
    gone. The recording comes first: a view *yields* to the capture, which overwrites its frames
    when it needs their slots rather than drop new frames. ``frames.valid`` and
    ``frames.stale_frames`` tell whether that happened, and ``spectrum``, ``bstate``, ``fringe``
    and ``decode`` raise ``StaleViewError`` rather than compute from overwritten frames: view a
    fraction of a second and use it at once. With ``hold=True`` a view *pins* its frames
    instead: the capture drops new frames (counted as ring overflows) until the view is
    released, at the end of the ``with`` block or when the array is garbage-collected. A view of
    more than half the ring is refused. The ring is mapped twice back to back, so a view across
    the ring's end is still one contiguous array. Frames are numbered from 0 in arrival order
    since ``start()``; ``stats().frames_received`` is the next number.
    """

    def __init__(self, **options: Unpack[RecorderOptions]) -> None:
        self._core = _core.Recorder(plain_options(options))
        self.address: tuple[str, int] | None = None
        #: Every stream's (host, port), in the order given (after ``start()``).
        self.addresses: list[tuple[str, int]] = []
        self._rows_seen = 0
        self._summary: Summary | None = None

    # -- scans ------------------------------------------------------------------------
    def start_scan(self, name: str, start: Any = None, stop: Any = None) -> str:
        """Starts writing a scan to the disks; returns the name used on disk.

        Parameters
        ----------
        name : str
            Letters, digits, ``_`` and ``-`` (at most 64). A name already on the disks (or used
            in this run) gets jive5ab's suffix: ``kvn_scan1a``, ``kvn_scan1b``, ...
        start, stop : datetime, str, float or (int, float), optional
            The scan holds exactly the frames whose VDIF time is in ``[start, stop)``: a
            ``datetime`` (naive means UTC), text (``"2026-11-30T22:48:47.5"``,
            ``"2026y334d22h48m47.5s"``, or VDIF time ``"53:13271327.5"``: reference epoch and
            seconds since it), POSIX seconds, or VDIF time as ``(ref_epoch, seconds)``. Without ``start`` the scan begins with
            the next frame; without ``stop`` it runs until ``stop_scan()``. With ``stop`` it ends
            by itself: ``wait_scan()`` returns its summary.

        A scan that starts at or after the stop of every scan running or queued is queued
        behind them (:attr:`queued_scans`): scans back to back lose no frame between them, each
        frame going to the scan whose window holds it. Any other scan while one runs is refused.
        """
        return self._core.start_scan(name, _utc_text("start", start), _utc_text("stop", stop))

    def stop_scan(self, name: str | None = None) -> ScanSummary:
        """Ends the running scan now (and any queued behind it, which end without a frame),
        waits until it is on disk, and returns its summary. With ``name``: only that scan."""
        text = self._core.stop_scan(None, name)
        assert text is not None, "waiting without a timeout returns a summary"
        return ScanSummary.from_dict(json.loads(text))

    def wait_scan(self, timeout: float | None = None, name: str | None = None) -> ScanSummary | None:
        """Waits for the running scan to end by its ``stop`` time (at most ``timeout`` seconds);
        its summary, or None if it still runs. With no scan running: the last scan's summary.
        With ``name`` (as :meth:`start_scan` returned it): that scan's summary once it is on
        disk, None if it still runs or was never started."""
        text = self._core.wait_scan(timeout, name)
        return None if text is None else ScanSummary.from_dict(json.loads(text))

    @property
    def queued_scans(self) -> list[str]:
        """Every scan running or queued, in order: the first records now (or is still being
        written out), the others wait for their windows."""
        return self._core.queued_scans()

    def set_observation(self, document: dict[str, Any] | None) -> None:
        """What the schedule driving this recorder stands at (``vdifrec observe`` sets it):
        served as ``observation`` in ``/status`` and counted in ``/metrics``; None clears it."""
        self._core.set_observation(None if document is None else json.dumps(document))

    # -- forwarding -------------------------------------------------------------------
    def add_forward(self, destination: str, enabled: bool = True) -> int:
        """Forwards the stream to ``destination`` (as in ``forward=``) from its newest frame on;
        returns the destination's id. ``enabled=False`` connects but sends nothing until
        ``set_forward(id, True)``. A bad destination raises ``ArgumentError`` naming
        ``forward``."""
        return self._core.add_forward(destination, enabled)

    def forward_feeds_itself(self, destination: str) -> bool:
        """Whether forwarding to ``destination`` would send the stream back to this recorder's
        own data port: a datagram destination whose address is one of this host's (loopback,
        ``0.0.0.0`` or ``::``, any address of its interfaces, in IPv4-mapped form too) at a
        port the recorder receives on. ``add_forward`` refuses such a destination; another
        host at the same port is no loop. A bad destination raises ``ArgumentError``."""
        return self._core.forward_feeds_itself(destination)

    def set_forward(self, id: int, enabled: bool) -> None:
        """Pauses (False) or resumes (True) forwarding to destination ``id``; it stays
        connected, and frames passed over while paused are not counted as skipped."""
        self._core.set_forward(id, enabled)

    def pace_forward(self, id: int, pacing: str) -> None:
        """Paces destination ``id`` anew, on the same connection and packet sequence:
        ``"rate=2Gbps"``, ``"ipd=10"`` (microseconds; ``"ipd=2500ns"``), or ``""`` for none.
        A bad value raises ``ArgumentError`` naming ``pacing``."""
        self._core.pace_forward(id, pacing)

    def remove_forward(self, id: int) -> ForwardStats:
        """Stops forwarding to destination ``id`` and closes its connection; its counters (the
        summary keeps them too)."""
        return ForwardStats.from_dict(json.loads(self._core.remove_forward(id)))

    def forwards(self) -> list[ForwardStats]:
        """Every forwarding destination of the run (removed ones too), counters now."""
        return [ForwardStats.from_dict(f) for f in json.loads(self._core.forwards())]

    @property
    def scan(self) -> str | None:
        """The scan running now (or still being written out), if any."""
        return self._core.active_scan()

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> Recorder:
        """Allocates, maps and locks the ring, then binds the socket; returns when both are ready."""
        host, port = self._core.start()
        self.address = (host, port)
        self.addresses = self._core.addresses()
        return self

    @property
    def listening(self) -> str:
        """Where the stream is taken from, for the operator: ``ADDRESS:PORT`` for the UDP
        backend, ``INTERFACE:PORT (backend)`` for the raw ones, which read the interface and
        keep the packets for that UDP port."""
        return self._core.source or "(not started)"

    def stop(self) -> Summary:
        """Stops capturing, drains the ring to disk and returns the summary (same one if called again)."""
        if self._summary is not None:
            return self._summary
        text = self._core.stop()
        if text is None:
            raise _core.RecorderError("stop() before start(): nothing was recorded")
        self._summary = Summary.from_dict(json.loads(text))
        return self._summary

    @property
    def running(self) -> bool:
        return bool(self._core.running)

    @property
    def status_address(self) -> tuple[str, int] | None:
        """(host, port) of the status endpoint while it runs, else None."""
        return self._core.status_address()

    @property
    def notes(self) -> list[str]:
        """What the recorder said about its set-up: ring, socket buffer, pinning, O_DIRECT."""
        return self._core.notes() if self.running else (self._summary.notes if self._summary else [])

    def __enter__(self) -> Recorder:
        if not self.running and self._summary is None:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.running:
            self.stop()

    # -- watching ---------------------------------------------------------------------
    def stats(self) -> Stats:
        """Every counter now."""
        text = self._core.stats()
        if text is None:
            if self._summary is not None:
                raise _core.RecorderError("the recorder has stopped: use the summary stop() returned")
            raise _core.RecorderError("the recorder has not been started: call start() first")
        return Stats.from_dict(json.loads(text))

    @property
    def finished(self) -> bool:
        """The capture ended by itself (``max_frames`` reached) or the recording failed."""
        return bool(self._core.finished())

    def seconds(self, timeout: float | None = None) -> Iterator[SecondRow]:
        """Yields each VDIF second's row as soon as the second completes.

        Ends when the recording stops or finishes, or when ``timeout`` seconds pass without a
        new row. Rows already yielded by an earlier call are not repeated.
        """
        last = time.monotonic()
        while True:
            rows = json.loads(self._core.wait_rows(self._rows_seen, _SLICE))
            for r in rows:
                self._rows_seen += 1
                yield SecondRow.from_dict(r)
            if rows:
                last = time.monotonic()
            elif not self.running or self.finished:
                # Rows published just before the end.
                tail = json.loads(self._core.wait_rows(self._rows_seen, 0.0))
                for r in tail:
                    self._rows_seen += 1
                    yield SecondRow.from_dict(r)
                return
            elif timeout is not None and time.monotonic() - last >= timeout:
                return

    # -- zero-copy views ---------------------------------------------------------------
    def latest(self, n: int, hold: bool = False) -> RingFrames:
        """The newest ``n`` frames (fewer, when fewer have arrived: the array's length says how
        many), as a zero-copy view that yields to the capture (``hold=True``: pinned until the
        array is garbage-collected)."""
        _check_int("n", n, 1)
        owner, _first = self._core.pin_latest(n, hold)
        return frames_of(owner)

    def frames(self, first_frame: int, n: int, hold: bool = False) -> RingFrames:
        """Frames ``first_frame .. first_frame + n - 1`` (arrival order since start), as a
        zero-copy view (yielding, or pinned with ``hold=True``). IndexError if they are no
        longer in the ring."""
        _check_int("first_frame", first_frame, 0)
        _check_int("n", n, 1)
        return frames_of(self._core.pin_frames(first_frame, n, hold))

    @contextmanager
    def view(self, n: int, hold: bool = False) -> Iterator[RingFrames]:
        """``with rec.view(n) as frames:`` the newest ``n`` frames (fewer, when fewer have
        arrived).

        The view yields to the recording: if the capture laps the ring while the block runs,
        it overwrites the frames rather than drop new ones; ``frames.valid`` and
        ``frames.stale_frames`` then say so, and an analysis given the frames raises
        ``StaleViewError``. View a fraction of a second and use it at once. ``hold=True`` pins
        the frames inside the block instead, at the cost of ring overflows (frames lost) if the
        block outlasts the ring. More than half the ring is refused.
        """
        _check_int("n", n, 1)
        owner, _first = self._core.pin_latest(n, hold)
        try:
            yield frames_of(owner)
        finally:
            owner.release()

    def live(self) -> LiveLook | None:
        """The live quality monitor's newest look (spectra, bit statistics, tones of part of the
        newest second), or None before its first look or when it is off (it runs with
        ``status_listen``, or ``live=True``)."""
        text = self._core.live()
        return None if text is None else LiveLook.from_dict(json.loads(text))

    def wait(self, duration: float | None = None, frames: int | None = None) -> Stats:
        """Blocks until ``duration`` seconds have passed or ``frames`` frames are buffered (or
        the capture ends); returns the stats then. Ctrl-C raises KeyboardInterrupt as usual."""
        if duration is None and frames is None:
            raise ValueError("wait: give duration (seconds) or frames (a count)")
        deadline = None if duration is None else time.monotonic() + duration
        while True:
            s = self.stats()
            if frames is not None and s.frames_received >= frames:
                return s
            if deadline is not None and time.monotonic() >= deadline:
                return s
            if self.finished:
                return s
            left = _SLICE if deadline is None else max(0.0, min(_SLICE, deadline - time.monotonic()))
            time.sleep(left)
