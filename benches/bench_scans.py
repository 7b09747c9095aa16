"""Scans on several disks and several streams (issue: FlexBuff-class recording).

(a) Two streams of 8.224 Gbit/s each, capture only (monitoring), both senders on this host,
    for BENCH_TWO_SECONDS (default 10). Target: zero loss. Baseline: two discard loops fed by
    the same two senders in the same run.

(b) One stream at 8.224 Gbit/s recorded as one vbs scan over 3 directories for
    BENCH_SCAN_SECONDS (default 60): chunks are checked (whole frames, each chunk's first frame
    following the previous chunk's last) and deleted as they close, so a few GB of disk suffice.
    Target: zero loss, the invariant holds. Baseline: the discard loop on the same sender.
(c) The scan writers alone (fed from memory) over N directories against N `dd bs=4M
    oflag=direct` writing to the same N directories in parallel. Target: >= 0.95. Medians of 3.

(d) Capture CPU time per frame at 8.224 Gbit/s (monitoring, 1 GiB ring) against the plain
    recvmmsg discard loop on the same socket set-up, and where the difference goes: the same
    discard loop receiving into 1 GiB of memory slot after slot as the capture fills its ring
    (the kernel's copy into memory not in cache), and the capture's own work per frame
    (classification, accounting) measured on frames in memory. Medians of BENCH_COST_RUNS (3).

BENCH_SCAN_DIRS (comma-separated) chooses the directories (default: three under the benchmark
disk directory); give one directory per physical disk for figures that mean something.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import threading
import time
from pathlib import Path

import vdifrec
from bench_record import discard_run, disk_dir
from common import report

FS = 8224
FPS = 125_000


def scan_dirs() -> list[Path]:
    given = os.environ.get("BENCH_SCAN_DIRS")
    if given:
        dirs = [Path(d) / "vdifrec-bench-scan" for d in given.split(",")]
    else:
        dirs = [disk_dir() / f"disk{i}" for i in range(3)]
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    return dirs


def remove(dirs: list[Path]) -> None:
    """The benchmark's directories, and the folder `disk_dir()` made for them."""
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    if not os.environ.get("BENCH_SCAN_DIRS"):
        shutil.rmtree(dirs[0].parent, ignore_errors=True)


def header_seq(raw: bytes) -> int:
    w0, w1 = int.from_bytes(raw[0:4], "little"), int.from_bytes(raw[4:8], "little")
    return (w0 & 0x3FFFFFFF) * FPS + (w1 & 0xFFFFFF)


