"""What a scientist checks in a recording, the face of the engine's ``src/analysis/``: spectra
(:func:`spectrum`, as m5spec), test tones (:func:`find_tones`), bit-state statistics
(:func:`bstate`, as m5bstate), the fringe between two streams (:func:`fringe`) and the
whole-file integrity check (:func:`check`).

The checks take a :class:`vdifrec.Reader` (read in chunks from its current position, which is
left unchanged), a ``(n, frame_size)`` uint8 array of whole frames (a live view from a Recorder,
or ``reader.frames``), or a float/complex sample array shaped ``(time,)``, ``(time, channel)``
or ``(time, thread, channel)``. The FFTs run in Rust, in chunks, on all CPUs, with the GIL
released.
"""

from __future__ import annotations

from .bstate import BitStats, bstate
from .check import check
from .fringe import DEFAULT_SNR_THRESHOLD, Fringe, fringe
from .spectrum import Spectrum, spectrum
from .tones import Tone, find_tones

__all__ = [
    "DEFAULT_SNR_THRESHOLD",
    "BitStats",
    "Fringe",
    "Spectrum",
    "Tone",
    "bstate",
    "check",
    "find_tones",
    "fringe",
    "spectrum",
]
