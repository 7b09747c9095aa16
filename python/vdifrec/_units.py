"""Argument conversion shared by the API and the command line."""

from __future__ import annotations

from typing import Any

from . import _core


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


def to_bytes(value: int | str | None, name: str) -> int | None:
    """A byte count from an int or a string like "8GiB" (None stays None); the error names the argument."""
    if value is None:
        return None
    return size(value, name)


def size(value: int | str, name: str) -> int:
    """A byte count from an int or a string like "8GiB"; the error names the argument."""
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected a size such as 1073741824 or \"1GiB\", got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{name}: a size cannot be negative, got {value}")
        return value
    if isinstance(value, str):
        return _core.parse_size_arg(name, value)
    raise ValueError(f"{name}: expected a size such as 1073741824 or \"1GiB\", got {value!r}")
