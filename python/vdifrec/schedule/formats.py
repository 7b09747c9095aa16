"""What a station records in a mode: the :class:`RecordingFormat` a VEX file gives it.

Where it is found, in this order, through the mode's ``ref`` for the station:

- ``$DATASTREAMS`` (VEX 2.0): ``datastream = &DS1 : VDIF ;`` and one ``thread = &DS1 : &thread0
  : 0 : 1 : 32 Ms/sec : 2 : real : 5000 ;`` per thread (thread id : channels : sample rate : bits
  : real or complex : payload bytes, the 32-byte header not included);
- ``$THREADS`` (VEX 1.5 as SCHED writes it): ``format = VDIF : : 512 ;`` and ``thread = 0 : 1 : 1
  : 512 : 16 : 2 : : : 8000 ;`` (thread id : backend : recorder : Mbit/s : channels : bits :
  format : extended format : payload bytes);
- ``$TRACKS``: ``track_frame_format`` = ``VDIF5032`` (the frame with its header), ``VDIF/8032/2``
  (frame / bits), ``VDIF_8224-4096-16-2`` (frame - Mbit/s - channels - bits),
  ``INTERLACEDVDIF/0,1,2,3/5032/2`` (thread ids / frame / bits), ``VDIFC...`` (complex),
  ``MARK5B``, ``Mark4``, ``VLBA``...; the channels are the ``chan_def`` lines of the mode's
  ``$FREQ``, its ``sample_rate`` the rate, and where the format names no bits, the ``fanout_def``
  lines tell them (a channel with a ``mag`` bit has 2 bits, one with ``sign`` alone 1; none at
  all: 2, said in :attr:`RecordingFormat.note`);
- ``$BITSTREAMS``: Mark5B.

A format that is not VDIF is reported as what it is, never taken for VDIF; then and where the
schedule leaves a number out, :attr:`RecordingFormat.frames_per_second` is None and
:attr:`RecordingFormat.problem` says why.
"""

from __future__ import annotations

import dataclasses
import re
from fractions import Fraction
from typing import Any

from .values import exact, parse_rate
from .vex import Def, Statement, VexFile

__all__ = ["HEADER_BYTES", "RecordingFormat", "recording_format"]

#: Bytes of a VDIF header (non-legacy): frame = header + payload.
HEADER_BYTES = 32


@dataclasses.dataclass(frozen=True)
class RecordingFormat:
    """What a station records in one mode.

    Attributes
    ----------
    kind : str
        ``"VDIF"``, ``"MARK5B"``, ``"MARK4"``, or what the schedule names (``"VLBA"``,
        ``"VDIFL"``, ``"unknown"``).
    frame_size : int or None
        Bytes of a VDIF frame, its 32-byte header included.
    channels : int or None
        Channels in each thread's frames.
    bits : int or None
        Bits per sample (per real and per imaginary part of a complex sample).
    threads : tuple of int
        The VDIF thread ids (``(0,)`` for one thread).
    sample_rate : float or None
        Samples per second per channel, Hz (complex samples for a complex format).
    frames_per_second : int or None
        Frames per second of each thread: ``channels * bits * sample_rate / (8 * payload)``
        (twice that for complex samples); None when not VDIF or not known.
    complex : bool
        Complex samples.
    problem : str or None
        Why frames cannot be planned in this format (not VDIF, a number left out, a rate that
        gives no whole number of frames); None when they can.
    note : str or None
        What was assumed (bits the schedule does not give).
    source : str
        Where it was read: ``"$TRACKS VDIF.16Ch2bit: track_frame_format = VDIF5032"``.
    """

    kind: str
    frame_size: int | None = None
    channels: int | None = None
    bits: int | None = None
    threads: tuple[int, ...] = ()
    sample_rate: float | None = None
    frames_per_second: int | None = None
    complex: bool = False
    problem: str | None = None
    note: str | None = None
    source: str = ""

    @property
    def is_vdif(self) -> bool:
        """Whether the station records VDIF in this mode (vdifrec records VDIF only)."""
        return self.kind == "VDIF"

    @property
    def payload(self) -> int | None:
        """Bytes of a frame after its 32-byte header."""
        return None if self.frame_size is None else self.frame_size - HEADER_BYTES

    @property
    def bytes_per_second(self) -> int | None:
        """Bytes per second of all threads together, headers included."""
        if self.frames_per_second is None or self.frame_size is None:
            return None
        return self.frames_per_second * self.frame_size * len(self.threads)

    def describe(self) -> str:
        """One line: ``VDIF 8224-byte frames, 1 thread x 16 ch x 2 bit at 128 Ms/s: 62,500
        frames/s per thread, 4.112 Gbit/s``."""
        if not self.is_vdif:
            return f"{self.kind}: not VDIF, vdifrec records VDIF only"
        parts = [f"VDIF {self.frame_size}-byte frames" if self.frame_size else "VDIF, frame size not given"]
        n = len(self.threads)
        shape = f"{n} thread{'' if n == 1 else 's'}" if n else "threads not given"
        if self.channels is not None:
            shape += f" x {self.channels} ch"
        if self.bits is not None:
            shape += f" x {self.bits} bit{' complex' if self.complex else ''}"
        if self.sample_rate is not None:
            shape += f" at {self.sample_rate / 1e6:g} Ms/s"
        parts.append(shape)
        text = ", ".join(parts)
        if self.frames_per_second is not None and self.bytes_per_second is not None:
            text += f": {self.frames_per_second:,} frames/s per thread, {self.bytes_per_second * 8 / 1e9:.6g} Gbit/s"
        if self.problem:
            text += f" ({self.problem})"
        if self.note:
            text += f" ({self.note})"
        return text

    def to_dict(self) -> dict[str, Any]:
        """Every field, ``payload``, ``bytes_per_second`` and ``description``, JSON-ready."""
        d = dataclasses.asdict(self)
        d["threads"] = list(self.threads)
        d.update(payload=self.payload, bytes_per_second=self.bytes_per_second, description=self.describe())
        return d


