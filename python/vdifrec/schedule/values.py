"""VEX values: times (``2022y039d23h28m00s``), durations (``180 sec``) and sample rates
(``32.0 Ms/sec``). Numbers are read as exact fractions of the decimals written, so that the
frames a scan expects are counted without rounding."""

from __future__ import annotations

import datetime as dt
import re
from fractions import Fraction

__all__ = ["exact", "parse_duration", "parse_rate", "parse_time"]

_TIME = re.compile(
    r"(?P<year>\d{4})y(?P<day>\d{1,3})d"
    r"(?:(?P<hour>\d{1,2})h)?(?:(?P<minute>\d{1,2})m)?(?:(?P<second>\d{1,2}(?:\.\d*)?)s)?"
)
_QUANTITY = re.compile(r"(?P<number>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>\S*)")

#: Seconds per unit of a duration.
SECONDS = {"": 1, "sec": 1, "s": 1, "min": 60, "hr": 3600, "h": 3600, "day": 86400, "d": 86400}
#: Samples per second per unit of a sample rate (VEX writes ``Ms/sec``).
RATES = {"s/sec": 1, "ks/sec": 10**3, "Ms/sec": 10**6, "Gs/sec": 10**9, "Hz": 1, "kHz": 10**3, "MHz": 10**6, "GHz": 10**9}


def exact(number: str) -> Fraction:
    """The decimal ``number`` as written, exactly (``"0.1"`` is one tenth). ValueError if
    it is none."""
    try:
        return Fraction(number.strip())
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"{number!r} is not a number") from None


def parse_time(text: str) -> dt.datetime:
    """A VEX time, ``2022y039d23h28m00s`` (day of year from 1; hours, minutes and seconds may be
    left out, seconds may have a fraction), as a UTC datetime. ValueError if it is none."""
    m = _TIME.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a VEX time: write it as 2022y039d23h28m00s")
    day = int(m["day"])
    hour, minute = int(m["hour"] or 0), int(m["minute"] or 0)
    second = exact(m["second"] or "0")
    if not (1 <= day <= 366 and hour < 24 and minute < 60 and second < 61):
        raise ValueError(f"{text!r} is not a VEX time: day {day}, {hour}h{minute}m{float(second):g}s is out of range")
    start = dt.datetime(int(m["year"]), 1, 1, tzinfo=dt.timezone.utc)
    micro = round(second * 1_000_000)
    t = start + dt.timedelta(days=day - 1, hours=hour, minutes=minute, microseconds=micro)
    if t.year != start.year:
        raise ValueError(f"{text!r} is not a VEX time: {start.year} has no day {day}")
    return t


def parse_duration(text: str) -> Fraction:
    """A VEX duration (``180 sec``, ``1.5 min``, ``2 hr``; a bare number is seconds) in seconds.
    ValueError if it is none."""
    m = _QUANTITY.fullmatch(text.strip())
    if m is None or m["unit"] not in SECONDS:
        raise ValueError(f"{text!r} is not a duration: write it as 180 sec (or min, hr)")
    return exact(m["number"]) * SECONDS[m["unit"]]


def parse_rate(text: str) -> Fraction:
    """A VEX sample rate (``32.0 Ms/sec``) in samples per second. ValueError if it is none."""
    m = _QUANTITY.fullmatch(text.strip())
    if m is None or m["unit"] not in RATES:
        raise ValueError(f"{text!r} is not a sample rate: write it as 32.0 Ms/sec")
    return exact(m["number"]) * RATES[m["unit"]]
