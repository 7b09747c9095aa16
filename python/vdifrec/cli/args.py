"""What every `vdifrec` subcommand shares: one-line usage errors (exit status 2) that name the
flag, argument types that only parse (the engine checks ranges and owns defaults), the signal
settings of `generate` and `send`, and SIGTERM handled as Ctrl-C."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from .. import _core
from ..analysis.fringe import DEFAULT_SNR_THRESHOLD
from ..recorder import Recorder
from ..scans import expand_disks

#: Exit statuses: 0 all is well, 1 a problem found (frames lost, a check failed), 2 a usage error.
OK, PROBLEMS, USAGE = 0, 1, 2

#: Every default, from the engine that owns it.
DEFAULTS: dict[str, dict[str, Any]] = _core.defaults()


class UsageError(Exception):
    """A bad argument: `vdifrec` exits 2 with the message."""


class OptionError(UsageError):
    """A bad argument whose message starts with the parameter's name, as the engine and the
    Python API word them (`nfft: ...`, `status_listen: ...`): main() names the flag instead."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (exit status 2), no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def flag_of(parser: argparse.ArgumentParser, name: str) -> str:
    """The flag a parameter of the engine was given with (`ring` → `--ring`)."""
    name = name.rpartition(".")[2]
    for action in parser._actions:
        if action.dest == name:
            return action.option_strings[0] if action.option_strings else (action.metavar or name).__str__()
    return name


def argument_error(parser: argparse.ArgumentParser, exc: Exception) -> UsageError:
    """The engine's `name: why` as `--flag: why`, for the command line."""
    name, sep, why = str(exc).partition(": ")
    if not sep or " " in name:
        return UsageError(str(exc))
    return UsageError(f"{flag_of(parser, name)}: {why}")


def given(a: argparse.Namespace, part: str) -> dict[str, Any]:
    """The options of `part` (recorder, sender, signal, ...) the user gave on the command line;
    the rest take the engine's defaults."""
    return {k: v for k in DEFAULTS[part] if (v := getattr(a, k, None)) is not None}


def default(part: str, name: str) -> str:
    """The engine's default, for help texts."""
    value = DEFAULTS[part][name]
    if name in ("ring", "rcvbuf") and isinstance(value, int):
        return _size_text(value)
    return "none" if value is None else str(value)


def _size_text(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def integer(text: str) -> int:
    """A whole number that fits 64 bits, signed (the engine checks its range)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not -(1 << 63) <= v < 1 << 63:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from -9223372036854775808 to 9223372036854775807, got {text!r}"
        )
    return v


def number(text: str) -> float:
    """A number (the engine checks its range)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def size(text: str) -> int | str:
    """A byte count such as 1073741824 or "1GiB" (the engine reads the unit and checks it)."""
    return int(text) if text.strip().isdigit() else text


def positive(kind: type = float) -> Callable[[str], Any]:
    """A number above 0, of `kind`: for the command line's own options (durations, counts)."""
    what = "a whole number" if kind is int else "a number"

    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} above 0, got {text!r}") from None
        if not v > 0 or v == float("inf"):
            raise argparse.ArgumentTypeError(f"expected {what} above 0, got {text!r}")
        return v

    return parse


def add_signal_arguments(p: argparse.ArgumentParser) -> None:
    """The synthetic signal's settings, as `generate` and `send` take them."""
    d = DEFAULTS["signal"]
    p.add_argument("--fps", type=integer, help=f"frames per second per thread (default {d['fps']})")
    p.add_argument("--frame-size", type=integer, help=f"bytes per frame incl. header (default {d['frame_size']})")
    p.add_argument("--nchan", type=integer, help=f"channels per frame, a power of two (default {d['nchan']})")
    p.add_argument("--bits", type=integer, help=f"bits per sample: 1, 2, 4 or 8 (default {d['bits']})")
    p.add_argument("--threads", type=integer, help=f"VDIF threads (default {d['threads']})")
    p.add_argument("--tone-mhz", type=number, help="tone frequency in MHz within the band (default: 0.390625 of the band)")
    p.add_argument("--tone-amplitude", type=number, help=f"tone amplitude in noise sigmas (default {d['tone_amplitude']})")
    p.add_argument("--edv", type=integer, help=f"extended data version of the headers: 0, 1 or 3 (default {d['edv']})")
    p.add_argument("--station", help=f"station: a two-character code such as Kv, or a 16-bit number (default {d['station']})")
    p.add_argument("--ref-epoch", type=integer, help="reference epoch, half-years since 2000 (default: now)")
    p.add_argument("--start-second", type=integer, help="VDIF seconds of the first frame (default: now)")
    p.add_argument("--seed", type=integer, help=f"random seed of this station's own noise (default {d['seed']})")
    p.add_argument("--sky-seed", type=integer,
                   help="seed of a sky shared by several stations: the common noise (--correlation) becomes a function "
                        "of time, the same in every file made with this sky seed, seen --delay samples late")


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops a recording the way Ctrl-C does: drain, summarise, exit."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def fail(prog: str, message: str) -> int:
    """Prints a failure that is not a usage error (exit status 1)."""
    print(f"{prog}: {message}", file=sys.stderr)
    return 1


