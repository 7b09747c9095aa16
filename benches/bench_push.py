"""Shipping scans to the correlator (`vdifrec.push` into a `vdifrec.Receiver`), each figure with
its baseline measured in the same run. Push and receiver run in this process, on loopback.

(a) One file of BENCH_PUSH_GB (default 10; fractions such as 0.5 work) GB, disk to disk: the file
    and both copies live in a temporary folder under BENCH_PUSH_DIR (default: under
    bench-results/ on the project's disk, never /dev/shm). ``push`` (streams auto, default
    64 MiB blocks) against one plain TCP stream written here: ``socket.sendfile`` of the same
    file into a loop of ``recv_into`` and plain ``os.write`` to a file, ``fsync`` at the end.
    Median of BENCH_PUSH_REPEATS (3) of each, taken in turns; GB/s of each, the ratio, the CPU
    time of this process per GB, and push's streams and why. Push does more than the baseline:
    it checksums every block at both ends, fdatasyncs as it goes (the manifest) and reads the
    whole copy back before naming it.
    Page cache: dropping it needs root, so before every timed run the source's own pages are
    dropped with ``posix_fadvise(POSIX_FADV_DONTNEED)`` (no root needed; the file is clean
    after its fsync) and ``fincore`` says how much of it was still cached. BENCH_PUSH_CACHE=warm
    reads the source through first instead (both sides then read from memory, where it fits).
    Push's reader drops the pages it read and its receiver writes with O_DIRECT; the
    baseline's copy goes through the page cache until its fsync.
(b) Through a relay that caps each TCP connection at BENCH_PUSH_RELAY_CONN_MBPS (default 25)
    MB/s and all of them together at BENCH_PUSH_RELAY_TOTAL_MBPS (150) MB/s (a long path whose
    windows limit each connection; a Python process of its own, so its CPU is not counted in
    this process's): a file of BENCH_PUSH_RELAY_MB (600) MB pushed with streams
    BENCH_PUSH_RELAY_STREAMS (default 1,2,4,8,16,auto), blocks of BENCH_PUSH_RELAY_BLOCK
    (8MiB: `auto` measures only while at least as many blocks are queued as streams run, which
    600 MB in 64 MiB blocks would not give it), a fresh relay each run. Throughput, and CPU
    seconds per GB of this process (``time.process_time``: push's and the receiver's Rust
    threads included) and of the relay. Baselines: one stream, the relay's aggregate cap, and
    the best fixed count for `auto`.
(c) A push with nice=True and rate=BENCH_PUSH_RECORD_RATE (default 1Gbps) running while the
    reference stream (125000 frames/s of 8224 bytes, 8.224 Gbit/s, sender on this host) is
    recorded for BENCH_PUSH_RECORD_SECONDS (default 10) exactly as bench_record's (a) records
    it: written to files under BENCH_DIR (4 GiB files, each deleted once closed), not
    capture-only. Baseline: the same recording without the push, in the same run, first.
    Target: zero frames lost with the push, and the push at its cap. The receiver here is the
    correlator's end and would be elsewhere: its writes go to the same disk (worst case).

BENCH_PUSH_PARTS (default a,b,c) chooses the parts: `BENCH_PUSH_PARTS=b python benches/run.py push`.
Disk: (a) needs twice BENCH_PUSH_GB, (c) about rate x (seconds + 8) plus the recording's 4 GiB.
Most of the time goes to (a): the file is made once and passed over twice per repeat.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import vdifrec
from bench_record import FS, REF_FPS, capture_only, record_reference
from common import env_float, env_int, report

CHUNK = 64 << 20  # bytes written at a time when making a source file


def rate_bytes(text: str) -> float:
    """Bytes per second of a rate as push reads it ("1Gbps", "500MB/s")."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kKMGT]?)(bps|bit/s|B/s)\s*", text)
    if not m:
        raise ValueError(f"{text!r}: write the rate as 1Gbps or 125MB/s")
    mult = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(2)]
    return float(m.group(1)) * mult / (1 if m.group(3) == "B/s" else 8)


def work_dir() -> Path:
    """A folder of our own on the disk the scans would be on (the project's disk by default)."""
    base = Path(os.environ.get("BENCH_PUSH_DIR", Path(__file__).resolve().parent.parent / "bench-results"))
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="bench-push-", dir=base))


