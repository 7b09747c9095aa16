"""Test tones and phase-cal lines in a spectrum: where each is and how far above the noise floor."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np

from .. import _core

if TYPE_CHECKING:
    from .spectrum import Spectrum

__all__ = ["Tone", "find_tones"]


@dataclasses.dataclass(frozen=True)
class Tone:
    """A spectral line: where, and how far above the noise floor (the median)."""

    thread: int
    channel: int
    frequency: float
    power_ratio: float

    @property
    def snr_db(self) -> float:
        return 10 * math.log10(self.power_ratio)


def find_tones(s: Spectrum, threshold: float = 10.0) -> list[Tone]:
    """Tones in every spectrum: local maxima more than ``threshold`` times the median power,
    the frequency refined between channels; strongest first within each (thread, channel)."""
    out = []
    for ti, thread in enumerate(s.thread_ids):
        for ch in range(s.power.shape[1]):
            p = np.ascontiguousarray(s.power[ti, ch], dtype=np.float64)
            for chan, ratio in _core.find_tones(p, threshold):
                step = float(s.freq[1] - s.freq[0]) if len(s.freq) > 1 else 1.0
                out.append(Tone(thread, ch, float(s.freq[0] + chan * step), float(ratio)))
    return out