def path(text: str) -> str:
    """A file or directory name: not empty."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path names no file")
    return text


def output(text: str) -> str:
    """A file the command line writes when the work is done (a summary, a figure): not empty,
    in a folder that exists, so that a typo is told before the work rather than after it."""
    path(text)
    folder = os.path.dirname(text) or "."
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{folder} is not a folder: give a file in an existing folder")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a folder: give a file name")
    return text


def os_error(exc: OSError) -> str:
    """An OSError as one line: the engine's own text (which names the file) without the
    errno and file name Python adds around it (the name is kept where the text lacks it)."""
    if not exc.strerror:
        return str(exc)
    if exc.filename is not None and os.fsdecode(exc.filename) not in exc.strerror:
        return f"{os.fsdecode(exc.filename)}: {exc.strerror}"
    return exc.strerror


def scan_recorder_options(a: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """The recorder's options given on the command line and its disks apart (`serve`,
    `observe`), every one checked by the engine now, before any port is bound, and each disk a
    folder."""
    options = given(a, "recorder")
    disks = options.pop("disks")
    if a.disk_faults:
        options["disk_faults"] = dict(a.disk_faults)
    Recorder(**{"port": "0", **options, "disks": disks})
    for d in expand_disks(disks):
        if not os.path.isdir(d):
            raise OptionError(f"disks: {d} does not exist or is not a folder")
    return options, disks


def check_bind(options: dict[str, Any]) -> None:
    """The recorder's `bind` address is one of this host's, checked before anything binds
    (`serve` binds at net_port=, `observe` at its first scan)."""
    if "bind" not in options:
        return
    try:
        with socket.socket(socket.AF_INET6 if ":" in options["bind"] else socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((options["bind"], 0))
    except OSError as exc:
        raise OptionError(f"bind: {options['bind']} is not an address of this host ({exc.strerror}); give 127.0.0.1, 0.0.0.0 or an interface's address") from None


# -- argument groups more than one command takes ------------------------------------------


def add_capture_arguments(p: Any, port_required: bool) -> None:
    """How the stream is received: the options `record` and `serve` share (each flag's dest is
    the engine's name for the option, so errors map back to the flag)."""
    port_help = "UDP port (0: any free port); several streams: 46227,46228, each may carry its address: 46227@10.0.1.1"
    if not port_required:
        port_help += " (optional: net_port= binds one)"
    p.add_argument("--port", required=port_required, help=port_help)
    p.add_argument("--bind", help=f"address to listen on (default {default('recorder', 'bind')}; 0.0.0.0 or the interface address to hear the network)")
    p.add_argument("--multicast", help="multicast group to join")
    p.add_argument("--ring", type=size, help=f"ring buffer size (default {default('recorder', 'ring')})")
    p.add_argument("--frame-size", type=integer, help="bytes per frame incl. header (default: learned from the first frame)")
    p.add_argument("--offset", type=integer, help="bytes to strip before each frame (8 for a PSN; default 0)")
    p.add_argument("--psn", action="store_true", default=None, help="count gaps in the 8-byte packet sequence numbers (with --offset 8)")
    p.add_argument("--fps", type=integer, help="frames per second per thread (default: learned)")
    p.add_argument("--capture-cpu", type=integer, help="pin the capture thread to this CPU")
    p.add_argument("--writer-cpu", type=integer, help="pin the writer thread to this CPU")
    p.add_argument("--no-direct", dest="direct", action="store_false", default=None, help="buffered writes instead of O_DIRECT")
    p.add_argument("--rcvbuf", type=size, help=f"socket receive buffer to ask for (default {default('recorder', 'rcvbuf')})")
    p.add_argument("--backend", help="capture backend: udp (default, no privileges), afpacket (TPACKET_V3 on --interface, CAP_NET_RAW), pfring (PF_RING on --interface)")
    p.add_argument("--interface", help="network interface for the afpacket and pfring backends")
    p.add_argument("--pfring-library", type=path, help="path of libpfring.so (default: the system's)")
    p.add_argument("--status-listen", help="serve the control-room page (GET /), /status (JSON), /history and /metrics (Prometheus) at HOST:PORT (PORT alone: localhost)")
    p.add_argument("--no-live", dest="live", action="store_false", default=None, help="no live quality monitor (on with --status-listen: spectra, bit statistics, tones of part of each second)")
    p.add_argument("--live-fraction", type=number, help="share of each second the live monitor analyses, in (0, 1], at most 1/8 of the ring (default: it paces itself from 1/16 by the CPU it may use)")
    p.add_argument("--live-nfft", type=integer, help=f"spectral channels of the live spectra (default {default('recorder', 'live_nfft')})")
    p.add_argument("--latency", action="store_true", default=None, help="per-stage latency stamps (kernel → capture → ring → write → disk, and VDIF time vs arrival); the table at the end")
    p.add_argument("--forward", action="append", metavar="DEST", help="forward the stream live while recording it (repeat for several): udp://HOST:PORT (VDIF frames), udps://HOST:PORT (jive5ab's sequence-numbered UDP) or tcp://HOST:PORT, optionally '?threads=0,1&channels=0-15&payload=1024&rate=2Gbps' (or ipd=MICROSECONDS); quote it for the shell")



def add_scan_arguments(p: Any, disks_required: bool = False) -> None:
    """Where and how scans are written: the options `record` and `serve` share."""
    p.add_argument("--disk", dest="disks", action="append", required=disks_required, help="record scans to this directory, one per disk (repeat, or a glob such as '/mnt/disk*')")
    p.add_argument("--format", help="scan layout: file (one disk), vbs (FlexBuff chunks; the default with several disks), mk6 (Mark6 scatter-gather)")
    p.add_argument("--chunk-size", type=size, help="vbs chunk or mk6 block size (default 256MiB and 8MiB), rounded to whole runs of 128 frames")
    p.add_argument("--writers", type=integer, help="scan writer threads (default: one per 5 Gbit/s plus one, at most one per disk)")
    p.add_argument("--split", help="write one scan per VDIF thread, station or sender, named SCAN_ds<key> (thread, station or sender)")
    p.add_argument("--disk-fault", dest="disk_faults", action="append", type=disk_fault, help="test aid: DIR=full@SIZE or DIR=error@SIZE, that disk fills or fails after SIZE bytes")


def disk_fault(text: str) -> tuple[str, str]:
    """DIR=full@SIZE or DIR=error@SIZE (the engine checks the rest)."""
    disk, sep, fault = text.rpartition("=")
    if not sep or not disk:
        raise argparse.ArgumentTypeError(f"{text!r}: write DIR=full@SIZE or DIR=error@SIZE")
    return disk, fault


def add_disk_arguments(p: argparse.ArgumentParser, required: bool = True) -> None:
    """`--disk` (repeated, or a glob) and `--format`, as every scan command takes them."""
    p.add_argument(
        "--disk",
        dest="disks",
        action="append",
        type=path,
        required=required,
        metavar="DIR",
        help="a directory (mount point) the scan was recorded on; repeat it, or give a quoted glob such as '/mnt/disk*'",
    )
    p.add_argument("--format", choices=["file", "vbs", "mk6"], help="the scan's layout (default: detected)")


def add_search_arguments(p: argparse.ArgumentParser) -> None:
    """How a fringe is searched and judged, as `fringe` and `fringe-test` take it."""
    # Its range is checked once, by the API (max_delay), and named here by OptionError.
    p.add_argument("--max-delay", type=integer, default=None, metavar="SAMPLES",
                   help="search delays up to this many samples either way (default: the whole lag function)")
    p.add_argument("--snr-threshold", type=positive(), default=DEFAULT_SNR_THRESHOLD,
                   help=f"SNR at which a fringe counts as detected (default {DEFAULT_SNR_THRESHOLD:g})")
    p.add_argument("--keep-tones", action="store_true",
                   help="keep the spectral channels holding tones (left out by default: a tone common to "
                        "both inputs fakes a flat lag function)")


def figure(text: str) -> str:
    """Where a figure goes: a file in an existing folder, in a format matplotlib writes."""
    output(text)
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise argparse.ArgumentTypeError("plots need matplotlib: pip install 'vdifrec[plot]'") from None
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    ext = os.path.splitext(text)[1][1:].lower()
    if ext and ext not in formats:
        raise argparse.ArgumentTypeError(
            f"cannot write a .{ext} figure: give a file ending in {', '.join('.' + f for f in formats)}"
        )
    return text
