"""Bit-state statistics, as mark5access' m5bstate counts them: the fraction of samples in each
quantisation state per thread and channel, beside what Gaussian noise gives. :data:`LEVELS`,
:func:`expected_fractions` and :func:`frame_states` are shared with ``vdifrec.dask``, which
counts the states of many files."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..reader import Reader
from ..views import checks_views
from .inputs import nonempty_frames

__all__ = ["BitStats", "LEVELS", "bstate", "expected_fractions", "frame_states"]


@dataclasses.dataclass(frozen=True)
class BitStats:
    """Fraction of samples in each quantisation state, per (thread, channel).

    ``expected`` holds the fractions Gaussian noise gives: for 2 bits at the optimal
    thresholds (±0.9816 σ: 16.3/33.7/33.7/16.3 %), for 4 and 8 bits at the encoding scale
    baseband assumes, for 1 bit 50/50.
    """

    bits: int
    levels: list[float]
    counts: npt.NDArray[np.int64]
    fractions: npt.NDArray[np.float64]
    expected: list[float]
    thread_ids: list[int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "bits": self.bits,
            "levels": self.levels,
            "counts": self.counts.tolist(),
            "fractions": self.fractions.tolist(),
            "expected": self.expected,
            "thread_ids": self.thread_ids,
        }


def expected_fractions(bits: int, levels: list[float]) -> list[float]:
    cdf = np.vectorize(lambda v: 0.5 * math.erfc(-v / math.sqrt(2)))
    if bits == 2:
        return list(_core.two_bit_state_fractions(_core.TWO_BIT_THRESHOLD_SIGMA))
    lv = np.asarray(levels, dtype=np.float64)
    edges = np.concatenate([[-np.inf], (lv[1:] + lv[:-1]) / 2, [np.inf]])
    c = cdf(edges)
    return [float(v) for v in np.diff(c)]


LEVELS = {
    1: [-1.0, 1.0],
    2: [-3.316505, -1.0, 1.0, 3.316505],
    4: [(v - 8) / 2.95 for v in range(16)],
    8: [(v - 127.5) / 35.5 for v in range(256)],
}


def frame_states(parts: list[npt.NDArray[np.uint8]]) -> tuple[list[int], npt.NDArray[np.int64], int]:
    """State counts per thread of whole frames given in parts (a scan's chunks): (threads,
    counts (thread, channel, state), bits)."""
    h = _core.Header.from_bytes(bytes(parts[0][0, :32]), verify=False)
    by_thread: dict[int, npt.NDArray[np.int64]] = {}
    for frames in parts:
        words = np.ascontiguousarray(frames[:, :16]).view("<u4")
        tid = (words[:, 3] >> 16) & 0x3FF
        for t in np.unique(tid).tolist():
            rows = np.ascontiguousarray(frames[tid == t])
            c = _core.bit_states(rows, h.header_size, h.bits, h.nchan, h.complex).astype(np.int64)
            by_thread[t] = by_thread[t] + c if t in by_thread else c
    threads = sorted(by_thread)
    return threads, np.stack([by_thread[t] for t in threads]), h.bits


@checks_views("bstate")
def bstate(x: Any, bits: int | None = None) -> BitStats:
    """Fraction of samples in each quantisation state per (thread, channel), like m5bstate.

    Counted from the raw bytes for a Reader or a frames array (fast, whole data); for a float
    array, the values must be decoded levels and ``bits`` says which (default: guessed).
    """
    if isinstance(x, Reader):
        parts = x.frame_parts
    else:
        frames = np.asarray(x)
        parts = [nonempty_frames(frames)] if frames.dtype == np.uint8 and frames.ndim == 2 else []
    if parts:
        threads, counts, b = frame_states(parts)
    else:
        a = np.asarray(x, dtype=np.float32)
        if a.ndim == 1:
            a = a[:, None, None]
        elif a.ndim == 2:
            a = a[:, None, :]
        b = bits or next((k for k in (1, 2, 4, 8) if np.isin(a[:64], np.asarray(LEVELS[k], np.float32)).all()), 0)
        if b not in LEVELS:
            raise ValueError("bstate needs decoded samples of 1, 2, 4 or 8 bits (give bits=...), a Reader, or frames")
        lv = np.asarray(LEVELS[b], np.float32)
        idx = np.searchsorted((lv[1:] + lv[:-1]) / 2, a)
        counts = np.stack([
            np.stack([np.bincount(idx[:, t, c].ravel(), minlength=len(lv)) for c in range(a.shape[2])])
            for t in range(a.shape[1])
        ]).astype(np.int64)
        threads = list(range(a.shape[1]))
    totals = counts.sum(axis=-1, keepdims=True)
    fractions = counts / np.where(totals > 0, totals, 1)
    levels = LEVELS[b]
    return BitStats(b, levels, counts, fractions, expected_fractions(b, levels), threads)
