"""What the recorder sees arriving, against what the schedule says it should be: frame size,
channels, bits, threads and frame rate from the mode; the stream's VDIF time against the host
clock (a formatter a second off puts every scan window a second off)."""

from __future__ import annotations

import calendar
import dataclasses
import time

from .._core import Header
from ..recorder import Recorder
from ..reports import Stats
from ..schedule import RecordingFormat

#: A stream whose VDIF time differs from the host clock by more than this is flagged.
CLOCK_LIMIT_S = 0.5


@dataclasses.dataclass(frozen=True)
class StreamSeen:
    """The stream as it arrives now."""

    frame_size: int
    #: Frames per second per thread (0 until known for sure: a second's frame numbers wrapped).
    frames_per_second: int
    threads: int
    channels: int
    bits: int
    complex: bool
    #: VDIF time of the newest frame, and the host clock when it arrived (POSIX seconds).
    vdif_unix: float
    arrived_unix: float

    @property
    def clock_offset(self) -> float:
        """VDIF time minus the host clock, seconds (positive: the stream is ahead); to the frame
        once the frame rate is known, else to the second."""
        return self.vdif_unix - self.arrived_unix


def ref_epoch_unix(ref_epoch: int) -> int:
    """POSIX seconds of a VDIF reference epoch (half-years since 2000)."""
    return calendar.timegm((2000 + ref_epoch // 2, 1 + 6 * (ref_epoch % 2), 1, 0, 0, 0))


def newest_frame_time(stats: Stats) -> float | None:
    """VDIF time of the newest frame, POSIX seconds: to the frame once the frame rate is known
    for sure, else to its second; None before the first frame."""
    latest = stats.latest_frame
    if latest is None:
        return None
    fps = stats.frames_per_second if stats.frames_per_second_known else 0
    return ref_epoch_unix(latest["ref_epoch"]) + latest["seconds"] + (latest["frame_nr"] / fps if fps else 0.0)


def stream_seen(rec: Recorder) -> StreamSeen | None:
    """The stream arriving at ``rec`` now; None before its first frame."""
    stats = rec.stats()
    vdif = newest_frame_time(stats)
    if vdif is None or stats.frame_size == 0 or stats.seconds_since_datagram is None:
        return None
    try:
        header = Header.from_bytes(bytes(rec.latest(1)[0][:32]), verify=False)
    except (ValueError, IndexError, RuntimeError):
        return None
    return StreamSeen(
        frame_size=stats.frame_size,
        frames_per_second=stats.frames_per_second if stats.frames_per_second_known else 0,
        threads=stats.threads,
        channels=header.nchan,
        bits=header.bits,
        complex=header.complex,
        vdif_unix=vdif,
        arrived_unix=time.time() - stats.seconds_since_datagram,
    )


def mismatches(expected: RecordingFormat, seen: StreamSeen | None) -> list[str]:
    """How the stream differs from the mode, one phrase each (empty: as scheduled)."""
    if seen is None:
        return ["no frame has arrived"]
    found: list[str] = []

    def differs(what: str, want: object, got: object) -> None:
        if want is not None and want != got:
            found.append(f"{what} {got}, the schedule says {want}")

    differs("frame size", expected.frame_size, seen.frame_size)
    differs("channels", expected.channels, seen.channels)
    differs("bits", expected.bits, seen.bits)
    differs("threads", len(expected.threads) or None, seen.threads)
    if expected.complex != seen.complex:
        found.append(f"{'complex' if seen.complex else 'real'} samples, the schedule says {'complex' if expected.complex else 'real'}")
    if seen.frames_per_second:
        differs("frames/s per thread", expected.frames_per_second, seen.frames_per_second)
    return found


def clock_warning(offset: float, limit: float = CLOCK_LIMIT_S) -> str | None:
    """The warning for a stream ``offset`` seconds off the host clock; None within ``limit``."""
    if abs(offset) <= limit:
        return None
    ahead = "ahead of" if offset > 0 else "behind"
    return (
        f"clock: the stream's VDIF time is {abs(offset):.3f} s {ahead} the host clock: a formatter "
        "that is off puts every scan window off by as much (check the formatter's time and the "
        "host's NTP)"
    )
