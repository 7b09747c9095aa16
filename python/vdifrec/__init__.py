"""vdifrec: record 10 GbE VDIF streams without losing a byte, and check what was recorded.

The engine is Rust (``vdifrec._core``); this package is its typed Python face.

>>> import vdifrec
>>> with vdifrec.open(vdifrec.SAMPLE_VDIF) as fh:   # doctest: +SKIP
...     x = fh.read(1024)
"""

from __future__ import annotations

import warnings as _warnings
from pathlib import Path as _Path

from . import _core
from ._core import (
    ArgumentError,
    FormatError,
    GapError,
    Header,
    HeaderError,
    OutputError,
    PortInUseError,
    RecorderError,
    SenderError,
    StaleViewError,
)
from .analysis.bstate import BitStats, bstate
from .analysis.check import check
from .analysis.fringe import Fringe, fringe
from .analysis.spectrum import Spectrum, spectrum
from .analysis.tones import Tone, find_tones
from .convert import convert
from .live import LiveLook
from .reader import Reader, decode, open
from .observing import ScanResult, SessionSummary, observe
from .recorder import Recorder
from .remote import RemoteStatus, RemoteStatuses
from .reports import (
    DiskRecord,
    FileRecord,
    ForwardSecond,
    ForwardStats,
    ScanSummary,
    SecondRow,
    Stats,
    Summary,
    ThreadSecond,
)
from .scans import gather, repair, scans
from .schedule import RecordingFormat, Schedule, ScheduledScan, ScheduleError, VexError
from .sources import Sender, generate, send
from .transfer import PushProgress, Receiver, TransferError, push
from .views import RingFrames
from .vsi import VSIClient, VSIError

__version__: str = _core.__version__

defaults: dict[str, dict[str, object]] = _core.defaults()
"""Every option's default, as the engine defines it: ``defaults["recorder"]["ring"]`` is the
ring size a Recorder gets when none is given; also ``sender``, ``signal``, ``generate``, ``check``."""

SAMPLE_VDIF: str = str(_Path(__file__).parent / "data" / "sample_fila10g.vdif")
"""A tiny synthetic FILA10G-like recording (2-bit, 4 channels, 200 MHz tone) for examples and tests."""

if _core.build_profile() == "debug":
    _warnings.warn(
        "vdifrec was built without optimisation (debug): recording at 8 Gbps will lose data. "
        "Reinstall with `pip install .` or `make`, which build in release mode.",
        RuntimeWarning,
        stacklevel=2,
    )

__all__ = [
    "ArgumentError",
    "BitStats",
    "FileRecord",
    "Fringe",
    "FormatError",
    "GapError",
    "Header",
    "LiveLook",
    "HeaderError",
    "OutputError",
    "PortInUseError",
    "PushProgress",
    "Reader",
    "Receiver",
    "RecordingFormat",
    "Recorder",
    "RecorderError",
    "RemoteStatus",
    "RemoteStatuses",
    "SAMPLE_VDIF",
    "ScanResult",
    "SessionSummary",
    "Schedule",
    "ScheduleError",
    "ScheduledScan",
    "SecondRow",
    "ForwardStats",
    "ForwardSecond",
    "Sender",
    "SenderError",
    "StaleViewError",
    "RingFrames",
    "Spectrum",
    "Stats",
    "Summary",
    "ScanSummary",
    "DiskRecord",
    "ThreadSecond",
    "Tone",
    "TransferError",
    "VSIClient",
    "VSIError",
    "VexError",
    "__version__",
    "bstate",
    "check",
    "convert",
    "decode",
    "defaults",
    "find_tones",
    "fringe",
    "gather",
    "observe",
    "generate",
    "open",
    "push",
    "repair",
    "scans",
    "send",
    "spectrum",
]
