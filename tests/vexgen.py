"""VEX schedules written for tests and benchmarks: any number of scans and stations, VEX 1.5
(SCHED's style: ``$TRACKS`` and, for several threads, ``$THREADS``) or 2.0 (``$DATASTREAMS``),
in the format a synthetic sender makes.

The default format is the local synthetic sender's: 8224-byte frames (8192-byte payload),
125,000 frames per second per thread, one thread, 4 channels x 2 bits at 1024 Ms/s
(4 x 2 x 1.024e9 / (8 x 8192) = 125,000).

>>> from datetime import datetime, timedelta, timezone
>>> t0 = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=5)
>>> make_vex(tmp / "soon.vex", experiment="T1", stations=["Kv"],
...          scans=[("s1", t0, 2, 0), ("s2", t0 + timedelta(seconds=3), 2, 0)])  # doctest: +SKIP
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

#: A scan: (name, start, seconds recorded, data_good), or with a fifth element, its mode. The
#: window is [start + data_good, start + data_good + seconds): data_stop = data_good + seconds.
Scan = tuple[str, dt.datetime, float, float] | tuple[str, dt.datetime, float, float, str]

#: The mode every scan without a mode of its own is in.
DEFAULT_MODE = "vdif"

#: Nineteen station codes for the benchmark's schedule (two-character, as SCHED writes them).
STATIONS_19 = ["Ky", "Ku", "Kt", "Ef", "Mc", "Nt", "O8", "Ys", "Hh", "Ir", "T6", "Ur", "Tr", "Jb", "Wb", "Sv",
               "Zc", "Bd", "Km"]

HEADER = 32


def make_vex(
    path: str | Path,
    *,
    version: str = "1.5",
    experiment: str = "VRGEN",
    stations: Sequence[str] = ("Kv",),
    scans: Sequence[Scan],
    frame_size: int = 8224,
    fps: int = 125_000,
    threads: int = 1,
    channels: int = 4,
    bits: int = 2,
    modes: Mapping[str, Mapping[str, int]] | None = None,
    source: str = "3C345",
) -> Path:
    """Writes a VEX schedule to ``path`` and returns the path.

    Parameters
    ----------
    version : "1.5" or "2.0"
    experiment : str
        ``exper_name``: scans are named ``<experiment>_<station>_<scan>`` on disk.
    stations : list of str
        Station codes; every station takes part in every scan.
    scans : list of tuples
        ``(name, start, seconds, data_good)`` or ``(name, start, seconds, data_good, mode)``:
        the window is ``start + data_good`` to ``start + data_good + seconds``; ``start`` a
        datetime (UTC if naive). In any order (they are written as given).
    frame_size, fps, threads, channels, bits : int
        The format of the default mode ``"vdif"``: frame bytes including the 32-byte header,
        frames per second per thread, VDIF threads (ids 0..threads-1), channels per thread,
        bits per sample. The sample rate is ``fps * 8 * payload / (channels * bits)``.
    modes : dict, optional
        More modes, by name: each a dict overriding any of ``frame_size``, ``fps``, ``threads``,
        ``channels``, ``bits``.
    source : str
        The source of every scan.
    """
    if version not in ("1.5", "2.0"):
        raise ValueError(f"version {version!r}: write '1.5' or '2.0'")
    base = {"frame_size": frame_size, "fps": fps, "threads": threads, "channels": channels, "bits": bits}
    all_modes: dict[str, dict[str, int]] = {DEFAULT_MODE: dict(base)}
    for name, over in (modes or {}).items():
        unknown = set(over) - set(base)
        if unknown:
            raise ValueError(f"mode {name}: unknown settings {sorted(unknown)} (known: {sorted(base)})")
        all_modes[name] = {**base, **over}
    rows = [(s[0], s[1], s[2], s[3], s[4] if len(s) > 4 else DEFAULT_MODE) for s in scans]
    for name, _, _, _, mode in rows:
        if mode not in all_modes:
            raise ValueError(f"scan {name} is in mode {mode}, which is not given in modes")
    writer = _V15 if version == "1.5" else _V20
    text = writer(experiment, list(stations), all_modes, rows, source).text()
    p = Path(path)
    p.write_text(text)
    return p


def make_large_vex(
    path: str | Path,
    *,
    version: str = "1.5",
    n_scans: int = 184,
    stations: Sequence[str] = tuple(STATIONS_19),
    start: dt.datetime = dt.datetime(2026, 3, 5, 12, 0, 0, tzinfo=dt.timezone.utc),
    seconds: float = 120,
    gap: float = 30,
    data_good: float = 0,
    experiment: str = "VRBIG",
    **fmt: Any,
) -> Path:
    """A long schedule, for the benchmark: ``n_scans`` scans (``No0001``...) of ``seconds`` each,
    ``gap`` apart, all ``stations`` in each (default 184 scans, 19 stations); ``fmt`` as for
    :func:`make_vex`."""
    scans: list[Scan] = [
        (f"No{i + 1:04d}", start + dt.timedelta(seconds=i * (seconds + gap + data_good)), seconds, data_good)
        for i in range(n_scans)
    ]
    return make_vex(path, version=version, experiment=experiment, stations=stations, scans=scans, **fmt)


# -- writing ---------------------------------------------------------------------------------


def _decimal(x: Fraction) -> str:
    """``x`` as an exact decimal (ValueError where it has none)."""
    d = x.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d != 1:
        raise ValueError(f"{x} has no exact decimal: choose fps, channels and bits that give a decimal sample rate")
    digits = 0
    while (x * 10**digits).denominator != 1:
        digits += 1
    whole = x * 10**digits
    text = str(whole.numerator).rjust(digits + 1, "0")
    return text if digits == 0 else f"{text[:-digits]}.{text[-digits:]}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else _decimal(Fraction(repr(float(x))))


def _vex_time(t: dt.datetime) -> str:
    t = t.replace(tzinfo=dt.timezone.utc) if t.tzinfo is None else t.astimezone(dt.timezone.utc)
    sec = f"{t.second:02d}" + (f".{t.microsecond:06d}".rstrip("0") if t.microsecond else "")
    return f"{t.year:04d}y{t.timetuple().tm_yday:03d}d{t.hour:02d}h{t.minute:02d}m{sec}s"


def _sample_rate(m: Mapping[str, int]) -> Fraction:
    """Samples per second per channel giving ``fps`` frames per second per thread."""
    return Fraction(m["fps"] * 8 * (m["frame_size"] - HEADER), m["channels"] * m["bits"])


class _Writer:
    def __init__(self, experiment: str, stations: list[str], modes: dict[str, dict[str, int]],
                 scans: list[tuple[str, dt.datetime, float, float, str]], source: str) -> None:
        self.experiment = experiment
        self.stations = stations
        self.modes = modes
        self.scans = scans
        self.source = source
        self.out: list[str] = []

    def w(self, *lines: str) -> None:
        self.out.extend(lines)

    def text(self) -> str:
        self.header()
        self.w("$GLOBAL;", f"     ref $EXPER = {self.experiment};", "$EXPER;", f"def {self.experiment};",
               f"     exper_name = {self.experiment};", '     exper_description = "generated by tests/vexgen.py";',
               "enddef;")
        self.mode_block()
        self.w("$STATION;")
        for code in self.stations:
            self.w(f"def {code};", f"     ref $SITE = SITE_{code.upper()};", "enddef;")
        self.w("$SITE;")
        for code in self.stations:
            self.w(f"def SITE_{code.upper()};", "     site_type = fixed;", f"     site_name = SITE_{code.upper()};",
                   f"     site_ID = {code};", "enddef;")
        self.w("$SOURCE;", f"def {self.source};", f"     source_name = {self.source};",
               "     ra = 16h42m58.8099666s; dec = 39d48'36.993986\"; ref_coord_frame = J2000;", "enddef;")
        self.w("$FREQ;")
        for name, m in self.modes.items():
            n = m["channels"] * m["threads"]
            self.w(f"def FREQ_{name};", f"     sample_rate = {_decimal(_sample_rate(m) / 10**6)} Ms/sec;")
            for i in range(n):
                self.w(f"     chan_def = : {8000 + 16 * i}.00 MHz : U : 16.00 MHz : &CH{i + 1:02d} : &BBC{i + 1:02d} : &NoCal;")
            self.w("enddef;")
        self.format_blocks()
        self.w("$SCHED;")
        for name, start, seconds, good, mode in self.scans:
            self.w(f"scan {name};", f"     start={_vex_time(start)}; mode={mode}; source={self.source};")
            for code in self.stations:
                self.w(f"     station={code}: {_num(good)} sec: {_num(good + seconds)} sec: 0.000 GB: : : 1;")
            self.w("endscan;")
        return "\n".join(self.out) + "\n"

    def header(self) -> None:
        raise NotImplementedError

    def mode_block(self) -> None:
        raise NotImplementedError

    def format_blocks(self) -> None:
        raise NotImplementedError


class _V15(_Writer):
    def header(self) -> None:
        self.w("VEX_rev = 1.5;", "*    generated by tests/vexgen.py")

    def mode_block(self) -> None:
        self.w("$MODE;")
        for name, m in self.modes.items():
            self.w(f"def {name};", f"     ref $FREQ = FREQ_{name};", f"     ref $TRACKS = TRACKS_{name};")
            if m["threads"] > 1:
                self.w(f"     ref $THREADS = THREADS_{name};")
            self.w("enddef;")

    def format_blocks(self) -> None:
        self.w("$TRACKS;")
        for name, m in self.modes.items():
            self.w(f"def TRACKS_{name};")
            if m["bits"] in (1, 2):
                self.w(f"     track_frame_format = VDIF{m['frame_size']};")
                for i in range(m["channels"] * m["threads"]):
                    self.w(f"     fanout_def = : &CH{i + 1:02d} : sign : 1: {i + 2};")
                    if m["bits"] == 2:
                        self.w(f"     fanout_def = : &CH{i + 1:02d} :  mag : 1: {i + 2};")
            else:
                self.w(f"     track_frame_format = VDIF/{m['frame_size']}/{m['bits']};")
            self.w("enddef;")
        threaded = {n: m for n, m in self.modes.items() if m["threads"] > 1}
        if threaded:
            self.w("$THREADS;")
            for name, m in threaded.items():
                mbps = _decimal(_sample_rate(m) * m["channels"] * m["bits"] / 10**6)
                total = _decimal(_sample_rate(m) * m["channels"] * m["bits"] * m["threads"] / 10**6)
                self.w(f"def THREADS_{name};", f"     format = VDIF : : {total};")
                for t in range(m["threads"]):
                    self.w(f"     thread = {t} : 1 : 1 : {mbps} : {m['channels']} : {m['bits']} : : : {m['frame_size'] - HEADER};")
                self.w("enddef;")


class _V20(_Writer):
    def header(self) -> None:
        self.w("VEX_rev = 2.0;", "*    generated by tests/vexgen.py")

    def mode_block(self) -> None:
        self.w("$MODE;")
        for name in self.modes:
            self.w(f"def {name};", f"     ref $FREQ = FREQ_{name};", f"     ref $DATASTREAMS = DS_{name};", "enddef;")

    def format_blocks(self) -> None:
        self.w("$DATASTREAMS;")
        for name, m in self.modes.items():
            rate = _decimal(_sample_rate(m) / 10**6)
            self.w(f"def DS_{name};", "     datastream = &DS1 : VDIF;")
            for t in range(m["threads"]):
                self.w(f"     thread = &DS1 : &thread{t} : {t} : {m['channels']} : {rate} Ms/sec : {m['bits']} : real : "
                       f"{m['frame_size'] - HEADER};")
            ch = 1
            for t in range(m["threads"]):
                for c in range(m["channels"]):
                    self.w(f"     channel = &DS1 : &thread{t} : &CH{ch:02d} : {c};")
                    ch += 1
            self.w("enddef;")
