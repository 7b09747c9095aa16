"""Who and what the station is: ``version?``, ``dts_id?``, ``os_rev?`` and ``status?``, all
queries. The build time they show is the engine's (the compiled extension's file)."""

from __future__ import annotations

import datetime as _dt
import os
import socket
from typing import TYPE_CHECKING

from ... import _core
from ..common import Problem, query_only, reply
from ..protocol import Code, Command, Reply

if TYPE_CHECKING:
    from ..station import Station


def _build_time() -> _dt.datetime:
    return _dt.datetime.fromtimestamp(os.path.getmtime(_core.__file__), tz=_dt.timezone.utc)


def version(st: Station, c: Command) -> Reply:
    if not c.query:
        raise Problem(Code.NOT_NOW, "query only")
    t = _build_time()
    return reply(c, "vdifrec", _core.__version__, "64bit", "Release", socket.gethostname(), t.strftime("%d-%b-%Y"), t.strftime("%Hh%Mm%Ss"), "nossapi", "")


def dts_id(st: Station, c: Command) -> Reply:
    query_only(c)
    t = _build_time().strftime("%d-%b-%Y %Hh%Mm%Ss")
    return reply(c, "-", t, 1, socket.gethostname().split(".")[0], 0, 0, "-", "-", "-")


def os_rev(st: Station, c: Command) -> Reply:
    query_only(c)
    try:
        with open("/proc/version") as fh:
            return reply(c, fh.readline().strip())
    except OSError:
        raise Problem(Code.ERROR, "failed to open /proc/version") from None


def status(st: Station, c: Command) -> Reply:
    query_only(c)
    word = 0x1  # ready
    if st.recording:
        word |= 0x18 | 0x40  # a transfer, and it is a recording
    elif st.d2f is not None and st.d2f.active:
        word |= 0x18 | 0x100 | 0x1000  # a transfer, playback, disk2file
    return reply(c, f"0x{word:08x}")
