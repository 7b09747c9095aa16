"""Smoke test of an installed vdifrec wheel, run by tests/wheel/run.py inside a fresh virtual
environment with no Rust toolchain on PATH (standard library and numpy only; nothing from the
source tree is imported).

    python smoke.py --version 0.1.0 --numpy-major 2 --workdir /tmp/x

Checks, each one line on stdout, the first failure ends the run with status 1:

- no compiler: neither ``cargo`` nor ``rustc`` is on PATH;
- the installed package: it comes from this environment, the wheel's build leaves the
  benchmarks' baselines out, ``vdifrec.__version__``, the installed METADATA and ``vdifrec
  --version`` all say the version given (Cargo.toml's);
- ``vdifrec generate`` then ``vdifrec check``: the file is clean, every frame counted;
- ``vdifrec.open(...).read()`` equals the samples decoded here, from the VDIF definition, by
  a few lines of numpy (2-bit offset binary, channels interleaved, least significant bits first);
- ``vdifrec.spectrum`` finds the generated tone in every channel, within one spectral channel;
- ``vdifrec record`` of ``vdifrec send`` on 127.0.0.1 for 2 seconds: every frame sent is in
  the file, nothing lost, dropped or malformed, and the summary's invariant holds.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

# The test recording: 2 s at 500 frames/s of 8224 bytes (4 channels x 2 bits, 8192 samples per
# channel and frame: 4.096 Msps, a 2.048 MHz band), the tone at 0.8 MHz.
GEN_FPS, GEN_SECONDS, FRAME_SIZE, TONE_HZ, SAMPLE_RATE = 500, 2, 8224, 0.8e6, 500 * 8192
# The loopback stream: 2 s at 2000 frames/s of 1056 bytes (17 Mbit/s). Small datagrams at a
# modest rate so that one batch of the sender (32 datagrams) fits many times over in the
# smallest socket buffer an untuned host grants (net.core.rmem_max 212992 bytes, without
# CAP_NET_ADMIN): there the kernel has no reason to drop, and vdifrec promises zero loss.
SEND_FPS, SEND_SECONDS, SEND_FRAME_SIZE = 2000, 2, 1056
# VDIF 2-bit samples are offset binary: 00, 01, 10, 11 are -high, -1, +1, +high, with high
# the optimal 3.316505 (the levels of the VDIF specification and of baseband).
LEVELS_2BIT = np.array([-3.316505, -1.0, 1.0, 3.316505], dtype=np.float32)


class SmokeError(Exception):
    pass


def ok(what: str) -> None:
    print(f"ok   {what}", flush=True)


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise SmokeError(what)
    ok(what)


def vdifrec_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The `vdifrec` command this environment installed (its console script, not `python -m`)."""
    exe = shutil.which("vdifrec")
    if exe is None or Path(exe).parent != Path(sys.executable).parent:
        raise SmokeError(f"the vdifrec command is not this environment's: {exe}")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)