def recording_format(vex: VexFile, mode: Def, station: str) -> RecordingFormat | None:
    """The format ``station`` records in ``mode`` (a ``$MODE`` def), None when the mode gives it
    none (no ``$DATASTREAMS``, ``$THREADS``, ``$TRACKS`` nor ``$BITSTREAMS``)."""
    # A ref that names the station says more than one for every station, whatever its block:
    # `ref $TRACKS = T;` with `ref $BITSTREAMS = B : Wb;` makes Wb a Mark5B station.
    order = ("DATASTREAMS", "THREADS", "TRACKS", "BITSTREAMS")
    named = [b for b in order if (r := mode.ref(b, station)) is not None and r.stations]
    for block in named + [b for b in order if b not in named]:
        found = _ref(vex, mode, block, station)
        if found is None:
            continue
        if block == "DATASTREAMS":
            return _datastreams(found)
        if block == "THREADS":
            return _threads(vex, mode, station, found)
        if block == "TRACKS":
            return _tracks(vex, mode, station, found)
        return _not_vdif("MARK5B", f"$BITSTREAMS {found.name}")
    return None


def _ref(vex: VexFile, mode: Def, block: str, station: str) -> Def | None:
    """The def of ``$block`` the mode (or failing it, the station's ``$STATION`` def) refers
    the station to; a ref to a def that is not there is a :class:`RecordingFormat` problem."""
    ref = mode.ref(block, station)
    if ref is None:
        station_def = vex.find("STATION", station)
        ref = None if station_def is None else station_def.ref(block, station)
    if ref is None:
        return None
    found = vex.find(block, ref.name)
    return found if found is not None else Def("missing", ref.name, ref.line, ref.column)


def _missing(d: Def, block: str) -> RecordingFormat | None:
    if d.kind == "missing":
        return RecordingFormat(
            kind="unknown",
            problem=f"line {d.line} refers to ${block} {d.name}, which ${block} does not define",
            source=f"${block} {d.name}",
        )
    return None


def _not_vdif(kind: str, source: str) -> RecordingFormat:
    return RecordingFormat(kind=kind, problem=f"{kind}: not VDIF, vdifrec records VDIF only", source=source)