def make_token(folder: Path) -> Path:
    path = folder / "token"
    path.write_text(os.urandom(24).hex() + "\n")
    path.chmod(0o600)
    return path


def drop_cache(path: Path) -> None:
    """Drops the file's clean pages from the page cache (no root needed for a file we wrote)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_through(path: Path) -> None:
    buf = bytearray(16 << 20)
    with open(path, "rb", buffering=0) as fh:
        while fh.readinto(buf):
            pass


def cached(path: Path) -> int | None:
    """Bytes of the file in the page cache (util-linux `fincore`), None where it cannot say."""
    try:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                             capture_output=True, text=True, check=True).stdout
        return int(out.split()[0])
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        return None


def make_source(path: Path, size: int) -> None:
    """`size` bytes of random data (64 MiB of it, each piece stamped with its number so that no
    two blocks are alike), flushed to disk and dropped from the page cache."""
    base = bytearray(os.urandom(min(CHUNK, size)))
    left, k = size, 0
    with open(path, "wb", buffering=0) as fh:
        while left:
            base[:8] = k.to_bytes(8, "little")
            n = min(left, len(base))
            fh.write(memoryview(base)[:n])
            left -= n
            k += 1
        os.fsync(fh.fileno())
    drop_cache(path)


def need_disk(folder: Path, size: float, what: str) -> None:
    free = shutil.disk_usage(folder).free
    if free < size * 1.05:
        raise RuntimeError(f"{what} needs {size / 1e9:.1f} GB of disk in {folder}, {free / 1e9:.1f} GB free: "
                           "set BENCH_PUSH_DIR to a bigger disk or ask for less")


def remove_copy(folder: Path, name: str) -> None:
    """The receiver's copy of `name` and anything of its own beside it, for the next run."""
    for p in (folder / name, folder / f".{name}.vdifrec-part", folder / f".{name}.vdifrec-manifest"):
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def plain_tcp_copy(src: Path, dest: Path) -> float:
    """The baseline: one TCP stream, sendfile into recv_into + os.write, fsync at the end.
    Seconds from connecting until the copy is on disk."""
    size = src.stat().st_size
    server = socket.create_server(("127.0.0.1", 0))
    failure: list[BaseException] = []

    def receive() -> None:
        try:
            conn, _ = server.accept()
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            buf = bytearray(4 << 20)
            view = memoryview(buf)
            with conn:
                while n := conn.recv_into(buf):
                    part = view[:n]
                    while part:
                        part = part[os.write(fd, part):]
            os.fsync(fd)
            os.close(fd)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            failure.append(exc)

    rx = threading.Thread(target=receive)
    rx.start()
    t0 = time.perf_counter()
    with socket.create_connection(server.getsockname()) as s, open(src, "rb") as fh:
        s.sendfile(fh)
    rx.join()
    elapsed = time.perf_counter() - t0
    server.close()
    if failure:
        raise failure[0]
    if dest.stat().st_size != size:
        raise RuntimeError(f"plain TCP copy: {dest.stat().st_size} bytes written of {size}")
    return elapsed


def pushed(src: Path, to: str, token: Path, **options: Any) -> tuple[float, float, dict[str, Any]]:
    """(wall seconds, CPU seconds of this process, summary) of one push of `src` that must be
    sent in full (a copy already there would make it a 'skipped' of no meaning here)."""
    c0, t0 = time.process_time(), time.perf_counter()
    summary = vdifrec.push(str(src), to=to, token_file=token, retry_seconds=20, **options)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    item = summary["items"][0]
    if item["state"] != "sent":
        raise RuntimeError(f"push of {src.name}: state {item['state']!r} (expected 'sent': the receiver's "
                           f"copy is removed before each run), {item['reconnects']} reconnects, error {item['error']}")
    return wall, cpu, summary


def prepare(src: Path, mode: str) -> int | None:
    """Puts the source in the cache state asked for; returns the bytes of it cached then."""
    if mode == "warm":
        read_through(src)
    else:
        drop_cache(src)
    return cached(src)


def gb_s(size: int, seconds: float) -> float:
    return size / seconds / 1e9


