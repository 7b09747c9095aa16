"""What the VSI-S command families share: the failure a handler raises (``Problem``), the reply
it gives (``reply``, ``query_only``), the VDIF mode jive5ab names (``Mode``), the scan set
(``ScanPointer``), and values read and written as jive5ab does (sizes, numbers, times, fields).
Nothing here knows the station; the families and the station import it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re

from .protocol import Code, Command, Reply


class Problem(Exception):
    """A command that cannot be done: its VSI-S code, what to tell the operator, and any
    fields jive5ab puts before the message."""

    def __init__(self, code: Code, why: str, *fields: object) -> None:
        super().__init__(why)
        self.code = code
        self.why = why
        self.fields = tuple(str(f) for f in fields)


def reply(c: Command, *fields: object, code: Code = Code.DONE) -> Reply:
    """The reply to ``c``: its keyword and mark, ``code`` and the fields as text."""
    # A ';' would end the reply early (a path or a kernel's name may hold one).
    return Reply(c.keyword, c.query, code, tuple(str(f).replace(";", ",") for f in fields))


def query_only(c: Command) -> None:
    """Refuses ``c`` (code 2) unless it is a query."""
    if not c.query:
        raise Problem(Code.NOT_NOW, "only available as query")


def one_field(text: str) -> str:
    """A message as one reply field: VSI-S separates fields by ':' and ends replies at ';'
    (engine messages such as "ring: ..." carry them)."""
    return text.replace(": ", " - ").replace(":", " ").replace(";", ",")


def vsi_size(name: str, text: str) -> int:
    """A size as jive5ab reads it: a number (decimal, or 0x hex) with an optional binary suffix,
    k (1024), M (1024**2) or G (1024**3)."""
    m = re.fullmatch(r"(0x[0-9a-fA-F]+|[0-9]+)([kMG]?)", text.strip())
    if not m:
        raise Problem(Code.BAD_PARAMETER, f"{name} '{text}' is not a size - give bytes, or with k, M or G (binary, 32M = 33554432)")
    return int(m.group(1), 0) << {"": 0, "k": 10, "M": 20, "G": 30}[m.group(2)]


def ostream_num(x: float) -> str:
    """A number as C++'s ostream writes a double (6 significant digits), as jive5ab's replies do."""
    return f"{x:g}"


def vex_time(t: _dt.datetime) -> str:
    """``2026y334d22h48m47.0000s``, as jive5ab writes times."""
    sec = t.second + t.microsecond / 1e6
    return f"{t.year:04d}y{t.timetuple().tm_yday:03d}d{t.hour:02d}h{t.minute:02d}m{sec:07.4f}s"



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


@dataclasses.dataclass
class ScanPointer:
    """The scan `scan_set=` chose and the byte range in it (`scan_check`, `disk2file`)."""

    name: str
    start: int
    end: int
