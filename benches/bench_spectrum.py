"""Spectrum and fringe throughput on 1 GB of 2-bit, 4-channel VDIF (8224-byte frames).

Baseline in the same run: baseband decoding plus numpy.fft doing the same spectrum (on the
first quarter of the file, as it is slow; rates are per sample). Target: >= 20x.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

import vdifrec

from common import report

NFFT = 1024


def main() -> dict[str, float]:
    gb = float(os.environ.get("BENCH_SPECTRUM_GB", "1"))
    frames = int(gb * 1e9 / 8224)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        path = os.path.join(tmp, "spec.vdif")
        vdifrec.generate(path, seconds=frames / 125000, fps=125000, ref_epoch=53, start_second=0)
        with vdifrec.open(path, sample_rate=1.024e9) as fh:
            n = fh.shape[0] // (2 * NFFT) * (2 * NFFT)
            t0 = time.perf_counter()
            s = vdifrec.spectrum(fh, nfft=NFFT)
            t_ours = time.perf_counter() - t0
            t0 = time.perf_counter()
            f = vdifrec.fringe(fh, pair=(0, 1), nfft=NFFT)
            t_fringe = time.perf_counter() - t0
        ours = n * 4 / t_ours
        fringe_rate = n * 2 / t_fringe

        from baseband import vdif

        quarter = n // 4 // (2 * NFFT) * (2 * NFFT)
        t0 = time.perf_counter()
        with vdif.open(path, "rs", sample_rate=1.024e9 * vdifrec_units_hz()) as bb:
            acc = np.zeros((NFFT, 4))
            done = 0
            while done < quarter:
                chunk = bb.read(min(2 * NFFT * 256, quarter - done))
                x = chunk.reshape(-1, 2 * NFFT, 4)
                acc += (np.abs(np.fft.rfft(x, axis=1)[:, :NFFT]) ** 2).sum(axis=0)
                done += len(chunk)
        t_bb = time.perf_counter() - t0
        baseline = quarter * 4 / t_bb
    cpus = os.cpu_count()
    report(
        f"spectrum of {gb:g} GB of 2-bit x 4-channel VDIF, nfft {NFFT} ({cpus} CPUs)",
        [
            ("vdifrec.spectrum", ours / 1e9, "Gsamples/s"),
            ("baseband + numpy.fft (first quarter)", baseline / 1e9, "Gsamples/s"),
            ("vdifrec.fringe, two channels", fringe_rate / 1e9, "Gsamples/s"),
            ("FFTs averaged per channel", s.nint, ""),
            ("fringe amplitude (channels share the tone)", f.amplitude, ""),
        ],
        [("vdifrec / baseband + numpy", ours / baseline, ">= 20")],
    )
    return {"ours": ours, "baseline": baseline, "fringe": fringe_rate}


def vdifrec_units_hz() -> object:
    import astropy.units as u

    return u.Hz


if __name__ == "__main__":
    main()
