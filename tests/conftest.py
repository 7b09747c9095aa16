"""Shared fixtures. baseband (from PyPI) is the independent oracle for VDIF decoding."""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import re
import select
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_udp_port() -> int:
    """A UDP port on 127.0.0.1 that nothing listens on (free at the time of asking)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


# -- what the kernel delivered ---------------------------------------------------------------
#
# On loopback the kernel drops a datagram only when the receiving socket's buffer is full. How
# big that buffer is depends on the host: with CAP_NET_ADMIN (root) the recorder is granted what
# it asks for (SO_RCVBUFFORCE); anyone else gets at most net.core.rmem_max, 212992 bytes on an
# untuned host: 25 frames of 8224 bytes, fewer than one batch of the sender (32). What the
# recorder promises is that every datagram sent is taken by it or dropped by the kernel and
# counted (kernel_drops). So the tests read what the kernel did (/proc/net/udp) and assert exact
# counts given that; where the kernel dropped nothing, they are the numbers the stream was made with.


def udp_socket(port: int) -> tuple[int, int] | None:
    """(bytes queued, datagrams dropped) on the UDP socket bound to local `port`, as the kernel
    counts them (the rx_queue and drops columns of /proc/net/udp and udp6); None if none is."""
    found: tuple[int, int] | None = None
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port:
                queued, drops = found or (0, 0)
                found = (queued + int(f[4].split(":")[1], 16), drops + int(f[12]))
    return found


def udp_receive_buffer_errors() -> int:
    """Datagrams this network namespace's kernel has dropped for a full socket buffer, all sockets
    together (RcvbufErrors of Udp and Udp6): an upper bound on any one socket's drops, for a
    recorder whose socket is gone (killed)."""
    total = 0
    for table, prefix in (("/proc/net/snmp", "Udp:"), ("/proc/net/snmp6", "Udp6RcvbufErrors")):
        lines = [ln for ln in Path(table).read_text().splitlines() if ln.startswith(prefix)]
        if prefix == "Udp:":
            names, values = lines[0].split()[1:], lines[1].split()[1:]
            total += int(dict(zip(names, values))["RcvbufErrors"])
        elif lines:
            total += int(lines[0].split()[1])
    return total


@dataclasses.dataclass(frozen=True)
class Delivery:
    """What the kernel did with a stream sent to a recorder's UDP socket."""

    kernel_drops: int
    """Datagrams the kernel dropped because the socket buffer was full."""
    flushes: int
    """Empty datagrams sent after the stream so that the recorder learns that count (0 or 1)."""


def delivered(address: tuple[str, int], sent: int, taken: Callable[[], int] | None = None,
              timeout: float = 20.0, drops_before: int = 0) -> Delivery:
    """Call once `sent` datagrams have been sent to the recorder listening at `address`: waits
    (bounded) until each was taken by the recorder or dropped by the kernel, and says how many
    the kernel dropped. `taken` gives the recorder's count of datagrams, where the test can ask
    (else an empty queue tells that the recorder has read the rest). The kernel counts drops
    per socket: for a socket that has had datagrams before, `drops_before` is its count then
    (the `kernel_drops` of the last Delivery), and the drops of these `sent` are returned.
    Where they are not all taken or dropped within `timeout` seconds, the test fails, saying
    what was seen.

    The kernel tells a receiver of its drops only with the next datagram it queues (SO_RXQ_OVFL),
    so drops at the very end of a stream would go unreported, where a real stream goes on and
    reports them. After any drop, one empty datagram (malformed: too_short) is therefore sent
    once the queue is empty, to carry the final count.
    """
    port = address[1]

    def state() -> tuple[int, int]:
        now = udp_socket(port)
        assert now is not None, f"no UDP socket is bound to port {port}: the recorder stopped, or never listened"
        return now

    def wait(n: int) -> None:
        # Without the recorder's count, an empty queue that stays empty (a datagram may still
        # wait in the kernel's backlog on a busy host) says that it has read the rest.
        deadline = time.monotonic() + timeout
        calm_since, last = time.monotonic(), state()
        while time.monotonic() < deadline:
            queued, drops = now = state()
            if now != last:
                calm_since, last = time.monotonic(), now
            if queued == 0 and (taken() + drops - drops_before >= n if taken else time.monotonic() - calm_since >= 0.1):
                return
            time.sleep(0.01)
        # Not delivered in time: what follows would compare counts of a stream still under way.
        queued, drops = state()
        raise AssertionError(
            f"{n} datagrams to port {port} not taken or dropped within {timeout} s: {queued} bytes still queued, "
            f"{drops - drops_before} dropped by the kernel"
            + (f", {taken()} taken by the recorder" if taken else ", the queue never empty and calm for 0.1 s"))

    wait(sent)
    flushes = 0
    if state()[1] > drops_before:
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.sendto(b"", address)
        flushes = 1
        wait(sent + 1)
    return Delivery(state()[1] - drops_before, flushes)


