"""A season of scans on a FlexBuff (issue 35): what an observation's commands cost on disks that
already hold thousands of scans, against a bare walk of the same tree (the baseline, in the same
run: `os.scandir` of every directory, the floor of any listing).

The disks: BENCH_CATALOGUE_DISKS (36) directories (tmpfs mounts of their own when run as root
and mounting is allowed, else directories on /dev/shm, else under BENCH_DIR), filled with old
vbs scans (a directory on every disk, one chunk of one small frame in each, chunk k on disk k, as a season of
short scans leaves them) up to each size of BENCH_CATALOGUE_SCANS ("1000,5000,20000"), and a
Mark6 set: BENCH_CATALOGUE_MK6 (1000) scans on 32 disks (4 modules of 8), one file per disk.

At each size:
- the bare walk, and `vdifrec.scans()` over the disks (medians of BENCH_CATALOGUE_REPEATS, 3):
  target listing <= 3x the bare walk;
- `vdifrec serve --disk ...` from its start to its control port;
- with a 131 Mbit/s stream (8224-byte frames, 2000 frames/s) flowing into it: the first
  `record=on` after start, then BENCH_CATALOGUE_COMMANDS (5) `record=on` ... `record=off`
  back to back: reply times (median, max), and how long after the command each scan's first
  frame was sent (from its VDIF time and the sender's pacing: about 0 to the frame spacing,
  0.5 ms, when it is the first frame after the command; within a millisecond or so). Target:
  `record=on` <= 20 ms at 20,000 scans;
- `scan_set=<an old scan>` + `scan_check?` (median of 5);
- serve's resident memory, against serve on empty disks.
Cost growth: each figure at the largest size over the smallest (target <= 25x for 20x the
scans: linear or better).

Then BENCH_CATALOGUE_OBSERVE_SECONDS (20; 0 skips it) of back-to-back 2-s scans at the
reference rate (8.224 Gbit/s) by `observe` onto the disks at their largest size (bench_observe's
run, onto these disks): zero boundary loss, every seam one frame. BENCH_CATALOGUE_DEBUG=1 also
prints its per-second rows (frames received, frames the full ring dropped).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import vdifrec
from vdifrec.vsi import VSIClient

from common import env_int, report

FS = 8224
FPS = 2000
SMALL = 32 + 1024
EPOCH_53 = dt.datetime(2026, 7, 1, tzinfo=dt.timezone.utc).timestamp()


def sizes() -> list[int]:
    return [int(x) for x in os.environ.get("BENCH_CATALOGUE_SCANS", "1000,5000,20000").split(",")]


class Tree:
    """The disks, and the old scans on them."""

    def __init__(self, n_disks: int, tag: str, modules: int = 0) -> None:
        base = os.environ.get("BENCH_CATALOGUE_DIR") or os.environ.get("BENCH_DIR")
        if base is None and Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK):
            base = "/dev/shm"
        self.root = Path(tempfile.mkdtemp(prefix=f"bench-catalogue-{tag}-", dir=base))
        if modules:
            # Mark6: /mnt/disks/<module>/<disk>, 8 disks a module.
            self.disks = [self.root / f"{1 + i // 8}" / f"{i % 8}" for i in range(n_disks)]
            self.glob = str(self.root / "*" / "*")
        else:
            self.disks = [self.root / f"disk{i:02d}" for i in range(n_disks)]
            self.glob = str(self.root / "disk*")
        self.format = "mk6" if modules else "vbs"
        self.mounted: list[Path] = []
        for d in self.disks:
            d.mkdir(parents=True)
            if os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2g", "tmpfs", str(d)],
                                                    capture_output=True).returncode == 0:
                self.mounted.append(d)
        self.where = (f"{len(self.mounted)} tmpfs mounts" if self.mounted else f"directories under {self.root.parent}")
        self.names: list[str] = []
        self.frame = b""

    def small_frame(self) -> bytes:
        if not self.frame:
            path = self.root / "frame.vdif"
            vdifrec.generate(path, seconds=1 / 50, fps=50, frame_size=SMALL, threads=1, ref_epoch=53, start_second=1000)
            self.frame = path.read_bytes()[:SMALL]
            path.unlink()
        return self.frame

    def fill_vbs(self, upto: int) -> None:
        self.small_frame()
        for k in range(len(self.names), upto):
            name = f"old{k:05d}_kv_no{k % 10000:04d}"
            for i, d in enumerate(self.disks):
                (d / name).mkdir()
                (d / name / f"{name}.{i:08d}").write_bytes(self.frame)
            self.names.append(name)

    def fill_mk6(self, upto: int) -> None:
        import struct
        head = struct.pack("<Iiiii", 0xFEED6666, 2, 8 + SMALL, 0, SMALL)
        self.small_frame()
        for k in range(len(self.names), upto):
            name = f"m6_{k:05d}"
            for i, d in enumerate(self.disks):
                (d / name).write_bytes(head + struct.pack("<ii", i, 8 + SMALL) + self.frame)
            self.names.append(name)

    def remove(self, name: str) -> None:
        for d in self.disks:
            shutil.rmtree(d / name, ignore_errors=True)
            (d / name).unlink(missing_ok=True)

    def close(self) -> None:
        for d in self.mounted:
            subprocess.run(["umount", str(d)], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def bare_walk(disks: list[Path]) -> int:
    """os.scandir of every directory under the disks: the floor of any listing."""
    n = 0
    stack = [str(d) for d in disks]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                n += 1
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    return n


def timed(fn: Any, repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Serve:
    """`vdifrec serve` on the disks, a stream flowing into it, a VSI-S client."""

    def __init__(self, tree: Tree) -> None:
        self.port = free_udp_port()
        self.out = tree.root / "serve.out"
        self.fh = open(self.out, "w")  # noqa: SIM115 - closed in close()
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vdifrec.cli", "serve", "--control", "127.0.0.1:0", "--disk", tree.glob,
             "--format", tree.format, "--port", str(self.port), "--frame-size", str(FS), "--fps", str(FPS), "--ring", "256MiB",
             "--log", os.devnull], stdout=self.fh, stderr=subprocess.STDOUT, text=True)
        m = None
        while m is None and time.perf_counter() - t0 < 600 and self.proc.poll() is None:
            m = re.search(r"control on ([0-9.]+):(\d+)", self.out.read_text())
            time.sleep(0.002)
        assert m, self.out.read_text()
        self.startup_s = time.perf_counter() - t0
        self.client = VSIClient((m.group(1), int(m.group(2))), timeout=120)
        # Frame k carries VDIF time stream_start + k/FPS and is sent at sent_from + k/FPS
        # (sent_from known once the sender stops: its end less its frames' span).
        self.stream_start = float(int(time.time()) + 1)
        self.sent_from = 0.0
        self.sender = vdifrec.Sender(("127.0.0.1", self.port), frame_size=FS, fps=FPS, duration=3600,
                                     ref_epoch=53, start_second=int(self.stream_start - EPOCH_53))
        time.sleep(0.5)

    def record(self, name: str) -> tuple[float, float]:
        """record=on: the reply's time, and when the command went (POSIX seconds)."""
        sent_at = time.time()
        t0 = time.perf_counter()
        r = self.client.send(f"record=on:{name}")
        reply_s = time.perf_counter() - t0
        assert r.code == 0, r
        return reply_s, sent_at

    def first_frame_after(self, k: int, sent_at: float) -> float:
        """How long after the command (at `sent_at`) frame k was sent, in seconds."""
        return self.sent_from + k / FPS - sent_at

    def stop_scan(self, tree: Tree, name: str) -> int:
        """record=off (a fifth of a second after record=on: 400 frames); the scan's first
        frame, counted from the stream's first."""
        time.sleep(0.2)
        self.client.send("record=off")
        deadline = time.monotonic() + 60
        while self.client.send("record?").fields != ("off",) and time.monotonic() < deadline:
            time.sleep(0.02)
        for d in tree.disks:
            p = d / name / f"{name}.summary.json" if tree.format == "vbs" else d / ".vdifrec" / f"{name}.summary.json"
            if p.exists():
                first = json.loads(p.read_text())["first_frame"]
                whole, _, fraction = first.rstrip("Z").partition(".")
                t = dt.datetime.fromisoformat(whole).replace(tzinfo=dt.timezone.utc).timestamp()
                t += float("0." + fraction) if fraction else 0.0
                return round((t - self.stream_start) * FPS)
        held = [str(p) for d in tree.disks for p in (d / name).glob("*")] if (tree.disks[0] / name).exists() else []
        raise RuntimeError(f"no summary of {name}: {self.client.send('record?')}; {held[:5]}; "
                           f"{self.out.read_text()[-2000:]}")

    def close(self) -> None:
        sent = self.sender.stop()
        self.sent_from = time.time() - sent["frames_sent"] / FPS
        self.client.close()
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.fh.close()


