"""What the checks accept, turned into what the engine takes: a :class:`vdifrec.Reader` (read
in chunks from its current position, which is left unchanged), a ``(n, frame_size)`` uint8
array of whole frames (a live view from a Recorder, or ``reader.frames``), or a float/complex
sample array shaped ``(time,)``, ``(time, channel)`` or ``(time, thread, channel)``."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..reader import Reader

__all__ = ["as_frames", "as_samples", "frames_sample_rate", "is_complex", "kind", "nonempty_frames"]


def kind(x: Any) -> str:
    """'reader' (a file: decoded in Rust segment by segment), 'frames' (whole frames, e.g. a
    live view: likewise) or 'samples' (a decoded or float array)."""
    if isinstance(x, Reader):
        return "reader"
    a = np.asarray(x)
    return "frames" if a.dtype == np.uint8 and a.ndim == 2 else "samples"


def as_frames(x: Any) -> npt.NDArray[np.uint8]:
    return np.ascontiguousarray(nonempty_frames(np.asarray(x)), dtype=np.uint8)


def nonempty_frames(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A frames array that holds at least one frame (a view taken before any arrived holds none)."""
    if a.shape[0] == 0:
        raise ValueError("the frames array holds no frame, so there is nothing to analyse (a view taken before any frame arrived is empty)")
    return a


def as_samples(x: Any) -> tuple[npt.NDArray[np.float32], int, int, int, bool]:
    """A sample array as flat float32 (time, input, value): (flat, n, threads, nchan, complex)."""
    a = np.asarray(x)
    if a.ndim == 0 or a.ndim > 3:
        raise ValueError(f"samples must be shaped (time,), (time, channel) or (time, thread, channel); got {a.shape}")
    cplx = bool(np.iscomplexobj(a))
    if a.ndim == 1:
        a = a[:, None, None]
    elif a.ndim == 2:
        a = a[:, None, :]
    a = np.ascontiguousarray(a, dtype=np.complex64 if cplx else np.float32)
    return a.reshape(-1).view(np.float32), a.shape[0], a.shape[1], a.shape[2], cplx


def frames_sample_rate(frames: npt.NDArray[np.uint8]) -> float | None:
    return _core.Header.from_bytes(bytes(frames[0, :32]), verify=False).sample_rate


def is_complex(x: Any) -> bool:
    if isinstance(x, Reader):
        return x.complex_data
    a = np.asarray(x)
    if a.dtype == np.uint8 and a.ndim == 2:
        return _core.Header.from_bytes(bytes(nonempty_frames(a)[0, :32]), verify=False).complex
    return bool(np.iscomplexobj(a))