def part_a() -> dict[str, float]:
    gb = env_float("BENCH_PUSH_GB", 10.0)
    repeats = env_int("BENCH_PUSH_REPEATS", 3)
    mode = os.environ.get("BENCH_PUSH_CACHE", "cold")
    if mode not in ("cold", "warm"):
        raise ValueError(f"BENCH_PUSH_CACHE={mode!r}: cold or warm")
    size = int(gb * 1e9) // 4096 * 4096
    folder = work_dir()
    try:
        need_disk(folder, 2 * size, "(a)")
        token = make_token(folder)
        src = folder / "push_a.vdif"
        t0 = time.perf_counter()
        make_source(src, size)
        print(f"\n(made {size / 1e9:.2f} GB in {time.perf_counter() - t0:.0f} s in {folder})")
        (folder / "plain").mkdir()
        (folder / "rx").mkdir()
        plain_dest = folder / "plain" / src.name
        plain_t: list[float] = []
        plain_cpu: list[float] = []
        push_t: list[float] = []
        push_cpu: list[float] = []
        summaries: list[dict[str, Any]] = []
        cache_seen: list[int | None] = []
        with vdifrec.Receiver(folder / "rx", listen="127.0.0.1:0", token_file=token) as rx:
            for _ in range(repeats):
                cache_seen.append(prepare(src, mode))
                c0 = time.process_time()
                plain_t.append(plain_tcp_copy(src, plain_dest))
                plain_cpu.append(time.process_time() - c0)
                plain_dest.unlink()
                cache_seen.append(prepare(src, mode))
                wall, cpu, summary = pushed(src, rx.address, token)
                push_t.append(wall)
                push_cpu.append(cpu)
                summaries.append(summary)
                remove_copy(folder / "rx", src.name)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    t_plain, t_push = statistics.median(plain_t), statistics.median(push_t)
    known = [c for c in cache_seen if c is not None]
    cache_note = (f"{max(known) / 1e9:.3f} GB of the {size / 1e9:.2f} GB source at most" if known
                  else "unknown (no fincore)")
    report(
        f"(a) one {size / 1e9:.3g} GB file on loopback, disk to disk ({os.cpu_count()} CPUs; median of {repeats}, "
        f"source {mode} before each run)",
        [
            ("push, streams auto (wall, call to return)", gb_s(size, t_push), "GB/s"),
            ("push, its own figure (summary rate_bps / 8)",
             statistics.median(s["rate_bps"] for s in summaries) / 8e9, "GB/s"),
            ("plain TCP, one stream, sendfile -> write, fsync", gb_s(size, t_plain), "GB/s"),
            ("push: CPU of this process per GB", statistics.median(push_cpu) / (size / 1e9), "s/GB"),
            ("plain: CPU of this process per GB", statistics.median(plain_cpu) / (size / 1e9), "s/GB"),
            ("push wall time", t_push, "s"),
            ("plain wall time", t_plain, "s"),
        ],
        [("push / plain TCP", t_plain / t_push, "none set: push checksums, syncs as it goes, reads back")],
    )
    for k, s in enumerate(summaries, 1):
        item = s["items"][0]
        print(f"  push run {k}: {item['streams']} streams (at most {item['streams_max']}): {item['streams_reason']}; "
              f"{item['blocks']} blocks, {item['blocks_resent']} re-sent, {item['reconnects']} reconnects")
    print(f"  page cache before the timed runs: {cache_note} (fincore); destinations removed after each run")
    return {"a_push_gbs": gb_s(size, t_push), "a_plain_gbs": gb_s(size, t_plain), "a_ratio": t_plain / t_push}


# --- (b): a relay capping each connection and all of them together -------------------------


class Bucket:
    """A pacer shared by threads: `reserve(n)` books n bytes and says how long to wait first."""

    def __init__(self, bytes_per_s: float) -> None:
        self.rate = bytes_per_s
        self.next = time.monotonic()
        self.lock = threading.Lock()

    def reserve(self, n: int) -> float:
        with self.lock:
            now = time.monotonic()
            start = max(self.next, now - 0.02)  # at most 20 ms of burst after a pause
            self.next = start + n / self.rate
            return max(0.0, start - now)