def _vdif(
    *,
    source: str,
    frame_size: int | None,
    channels: int | None,
    bits: int | None,
    threads: tuple[int, ...],
    sample_rate: Fraction | None,
    complex_: bool = False,
    bits_per_second: Fraction | None = None,
    problem: str | None = None,
    note: str | None = None,
) -> RecordingFormat:
    """A VDIF format, its frames per second per thread computed exactly (from the thread's bit
    rate where the schedule gives it, else channels x bits x sample rate)."""
    sample_bits = None if bits is None else bits * (2 if complex_ else 1)
    if bits_per_second is None and None not in (channels, sample_bits, sample_rate):
        bits_per_second = Fraction(channels or 0) * (sample_bits or 0) * (sample_rate or 0)
    if sample_rate is None and bits_per_second is not None and channels and sample_bits:
        sample_rate = bits_per_second / (channels * sample_bits)
    fps = None
    if problem is None:
        missing = [name for name, v in (("the frame size", frame_size), ("the channels", channels), ("the bits per sample", bits),
                                        ("the sample rate", sample_rate if bits_per_second is None else bits_per_second))
                   if v is None]
        if not threads:
            missing.append("the threads")
        if missing:
            problem = f"the schedule does not give {', '.join(missing)}"
        elif frame_size is not None and frame_size <= HEADER_BYTES:
            problem = f"a {frame_size}-byte frame holds no more than its {HEADER_BYTES}-byte header"
        elif frame_size is not None and bits_per_second is not None:
            per_second = bits_per_second / (8 * (frame_size - HEADER_BYTES))
            if per_second.denominator != 1 or per_second <= 0:
                problem = (f"{float(bits_per_second) / 1e6:g} Mbit/s in {frame_size}-byte frames is "
                           f"{float(per_second):g} frames per second, not a whole number")
            else:
                fps = int(per_second)
    return RecordingFormat(
        kind="VDIF",
        frame_size=frame_size,
        channels=channels,
        bits=bits,
        threads=threads,
        sample_rate=None if sample_rate is None else float(sample_rate),
        frames_per_second=fps,
        complex=complex_,
        problem=problem,
        note=note,
        source=source,
    )


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _rate(text: str) -> Fraction | None:
    try:
        return parse_rate(text)
    except ValueError:
        return None


def _freq(vex: VexFile, mode: Def, station: str) -> tuple[int | None, Fraction | None]:
    """(channels, sample rate) of the mode's ``$FREQ`` for the station."""
    freq = _ref(vex, mode, "FREQ", station)
    if freq is None or freq.kind == "missing":
        return None, None
    rate = freq.get("sample_rate")
    channels = len(freq.all("chan_def"))
    return (channels or None), (None if rate is None else _rate(rate.value(0)))


# -- VEX 2.0 $DATASTREAMS ---------------------------------------------------------------------


def _datastreams(d: Def) -> RecordingFormat:
    missing = _missing(d, "DATASTREAMS")
    if missing is not None:
        return missing
    source = f"$DATASTREAMS {d.name}"
    kinds = {s.value(0).lstrip("&"): s.value(1).strip().upper() for s in d.all("datastream")}
    if kinds and all(k != "VDIF" for k in kinds.values()):
        return _not_vdif(sorted(set(kinds.values()))[0] or "unknown", source)
    threads = [t for t in d.all("thread") if kinds.get(t.value(0).lstrip("&"), "VDIF") == "VDIF"]
    if not threads:
        return _vdif(source=source, frame_size=None, channels=None, bits=None, threads=(), sample_rate=None,
                     problem=f"{source} has no thread statements")
    shapes = {(t.value(3), t.value(4), t.value(5), t.value(6), t.value(7)) for t in threads}
    ids = tuple(_int(t.value(2)) for t in threads)
    first = threads[0]
    problem = None
    if len(shapes) > 1:
        problem = f"the threads of {source} differ in channels, rate, bits or payload (line {first.line}): not planned"
    elif None in ids:
        problem = f"a thread of {source} has no whole-number thread id (line {first.line})"
    payload = _int(first.value(7))
    return _vdif(
        source=source,
        frame_size=None if payload is None else payload + HEADER_BYTES,
        channels=_int(first.value(3)),
        bits=_int(first.value(5)),
        threads=tuple(i for i in ids if i is not None),
        sample_rate=_rate(first.value(4)),
        complex_=first.value(6).strip().lower() == "complex",
        problem=problem,
    )


# -- VEX 1.5 $THREADS (as SCHED writes it) -------------------------------------------------------


def _threads(vex: VexFile, mode: Def, station: str, d: Def) -> RecordingFormat:
    missing = _missing(d, "THREADS")
    if missing is not None:
        return missing
    source = f"$THREADS {d.name}"
    fmt = d.get("format")
    kind = fmt.value(0).strip().upper() if fmt is not None else "VDIF"
    if kind != "VDIF":
        return _not_vdif(kind, source)
    threads = d.all("thread")
    if not threads:
        return _vdif(source=source, frame_size=None, channels=None, bits=None, threads=(), sample_rate=None,
                     problem=f"{source} has no thread statements")
    first = threads[0]
    problem = None
    if len({(t.value(3), t.value(4), t.value(5), t.value(8)) for t in threads}) > 1:
        problem = f"the threads of {source} differ in rate, channels, bits or payload (line {first.line}): not planned"
    ids = tuple(_int(t.value(0)) for t in threads)
    payload = _int(first.value(8))
    mbps = _mbit(first)
    _, sample_rate = _freq(vex, mode, station)
    return _vdif(
        source=source,
        frame_size=None if payload is None else payload + HEADER_BYTES,
        channels=_int(first.value(4)),
        bits=_int(first.value(5)),
        threads=tuple(i for i in ids if i is not None),
        sample_rate=sample_rate,
        bits_per_second=mbps,
        problem=problem,
    )


