"""Recording benchmarks, each with its baseline measured in the same run.

(a) Record the reference stream (125000 frames/s of 8224 bytes = 8.224 Gbit/s) on loopback for
    BENCH_RECORD_SECONDS (default 60) with the sender on the same machine. Target: zero loss
    and the invariant. Files rotate every 4 GiB and each closed file is deleted once its size
    is checked, so the run needs only a few GB of free disk. Baseline: the same sender into a
    plain recvmmsg-and-discard loop for the same time.
(b) Highest lossless capture-only rate (monitoring, no disk) against the discard loop, fed by
    the same sender, on a ladder of rates. Target: >= 90 % of the discard loop.
(c) Writer throughput (fed from memory) against `dd bs=4M oflag=direct` to the same disk.
    Target: >= 95 %.
(d) Capture CPU time per frame against the discard loop's per datagram.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import vdifrec

from common import report

FS = 8224
REF_FPS = 125_000


def disk_dir() -> Path:
    """A folder on the disk recordings would go to (the project's disk, not /tmp if tmpfs)."""
    base = Path(os.environ.get("BENCH_DIR", Path(__file__).resolve().parent.parent / "bench-results"))
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="bench-", dir=base))


def discard_run(fps: int, seconds: float) -> tuple[dict, dict]:
    """The sender into the plain discard loop: (sender summary, receiver result)."""
    rx = vdifrec._core.DiscardReceiver()
    sent = vdifrec.send(("127.0.0.1", rx.port), duration=seconds, fps=fps)
    deadline = time.monotonic() + 5
    while rx.received() < sent["frames_sent"] and time.monotonic() < deadline:
        time.sleep(0.01)
    got = json.loads(rx.stop())
    return sent, got


def record_reference(seconds: float) -> dict:
    folder = disk_dir()
    deleted: list[int] = []
    stop = threading.Event()

    def delete_closed(rec: vdifrec.Recorder) -> None:
        # Closed files are complete: check the size, delete, keep the disk from filling.
        seen: set[str] = set()
        while not stop.is_set():
            for p in sorted(folder.glob("ref_*.vdif")):
                s = rec.stats() if rec.running else None
                if s is None or str(p) == s.current_file or str(p) in seen:
                    continue
                seen.add(str(p))
                deleted.append(p.stat().st_size)
                p.unlink()
            time.sleep(0.5)

    rec = vdifrec.Recorder(port=0, directory=folder, prefix="ref", ring="2GiB", frame_size=FS, fps=REF_FPS, file_size="4GiB")
    rec.start()
    assert rec.address is not None
    cleaner = threading.Thread(target=delete_closed, args=(rec,), daemon=True)
    cleaner.start()
    t0 = time.monotonic()
    sent = vdifrec.send(rec.address, duration=seconds, fps=REF_FPS)
    deadline = time.monotonic() + 10
    while rec.stats().frames_received < sent["frames_sent"] and time.monotonic() < deadline:
        time.sleep(0.05)
    summary = rec.stop()
    wall = time.monotonic() - t0
    stop.set()
    cleaner.join()
    shutil.rmtree(folder, ignore_errors=True)
    return {"sent": sent, "summary": summary, "wall": wall, "deleted_files": len(deleted)}


def capture_only(fps: int, seconds: float) -> tuple[dict, vdifrec.Summary]:
    rec = vdifrec.Recorder(port=0, ring="1GiB", frame_size=FS, fps=fps)
    rec.start()
    assert rec.address is not None
    sent = vdifrec.send(rec.address, duration=seconds, fps=fps)
    deadline = time.monotonic() + 5
    while rec.stats().frames_received < sent["frames_sent"] and time.monotonic() < deadline:
        time.sleep(0.01)
    return sent, rec.stop()


def dd_direct(folder: Path, mib: int) -> float:
    target = folder / "dd.bin"
    t0 = time.perf_counter()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", "bs=4M", f"count={mib // 4}", "oflag=direct", "status=none"],
        check=True,
    )
    elapsed = time.perf_counter() - t0
    target.unlink()
    return mib * 2**20 / elapsed


def writer_alone(folder: Path, mib: int) -> float:
    r = json.loads(vdifrec._core.writer_throughput(str(folder), mib * 2**20))
    for p in folder.glob("bench_*.vdif"):
        p.unlink()
    if r["error"]:
        raise RuntimeError(r["error"])
    return r["bytes"] / r["seconds"]