def relay_main(upstream: str, conn_rate: float, total_rate: float) -> None:
    """Run as its own process: forwards every connection to `upstream`, the pusher's direction
    capped per connection and in all (the receiver's small replies go back as they come)."""
    host, port = upstream.rsplit(":", 1)
    total = Bucket(total_rate)
    server = socket.create_server(("127.0.0.1", 0))
    print(server.getsockname()[1], flush=True)

    def pump(a: socket.socket, b: socket.socket, own: Bucket | None) -> None:
        buf = bytearray(128 << 10)
        view = memoryview(buf)
        try:
            while n := a.recv_into(buf):
                if own is not None:
                    wait = max(own.reserve(n), total.reserve(n))
                    if wait > 0:
                        time.sleep(wait)
                b.sendall(view[:n])
        except OSError:
            pass
        for s, how in ((b, socket.SHUT_WR), (a, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass

    while True:
        client, _ = server.accept()
        up = socket.create_connection((host, int(port)))
        for s in (client, up):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pump, args=(client, up, Bucket(conn_rate)), daemon=True).start()
        threading.Thread(target=pump, args=(up, client, None), daemon=True).start()


class Relay:
    """The relay in a process of its own; `cpu` is the CPU seconds it spent relaying (from when
    it was ready to when it was stopped: its start-up, imports included, is not counted)."""

    def __init__(self, upstream: str, conn_rate: float, total_rate: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "relay", upstream, str(conn_rate), str(total_rate)],
            stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        self.address = f"127.0.0.1:{int(self.proc.stdout.readline())}"
        self.ready_cpu = self.cpu_now()
        self.cpu = 0.0

    def cpu_now(self) -> float:
        """The relay's user + system CPU seconds so far (all its threads), from /proc."""
        with open(f"/proc/{self.proc.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.cpu = self.cpu_now() - self.ready_cpu
        self.proc.terminate()
        self.proc.wait()


def part_b() -> dict[str, float]:
    size = int(env_float("BENCH_PUSH_RELAY_MB", 600) * 1e6) // 4096 * 4096
    conn_rate = env_float("BENCH_PUSH_RELAY_CONN_MBPS", 25) * 1e6
    total_rate = env_float("BENCH_PUSH_RELAY_TOTAL_MBPS", 150) * 1e6
    block = os.environ.get("BENCH_PUSH_RELAY_BLOCK", "8MiB")
    repeats = env_int("BENCH_PUSH_RELAY_REPEATS", 1)
    settings: list[int | str] = [
        s if s == "auto" else int(s) for s in os.environ.get("BENCH_PUSH_RELAY_STREAMS", "1,2,4,8,16,auto").split(",")
    ]
    folder = work_dir()
    rows: list[dict[str, Any]] = []
    try:
        need_disk(folder, 2 * size, "(b)")
        token = make_token(folder)
        src = folder / "push_b.vdif"
        make_source(src, size)
        (folder / "rx").mkdir()
        with vdifrec.Receiver(folder / "rx", listen="127.0.0.1:0", token_file=token) as rx:
            for setting in settings:
                runs = []
                for _ in range(repeats):
                    relay = Relay(rx.address, conn_rate, total_rate)
                    try:
                        wall, cpu, summary = pushed(src, relay.address, token, streams=setting, block_size=block)
                    finally:
                        relay.stop()
                    remove_copy(folder / "rx", src.name)
                    runs.append((wall, cpu, relay.cpu, summary["items"][0]))
                runs.sort(key=lambda r: r[0])
                wall, cpu, relay_cpu, item = runs[len(runs) // 2]
                rows.append({"setting": setting, "wall": wall, "cpu": cpu, "relay_cpu": relay_cpu, "item": item})
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    gb = size / 1e9
    print(f"\n== (b) {size / 1e6:.0f} MB through a relay capping each connection at {conn_rate / 1e6:g} MB/s and all "
          f"at {total_rate / 1e6:g} MB/s, blocks {block} ({os.cpu_count()} CPUs; "
          f"{'median of ' + str(repeats) if repeats > 1 else 'one run each'}; wall time, call to return)")
    print(f"  {'streams':>8} {'used':>5} {'MB/s':>8} {'of cap':>7} {'CPU s/GB':>9} {'relay s/GB':>11}  why")
    for r in rows:
        item = r["item"]
        rate = size / r["wall"]
        print(f"  {str(r['setting']):>8} {item['streams']:>5} {rate / 1e6:>8.1f} {rate / total_rate:>7.2f} "
              f"{r['cpu'] / gb:>9.2f} {r['relay_cpu'] / gb:>11.2f}  {item['streams_reason']}")
    by = {r["setting"]: size / r["wall"] for r in rows}
    ratios: list[tuple[str, float, str]] = []
    fixed = {k: v for k, v in by.items() if k != "auto"}
    if 1 in by:
        ratios += [(f"{k} streams / 1 stream", v / by[1], f"{min(k * conn_rate, total_rate) / conn_rate:.2g} (the caps)")
                   for k, v in fixed.items() if k != 1]
    if "auto" in by and fixed:
        best = max(fixed, key=lambda k: fixed[k])
        ratios.append((f"auto / best fixed ({best} streams)", by["auto"] / fixed[best], ">= 0.9"))
        ratios.append(("auto / the relay's aggregate cap", by["auto"] / total_rate, "as close to 1 as the trials allow"))
    report("(b) ratios", [], ratios)
    print("  CPU s/GB: this process's CPU time (push and receiver, Rust threads included) per GB moved; "
          "relay: the relay process's own")
    return {f"b_{k}_mbs": v / 1e6 for k, v in by.items()}


# --- (c): pushing from the host that records ----------------------------------------------


class ReceiverProcess:
    """`vdifrec receive` in a process of its own at nice 19: the correlator's end, which would
    be on another host, here takes CPU only when the recording leaves some."""

    def __init__(self, folder: Path, token: Path) -> None:
        cli = "import sys; from vdifrec.cli import main; sys.exit(main(sys.argv[1:]))"
        self.proc = subprocess.Popen(
            ["nice", "-n", "19", sys.executable, "-c", cli, "receive", "--listen", "127.0.0.1:0",
             "--dir", str(folder), "--token-file", str(token)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        m = re.search(r"receiving on (\S+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"vdifrec receive did not start: {line}{self.proc.stderr.read()}")
        self.address = m.group(1)

    def stop(self) -> str:
        """Stops it (SIGTERM); what it printed, one line per transfer."""
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=30)
        return out


def record_capture_only(seconds: float) -> dict[str, Any]:
    """The reference stream received and accounted, nothing written: for a host whose disk
    cannot take 1 GB/s, where the written recording loses frames with or without a push."""
    sent, summary = capture_only(REF_FPS, seconds)
    return {"sent": sent, "summary": summary}


def part_c() -> dict[str, float]:
    seconds = env_float("BENCH_PUSH_RECORD_SECONDS", 10.0)
    # BENCH_PUSH_RECORD_WRITE=0: capture only (the recording's own disk writes left out).
    write = os.environ.get("BENCH_PUSH_RECORD_WRITE", "1") != "0"
    record = record_reference if write else record_capture_only
    rate = os.environ.get("BENCH_PUSH_RECORD_RATE", "1Gbps")
    cap = rate_bytes(rate)
    size = int(cap * (seconds + 8)) // 4096 * 4096
    folder = work_dir()
    try:
        need_disk(folder, 2 * size + (4 << 30), "(c)")
        token = make_token(folder)
        src = folder / "push_c.vdif"
        make_source(src, size)  # flushed and out of the cache, as a scan recorded earlier is
        (folder / "rx").mkdir()

        alone = record(seconds)

        samples: list[tuple[float, int]] = []
        result: dict[str, Any] = {}

        def progress(p: vdifrec.PushProgress) -> None:
            samples.append((time.monotonic(), p.bytes_done))

        rx = ReceiverProcess(folder / "rx", token)
        try:
            def run() -> None:
                try:
                    result["summary"] = vdifrec.push(str(src), to=rx.address, token_file=token, nice=True,
                                                     rate=rate, progress=progress, retry_seconds=20)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    result["error"] = exc

            pusher = threading.Thread(target=run)
            pusher.start()
            while not (samples and samples[-1][1] > 0) and pusher.is_alive():
                time.sleep(0.05)
            t_start = time.monotonic()
            both = record(seconds)
            t_end = time.monotonic()
            pusher.join()
        finally:
            received = rx.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if "error" in result:
        raise result["error"]
    summary = result["summary"]
    item = summary["items"][0]

    def done_at(t: float) -> float:
        """Bytes the push had done at `t`, between the progress samples either side."""
        before = [s for s in samples if s[0] <= t]
        after = [s for s in samples if s[0] >= t]
        if not before:
            return 0.0
        if not after:
            return float(samples[-1][1])
        (t0, b0), (t1, b1) = before[-1], after[0]
        return b0 if t1 == t0 else b0 + (b1 - b0) * (t - t0) / (t1 - t0)

    pushed_end = samples[-1][0] if samples else t_start
    overlap = max(0.0, min(t_end, pushed_end) - t_start)
    during = (done_at(t_end) - done_at(t_start)) / max(overlap, 1e-9)
    # The baseline for the push: its rate while nothing was being recorded (before and after).
    first_t = samples[0][0] if samples else t_start
    outside_s = max(0.0, t_start - first_t) + max(0.0, pushed_end - t_end)
    outside = (done_at(t_start) + float(summary["bytes"]) - done_at(t_end)) / outside_s if outside_s > 0.5 else float("nan")

    def lost(r: dict[str, Any]) -> float:
        s: vdifrec.Summary = r["summary"]
        return float(s.frames_lost + s.ring_overflows)

    a, b = alone["summary"], both["summary"]
    report(
        f"(c) recording 8.224 Gbit/s for {seconds:g} s "
        f"({'written to disk, as bench_record (a)' if write else 'capture only, nothing written'}) while pushing with "
        f"nice=True, rate={rate}",
        [
            ("without the push: frames sent", alone["sent"]["frames_sent"], "frames"),
            ("without the push: frames lost (all causes)", lost(alone), "frames"),
            ("without the push: kernel drops", a.kernel_drops, "datagrams"),
            ("without the push: sender rate achieved", alone["sent"]["gbps"], "Gbit/s"),
            ("with the push: frames sent", both["sent"]["frames_sent"], "frames"),
            ("with the push: frames lost (all causes)", lost(both), "frames"),
            ("with the push: kernel drops", b.kernel_drops, "datagrams"),
            ("with the push: sender rate achieved", both["sent"]["gbps"], "Gbit/s"),
            ("push rate while recording", during * 8 / 1e9, "Gbit/s"),
            ("push rate before and after the recording", outside * 8 / 1e9, "Gbit/s"),
            ("push rate over the whole push (summary)", summary["rate_bps"] / 1e9, "Gbit/s"),
            ("recording time the push overlapped", overlap / max(t_end - t_start, 1e-9), "of it"),
        ],
        [
            ("with the push: recorded / sent (zero loss)",
             b.frames_received / max(both["sent"]["frames_sent"], 1), "1.00"),
            ("without: recorded / sent (the baseline)",
             a.frames_received / max(alone["sent"]["frames_sent"], 1), "1.00"),
            ("push rate while recording / its cap", during / cap, "close to 1"),
            ("push rate while recording / before and after", during / outside, "none set"),
        ],
    )
    print(f"  push: {item['state']}, {item['streams']} streams ({item['streams_reason']}), "
          f"{summary['bytes'] / 1e9:.2f} GB; notes: {'; '.join(summary['notes']) or 'none'}")
    for line in received.splitlines():
        print(f"  receiver: {line.strip()}")
    recording = ("the recording writes 4 GiB files, each deleted once closed (bench_record (a)), not capture-only"
                 if write else "the recording is capture only (BENCH_PUSH_RECORD_WRITE=0): received and accounted, "
                 "nothing written")
    print(f"  {recording}; the "
          "push reads a file written before the recording (not in the page cache); the receiver (`vdifrec receive`, "
          "nice 19, its own process) writes to the same disk")
    reference = REF_FPS * FS * 8 / 1e9
    for label, r, others in (("without", alone, "the recorder"), ("with", both, "the recorder, the push, the receiver")):
        if r["sent"]["gbps"] < 0.95 * reference:
            print(f"  WARNING: {label} the push the sender reached only {r['sent']['gbps']:.2f} Gbit/s of "
                  f"{reference:.3f} (it shares this host's {os.cpu_count()} CPUs with {others} and whatever else "
                  "runs here): it sends a fixed number of frames, so they came later; no loss at that rate is "
                  "not no loss at the reference rate")
    return {"c_lost_alone": lost(alone), "c_lost_with_push": lost(both), "c_push_gbps": during * 8 / 1e9}


PARTS = {"a": part_a, "b": part_b, "c": part_c}


def main() -> dict[str, float]:
    parts = [p.strip() for p in os.environ.get("BENCH_PUSH_PARTS", "a,b,c").split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"BENCH_PUSH_PARTS: unknown part(s) {', '.join(unknown)}; choose from a, b, c")
    started = time.perf_counter()
    results: dict[str, float] = {}
    for p in parts:
        results.update(PARTS[p]())
    print(f"\n(bench_push: {time.perf_counter() - started:.0f} s in all, files removed)")
    return results


if __name__ == "__main__":
    if sys.argv[1:2] == ["relay"]:
        relay_main(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
    else:
        main()