class ChunkReaper:
    """Checks and deletes the chunks of a vbs scan as they close: a chunk is closed once a chunk
    numbered `writers + 1` higher exists (each writer holds at most one chunk open)."""

    def __init__(self, dirs: list[Path], scan: str, writers: int) -> None:
        self.dirs, self.scan, self.writers = dirs, scan, writers
        self.checked = self.bad = self.bytes = 0
        self.edges: dict[int, tuple[int, int]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def chunks(self) -> dict[int, Path]:
        found = {}
        for d in self.dirs:
            for p in (d / self.scan).glob(f"{self.scan}.0*"):
                found[int(p.name.rsplit(".", 1)[1])] = p
        return found

    def check(self, n: int, p: Path) -> None:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            first = fh.read(32)
            fh.seek(size - FS)
            last = fh.read(32)
        self.edges[n] = (header_seq(first), header_seq(last))
        if size % FS or (n - 1 in self.edges and self.edges[n - 1][1] + 1 != self.edges[n][0]):
            self.bad += 1
        self.checked += 1
        self.bytes += size
        p.unlink()

    def run(self) -> None:
        while not self.stop.is_set():
            found = self.chunks()
            top = max(found, default=-1)
            for n in sorted(found):
                if n + self.writers + 1 <= top:
                    self.check(n, found[n])
            time.sleep(0.2)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()
        for n, p in sorted(self.chunks().items()):
            self.check(n, p)


def vbs_at_line_rate(seconds: float) -> dict[str, float]:
    dirs = scan_dirs()
    base_sent, base_got = discard_run(FPS, min(seconds, 5))
    rec = vdifrec.Recorder(port=0, ring="2GiB", frame_size=FS, disks=[str(d) for d in dirs], writers=3)
    rec.start()
    name = rec.start_scan("bench_vbs")
    reaper = ChunkReaper(dirs, name, 3)
    reaper.thread.start()
    assert rec.address is not None
    sent = vdifrec.send(rec.address, duration=seconds, fps=FPS)
    time.sleep(1.0)
    s = rec.stop_scan()
    run = rec.stop()
    reaper.finish()
    remove(dirs)
    report(
        f"(b) one 8.224 Gbit/s stream into vbs over {len(dirs)} directories for {seconds:g} s (sender on the same host)",
        [
            ("frames sent", sent["frames_sent"], "frames"),
            ("frames in the scan", s.frames, "frames"),
            ("lost in the scan (gaps, ring overflows included)", s.frames_lost, "frames"),
            ("ring overflows (disks too slow)", s.ring_overflows, "frames"),
            ("bytes written / dropped on the way to disk", s.bytes_written, f"/ {s.bytes_dropped_disk}"),
            ("chunks checked and deleted (bad)", reaper.checked, f"({reaper.bad})"),
            ("invariant holds (1 yes)", float(s.invariant_holds and run.invariant_holds), ""),
            ("sender rate achieved", sent["gbps"], "Gbit/s"),
            ("baseline: discard loop received / sent", base_got["datagrams"] / max(base_sent["frames_sent"], 1), ""),
        ],
        [("in the scan / sent (target 1.00)", s.frames / max(sent["frames_sent"], 1), "1.00")],
    )
    return {"b_lossless": float(s.frames == sent["frames_sent"] and s.ok and reaper.bad == 0)}


def two_streams(seconds: float) -> dict[str, float]:
    def senders_into(addresses: list[tuple[str, int]]) -> list[dict]:
        out: list[dict] = [{}, {}]

        def one(k: int) -> None:
            out[k] = vdifrec.send(addresses[k], duration=seconds, fps=FPS)

        threads = [threading.Thread(target=one, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    rxs = [vdifrec._core.DiscardReceiver() for _ in range(2)]
    base_sent = senders_into([("127.0.0.1", rx.port) for rx in rxs])
    time.sleep(0.5)
    base_got = [json.loads(rx.stop()) for rx in rxs]
    rec = vdifrec.Recorder(ports=[0, 0], ring="1GiB", frame_size=FS)
    rec.start()
    sent = senders_into(rec.addresses)
    time.sleep(0.5)
    s = rec.stop()
    offered = sum(x["frames_sent"] for x in sent)
    base_offered = sum(x["frames_sent"] for x in base_sent)
    report(
        f"(a) two 8.224 Gbit/s streams, capture only, {seconds:g} s, both senders on this host",
        [
            ("frames sent (both)", offered, "frames"),
            ("frames received (both)", s.frames_received, "frames"),
            ("lost (kernel drops + gaps)", s.frames_lost + s.kernel_drops, "frames"),
            ("sender rates achieved", sum(x["gbps"] for x in sent), "Gbit/s together"),
            ("baseline: discard loops received / sent", sum(g["datagrams"] for g in base_got) / max(base_offered, 1), ""),
        ],
        [("received / sent (target 1.00)", s.frames_received / max(offered, 1), "1.00")],
    )
    return {"a_ratio": s.frames_received / max(offered, 1)}


def capture_cost(seconds: float, runs: int) -> dict[str, float]:
    def discard(span: int) -> float:
        rx = vdifrec._core.DiscardReceiver(span=span)
        vdifrec.send(("127.0.0.1", rx.port), duration=seconds, fps=FPS)
        time.sleep(0.3)
        got = json.loads(rx.stop())
        return float(got["cpu_s"] / max(got["datagrams"], 1) * 1e9)

    def ours() -> float:
        rec = vdifrec.Recorder(port=0, ring="1GiB", frame_size=FS)
        rec.start()
        assert rec.address is not None
        vdifrec.send(rec.address, duration=seconds, fps=FPS)
        time.sleep(0.3)
        s = rec.stop()
        return float(s.capture_cpu_s / max(s.frames_received, 1) * 1e9)

    plain = statistics.median(discard(0) for _ in range(runs))
    spread = statistics.median(discard(1 << 30) for _ in range(runs))
    capture = statistics.median(ours() for _ in range(runs))
    stages = json.loads(vdifrec._core.capture_stage_costs())
    report(
        f"(d) capture CPU per frame at 8.224 Gbit/s, {seconds:g} s each, median of {runs}",
        [
            ("vdifrec capture thread", capture, "ns/frame"),
            ("discard loop, one small buffer", plain, "ns/datagram"),
            ("discard loop, into 1 GiB slot after slot", spread, "ns/datagram"),
            ("vdifrec classification, frames in memory", stages["classify_ns"], "ns/frame"),
            ("vdifrec classification + accounting", stages["classify_and_account_ns"], "ns/frame"),
        ],
        [
            ("vdifrec / discard loop (target <= 1.10)", capture / plain, "<= 1.10"),
            ("vdifrec / discard loop into ring-sized memory", capture / spread, "close to 1"),
        ],
    )
    return {"d_ratio": capture / plain, "d_ratio_same_memory": capture / spread}


def dd_parallel(dirs: list[Path], mib: int) -> float:
    procs = []
    t0 = time.perf_counter()
    for d in dirs:
        procs.append(subprocess.Popen(
            ["dd", "if=/dev/zero", f"of={d / 'dd.bin'}", "bs=4M", f"count={mib // 4}", "oflag=direct", "status=none"]))
    for p in procs:
        p.wait()
    elapsed = time.perf_counter() - t0
    for d in dirs:
        (d / "dd.bin").unlink()
    return len(dirs) * mib * 2**20 / elapsed


def writers_alone(dirs: list[Path], mib: int) -> float:
    total = len(dirs) * mib * 2**20
    r = json.loads(vdifrec._core.scan_writer_throughput([str(d) for d in dirs], total, "vbs", 256 << 20, len(dirs)))
    for d in dirs:
        shutil.rmtree(d / "bench_scan", ignore_errors=True)
    if r["error"]:
        raise RuntimeError(r["error"])
    return float(r["bytes"] / r["seconds"])


def main() -> dict[str, float]:
    results = two_streams(float(os.environ.get("BENCH_TWO_SECONDS", "10")))
    results |= capture_cost(float(os.environ.get("BENCH_COST_SECONDS", "5")), int(os.environ.get("BENCH_COST_RUNS", "3")))
    results |= vbs_at_line_rate(float(os.environ.get("BENCH_SCAN_SECONDS", "60")))
    dirs = scan_dirs()
    mib = int(os.environ.get("BENCH_SCAN_MIB", "1024"))
    ours = statistics.median(writers_alone(dirs, mib) for _ in range(3))
    dd = statistics.median(dd_parallel(dirs, mib) for _ in range(3))
    remove(dirs)
    report(
        f"(c) scan writers alone (fed from memory, vbs, 256 MiB chunks, {len(dirs)} writers) vs {len(dirs)} x dd bs=4M "
        f"oflag=direct in parallel, {mib} MiB per directory, median of 3",
        [("vdifrec scan writers", ours / 1e9, "GB/s"), ("dd in parallel", dd / 1e9, "GB/s")],
        [("vdifrec / dd", ours / dd, ">= 0.95")],
    )
    results["c_ratio"] = ours / dd
    return results


if __name__ == "__main__":
    main()