def main() -> dict[str, float]:
    seconds = float(os.environ.get("BENCH_RECORD_SECONDS", "60"))
    free = shutil.disk_usage(disk_dir().parent).free
    results: dict[str, float] = {}

    # (a) the reference recording, and its baseline.
    base_sent, base_got = discard_run(REF_FPS, min(seconds, 10))
    ref = record_reference(seconds)
    s: vdifrec.Summary = ref["summary"]
    sent = ref["sent"]
    frames_expected = sent["frames_sent"]
    report(
        f"(a) record 8.224 Gbit/s for {seconds:g} s on loopback (sender on the same host; {free / 1e9:.0f} GB free)",
        [
            ("frames sent", frames_expected, "frames"),
            ("frames recorded", s.frames_received, "frames"),
            ("frames lost (all causes)", s.frames_lost + s.ring_overflows, "frames"),
            ("kernel drops", s.kernel_drops, "datagrams"),
            ("bytes written == buffered (1 yes)", float(s.bytes_written == s.bytes_buffered and s.invariant_holds), ""),
            ("sender rate achieved", sent["gbps"], "Gbit/s"),
            ("baseline: discard loop received / sent", base_got["datagrams"] / max(base_sent["frames_sent"], 1), ""),
        ],
        [("recorded / sent (target 1.00, zero loss)", s.frames_received / max(frames_expected, 1), "1.00")],
    )
    results["a_lossless"] = float(s.frames_received == frames_expected and s.ok)

    # (b) highest lossless capture-only rate vs the discard loop.
    ladder = [int(x) for x in os.environ.get("BENCH_LADDER", "125000,150000,175000,200000,250000,300000").split(",")]
    best_ours = best_base = 0
    rows = []
    for fps in ladder:
        b_sent, b_got = discard_run(fps, 3)
        base_ok = b_got["datagrams"] == b_sent["frames_sent"] and b_got["kernel_drops"] == 0
        o_sent, o_sum = capture_only(fps, 3)
        ours_ok = o_sum.frames_received == o_sent["frames_sent"] and o_sum.kernel_drops == 0
        achieved = o_sent["gbps"]
        rows.append((f"{fps} fps asked, sender reached {achieved:.2f} Gbit/s: discard {'ok' if base_ok else 'LOSS'}, vdifrec {'ok' if ours_ok else 'LOSS'}", achieved, "Gbit/s"))
        # The rung's nominal rate, so both sides are judged on the same offered load.
        nominal = fps * FS * 8 // 1_000_000
        if base_ok:
            best_base = max(best_base, nominal)
        if ours_ok:
            best_ours = max(best_ours, nominal)
    report(
        "(b) highest lossless capture-only rate, same sender and rungs (sender on the same host)",
        rows + [("vdifrec (nominal Gbit/s)", best_ours / 1000, "Gbit/s"), ("discard loop (nominal Gbit/s)", best_base / 1000, "Gbit/s")],
        [("vdifrec / discard loop", best_ours / max(best_base, 1), ">= 0.90")],
    )
    results["b_ratio"] = best_ours / max(best_base, 1)

    # (c) writer vs dd, medians of three.
    folder = disk_dir()
    mib = int(os.environ.get("BENCH_WRITE_MIB", "4096"))
    ours = statistics.median(writer_alone(folder, mib) for _ in range(3))
    dd = statistics.median(dd_direct(folder, mib) for _ in range(3))
    shutil.rmtree(folder, ignore_errors=True)
    report(
        f"(c) writer alone (fed from memory) vs dd bs=4M oflag=direct, {mib} MiB, median of 3",
        [("vdifrec writer", ours / 1e9, "GB/s"), ("dd", dd / 1e9, "GB/s")],
        [("vdifrec / dd", ours / dd, ">= 0.95")],
    )
    results["c_ratio"] = ours / dd

    # (d) capture CPU per frame (from (a)) vs the discard loop per datagram.
    ours_ns = s.capture_cpu_s / max(s.frames_received, 1) * 1e9
    base_ns = base_got["cpu_s"] / max(base_got["datagrams"], 1) * 1e9
    report(
        "(d) capture CPU time per frame at 8.224 Gbit/s",
        [("vdifrec capture thread", ours_ns, "ns/frame"), ("discard loop", base_ns, "ns/datagram"),
         ("vdifrec writer thread", s.writer_cpu_s / max(s.frames_received, 1) * 1e9, "ns/frame")],
        [("vdifrec / discard loop", ours_ns / base_ns, "close to 1")],
    )
    results["d_ratio"] = ours_ns / base_ns
    return results


if __name__ == "__main__":
    main()
