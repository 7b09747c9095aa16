"""`vdifrec spectrum`, `vdifrec bstate`, `vdifrec fringe`: the recording's proof, from the shell."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from .. import _core
from ..analysis.bstate import bstate
from ..analysis.fringe import fringe
from ..analysis.spectrum import spectrum
from ..reader import Reader
from ..reader import open as open_reader
from .args import OptionError, UsageError, add_search_arguments, figure, os_error, output, path, positive
from .printing import verdict


def _open(path: str, sample_rate: float | None) -> Reader:
    try:
        return open_reader(path, sample_rate=sample_rate)
    except OSError as exc:
        raise UsageError(os_error(exc)) from None
    except _core.FormatError as exc:
        raise UsageError(f"{path}: {exc}") from None


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sample-rate", type=positive(), default=None, help="Hz per channel, if the file cannot tell")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def add_analysis(sub: Any) -> None:
    p = sub.add_parser("spectrum", help="autospectra of every channel, tones found (like m5spec)")
    p.add_argument("file", type=path, help="VDIF file")
    p.add_argument("--nfft", type=positive(int), default=1024, help="spectral channels across the band (default 1024)")
    p.add_argument("--nint", type=positive(int), default=None, help="FFTs to average (default: the whole file)")
    p.add_argument("--threshold", type=positive(), default=10.0, help="tone: times the noise floor (default 10)")
    p.add_argument("--plot", type=figure, default=None, help="write a figure (one panel per channel, tones marked) here (.png)")
    p.add_argument("--m5spec", type=output, default=None, help="write m5spec's text form here: frequency (MHz), then each channel's power / mean")
    _common(p)
    p.set_defaults(func=run_spectrum)

    p = sub.add_parser("bstate", help="fraction of samples in each quantisation state (like m5bstate)")
    p.add_argument("file", type=path, help="VDIF file")
    _common(p)
    p.set_defaults(func=run_bstate)

    p = sub.add_parser("fringe", help="cross-correlate two files, or two channels/threads of one file")
    p.add_argument("files", nargs="+", metavar="FILE", type=path, help="one file (with --pair) or two files")
    p.add_argument("--pair", default=None, help="inputs to correlate, thread*nchan+channel: 'I,J' (default 0,1 for one file, 0,0 for two)")
    p.add_argument("--nfft", type=positive(int), default=1024, help="spectral channels (lags: 2 nfft)")
    p.add_argument("--nint", type=positive(int), default=None, help="FFTs to integrate (default: all)")
    p.add_argument("--plot", type=figure, default=None, help="write the lag amplitude figure here (.png)")
    add_search_arguments(p)
    _common(p)
    p.set_defaults(func=run_fringe)


def run_spectrum(a: argparse.Namespace) -> int:
    fh = _open(a.file, a.sample_rate)
    try:
        s = spectrum(fh, nfft=a.nfft, nint=a.nint)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    tones = s.tones(a.threshold)
    if a.json:
        d = s.to_dict()
        d["tones"] = [t.__dict__ | {"snr_db": t.snr_db} for t in tones]
        print(json.dumps(d))
    else:
        rate = f"{s.sample_rate / 1e6:g} MHz" if s.sample_rate else "?"
        print(f"{a.file}: {s.nfft} channels, {s.nint} FFTs, sample rate {rate} per channel")
        for ti, thread in enumerate(s.thread_ids):
            for ch in range(s.power.shape[1]):
                found = [t for t in tones if t.thread == thread and t.channel == ch]
                desc = ", ".join(f"{t.frequency / 1e6:.4f} MHz ({t.snr_db:.1f} dB)" for t in found[:3]) or "none"
                print(f"thread {thread} channel {ch}: tones {desc}")
    if a.m5spec:
        norm = s.normalised().reshape(-1, s.nfft)
        with open(a.m5spec, "w") as out:
            for k in range(s.nfft):
                vals = " ".join(f"{v:.6f}" for v in norm[:, k])
                out.write(f"{s.freq[k] / 1e6:.6f} {vals}\n")
    if a.plot:
        s.plot(a.plot, title=f"{a.file}: autospectra")
    return 0


def run_bstate(a: argparse.Namespace) -> int:
    fh = _open(a.file, a.sample_rate)
    b = bstate(fh)
    if a.json:
        print(json.dumps(b.to_dict()))
        return 0
    head = "  ".join(f"{lv:>8.3f}" for lv in b.levels) if b.bits <= 2 else f"{len(b.levels)} states"
    print(f"{a.file}: {b.bits}-bit, state fractions in % (levels {head})")
    for ti, thread in enumerate(b.thread_ids):
        for ch in range(b.fractions.shape[1]):
            row = "  ".join(f"{100 * f:8.2f}" for f in b.fractions[ti, ch]) if b.bits <= 4 else f"{b.counts[ti, ch].sum()} samples"
            print(f"thread {thread} channel {ch}: {row}")
    if b.bits <= 4:
        print("Gaussian:            " + "  ".join(f"{100 * f:8.2f}" for f in b.expected))
    return 0


def run_fringe(a: argparse.Namespace) -> int:
    if len(a.files) > 2:
        raise UsageError(f"argument FILE: give one file (with --pair) or two files, not {len(a.files)}")
    text = a.pair if a.pair is not None else ("0,1" if len(a.files) == 1 else "0,0")
    try:
        pair = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"--pair: expected two inputs 'I,J', got {text!r}") from None
    if len(pair) != 2:
        raise UsageError(f"--pair: expected two inputs 'I,J', got {text!r}")
    fa = _open(a.files[0], a.sample_rate)
    fb = _open(a.files[1], a.sample_rate) if len(a.files) == 2 else None
    if fb is None and len(fa.thread_ids) * fa.header0.nchan < 2:
        raise UsageError(f"{a.files[0]} has one input: give a second file to correlate with")
    try:
        f = fringe(fa, fb, nfft=a.nfft, pair=(pair[0], pair[1]), nint=a.nint, exclude_tones=not a.keep_tones,
                   max_delay=a.max_delay, snr_threshold=a.snr_threshold)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    if a.json:
        print(json.dumps(f.to_dict()))
    else:
        delay = f"{f.delay * 1e9:.3f} ns" if f.delay is not None else "?"
        tones = f", {len(f.excluded_channels)} channel(s) with tones left out" if len(f.excluded_channels) else ""
        print(
            f"fringe: delay {f.delay_samples} samples ({delay}), amplitude {f.amplitude:.5f}, "
            f"phase {math.degrees(f.phase):.2f} deg, SNR {f.snr:.1f}, {f.nint} FFTs of {f.lags.size} samples{tones}"
        )
        print(verdict(f))
    if a.plot:
        f.plot(a.plot, title=f"fringe {' x '.join(a.files)} ({text})")
    return 0