def disk_fill(path: str | Path) -> float:
    """How full the file system holding `path` is, from os.statvfs, as /status's `fill`:
    used / (used + free to non-root), df's Use%."""
    st = os.statvfs(path)
    used = st.f_blocks - st.f_bfree
    return used / (used + st.f_bavail) if used + st.f_bavail else 0.0


def around(ask: Callable[[], object], *paths: str | Path) -> tuple[object, float, float]:
    """`ask()`'s answer, with the least and the most `disk_fill` of `paths` seen just before and
    just after it: other processes write to the same file systems meanwhile, so a fill served in
    between lies in that range (give or take what they wrote in the instant between)."""
    before = [disk_fill(p) for p in paths]
    answer = ask()
    after = [disk_fill(p) for p in paths]
    return answer, min(before + after), max(before + after)


#: Fill that other processes may add or free in the instant between statvfs and the recorder's.
FILL_SLACK = 0.002


def output_line(path: Path, pattern: str, timeout: float = 30.0, proc: subprocess.Popen[str] | None = None) -> re.Match[str]:
    """Waits (bounded) until what a subprocess writes to `path` matches `pattern` (its
    'listening on ...' or 'control on ...' line) and returns the match; stops early when
    `proc` has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, path.read_text())
        if m or (proc is not None and proc.poll() is not None):
            break
        time.sleep(0.05)
    assert m, path.read_text()
    return m


def read_until(proc: subprocess.Popen[str], pattern: str, timeout: float = 30.0) -> tuple[re.Match[str], str]:
    """Reads what `proc` writes to its stdout pipe until a whole line matches `pattern` (its
    'listening on ...' line), for at most `timeout` seconds: a line that never comes fails the
    test, where readline() would wait for ever. Returns the match and all that was read (the
    pipe is read directly, so communicate() later gives the rest)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    raw = b""
    deadline = time.monotonic() + timeout
    while True:
        text = raw.decode(errors="replace")
        for line in text.splitlines(keepends=True):
            if line.endswith("\n") and (m := re.search(pattern, line)):
                return m, text
        left = deadline - time.monotonic()
        ready = select.select([fd], [], [], min(left, 0.5))[0] if left > 0 else []
        chunk = os.read(fd, 1 << 16) if ready else None
        if left <= 0 or chunk == b"":
            proc.kill()
            _, err = proc.communicate(timeout=30)
            why = f"not within {timeout} s" if left <= 0 else f"before it exited with status {proc.returncode}"
            raise AssertionError(f"no line matching {pattern!r} {why}; it wrote {text!r} and to stderr {err!r}")
        if chunk:
            raw += chunk


def ring_holding(frames: int, frame_size: int = 8224) -> str:
    """A ring size that holds `frames` frames whole (the ring is laid out in runs of 128 frames,
    one run spare), as the recorder reads it: so that a stream of that many frames cannot
    overflow it however slow the disk."""
    runs = math.ceil(frames / 128) + 1
    return f"{math.ceil(runs * 128 * frame_size / (1 << 20))}MiB"


# -- the live monitor -------------------------------------------------------------------------
#
# The live monitor runs at the lowest priority (SCHED_IDLE): it looks only with CPU nobody else
# wants, and only while frames arrive. On a host loaded by other work it may not look for as
# long as a test can wait. What it promises then is to count each second it let pass (skips).
# So a test keeps its stream flowing until the first look (bounded); without one, the monitor
# must have said why, and the test is skipped with that.

T = TypeVar("T")

#: How long a test waits for the live monitor's first look.
LIVE_LOOK_TIMEOUT = 60.0


