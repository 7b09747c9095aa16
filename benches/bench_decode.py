"""Decode throughput: 2-bit, 4-channel, 8224-byte frames into float32.

Compared in the same run with baseband (the library scientists use today) and with a plain
lookup-table loop over the same payload bytes (no frames, no headers: the memory-bandwidth
limit). Targets: >= 10x baseband, >= 90 % of the lookup-table loop.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

import vdifrec

from common import env_int, median_seconds, report



def main() -> dict[str, float]:
    frames = env_int("BENCH_DECODE_FRAMES", 4000)  # 4000: 33 MB of frames, 131 M samples
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.vdif")
        # Two seconds of frames: the reader learns the frame rate from the wrap between them.
        vdifrec.generate(path, seconds=2, fps=frames // 2, ref_epoch=53, start_second=0)
        with vdifrec.open(path) as fh:
            n = fh.shape[0]
            out = np.empty(fh.shape, np.float32)

            def ours() -> None:
                fh.seek(0)
                fh.read(out=out)

            t_ours = median_seconds(ours)
            payload = np.ascontiguousarray(fh.frames[:, 32:]).reshape(-1)
        flat = out.reshape(-1)

        def lut() -> None:
            vdifrec._core.plain_lut_decode(payload, flat)

        t_lut = median_seconds(lut)

        from baseband import vdif

        def bb() -> None:
            with vdif.open(path, "rs") as f:
                f.read()

        t_bb = median_seconds(bb, repeats=3)
    samples = n * 4
    gs = lambda t: samples / t / 1e9  # noqa: E731
    report(
        "decode 2-bit x 4 channels, 8224-byte frames -> float32 (one core)",
        [
            ("vdifrec Reader.read (Gsamples/s)", gs(t_ours), "Gsamples/s"),
            ("plain lookup-table loop (Gsamples/s)", gs(t_lut), "Gsamples/s"),
            ("baseband vdif.open('rs').read (Gsamples/s)", gs(t_bb), "Gsamples/s"),
        ],
        [
            ("vdifrec / baseband", t_bb / t_ours, ">= 10"),
            ("vdifrec / lookup-table loop", t_lut / t_ours, ">= 0.90"),
        ],
    )
    return {"ours": gs(t_ours), "lut": gs(t_lut), "baseband": gs(t_bb)}


if __name__ == "__main__":
    main()