def commands(tree: Tree, commanded: int, tag: str) -> dict[str, Any]:
    s = Serve(tree)
    try:
        first = s.record(f"{tag}_first")
        firsts = [(s.stop_scan(tree, f"{tag}_first"), first[1])]
        replies = [first[0]]
        for k in range(commanded):
            name = f"{tag}_b2b{k}"
            reply_s, sent_at = s.record(name)
            replies.append(reply_s)
            firsts.append((s.stop_scan(tree, name), sent_at))
        picks = random.Random(1).sample(tree.names, min(5, len(tree.names)))

        def set_and_check(name: str) -> float:
            t0 = time.perf_counter()
            r = s.client.send(f"scan_set={name}")
            assert r.code == 0, r
            r = s.client.send("scan_check?")
            assert r.code == 0, r
            return time.perf_counter() - t0

        checks = [set_and_check(n) for n in picks]
        out = {
            "startup_s": s.startup_s,
            "first_on_s": first[0],
            "on_median_s": statistics.median(replies[1:]),
            "on_max_s": max(replies[1:]),
            "firsts": firsts,
            "check_s": statistics.median(checks) if checks else float("nan"),
            "rss_mib": rss_mib(s.proc.pid),
        }
    finally:
        s.close()
    out["first_frame_offsets"] = [s.first_frame_after(k, at) for k, at in firsts]
    for name in [f"{tag}_first"] + [f"{tag}_b2b{k}" for k in range(commanded)]:
        tree.remove(name)
    return out


