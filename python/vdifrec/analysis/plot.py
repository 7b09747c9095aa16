"""Plots of the spectrum and fringe checks (matplotlib, the `plot` extra)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .fringe import Fringe
    from .spectrum import Spectrum


def _pyplot(path: str | None) -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ImportError("plots need matplotlib: pip install 'vdifrec[plot]'") from None
    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _axis(freq: np.ndarray, sample_rate: float | None) -> tuple[np.ndarray, str]:
    return (freq / 1e6, "frequency (MHz)") if sample_rate else (freq, "frequency (cycles/sample)")


def plot_spectrum(s: Spectrum, path: str | None = None, mark_tones: bool = True, title: str | None = None) -> Any:
    """One panel per (thread, channel), power normalised to mean 1 (as m5spec), tones marked."""
    plt = _pyplot(path)
    nthread, nchan = s.power.shape[:2]
    panels = nthread * nchan
    cols = min(panels, 2 if panels <= 4 else 4)
    rows = -(-panels // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False, sharex=True)
    x, xlabel = _axis(s.freq, s.sample_rate)
    norm = s.normalised()
    tones = s.tones() if mark_tones else []
    for k in range(rows * cols):
        ax = axes[k // cols][k % cols]
        if k >= panels:
            ax.set_visible(False)
            continue
        ti, ch = divmod(k, nchan)
        ax.semilogy(x, norm[ti, ch], lw=0.8)
        ax.set_title(f"thread {s.thread_ids[ti]}, channel {ch}", fontsize=9)
        for t in tones:
            if t.thread == s.thread_ids[ti] and t.channel == ch:
                fx = t.frequency / 1e6 if s.sample_rate else t.frequency
                ax.axvline(fx, color="tab:red", ls="--", lw=0.8)
                ax.annotate(f"{fx:.3f}{' MHz' if s.sample_rate else ''}\n{t.snr_db:.1f} dB",
                            (fx, float(norm[ti, ch].max())), fontsize=8, color="tab:red",
                            xytext=(4, -24), textcoords="offset points")
        if k // cols == rows - 1:
            ax.set_xlabel(xlabel)
        if k % cols == 0:
            ax.set_ylabel("power / mean")
    fig.suptitle(title or f"autospectra: {s.nfft} channels, {s.nint} FFTs")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def plot_fringe(f: Fringe, path: str | None = None, title: str | None = None) -> Any:
    """Lag amplitude with the peak marked."""
    plt = _pyplot(path)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(f.lags, f.lag_amplitude, lw=0.8)
    ax.axvline(f.delay_samples, color="tab:red", ls="--", lw=0.8)
    label = f"lag {f.delay_samples} samples"
    if f.delay is not None:
        label += f" = {f.delay * 1e9:.3f} ns"
    said = "fringe detected" if f.detected else "no fringe"
    ax.annotate(f"{label}\namplitude {f.amplitude:.4f}, phase {np.degrees(f.phase):.1f}°, SNR {f.snr:.1f}: {said}",
                (f.delay_samples, float(f.lag_amplitude.max())), xytext=(8, -28), textcoords="offset points",
                fontsize=8, color="tab:red")
    ax.set_xlabel("lag (samples)")
    ax.set_ylabel("|correlation|")
    ax.set_title(title or f"fringe: {f.nint} FFTs")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig
