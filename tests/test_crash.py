"""A recorder killed mid-scan (SIGKILL, as a power cut or a panic leaves it) loses only the frames
in flight. `record` and `serve` record the reference stream (125,000 frames/s of 8224 bytes) as a
scan in each layout (file; vbs and mk6 over three disks) and are killed at a random moment; the
scan is then read by the test's own reading of the layout (the oracle) and by vdifrec:

- every whole frame on disk is the frame `record_sent` wrote with its time, byte for byte;
  frames go missing only at the end, after a piece a writer had in flight (at most one per
  writer), or where the kernel dropped datagrams (counted: RcvbufErrors);
- the torn bytes vdifrec reports are the bytes on disk that are not whole frames (nor the
  headers of Mark6 blocks and files that hold them), and vdifrec reads the same whole frames;
- a recorder started again on the disks names the scan the crash left (notes, `/status`);
- `vdifrec scans --repair` leaves the same whole frames and nothing else, marks the scan closed,
  and `vdifrec push` of the repaired scan arrives verified.

A kill before the first frame leaves no scan, or an empty one that every tool reads. The figures
of every run (frames kept, torn bytes) are written to tests/artifacts/crash.json."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import select
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import udp_receive_buffer_errors

import vdifrec

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts"
FS = 8224
FPS = 125_000
SCAN = "crash"
#: Runs per layout and command: run 0 is killed before the first frame, the others at random.
RUNS = 5
#: The longest a run records before it is killed. The ring (512 MiB; 0.3 s of the stream is
#: 308 MB) holds all of it, so however slow the disk, no frame is dropped for a full ring:
#: whatever is missing was in flight.
MOST_SECONDS = 0.3
RING = "512MiB"
#: Writer threads: pieces that can be in flight, and so torn or not yet begun, at once.
WRITERS = {"file": 1, "vbs": 3, "mk6": 3}
DISKS = {"file": 1, "vbs": 3, "mk6": 3}
#: Small chunks and blocks, so that a fraction of a second is many of them.
CHUNK = {"file": [], "vbs": ["--chunk-size", "16MiB"], "mk6": ["--chunk-size", "4MiB"]}
START = dict(ref_epoch=53, start_second=2000)
TOKEN = "crash-test-token-0123456789abcdef"
MK6_BLOCK_HEADER = 8
MK6_FILE_HEADER = 20

FIGURES: list[dict[str, Any]] = []


# -- the layouts read by the test itself --------------------------------------------------------


@dataclass
class Piece:
    """One chunk, block or file of the scan as the test reads it: its whole frames and the bytes
    after them that are not whole frames (`number` -1: part of a Mark6 block or file header)."""

    number: int
    path: Path
    frames: np.ndarray
    torn: int
    #: Fewer bytes than the writer meant to write: cut short, or created and left empty.
    short: bool


def frames_of(path: Path, offset: int, length: int) -> tuple[np.ndarray, int]:
    """The whole frames of `length` bytes at `offset` of `path` (mapped), and the bytes left."""
    whole = length // FS * FS
    if whole == 0:
        return np.empty((0, FS), np.uint8), length
    return np.memmap(path, np.uint8, "r", offset=offset, shape=(whole // FS, FS)), length - whole


def read_file_layout(disks: list[Path], name: str) -> list[Piece]:
    path = disks[0] / f"{name}.vdif"
    if not path.exists():
        return []
    frames, torn = frames_of(path, 0, path.stat().st_size)
    return [Piece(0, path, frames, torn, torn > 0)]


def read_vbs_layout(disks: list[Path], name: str, chunk: int) -> list[Piece]:
    pieces = []
    for d in disks:
        folder = d / name
        for p in sorted(folder.glob(f"{name}.[0-9]*")) if folder.is_dir() else []:
            size = p.stat().st_size
            frames, torn = frames_of(p, 0, size)
            # A chunk is `chunk` bytes but for the scan's last, which holds what was left.
            pieces.append(Piece(int(p.name.rsplit(".", 1)[1]), p, frames, torn, torn > 0 or size == 0))
    return sorted(pieces, key=lambda p: p.number)


def read_mk6_layout(disks: list[Path], name: str) -> list[Piece]:
    """Mark6 scatter-gather: a 20-byte file header, then blocks of (blocknum, wb_size) and whole
    frames; only a file's last block can be cut short by a crash (or its header, or the file's)."""
    pieces = []
    for d in disks:
        path = d / name
        if not path.exists():
            continue
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(MK6_FILE_HEADER)
            if len(head) < MK6_FILE_HEADER:
                pieces.append(Piece(-1, path, np.empty((0, FS), np.uint8), len(head), True))
                continue
            sync, version, _block, _fmt, packet = struct.unpack("<Iiiii", head)
            assert sync == 0xFEED6666 and version == 2 and packet == FS
            at = MK6_FILE_HEADER
            while at < size:
                if size - at < MK6_BLOCK_HEADER:
                    pieces.append(Piece(-1, path, np.empty((0, FS), np.uint8), size - at, True))
                    break
                f.seek(at)
                number, wb = struct.unpack("<ii", f.read(MK6_BLOCK_HEADER))
                payload = min(wb - MK6_BLOCK_HEADER, size - at - MK6_BLOCK_HEADER)
                frames, torn = frames_of(path, at + MK6_BLOCK_HEADER, payload)
                short = payload < wb - MK6_BLOCK_HEADER
                if short and len(frames) == 0:
                    torn += MK6_BLOCK_HEADER  # a block with no whole frame is torn from its header on
                pieces.append(Piece(number, path, frames, torn, short))
                at += MK6_BLOCK_HEADER + payload
    return sorted(pieces, key=lambda p: p.number)


def read_layout(layout: str, disks: list[Path]) -> list[Piece]:
    if layout == "file":
        return read_file_layout(disks, SCAN)
    if layout == "vbs":
        return read_vbs_layout(disks, SCAN, 16 << 20)
    return read_mk6_layout(disks, SCAN)


def digest(parts: Iterable[np.ndarray]) -> str:
    """The bytes of `parts` one after another, as a digest (the scan's frames are large)."""
    h = hashlib.sha256()
    for p in parts:
        if len(p):
            h.update(memoryview(np.ascontiguousarray(p)).cast("B"))
    return h.hexdigest()


def frame_keys(frames: np.ndarray) -> np.ndarray:
    """(seconds, frame number, thread) of each frame, as one integer, from its VDIF header."""
    w = np.ascontiguousarray(frames[:, :16]).view("<u4")
    seconds = (w[:, 0] & 0x3FFFFFFF).astype(np.int64)
    frame = (w[:, 1] & 0xFFFFFF).astype(np.int64)
    thread = ((w[:, 3] >> 16) & 0x3FF).astype(np.int64)
    return (seconds * FPS + frame) * 1024 + thread


def sample_rate(frame: np.ndarray) -> float:
    """Samples per second per channel of the reference stream, from a frame's header: half a
    second is too short a scan for a reader to learn it from the frame numbers."""
    w = np.ascontiguousarray(frame[:16]).view("<u4")
    channels = 1 << ((int(w[2]) >> 24) & 0x1F)
    bits = ((int(w[3]) >> 26) & 0x1F) + 1
    per_sample = bits * channels * (2 if int(w[3]) >> 31 else 1)
    return (FS - 32) * 8 // per_sample * FPS


# -- one run ------------------------------------------------------------------------------------


@dataclass
class Run:
    layout: str
    command: str
    tmp: Path
    disks: list[Path] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    address: tuple[str, int] | None = None
    status: str | None = None
    output: str = ""
    #: O_DIRECT writes (the default) go to disk whole or not at all when the recorder is killed;
    #: buffered ones (`--no-direct`, as on a file system without O_DIRECT) can stop part way.
    direct: bool = True

    @property
    def d(self) -> list[str]:
        return [str(x) for x in self.disks]

    @property
    def disk_args(self) -> list[str]:
        return [a for d in self.disks for a in ("--disk", str(d))]


def start(run: Run, record_on: bool = True) -> None:
    """Starts the recorder; with `serve`, a scan is asked for over VSI-S (`record=on`) when
    `record_on`. Returns once it listens (and the scan is on)."""
    if not run.disks:
        run.disks = [run.tmp / f"disk{i}" for i in range(DISKS[run.layout])]
        for d in run.disks:
            d.mkdir()
    common = ["--port", "0", "--ring", RING, "--frame-size", str(FS), "--fps", str(FPS),
              "--format", run.layout, "--writers", str(WRITERS[run.layout]), *CHUNK[run.layout],
              "--status-listen", "127.0.0.1:0", "--no-live", *run.disk_args,
              *([] if run.direct else ["--no-direct"])]
    py = [sys.executable, "-m", "vdifrec.cli"]
    if run.command == "record":
        cmd = [*py, "record", *common, "--scan", SCAN, "--quiet"]
    else:
        cmd = [*py, "serve", "--control", "127.0.0.1:0", "--gather-dir", str(run.tmp), *common]
    run.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run.output = ""
    if run.command == "serve":
        mc = wait_for(run, r"control on ([0-9.]+):(\d+)")
    m = wait_for(run, r"listening on ([0-9.]+):(\d+)")
    run.address = (m.group(1), int(m.group(2)))
    run.status = wait_for(run, r"status on (http://[0-9.]+:\d+)").group(1)
    if run.command == "serve" and record_on:
        with vdifrec.VSIClient((mc.group(1), int(mc.group(2))), timeout=30) as c:
            r = c.send(f"record=on:{SCAN}")
            assert r.code == 0, r


def wait_for(run: Run, pattern: str, timeout: float = 30.0) -> re.Match[str]:
    """The first line of the recorder's output matching `pattern`, reading more of it for at most
    `timeout` seconds."""
    assert run.proc is not None and run.proc.stdout is not None
    fd = run.proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    while True:
        if m := re.search(pattern, run.output):
            return m
        left = deadline - time.monotonic()
        chunk = os.read(fd, 1 << 16) if left > 0 and select.select([fd], [], [], min(left, 0.5))[0] else None
        if left <= 0 or chunk == b"":
            raise AssertionError(f"no line matching {pattern!r} (exit status {run.proc.poll()}): {run.output!r}")
        if chunk:
            run.output += chunk.decode(errors="replace")


def kill(run: Run) -> None:
    assert run.proc is not None and run.proc.stdout is not None
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait(timeout=30)
    run.output += run.proc.stdout.read()
    run.proc.stdout.close()


def socket_drops(port: int) -> int | None:
    """The datagrams the kernel dropped for the UDP socket bound to `port` (its receive buffer
    full), from /proc/net/udp; None where no such socket is listed."""
    for table in (Path("/proc/net/udp"), Path("/proc/net/udp6")):
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port:
                return int(f[-1])
    return None


def record_and_kill(run: Run, seconds: float, sent_path: Path) -> tuple[int, int]:
    """Sends the reference stream and kills the recorder `seconds` after the first datagram;
    returns (frames sent, the most datagrams the kernel can have dropped for the recorder: its
    socket's count just before the kill, and every drop on the host from then until the kill)."""
    assert run.address is not None
    drops0 = udp_receive_buffer_errors()
    sender = vdifrec.Sender(run.address, duration=MOST_SECONDS + 1, fps=FPS, record_sent=sent_path, seed=7,
                            **START)
    time.sleep(seconds)
    host_before = udp_receive_buffer_errors()
    own = socket_drops(run.address[1])
    kill(run)
    host_after = udp_receive_buffer_errors()
    sent = sender.stop()
    drops = own + host_after - host_before if own is not None else host_after - drops0
    return int(sent["frames_sent"]), drops


def check_frames(run: Run, pieces: list[Piece], sent: np.ndarray, drops: int) -> dict[str, int]:
    """Every frame on disk is the frame sent with its time; frames go missing only after a piece
    in flight at the kill (cut short, or not begun) and where the kernel dropped datagrams."""
    index = {int(k): i for i, k in enumerate(frame_keys(sent))}
    numbered = [p for p in pieces if p.number >= 0]
    numbers = [p.number for p in numbered]
    assert len(set(numbers)) == len(numbers), f"a piece number twice: {numbers}"
    absent = sorted(set(range(max(numbers, default=-1) + 1)) - set(numbers))
    in_flight = [p.number for p in numbered if p.short] + absent
    # Each writer has one piece at a time: only as many can be cut short or not yet begun.
    assert len(in_flight) <= WRITERS[run.layout], (
        f"pieces {sorted(in_flight)} cut short or not begun: more than the "
        f"{WRITERS[run.layout]} writer(s) could have had in flight")
    explained = 0
    unexplained = 0
    last = -1
    after_in_flight = False
    for p in numbered:
        if p.number - 1 in absent:
            after_in_flight = True
        if len(p.frames):
            at = np.array([index.get(int(k), -1) for k in frame_keys(p.frames)])
            assert (at >= 0).all(), f"{p.path}: a frame that was never sent"
            assert np.array_equal(p.frames, sent[at]), f"{p.path}: a frame differs from the one sent with its time"
            steps = np.diff(np.concatenate([[last], at]))
            assert (steps > 0).all(), f"{p.path}: frames out of order"
            gap, inside = int(steps[0] - 1), int((steps[1:] - 1).sum())
            if after_in_flight:
                explained += gap
            else:
                unexplained += gap
            unexplained += inside
            last = int(at[-1])
        after_in_flight = p.short
    assert unexplained <= drops, f"{unexplained} frames missing between whole frames; the kernel dropped {drops}"
    return {"frames_kept": sum(len(p.frames) for p in pieces), "frames_missing_at_end": len(sent) - 1 - last,
            "frames_missing_in_flight": explained, "frames_missing_kernel": unexplained,
            "pieces_in_flight": len(in_flight)}


def listed(disks: list[str], name: str = SCAN) -> dict[str, Any] | None:
    found = [s for s in vdifrec.scans(disks) if s["name"] == name]
    assert len(found) <= 1, found
    return found[0] if found else None


def get_status(run: Run) -> dict[str, Any]:
    with urllib.request.urlopen(f"{run.status}/status", timeout=10) as r:
        doc: dict[str, Any] = json.loads(r.read())
    return doc


def assert_every_tool_reads_an_empty_scan(run: Run, name: str, cli: Any) -> None:
    """A kill before the first frame: no scan, or one with no frame that every tool reads."""
    s = listed(run.d, name)
    if s is None:
        return
    assert (s["bytes"], s["error"], s["closed"]) == (0, None, False), s
    c = vdifrec.check(name, disks=run.d)
    assert (c["frames"], c["clean"]) == (0, False), c
    assert vdifrec.gather(name, run.d, run.tmp / "gathered.vdif")["bytes"] == 0
    with pytest.raises(vdifrec.FormatError, match="holds no whole frame"):
        vdifrec.open(name, disks=run.d)
    res = cli("scans", "--repair", name, *run.disk_args)
    assert res.returncode == 0, res.stdout + res.stderr
    after = listed(run.d, name)
    assert after is None or (after["torn"], after["bytes"]) == ([], 0), after


def clean(run: Run) -> None:
    """The run's files gone: a scan and what was sent are hundreds of MB each."""
    for f in sorted(run.tmp.rglob("*"), reverse=True):
        f.unlink() if f.is_file() or f.is_symlink() else f.rmdir()


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    folder = tmp_path_factory.mktemp("crash-rx")
    token = folder / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    with vdifrec.Receiver(folder / "in", listen="127.0.0.1:0", token_file=token) as r:
        yield r.address, folder / "in", token


@pytest.fixture(scope="module", autouse=True)
def figures() -> Iterator[None]:
    yield
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "crash.json").write_text(json.dumps(FIGURES, indent=1) + "\n")


def seconds_of(layout: str, command: str, i: int) -> float:
    """The moment of the kill after the first datagram: random, but the same in every session so
    that a failure can be run again."""
    return random.Random(f"{layout}-{command}-{i}").uniform(0.1, MOST_SECONDS)


def restart_names_the_scan(run: Run, frames: int, torn: int) -> None:
    """A recorder started again on the disks says, before it records, what the crash left."""
    again = Run(run.layout, run.command, run.tmp, disks=run.disks)
    start(again, record_on=False)
    try:
        (u,) = [u for u in get_status(again)["unclosed_scans"] if u["name"] == SCAN]
        assert (u["format"], u["frames"], u["bytes"], u["torn_bytes"], u["error"]) == (
            run.layout, frames, frames * FS, torn, None), u
        assert sorted(u["disks"]) == sorted(str(d) for d in run.disks if any(d.iterdir())), u
        assert u["note"].startswith(f"scan {SCAN} ({run.layout} on "), u["note"]
        assert f"{frames:,} whole frames" in u["note"], u["note"]
        # The same words on its output, before anything is recorded.
        wait_for(again, re.escape(u["note"]))
    finally:
        assert again.proc is not None
        again.proc.send_signal(signal.SIGINT)
        again.proc.wait(timeout=60)
        assert again.proc.stdout is not None
        again.proc.stdout.close()


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["file", "vbs", "mk6"])
@pytest.mark.parametrize("command", ["record", "serve"])
def test_a_recorder_killed_mid_scan_loses_only_the_frames_in_flight(
    layout: str, command: str, tmp_path: Path, receiver: tuple[str, Path, Path], cli: Any
) -> None:
    to, incoming, token = receiver
    restarted = pushed = False
    for i in range(RUNS):
        run = Run(layout, command, tmp_path / f"run{i}", direct=i % 2 == 1)
        run.tmp.mkdir()
        start(run)
        if i == 0:
            kill(run)
            assert_every_tool_reads_an_empty_scan(run, SCAN, cli)
            FIGURES.append({"layout": layout, "command": command, "run": i, "killed_after_s": 0.0,
                            "frames_sent": 0, "frames_kept": 0, "torn_bytes": 0,
                            "scan_left": listed(run.d) is not None})
            continue
        at = seconds_of(layout, command, i)
        sent_path = run.tmp / "sent.vdif"
        frames_sent, drops = record_and_kill(run, at, sent_path)
        sent = np.memmap(sent_path, np.uint8, "r").reshape(-1, FS)
        assert len(sent) == frames_sent
        pieces = read_layout(layout, run.disks)
        figures = check_frames(run, pieces, sent, drops)
        torn = sum(p.torn for p in pieces)
        kept = figures["frames_kept"]
        whole = digest(p.frames for p in pieces)
        FIGURES.append({"layout": layout, "command": command, "run": i, "killed_after_s": round(at, 3),
                        "direct": run.direct, "frames_sent": frames_sent, "torn_bytes": torn,
                        "kernel_drops_at_most": drops,
                        **figures})
        if not kept:
            # Killed before a chunk reached the disk (a slow or loaded host): as a kill before
            # the first frame.
            assert_every_tool_reads_an_empty_scan(run, SCAN, cli)
            del sent, pieces
            clean(run)
            continue

        # vdifrec reads the same whole frames and reports the same torn bytes.
        s = listed(run.d)
        assert s is not None and s["error"] is None and not s["closed"], s
        assert (s["bytes"], s["torn_bytes"]) == (kept * FS, torn), (s, torn)
        with vdifrec.open(SCAN, disks=run.d, sample_rate=sample_rate(sent[0])) as fh:
            assert sum(t["bytes"] for t in fh.torn) == torn
            assert digest(fh.frame_parts) == whole
        if not restarted:
            restart_names_the_scan(run, kept, torn)
            restarted = True

        # Repair: the same whole frames, nothing else; closed; a second repair cuts nothing.
        res = cli("scans", "--repair", SCAN, *run.disk_args, "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        report = json.loads(res.stdout)
        assert (report["bytes_cut"], report["bytes"], report["missing"]) == (torn, kept * FS, []), report
        repaired = read_layout(layout, run.disks)
        assert sum(p.torn for p in repaired) == 0
        assert digest(p.frames for p in repaired) == whole
        s = listed(run.d)
        assert s is not None and (s["torn"], s["closed"], s["missing"]) == ([], True, []), s
        assert vdifrec.repair(SCAN, run.d)["cut"] == []
        FIGURES[-1]["torn_pieces"] = len(report["cut"])
        FIGURES[-1]["parts_emptied"] = len(report["emptied"])

        # The repaired scan pushed to the correlator's end arrives verified, frame for frame.
        if not pushed:
            p = vdifrec.push(SCAN, to=to, token_file=token, disks=run.d)
            (item,) = p["items"]
            assert (p["ok"], item["state"], item["notes"]) == (True, "sent", []), p
            landed = incoming / SCAN
            assert digest([np.memmap(landed, np.uint8, "r")]) == whole
            landed.unlink()
            pushed = True
        del sent, pieces, repaired
        clean(run)
    assert restarted and pushed, "no run kept a frame: kill later (MOST_SECONDS)"
