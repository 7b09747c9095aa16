"""What every `vdifrec` subcommand shares: the usage error (exit status 2), argument types
whose errors name the argument, and SIGTERM handled as Ctrl-C."""

from __future__ import annotations

import argparse
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import _core


class UsageError(Exception):
    """A bad argument: `vdifrec` exits 2 with the message."""


def size(name: str) -> Callable[[str], int]:
    """A byte count such as 1073741824 or "1GiB"."""

    def parse(text: str) -> int:
        try:
            return _core.parse_size_arg(name, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def nonneg_int(name: str) -> Callable[[str], int]:
    """A whole number, 0 or more (ports, CPUs, ids)."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, got {text!r}") from None
        if v < 0:
            raise argparse.ArgumentTypeError(f"{name} must be 0 or more, got {text!r}")
        return v

    return parse


def positive(name: str, kind: type = float) -> Callable[[str], Any]:
    """A number above 0, of `kind` (float or int)."""
    what = "a whole number" if kind is int else "a number"

    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {what}, got {text!r}") from None
        if not v > 0:
            raise argparse.ArgumentTypeError(f"{name} must be positive, got {text!r}")
        return v

    return parse


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
