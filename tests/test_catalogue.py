"""What vdifrec knows of the disks (docs/operator/scans.md, "A season of scans"): the scans
another program writes, extends or deletes between two commands are seen by the next command;
`scan_set=` finds scans by name, pattern and `next` as jive5ab 3.1 does; listings take
`--name` and `--json`; a scan of 2,000 chunks is read, shipped and received under a limit of
256 open files. Scans are laid out here by hand (docs/reference/formats/layouts.md) from a file
`vdifrec.generate` made; its bytes are the oracle."""

from __future__ import annotations

import json
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import run_cli
from test_vsi import Serve

import vdifrec

FS = 32 + 1024
FPS = 50


def stream(tmp_path: Path, frames: int, name: str = "original.vdif") -> bytes:
    """`frames` frames of 2 threads (FS bytes, FPS per thread) from second 1000 of epoch 53."""
    path = tmp_path / name
    vdifrec.generate(path, seconds=frames / 2 / FPS, fps=FPS, frame_size=FS, threads=2, nchan=2,
                     ref_epoch=53, start_second=1000, seed=3)
    data = path.read_bytes()
    assert len(data) == frames * FS
    return data


def write_vbs_scan(disks: list[Path], scan: str, data: bytes, chunk_frames: int, first: int = 0) -> int:
    """Chunks of `chunk_frames` frames, numbered from `first`, round the disks; how many."""
    chunk = chunk_frames * FS
    n = 0
    for k, at in enumerate(range(0, len(data), chunk)):
        d = disks[(first + k) % len(disks)] / scan
        d.mkdir(exist_ok=True)
        (d / f"{scan}.{first + k:08d}").write_bytes(data[at:at + chunk])
        n += 1
    return n


def another_program(code: str) -> None:
    """Runs `code` in a separate Python process, as jive5ab, m5copy or `rm` would act."""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("watch", ["inotify", "directory times"])