def metric(base: str, name: str) -> float:
    """The value of the unlabelled series `name` in the `GET /metrics` of the status server at
    `base` (http://host:port)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert m, f"{name} is not in {base}/metrics:\n{text}"
    return float(m.group(1))


def first_live_look(look: Callable[[], T | None], base: str, timeout: float = LIVE_LOOK_TIMEOUT) -> T:
    """Waits (bounded) until `look()` gives the live monitor's first look, and returns it. The
    caller keeps the stream flowing meanwhile. With none in `timeout` s the monitor must have
    counted the seconds it skipped (`vdifrec_live_skips_total` of the status server at `base`):
    then the test is skipped saying so; without even that it fails."""
    deadline = time.monotonic() + timeout
    while True:
        got = look()
        if got:
            return got
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    skips = metric(base, "vdifrec_live_skips_total")
    assert skips >= 1, (f"the live monitor made no look in {timeout:g} s of a flowing stream and counted no "
                        "second skipped: it neither looked nor said why")
    pytest.skip(f"the live monitor (SCHED_IDLE) made no look in {timeout:g} s on this busy host: it counted "
                f"{skips:.0f} s skipped for want of idle CPU, as it promises")


def frames_of(data: bytes | Path, frame_size: int = 8224) -> np.ndarray:
    """The frames of a recording (or of what a sender recorded it sent), one row each."""
    raw = data.read_bytes() if isinstance(data, Path) else data
    assert len(raw) % frame_size == 0
    return np.frombuffer(raw, np.uint8).reshape(-1, frame_size)


def vdif_keys(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(thread, VDIF seconds, frame number) of each frame."""
    w = np.ascontiguousarray(rows[:, :16]).view("<u4")
    return (w[:, 3] >> 16) & 0x3FF, w[:, 0] & 0x3FFFFFFF, w[:, 1] & 0xFFFFFF


def left_out(sent: np.ndarray, recorded: np.ndarray) -> list[int]:
    """Which of the frames sent (rows, in the order sent) the recording lacks. Asserts that the
    recording is exactly the frames sent, in that order, with only those left out: loopback
    keeps the order, and a full socket buffer drops whole datagrams."""
    sent_heads = [r.tobytes() for r in sent[:, :32]]
    missing: list[int] = []
    kept: list[int] = []
    j = 0
    for head in (r.tobytes() for r in recorded[:, :32]):
        while j < len(sent_heads) and sent_heads[j] != head:
            missing.append(j)
            j += 1
        assert j < len(sent_heads), f"recorded frame {len(kept)} was not sent, or not in this order"
        kept.append(j)
        j += 1
    missing.extend(range(j, len(sent_heads)))
    assert np.array_equal(sent[kept], recorded), "a recorded frame differs from the frame sent"
    return missing


def loss_by_second(rows: np.ndarray, fps: int) -> dict[int, int]:
    """Frames missing from each VDIF second among `rows` (the frames received), as the recorder
    defines loss: on each thread, between its first and its last frame (nothing is guessed
    before the first or after the last). Every second from the first to the last is a key."""
    thread, second, fnr = vdif_keys(rows)
    seq = second.astype(np.int64) * fps + fnr
    lost: collections.Counter[int] = collections.Counter()
    for t in np.unique(thread):
        have = np.unique(seq[thread == t])
        missing = np.setdiff1d(np.arange(have[0], have[-1] + 1), have)
        lost.update((missing // fps).tolist())
    return {int(s): lost[int(s)] for s in range(int(second.min()), int(second.max()) + 1)}


def run_cli(*args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Runs the installed `vdifrec` command line in a subprocess (bounded in time)."""
    cmd = [sys.executable, "-m", "vdifrec.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=check)


#: A shared token, as a station and its correlator keep it (pushes, receivers, shipping).
TOKEN = "station-token-0123456789abcdef"


@pytest.fixture
def token(tmp_path: Path) -> Path:
    """TOKEN in a file readable by its owner only, as vdifrec wants a token file."""
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    f.chmod(0o600)
    return f


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(autouse=True)
def _quiet_astropy(monkeypatch: pytest.MonkeyPatch) -> None:
    # Keep astropy from reaching for the network to refresh its leap-second table.
    monkeypatch.setenv("ASTROPY_SKIP_CONFIG_UPDATE", "1")


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        from astropy.utils import iers

        iers.conf.auto_download = False
        iers.conf.auto_max_age = None
    except Exception:  # pragma: no cover - astropy is a test dependency
        pass
