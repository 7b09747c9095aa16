"""What goes wrong reading a schedule: :class:`ScheduleError` for a schedule that cannot be
planned (a scan without a start, a mode it does not define, a station it does not have), and
:class:`VexError`, a kind of it, for text that is not VEX, naming the file, line and column."""

from __future__ import annotations

__all__ = ["ScheduleError", "VexError"]


class ScheduleError(ValueError):
    """A schedule that cannot be planned as it is: the message names the file and line, or the
    scan, mode or station at fault, and says what to write instead."""


class VexError(ScheduleError):
    """Text that is not VEX: ``str()`` is ``<file>:<line>:<column>: <what>``.

    Attributes
    ----------
    source : str
        The file's name (``"<string>"`` for text given directly).
    line, column : int
        Where the fault is, both counted from 1 (the column in characters).
    what : str
        The fault alone, without the place.
    """

    def __init__(self, source: str, line: int, column: int, what: str) -> None:
        super().__init__(f"{source}:{line}:{column}: {what}")
        self.source = source
        self.line = line
        self.column = column
        self.what = what
