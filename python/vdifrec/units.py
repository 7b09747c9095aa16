"""Argument conversion shared by the API and the command line: rates, sizes, paths, and the
engine's UTC times."""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Mapping
from typing import Any, TypeVar, cast

from . import _core

T = TypeVar("T", bound=Mapping[str, Any])


def to_hz(value: Any, name: str = "sample_rate") -> float | None:
    """A rate in Hz from a float, an int or an astropy Quantity (any frequency unit)."""
    if value is None:
        return None
    if hasattr(value, "to_value"):
        try:
            hz = float(value.to_value("Hz"))
        except Exception as exc:  # astropy raises UnitConversionError
            raise ValueError(f"{name} must be a frequency, got {value!r}: {exc}") from None
    else:
        try:
            hz = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a number of Hz or an astropy Quantity, got {value!r}") from None
    if not hz > 0 or hz != hz or hz == float("inf"):
        raise ValueError(f"{name} must be a positive number of Hz, got {value!r}")
    return hz


def parse_size(value: int | str, name: str) -> int:
    """A byte size given as a number or as text such as ``"8GiB"`` (the engine's own rule);
    ``name`` names the value in the error."""
    return value if isinstance(value, int) else _core.parse_size_arg(name, value)


def plain_options(options: T) -> T:
    """Options as the engine takes them: paths as text (nested dicts too), the rest as given."""
    out: dict[str, Any] = {}
    for k, v in options.items():
        if isinstance(v, os.PathLike):
            v = os.fspath(v)
        elif isinstance(v, dict):
            v = plain_options({os.fspath(x) if isinstance(x, os.PathLike) else x: y for x, y in v.items()})
        elif isinstance(v, (list, tuple)):
            v = [os.fspath(x) if isinstance(x, os.PathLike) else x for x in v]
        out[k] = v
    return cast(T, out)


def iso_utc(text: str) -> _dt.datetime:
    """A UTC time as the engine writes it (ISO 8601 to the nanosecond, kept to the microsecond:
    Python 3.10's ``fromisoformat`` takes no more)."""
    return _dt.datetime.fromisoformat(text.rstrip("Z")[:26]).replace(tzinfo=_dt.timezone.utc)