def _mbit(t: Statement) -> Fraction | None:
    try:
        return exact(t.value(3)) * 10**6
    except ValueError:
        return None


# -- $TRACKS track_frame_format ------------------------------------------------------------------

_VDIF_SIZE = re.compile(r"(?P<variant>INTERLACEDVDIF|VDIF[A-Z]?)(?P<frame>\d+)?")
_VDIF_RATE = re.compile(r"(?P<variant>INTERLACEDVDIF|VDIF[A-Z]?)_(?P<frame>\d+)-(?P<mbps>\d+(?:\.\d+)?)-(?P<channels>\d+)-(?P<bits>\d+)")
_VDIF_SLASH = re.compile(r"(?P<variant>INTERLACEDVDIF|VDIF[A-Z]?)(?:/(?P<threads>[\d,]+))?/(?P<frame>\d+)/(?P<bits>\d+)")
_OTHER = {"MARK5B": "MARK5B", "MARK4": "MARK4", "MKIV": "MARK4", "MARKIV": "MARK4"}


def _tracks(vex: VexFile, mode: Def, station: str, d: Def) -> RecordingFormat:
    missing = _missing(d, "TRACKS")
    if missing is not None:
        return missing
    statement = d.get("track_frame_format")
    if statement is None:
        return RecordingFormat(kind="unknown", problem=f"$TRACKS {d.name} has no track_frame_format",
                               source=f"$TRACKS {d.name}")
    written = statement.value(0).strip()
    source = f"$TRACKS {d.name}: track_frame_format = {written}"
    upper = written.upper()
    m = _VDIF_RATE.fullmatch(upper) or _VDIF_SLASH.fullmatch(upper) or _VDIF_SIZE.fullmatch(upper)
    if m is None:
        kind = _OTHER.get(upper, upper or "unknown")
        return _not_vdif(kind, source)
    variant = m["variant"]
    if variant not in ("VDIF", "VDIFC", "INTERLACEDVDIF"):
        return _not_vdif(variant, source)
    groups = m.groupdict()
    channels, sample_rate = _freq(vex, mode, station)
    frame = int(groups["frame"]) if groups.get("frame") else None
    bits = int(groups["bits"]) if groups.get("bits") else None
    note = None
    if bits is None:
        bits = _fanout_bits(d)
        if bits is None:
            bits, note = 2, f"2 bits per sample assumed: $TRACKS {d.name} has no fanout_def lines"
    mbps = None
    threads: tuple[int, ...] = (0,)
    problem = None
    if groups.get("mbps"):
        mbps = exact(groups["mbps"]) * 10**6
        channels = int(groups["channels"])
    if groups.get("threads"):
        threads = tuple(int(x) for x in groups["threads"].split(",") if x)
    elif variant == "INTERLACEDVDIF":
        threads, problem = (), f"{written} names no thread ids (write INTERLACEDVDIF/0,1,2,3/5032/2)"
    if frame is None:
        problem = f"track_frame_format = {written} names no frame size (write VDIF5032, VDIF/8032/2 or VDIF_8224-4096-16-2)"
    if channels is not None and len(threads) > 1:
        # The format and $FREQ count the channels of all threads; each thread carries its share.
        if channels % len(threads):
            problem = f"{channels} channels do not split evenly over {len(threads)} threads"
        channels //= len(threads)
        if mbps is not None:
            mbps /= len(threads)
    return _vdif(
        source=source,
        frame_size=frame,
        channels=channels,
        bits=bits,
        threads=threads,
        sample_rate=sample_rate,
        complex_=variant == "VDIFC",
        bits_per_second=mbps,
        problem=problem,
        note=note,
    )


def _fanout_bits(d: Def) -> int | None:
    """Bits per sample from ``fanout_def = : &CH01 : sign : 1 : 1 ;`` lines: 2 where a channel
    has a ``mag`` bit, 1 where ``sign`` alone; None without any."""
    kinds = {s.value(2).strip().lower() for s in d.all("fanout_def")}
    if "mag" in kinds:
        return 2
    if "sign" in kinds:
        return 1
    return None