def test_commands_see_what_another_program_did_between_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            watch: str) -> None:
    if watch != "inotify":
        monkeypatch.setenv("VDIFREC_CATALOGUE_WATCH", "0")
    serve = Serve(tmp_path)
    try:
        stream(tmp_path, 120)
        assert serve.one("scan_set=kv_no0001").fields[0].startswith("'kv_no0001' does not exist")
        # Another program writes a scan (the catalogue already holds the disks: serve read them).
        src = tmp_path / "original.vdif"
        another_program(
            "from pathlib import Path\n"
            f"data = Path({str(src)!r}).read_bytes()\n"
            f"for k, d in enumerate({[str(d) for d in serve.disks]!r}):\n"
            "    p = Path(d) / 'kv_no0001'\n"
            "    p.mkdir()\n"
            f"    (p / f'kv_no0001.{{k:08d}}').write_bytes(data[k * 60 * {FS}:(k + 1) * 60 * {FS}])\n")
        assert serve.one("scan_set=kv_no0001").code == 0
        assert serve.one("scan_set?").fields == ("-1", "kv_no0001", "0", str(120 * FS))
        check = serve.one("scan_check?")
        assert check.code == 0 and check.fields[1] == "kv_no0001", check
        # ... adds a chunk to it: the next command reads the scan as it is now.
        more = stream(tmp_path, 40, "more.vdif")
        another_program(
            "from pathlib import Path\n"
            f"Path({str(serve.disks[0])!r}, 'kv_no0001', 'kv_no0001.00000002').write_bytes("
            f"Path({str(tmp_path / 'more.vdif')!r}).read_bytes())\n")
        assert serve.one("scan_set=kv_no0001").code == 0
        assert serve.one("scan_set?").fields[3] == str((120 + len(more) // FS) * FS)
        # A name another program used gets jive5ab's suffix from record=on.
        port = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        port.bind(("127.0.0.1", 0))
        free = port.getsockname()[1]
        port.close()
        assert serve.one(f"net_port={free}").code == 0
        on = serve.one("record=on:kv_no0001")
        assert (on.code, on.fields) == (0, ("kv_no0001a",))
        assert serve.one("record=off").code == 1
        serve.wait_off()
        # ... and deletes it: gone for the next command.
        another_program(
            "import shutil\n"
            f"for d in {[str(d) for d in serve.disks]!r}:\n"
            "    shutil.rmtree(d + '/kv_no0001')\n")
        gone = serve.one("scan_set=kv_no0001")
        assert gone.code == 4 and "does not exist" in gone.fields[0], gone
        # The name is free again.
        on = serve.one("record=on:kv_no0001")
        assert (on.code, on.fields) == (0, ()), on  # the name asked for: no name in the reply
        serve.one("record=off")
        serve.wait_off()
    finally:
        serve.stop()


def test_scan_set_finds_scans_by_pattern_and_next_as_jive5ab_does(tmp_path: Path) -> None:
    serve = Serve(tmp_path)
    try:
        data = stream(tmp_path, 20)
        names = ["r41_kv_no0002", "r41_kv_no0001", "r42_kv_no0001"]
        for n in names:
            write_vbs_scan(serve.disks, n, data, 10)
        r = serve.one("scan_set=next")
        assert (r.code, r.fields) == (4, ("no search string given yet",)), r
        assert serve.one("scan_set=r41*").code == 0
        assert serve.one("scan_set?").fields[1] == "r41_kv_no0001"
        assert serve.one("scan_set=next").code == 0
        assert serve.one("scan_set?").fields[1] == "r41_kv_no0002"
        assert serve.one("scan_set=next").code == 0  # round to the first again
        assert serve.one("scan_set?").fields[1] == "r41_kv_no0001"
        # inc and dec step through this session's scans: none recorded here.
        r = serve.one("scan_set=inc")
        assert r.code == 6 and "no recorded scan to increment from" in r.fields[0], r
        # A failed scan_set keeps the scan set before it.
        assert serve.one("scan_set=r43*").code == 4
        assert serve.one("scan_set?").fields[1] == "r41_kv_no0001"
        # A scan is a name at the top of the disks and nothing else: a path outside them is never
        # opened, and nothing of what lies there is said.
        (tmp_path / "outside").write_bytes(b"root:x:0:0" + bytes(2000))
        for probe in ("/etc/passwd", str(tmp_path / "outside"), "../outside", "../disk1/r41_kv_no0001"):
            r = serve.one(f"scan_set={probe}")
            assert r.code == 4 and r.fields == (f"'{probe}' does not exist in Mk6/VBS format",), r
        # Byte offsets as C's strtoll reads them: hexadecimal too.
        assert serve.one(f"scan_set=r42_kv_no0001:+{FS:#x}:-{FS}").code == 0
        assert serve.one("scan_set?").fields == ("-1", "r42_kv_no0001", str(FS), str(19 * FS))
        assert serve.one("scan_set=r42_kv_no0001:+0x").code == 4  # as jive5ab: no number to parse
        assert serve.one("scan_set=r42_kv_no0001:e").code == 8  # a scan under 1 MB has no "e"
        # Times, as jive5ab reads them, need the data rate: from the mode (100 frames/s of 1024
        # bytes of payload, both threads together).
        r = serve.one("scan_set=r42_kv_no0001:+0.05s")
        assert r.code == 6 and "could not deduce recorded data rate" in r.fields[0], r
        assert serve.one("mode=VDIF_1024-0.8192-2-2").code == 0
        assert serve.one("scan_set=r42_kv_no0001:+0.05s:-0.02s").code == 0
        assert serve.one("scan_set?").fields == ("-1", "r42_kv_no0001", str(5 * FS), str(18 * FS))
        assert serve.one("scan_set=r42_kv_no0001:16m40.1s").code == 0  # its first frame is at 00:16:40
        assert serve.one("scan_set?").fields[2] == str(10 * FS)
        assert serve.one("scan_set=r42_kv_no0001:40.1s").code == 0  # the first 40.1 s mark in it
        assert serve.one("scan_set?").fields[2] == str(10 * FS)
        assert serve.one("scan_set=r42_kv_no0001:+61s").code == 4  # seconds below 60, as jive5ab
    finally:
        serve.stop()


def test_listing_by_pattern_and_as_json(tmp_path: Path) -> None:
    disks = [tmp_path / f"disk{i}" for i in range(6)]
    for d in disks:
        d.mkdir()
    data = stream(tmp_path, 12)
    made = [f"r{e}_kv_no{k:04d}" for e in (41, 42) for k in range(150)]
    for n in made:
        write_vbs_scan(disks, n, data, 2)
    listed = run_cli("scans", "--disk", str(tmp_path / "disk*"), "--json", "--name", "r41_*_no00[0-4]?")
    assert listed.returncode == 0, listed.stderr
    found = json.loads(listed.stdout)
    assert [s["name"] for s in found] == [f"r41_kv_no{k:04d}" for k in range(50)]
    assert all(s["chunks"] == 6 and s["bytes"] == len(data) and s["disks"] == [str(d) for d in disks] for s in found)
    assert all(s["first"]["seconds"] == 1000 and s["last"]["frame"] == 5 for s in found)
    every = vdifrec.scans(tmp_path / "disk*")
    assert [s["name"] for s in every] == sorted(made)
    bad = run_cli("scans", "--disk", str(disks[0]), "--name", "r41[")
    assert bad.returncode == 2 and "--name" in bad.stderr and "pattern" in bad.stderr, bad.stderr


def limit_open_files() -> None:
    """The common default where a FlexBuff's operator never raised it, and lower."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))


def limited(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vdifrec.cli", *args], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit_open_files)


@pytest.mark.slow
def test_a_scan_of_2000_chunks_is_read_shipped_and_received_under_256_open_files(tmp_path: Path) -> None:
    disks = [tmp_path / f"disk{i}" for i in range(4)]
    for d in disks:
        d.mkdir()
    data = stream(tmp_path, 2000)
    assert write_vbs_scan(disks, "long1", data, 1) == 2000
    on = ["--disk", str(tmp_path / "disk*")]

    listed = limited("scans", *on, "--json")
    assert listed.returncode == 0, listed.stderr
    (scan,) = json.loads(listed.stdout)
    assert (scan["chunks"], scan["bytes"], scan["missing"]) == (2000, len(data), [])

    checked = limited("check", "long1", *on, "--fps", str(FPS))
    assert checked.returncode == 0, checked.stdout + checked.stderr

    gathered = limited("gather", "long1", *on, "-o", str(tmp_path / "gathered.vdif"))
    assert gathered.returncode == 0, gathered.stderr
    assert (tmp_path / "gathered.vdif").read_bytes() == data

    converted = limited("convert", "long1", str(tmp_path / "converted.vdif"), *on)
    assert converted.returncode == 0, converted.stderr
    assert (tmp_path / "converted.vdif").read_bytes() == data

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(0.5)
    got: list[bytes] = []

    def take() -> None:
        try:
            while len(got) < 2000:
                got.append(rx.recv(65536))
        except TimeoutError:
            pass

    reader = threading.Thread(target=take)
    reader.start()
    sent = limited("send", "--scan", "long1", *on, "--to", f"udp://127.0.0.1:{rx.getsockname()[1]}",
                   "--rate", "8Mbps")
    reader.join(timeout=60)
    rx.close()
    assert sent.returncode == 0, sent.stderr
    # Kernel drops on a busy host may cost datagrams; each that arrived is one of the scan's
    # frames, in order.
    frames = [data[k * FS:(k + 1) * FS] for k in range(2000)]
    at = 0
    for d in got:
        assert d in frames[at:], "a datagram that is no frame of the scan, or out of order"
        at = frames.index(d, at) + 1
    assert len(got) > 1000, f"only {len(got)} of 2000 frames arrived"

    token = tmp_path / "token"
    token.write_text("station-token-0123456789abcdef\n")
    token.chmod(0o600)
    incoming = tmp_path / "incoming"
    receiver = subprocess.Popen(
        [sys.executable, "-m", "vdifrec.cli", "receive", "--listen", "127.0.0.1:0", "--dir", str(incoming),
         "--token-file", str(token)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=limit_open_files)
    try:
        assert receiver.stdout is not None
        line = ""
        deadline = time.monotonic() + 30
        while "127.0.0.1:" not in line and time.monotonic() < deadline:
            line = receiver.stdout.readline()
        port = line.split("127.0.0.1:")[1].split()[0].strip(" ,;)")
        pushed = limited("push", "long1", *on, "--as", "vbs", "--to", f"127.0.0.1:{port}", "--token-file",
                         str(token))
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    finally:
        receiver.terminate()
        receiver.wait(timeout=30)
        if receiver.stdout is not None:
            receiver.stdout.close()
    chunks = sorted((incoming / "long1").iterdir())
    assert [c.name for c in chunks] == [f"long1.{k:08d}" for k in range(2000)]
    assert b"".join(c.read_bytes() for c in chunks) == data
