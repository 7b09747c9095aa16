"""What every `vdifrec` subcommand shares: one-line usage errors (exit status 2) that name the
flag, argument types that only parse (the engine checks ranges and owns defaults), the signal
settings of `generate` and `send`, and SIGTERM handled as Ctrl-C."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from . import _core

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