def succeed(r: subprocess.CompletedProcess[str], what: str) -> str:
    if r.returncode != 0:
        raise SmokeError(f"{what}: exit status {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


def reference_samples(path: Path) -> np.ndarray:
    """The samples of a single-thread, 4-channel, 2-bit real VDIF file, (time, channel) float32,
    read from the bytes here: header words 2 and 3 give the frame length, channels and bits."""
    raw = np.fromfile(path, dtype=np.uint8)
    words = raw[:32].view("<u4")
    frame_bytes = int(words[2] & 0xFFFFFF) * 8
    nchan = 1 << int((words[2] >> 24) & 0x1F)
    bits = int((words[3] >> 26) & 0x1F) + 1
    legacy, is_complex = bool(words[0] >> 30 & 1), bool(words[3] >> 31)
    if (frame_bytes, nchan, bits, legacy, is_complex) != (FRAME_SIZE, 4, 2, False, False):
        raise SmokeError(f"unexpected format: {frame_bytes} bytes, {nchan} channels, {bits} bits, "
                         f"legacy {legacy}, complex {is_complex}")
    frames = raw.reshape(-1, frame_bytes)
    heads = np.ascontiguousarray(frames[:, :32]).view("<u4")
    if np.any(heads[:, 0] >> 31):
        raise SmokeError("an invalid-flagged frame in the generated file")
    payload = frames[:, 32:].reshape(-1)
    # Each byte is one time step: channel c in bits 2c and 2c+1.
    codes = (payload[:, None] >> np.array([0, 2, 4, 6], dtype=np.uint8)) & 3
    samples: np.ndarray = LEVELS_2BIT[codes]
    return samples


def check_installation(version: str, numpy_major: int) -> None:
    for tool in ("cargo", "rustc"):
        expect(shutil.which(tool) is None, f"no {tool} on PATH")
    expect(int(np.__version__.split(".")[0]) == numpy_major, f"numpy {np.__version__} (numpy {numpy_major} asked)")
    import vdifrec
    from vdifrec import _core

    where = Path(vdifrec.__file__).resolve()
    expect(Path(sys.prefix).resolve() in where.parents, f"vdifrec imported from this environment ({where.parent})")
    expect(not hasattr(_core, "plain_lut_decode"), "the wheel leaves the benchmarks' baselines out")
    expect(_core.build_profile() == "release", "an optimised build")
    expect(vdifrec.__version__ == version, f"vdifrec.__version__ {vdifrec.__version__}, Cargo.toml {version}")
    installed = importlib.metadata.version("vdifrec")
    expect(installed == version, f"installed metadata version {installed}, Cargo.toml {version}")
    metadata = importlib.metadata.distribution("vdifrec").read_text("METADATA") or ""
    expect(f"\nVersion: {version}\n" in metadata and "Requires-Python: >=3.10" in metadata,
           "METADATA: Version and Requires-Python")
    out = succeed(vdifrec_cli("--version"), "vdifrec --version").strip()
    expect(out == f"vdifrec {version}", f"vdifrec --version: {out!r}, Cargo.toml {version}")


def check_generate_read_spectrum(work: Path) -> None:
    import vdifrec

    path = work / "tone.vdif"
    succeed(vdifrec_cli("generate", str(path), "--seconds", str(GEN_SECONDS), "--fps", str(GEN_FPS),
                        "--frame-size", str(FRAME_SIZE), "--tone-mhz", str(TONE_HZ / 1e6)), "vdifrec generate")
    n_frames = GEN_FPS * GEN_SECONDS
    expect(path.stat().st_size == n_frames * FRAME_SIZE, f"generate wrote {n_frames} frames")
    report = json.loads(succeed(vdifrec_cli("check", str(path), "--json"), "vdifrec check"))
    expect(report["clean"] and report["frames"] == n_frames and report["totals"]["lost"] == 0
           and report["frames_per_second"] == GEN_FPS, "vdifrec check: clean, every frame, fps learned")

    expected = reference_samples(path)
    with vdifrec.open(path) as fh:
        expect(fh.sample_rate == SAMPLE_RATE, f"sample rate learned: {fh.sample_rate} Hz")
        samples = fh.read()
    expect(samples.dtype == np.float32 and samples.shape == expected.shape,
           f"read(): {samples.dtype} {samples.shape}, expected float32 {expected.shape}")
    expect(bool(np.array_equal(samples, expected)), "read() equals the samples decoded here from the bytes")

    with vdifrec.open(path) as fh:
        s = vdifrec.spectrum(fh, nfft=1024)
    channel_width = SAMPLE_RATE / 2 / 1024
    tones = vdifrec.find_tones(s)
    found = {t.channel: t.frequency for t in tones if abs(t.frequency - TONE_HZ) <= channel_width}
    expect(sorted(found) == [0, 1, 2, 3],
           f"spectrum: the {TONE_HZ / 1e6} MHz tone in every channel ({[round(t.frequency) for t in tones]} Hz)")


def check_record_send(work: Path) -> None:
    out, summary_json = work / "loopback.vdif", work / "summary.json"
    n = SEND_FPS * SEND_SECONDS
    exe = shutil.which("vdifrec")
    assert exe is not None
    # Port 0: the kernel picks a free high port; record says which once it listens. It stops at
    # the n-th frame, or after 30 s if some never come (then the checks below say what is missing).
    rec = subprocess.Popen(
        [exe, "record", "--port", "0", "--bind", "127.0.0.1", "--out", str(out), "--ring", "64MiB",
         "--frames", str(n), "--duration", "30", "--summary-json", str(summary_json), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert rec.stdout is not None
        port = None
        deadline = time.monotonic() + 20
        head: list[str] = []
        while port is None and time.monotonic() < deadline:
            line = rec.stdout.readline()
            if not line:
                break
            head.append(line)
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            port = int(m.group(1)) if m else None
        if port is None:
            raise SmokeError(f"vdifrec record never said 'listening on': {''.join(head)}")
        sent = json.loads(succeed(vdifrec_cli("send", "--to", f"127.0.0.1:{port}", "--duration", str(SEND_SECONDS),
                                              "--fps", str(SEND_FPS), "--frame-size", str(SEND_FRAME_SIZE), "--json"),
                                  "vdifrec send"))
        stdout, stderr = rec.communicate(timeout=40)
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.wait()
    if rec.returncode != 0:
        raise SmokeError(f"vdifrec record: exit status {rec.returncode}\n{stdout[-2000:]}\n{stderr[-2000:]}")
    expect(sent["frames_sent"] == n and sent["frames_dropped"] == 0 and sent["refused"] == 0,
           f"vdifrec send: {sent['frames_sent']} frames at {sent['gbps'] * 1000:.1f} Mbit/s")
    s = json.loads(summary_json.read_text())
    losses = {k: s[k] for k in ("frames_lost", "kernel_drops", "ring_overflows", "datagrams_malformed",
                                "frames_out_of_order", "frames_duplicate", "bytes_dropped_disk")}
    expect(s["frames_received"] == n and not any(losses.values()),
           f"vdifrec record: {s['frames_received']} of {n} frames, {losses}")
    expect(s["ok"] and s["invariant_holds"] and s["bytes_written"] == out.stat().st_size == n * SEND_FRAME_SIZE,
           f"vdifrec record: invariant holds, {out.stat().st_size} bytes on disk")
    rows = np.fromfile(out, dtype=np.uint8).reshape(-1, SEND_FRAME_SIZE)
    w = np.ascontiguousarray(rows[:, :8]).view("<u4")
    seq = (w[:, 0] & 0x3FFFFFFF).astype(np.int64) * SEND_FPS + (w[:, 1] & 0xFFFFFF)
    expect(bool(np.array_equal(seq, seq[0] + np.arange(n))), "the file holds every frame once, in order")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", required=True, help="the version Cargo.toml gives")
    p.add_argument("--numpy-major", type=int, required=True, help="the numpy major version installed")
    p.add_argument("--workdir", type=Path, required=True, help="an empty folder for the files written")
    p.add_argument("--lock", type=Path, help="hold this file locked while recording (one recording at a time "
                   "when several smoke tests run side by side)")
    a = p.parse_args()
    try:
        check_installation(a.version, a.numpy_major)
        check_generate_read_spectrum(a.workdir)
        with open(a.lock or os.devnull, "a") as lock:
            if a.lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
            check_record_send(a.workdir)
    except SmokeError as exc:
        print(f"FAIL {exc}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
