"""`vdifrec fringe-test A.vdif B.vdif [C.vdif ...]`: the session's fringe test from the shell,
every baseline between the stations' recordings, on this machine or a Dask cluster.

Exit status 0 when every baseline shows a fringe, 1 when one does not (so that a script can
raise the alarm), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import json
import math
import os
from typing import Any

from .. import _core
from .args import OptionError, UsageError, add_search_arguments, figure, number, os_error, path, positive
from .printing import verdict

OK, NO_FRINGE = 0, 1


def add_fringe_test(sub: Any) -> None:
    p = sub.add_parser(
        "fringe-test",
        help="correlate every baseline between stations' recordings and say which show fringes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="+", metavar="FILE", type=path,
                   help="one recording per station (two or more), aligned by their VDIF time")
    p.add_argument("--names", default=None, metavar="A,B,...",
                   help="station names, one per file (default: the stations in the headers, else the file names)")
    p.add_argument("--seconds", type=positive(), default=None, help="seconds to correlate (default: the whole overlap)")
    p.add_argument("--nfft", type=positive(int), default=1024, help="spectral channels (delays searched: ±nfft samples)")
    p.add_argument("--channels", default=None, metavar="I,J,...",
                   help="inputs to correlate, thread*nchan+channel (default 0); the best is reported")
    p.add_argument("--clock-offset", action="append", default=[], metavar="STATION=SECONDS",
                   help="a station clock's offset, its stamps ahead of true time (repeat for several)")
    p.add_argument("--stretches", type=positive(int), default=None,
                   help="stretches of time for the fringe-rate search (default 16; 1: delay alone)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="a Dask scheduler (tcp://host:8786) to run on (default: threads on this machine)")
    p.add_argument("--sample-rate", type=positive(), default=None, help="Hz per channel, if the files cannot tell")
    p.add_argument("--plot", type=figure, default=None,
                   help="write one lag plot per baseline: NAME.png gives NAME-Kv-Ku.png, ...")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    add_search_arguments(p)
    p.set_defaults(func=run_fringe_test)


def _names(a: argparse.Namespace) -> list[str]:
    if a.names is not None:
        names = [n.strip() for n in a.names.split(",")]
        if len(names) != len(a.files) or not all(names) or len(set(names)) != len(names):
            raise UsageError(f"--names: give {len(a.files)} different names, one per file, got {a.names!r}")
        return names
    stations = []
    for f in a.files:
        try:
            with open(f, "rb") as fh:
                stations.append(_core.Header.from_bytes(fh.read(32), verify=False).station)
        except OSError as exc:
            raise UsageError(os_error(exc)) from None
        except ValueError as exc:
            raise UsageError(f"{f}: {exc}") from None
    if len(set(stations)) == len(stations):
        return stations
    stems = [os.path.splitext(os.path.basename(f))[0] for f in a.files]
    return stems if len(set(stems)) == len(stems) else [f"{i}:{s}" for i, s in enumerate(stems)]


def _offsets(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            seconds = number(value) if sep else math.nan
        except argparse.ArgumentTypeError:
            seconds = math.nan
        if not name or not math.isfinite(seconds):
            raise UsageError(f"--clock-offset: expected STATION=SECONDS such as Ku=1.5e-6, got {item!r}")
        out[name] = seconds
    return out


def _channels(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise UsageError(f"--channels: expected inputs 'I,J,...' such as 0,1, got {text!r}") from None


def _client(address: str | None) -> Any:
    if address is None:
        return None
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("--scheduler needs distributed: pip install 'vdifrec[dask]'") from None
    # Ask before making a Client: one that fails to connect stays half made (and is closed,
    # slowly, whenever it is collected).
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import backends

    try:
        scheme, where = parse_address(address)
        if scheme not in backends:
            raise ValueError(f"unknown address scheme {scheme!r} (known: {', '.join(sorted(backends))})")
        if scheme in ("tcp", "tls"):
            socket.create_connection(parse_host_port(where), timeout=10).close()
        # Not the process's default client: the fringe test runs on it by `as_current`.
        return Client(address, timeout=10, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"--scheduler: no Dask scheduler answers at {address!r}: {exc}") from None


def run_fringe_test(a: argparse.Namespace) -> int:
    if len(a.files) < 2:
        raise UsageError("argument FILE: give two or more recordings, one per station")
    try:
        from ..dask import fringe_test
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    names = _names(a)
    stations = dict(zip(names, a.files))
    client = _client(a.scheduler)
    try:
        with client.as_current() if client is not None else contextlib.nullcontext():
            df = fringe_test(
                stations, seconds=a.seconds, nfft=a.nfft, channels=_channels(a.channels), max_delay=a.max_delay,
                clock_offset=_offsets(a.clock_offset), stretches=a.stretches, exclude_tones=not a.keep_tones,
                snr_threshold=a.snr_threshold, sample_rate=a.sample_rate,
            )
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    except OSError as exc:
        raise UsageError(os_error(exc)) from None
    finally:
        if client is not None:
            client.close()
    if a.json:
        rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items() if k != "fringe"}
                for row in df.to_dict("records")]
        print(json.dumps(rows))
    else:
        _print_table(df)
    if a.plot:
        stem, ext = os.path.splitext(a.plot)
        for row in df.itertuples():
            if row.fringe is None:
                continue
            row.fringe.plot(f"{stem}-{row.baseline}{ext or '.png'}", title=f"fringe {row.baseline} (input {row.channel})")
    return OK if bool(df["detected"].all()) else NO_FRINGE


def _print_table(df: Any) -> None:
    print(f"{'baseline':<10} {'delay':>9} {'delay ns':>12} {'amplitude':>10} {'phase':>8} {'SNR':>8} "
          f"{'rate mHz':>9} {'input':>5}  verdict")
    for r in df.itertuples():
        if r.fringe is None:
            print(f"{r.baseline:<10} no data: {r.note}")
            continue
        ns = f"{r.delay_seconds * 1e9:.3f}" if r.delay_seconds is not None else "?"
        rate = f"{r.fringe_rate * 1e3:.2f}" if r.fringe_rate is not None else "-"
        note = f"  ({r.note})" if r.note else ""
        print(f"{r.baseline:<10} {r.delay_samples:>9} {ns:>12} {r.amplitude:>10.5f} {math.degrees(r.phase):>8.2f} "
              f"{r.snr:>8.1f} {rate:>9} {r.channel:>5}  {verdict(r.fringe)}{note}")
    seconds = float(df["seconds"].max())
    print(f"{len(df)} baseline(s), {int(df['detected'].sum())} with fringes; up to {seconds:g} s correlated per baseline")
