"""Corner turn: 16 channels of 2 bits (each 32-bit word one sample time of every channel), in
8224-byte frames, into 16 single-channel frames each (`vdifrec convert --channels 0-15`).

Figure: GB/s of input on one core for `vdifrec._core.corner_turn` (the kernel `convert` and the
live forwarder run: headers made, payloads turned), on slices of 256 frames (2 MB in) into one
output array used again (`out=`), as convert and the forwarder work a frame set or a batch at a
time into a buffer of their own. Baseline in the same run, on the same slices, into an output
array used again too: a vectorised numpy corner turn of the payloads alone (per channel, the
words shifted and masked to its 2-bit values, four packed into each byte), its output checked
against vdifrec's. Also shown: `corner_turn` making a new array for each slice (fresh memory is
zeroed first), and one call on all the frames (66 MB out of cache: writing 16 output streams is
bound by memory). Medians of BENCH_CORNERTURN_REPEATS (5) runs each. Target: >= 10x numpy.
"""

from __future__ import annotations

import numpy as np

import vdifrec
from vdifrec import _core

from common import env_int, median_seconds, report

NCHAN, BITS, FRAME = 16, 2, 8224
PAYLOAD = FRAME - 32
SLICE = 256


def numpy_corner_turn(payloads: np.ndarray, out: np.ndarray) -> np.ndarray:
    """(frames, 8192) payload bytes -> `out`, (frames, 16, 512): channel c's bytes of each frame."""
    words = payloads.view("<u4")  # (frames, 2048): each word one sample time
    for c in range(NCHAN):
        v = ((words >> np.uint32(BITS * c)) & np.uint32(3)).astype(np.uint8).reshape(len(words), -1, 4)
        out[:, c] = v[..., 0] | (v[..., 1] << 2) | (v[..., 2] << 4) | (v[..., 3] << 6)
    return out


def main() -> dict[str, float]:
    n = env_int("BENCH_CORNERTURN_FRAMES", 8000)  # 8000: 66 MB of frames
    repeats = env_int("BENCH_CORNERTURN_REPEATS", 5)
    header = np.frombuffer(vdifrec.Header(edv=0, frame_size=FRAME, nchan=NCHAN, bits=BITS).to_bytes(), np.uint8)
    rng = np.random.default_rng(1)
    frames = np.empty((n, FRAME), np.uint8)
    frames[:, :32] = header
    frames[:, 32:] = rng.integers(0, 256, (n, PAYLOAD), dtype=np.uint8)
    slices = [frames[at:at + SLICE].reshape(-1) for at in range(0, n, SLICE)]
    payloads = [np.ascontiguousarray(frames[at:at + SLICE, 32:]) for at in range(0, n, SLICE)]
    channels = list(range(NCHAN))

    ours = np.empty(SLICE * NCHAN * (32 + PAYLOAD // NCHAN), np.uint8)
    theirs = np.empty((SLICE, NCHAN, PAYLOAD // NCHAN), np.uint8)
    for f, p in zip(slices, payloads):
        mine = _core.corner_turn(f, channels).reshape(len(p), NCHAN, -1)
        if not np.array_equal(mine[:, :, 32:], numpy_corner_turn(p, theirs[:len(p)])):
            raise AssertionError("vdifrec's corner turn and numpy's differ")
    whole = [f for f in slices if len(f) == len(slices[0])]  # out= takes slices of one size

    t_ours = median_seconds(lambda: [_core.corner_turn(f, channels, out=ours) for f in whole], repeats=repeats)
    t_numpy = median_seconds(lambda: [numpy_corner_turn(p, theirs) for p in payloads[:len(whole)]], repeats=repeats)
    t_new = median_seconds(lambda: [_core.corner_turn(f, channels) for f in whole], repeats=repeats)
    flat = frames.reshape(-1)
    t_all = median_seconds(lambda: _core.corner_turn(flat, channels), repeats=repeats)
    gbs = lambda t, nbytes=len(whole) * slices[0].nbytes: nbytes / t / 1e9  # noqa: E731
    report(
        f"corner turn {NCHAN} ch x {BITS} bit, {FRAME}-byte frames -> {NCHAN} threads ({n} frames, one core)",
        [
            (f"vdifrec corner_turn, {SLICE}-frame slices, out=", gbs(t_ours), "GB/s of input"),
            (f"numpy shift/mask/pack, {SLICE}-frame slices, out=", gbs(t_numpy), "GB/s of input"),
            ("vdifrec, a new array for each slice", gbs(t_new), "GB/s of input"),
            ("vdifrec, one call on all frames", gbs(t_all, frames.nbytes), "GB/s of input"),
            ("vdifrec median time (slices, out=)", t_ours, "s"),
            ("numpy median time (slices, out=)", t_numpy, "s"),
        ],
        [("vdifrec / numpy", t_numpy / t_ours, ">= 10")],
    )
    return {"ours": gbs(t_ours), "numpy": gbs(t_numpy), "ours_new": gbs(t_new), "ours_all": gbs(t_all, frames.nbytes)}


if __name__ == "__main__":
    main()