def vbs_season(n_disks: int, repeats: int, commanded: int) -> tuple[Tree, dict[int, dict[str, Any]]]:
    tree = Tree(n_disks, "vbs")
    try:
        return tree, season_on(tree, n_disks, repeats, commanded)
    except BaseException:
        tree.close()
        raise


def season_on(tree: Tree, n_disks: int, repeats: int, commanded: int) -> dict[int, dict[str, Any]]:
    results: dict[int, dict[str, Any]] = {}
    empty = commands(tree, 1, "empty")
    for n in sizes():
        t0 = time.perf_counter()
        tree.fill_vbs(n)
        made = time.perf_counter() - t0
        bare, entries = timed(lambda: bare_walk(tree.disks), repeats)
        listing, found = timed(lambda: vdifrec.scans(tree.disks), repeats)
        assert len(found) == n, (len(found), n)
        r = commands(tree, commanded, f"s{n}")
        r.update(bare_s=bare, entries=entries, listing_s=listing, made_s=made)
        results[n] = r
        report(
            f"{n} old vbs scans on {n_disks} disks ({tree.where}; {entries} directory entries)",
            [
                ("bare walk (os.scandir of every directory)", bare, "s"),
                ("vdifrec.scans() over the disks", listing, "s"),
                ("serve: start to control port", r["startup_s"], "s"),
                ("first record=on after start: reply", r["first_on_s"] * 1e3, "ms"),
                ("later record=on: reply, median", r["on_median_s"] * 1e3, "ms"),
                ("later record=on: reply, max", r["on_max_s"] * 1e3, "ms"),
                ("scan's first frame sent after the command, max", max(r["first_frame_offsets"]) * 1e3, "ms"),
                ("scan's first frame sent after the command, min", min(r["first_frame_offsets"]) * 1e3, "ms"),
                ("scan_set=<old scan> + scan_check?, median", r["check_s"] * 1e3, "ms"),
                ("serve resident memory", r["rss_mib"], "MiB"),
                ("serve resident memory, empty disks", empty["rss_mib"], "MiB"),
                ("  over empty disks, per scan", (r["rss_mib"] - empty["rss_mib"]) * 1024 * 1024 / n, "bytes"),
            ],
            [("listing / bare walk", listing / bare, "<= 3"),
             ("record=on median at this size / on empty disks", r["on_median_s"] / empty["on_median_s"], "~1")],
        )
    small, large = results[min(results)], results[max(results)]
    grow = max(results) / min(results)
    report(
        f"cost at {max(results)} scans over cost at {min(results)} ({grow:g}x the scans)",
        [],
        [
            ("listing", large["listing_s"] / small["listing_s"], "<= 25 (linear)"),
            ("bare walk", large["bare_s"] / small["bare_s"], "(the floor)"),
            ("serve start-up", large["startup_s"] / small["startup_s"], "<= 25"),
            ("record=on reply, median", large["on_median_s"] / small["on_median_s"], "<= 25 (~1: constant)"),
            ("scan_set + scan_check?", large["check_s"] / small["check_s"], "<= 25 (~1: constant)"),
        ],
    )
    verdicts = [
        ("record=on <= 20 ms at the largest size", large["on_median_s"] <= 0.020),
        ("listing <= 3x the bare walk at every size", all(r["listing_s"] <= 3 * r["bare_s"] for r in results.values())),
        (f"listing at {max(results)} <= 25x at {min(results)}", large["listing_s"] <= 25 * small["listing_s"]),
    ]
    for what, ok in verdicts:
        print(f"  {'MET   ' if ok else 'MISSED'} {what}")
    return results


