"""What the recorder's live quality monitor saw in its last look (``Recorder.live()``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt

from .analysis.tones import Tone

__all__ = ["LiveLook"]


@dataclasses.dataclass(frozen=True)
class LiveLook:
    """The live monitor's newest look at part of one VDIF second.

    ``power`` is shaped ``(thread, channel, nfft)`` with ``threads`` naming the first axis and
    ``freq`` (Hz from the band's lower edge; spectral channels when the sample rate is
    unknown) the last, as ``vdifrec.spectrum`` gives them. ``fractions``/``expected`` are the
    bit-state fractions measured and expected for Gaussian noise, ``(thread, channel, state)``;
    ``deviation_pp`` the largest difference per ``(thread, channel)``, percentage points.
    ``computed`` and ``skips`` count the monitor's looks since the start (a look is skipped,
    never a frame lost, when the capture overwrote what it was reading or no CPU was spare).
    """

    vdif_second: str
    unix_second: int
    ref_epoch: int
    seconds: int
    frames: int
    fraction: float
    nfft: int
    bits: int
    complex: bool
    sample_rate_hz: float | None
    bandwidth_hz: float | None
    threads: list[int]
    freq: npt.NDArray[np.float64]
    power: npt.NDArray[np.float64]
    fractions: npt.NDArray[np.float64]
    expected: list[float] | None
    deviation_pp: npt.NDArray[np.float64]
    tones: list[Tone]
    computed: int
    skips: int
    cpu_s: float
    last_skip: str | None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LiveLook:
        spectra = d["spectra"]
        threads = sorted({s["thread"] for s in spectra})
        nchan = 1 + max((s["channel"] for s in spectra), default=0)
        nfft = int(d["nfft"])
        power = np.zeros((len(threads), nchan, nfft))
        for s in spectra:
            power[threads.index(s["thread"]), s["channel"]] = s["power"]
        states = 1 << int(d["bits"])
        fractions = np.zeros((len(threads), nchan, states))
        deviation = np.full((len(threads), nchan), np.nan)
        for b in d["bit_states"]:
            k = (threads.index(b["thread"]), b["channel"])
            fractions[k] = b["fractions"]
            if b["deviation_pp"] is not None:
                deviation[k] = b["deviation_pp"]
        expected = d["bit_states"][0]["expected"] if d["bit_states"] else None
        bw = d["bandwidth_hz"]
        freq = np.arange(nfft, dtype=np.float64) * (bw / nfft if bw else 1.0)
        return cls(
            vdif_second=d["vdif_second"],
            unix_second=int(d["unix_second"]),
            ref_epoch=int(d["ref_epoch"]),
            seconds=int(d["seconds"]),
            frames=int(d["frames"]),
            fraction=float(d["fraction"]),
            nfft=nfft,
            bits=int(d["bits"]),
            complex=bool(d["complex"]),
            sample_rate_hz=d["sample_rate_hz"],
            bandwidth_hz=bw,
            threads=threads,
            freq=freq,
            power=power,
            fractions=fractions,
            expected=expected,
            deviation_pp=deviation,
            tones=[Tone(t["thread"], t["channel"], float(t["frequency"]), float(t["power_ratio"])) for t in d["tones"]],
            computed=int(d["computed"]),
            skips=int(d["skips"]),
            cpu_s=float(d["cpu_s"]),
            last_skip=d["last_skip"],
        )