def mark6_set(n: int, repeats: int) -> None:
    tree = Tree(32, "mk6", modules=4)
    try:
        tree.fill_mk6(n)
        bare, entries = timed(lambda: bare_walk(tree.disks), repeats)
        listing, found = timed(lambda: vdifrec.scans(tree.disks), repeats)
        assert len(found) == n and all(s["format"] == "mk6" and s["chunks"] == 32 for s in found), found[:1]
        r = commands(tree, 3, "mk6")
        report(
            f"a Mark6 set: {n} scans on 32 disks (4 modules of 8; {tree.where}), recording mk6",
            [
                ("bare walk", bare, "s"),
                ("vdifrec.scans()", listing, "s"),
                ("serve: start to control port", r["startup_s"], "s"),
                ("record=on reply, median", r["on_median_s"] * 1e3, "ms"),
                ("scan_set=<old scan> + scan_check?, median", r["check_s"] * 1e3, "ms"),
            ],
            [("listing / bare walk", listing / bare, "<= 3 (each file's header is read: a Mark6 file is known by it)")],
        )
    finally:
        tree.close()


def observe_on(tree: Tree, seconds: float) -> None:
    import bench_observe
    scan_s = 2.0
    n = round(seconds / scan_s)
    o = bench_observe.observe_run(n, scan_s, "1GiB", disks=tree.disks)
    bad_seams = [x for x in o["seams"] if x[1] != 1]
    if os.environ.get("BENCH_CATALOGUE_DEBUG"):
        for r in o["rec"].seconds:
            print("  second", r.unix_second, "received", r.received, "ring_overflow", r.ring_overflow)
    report(
        f"observe: {n} back-to-back scans of 2 s at 8.224 Gbit/s onto {len(tree.disks)} disks holding "
        f"{len(tree.names)} old scans",
        [
            ("received in the windows", o["received_in_windows"], "frames"),
            ("in the scans", o["in_scans"], "frames"),
            ("boundary loss (target 0)", o["boundary_loss"], "frames"),
            ("seams where next first - last != 1 frame (target 0)", len(bad_seams), f"of {len(o['seams'])}"),
            ("scans not recorded", len(o["missed"]), ""),
            ("recorder ready, after the first window's start", o["ready_after_first_window_s"], "s (its start-up "
             "searches the disks for unclosed scans; negative: before)"),
            ("kernel drops (whole run)", o["rec"].kernel_drops, "datagrams"),
            ("ring overflows in the windows", o["overflows"], "frames"),
        ],
        [("in the scans / sender's frames in the windows", o["in_scans"] / o["window_frames"], "1.00 less kernel drops")],
    )


def main() -> dict[str, Any]:
    n_disks = env_int("BENCH_CATALOGUE_DISKS", 36)
    repeats = env_int("BENCH_CATALOGUE_REPEATS", 3)
    commanded = env_int("BENCH_CATALOGUE_COMMANDS", 5)
    tree, results = vbs_season(n_disks, repeats, commanded)
    try:
        seconds = float(os.environ.get("BENCH_CATALOGUE_OBSERVE_SECONDS", "20"))
        if seconds > 0:
            observe_on(tree, seconds)
    finally:
        tree.close()
    mark6_set(env_int("BENCH_CATALOGUE_MK6", 1000), repeats)
    return {str(n): r for n, r in results.items()}


if __name__ == "__main__":
    main()
