"""Station control by VSI-S: `vdifrec serve` driven as the Field System drives jive5ab on a
FlexBuff (docs/reference/formats/vsi.md), with the sender on loopback. Every reply is checked
against the grammar with a pattern written here (not vdifrec's parser), each scan byte for byte
against what was sent (kernel drops, which an untuned host may have, change the expectation,
never the verdict), then bad parameters, unknown keywords, abuse of the control port while a
scan records, two clients racing for `record=on`, and SIGTERM during a scan.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (FILL_SLACK, around, delivered, free_udp_port, frames_of, left_out, output_line, ring_holding,
                      run_cli)

import vdifrec
from vdifrec.vsi import Code, Reply, VSIClient, VSIError, parse_reply
from vdifrec.vsi.protocol import parse, split_line

FS = 8224
FPS = 15_625  # VDIF_8192-1024-4-2: 1024 Mbit/s of 8192-byte payloads
MODE = "VDIF_8192-1024-4-2"
START = dict(ref_epoch=53, start_second=2000)
# `!keyword= code [: field]* ;` or `!keyword? ...`, written from the reference, not from vdifrec.
GRAMMAR = re.compile(r"^!([a-z_0-9]+)([=?]) (\d+)((?: : [^:;]*)*) ;$")
CHUNK_RE = re.compile(r"^[^/.]+\.([0-9]{8})$")


def check_grammar(r: Reply) -> Reply:
    m = GRAMMAR.match(str(r))
    assert m, f"reply does not follow the grammar: {r}"
    return r


class Serve:
    """`vdifrec serve` in a subprocess on free ports, and a client to it."""

    def __init__(self, tmp: Path, *extra: str, ring: str = "64MiB") -> None:
        self.disks = [tmp / "disk0", tmp / "disk1"]
        for d in self.disks:
            d.mkdir(exist_ok=True)
        self.gather = tmp / "gather"
        self.gather.mkdir(exist_ok=True)
        self.log = tmp / "serve.log"
        self.out = tmp / "serve.out"
        cmd = [sys.executable, "-m", "vdifrec.cli", "serve", "--control", "127.0.0.1:0", "--disk", str(tmp / "disk*"),
               "--gather-dir", str(self.gather), "--ring", ring, "--log", str(self.log), *extra]
        self._out = open(self.out, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, text=True)
        m = output_line(self.out, r"control on ([0-9.]+):(\d+)", proc=self.proc)
        self.address = (m.group(1), int(m.group(2)))
        self.client = VSIClient(self.address, timeout=30)

    def __call__(self, line: str) -> list[Reply]:
        return [check_grammar(r) for r in self.client.send_line(line)]

    def one(self, command: str) -> Reply:
        return check_grammar(self.client.send(command))

    def wait_off(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.one("record?").fields == ("off",):
                return
            time.sleep(0.05)
        raise AssertionError("record? did not say off")

    def wait_copied(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.one("disk2file?").fields[0] == "active":
            assert time.monotonic() < deadline, "disk2file still active"
            time.sleep(0.05)

    def stats(self) -> dict[str, str]:
        return dict(f.split("=", 1) for f in self.one("stats?").fields)

    def stop(self) -> int:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        finally:
            self._out.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    s = Serve(tmp_path)
    yield s
    s.stop()


def vbs_scan(disks: list[Path], scan: str) -> bytes:
    chunks: dict[int, Path] = {}
    for d in disks:
        for f in (d / scan).iterdir() if (d / scan).is_dir() else []:
            m = CHUNK_RE.match(f.name)
            if m and f.name.startswith(scan + "."):
                chunks[int(m.group(1))] = f
    assert sorted(chunks) == list(range(len(chunks)))
    return b"".join(chunks[k].read_bytes() for k in sorted(chunks))


def scan_summary(disks: list[Path], scan: str) -> dict:
    for d in disks:
        p = d / scan / f"{scan}.summary.json"
        if p.exists():
            return json.loads(p.read_text())
    raise AssertionError(f"no summary beside {scan}")


# -- the protocol, alone ---------------------------------------------------------------------------


def test_commands_split_and_parse_as_the_reference_says() -> None:
    assert split_line(" mode = VDIF_8192-8192-4-2 ; record?;;net_port=46300") == ["mode = VDIF_8192-8192-4-2", "record?", "net_port=46300"]
    c = parse("Record = on : kvn_scan1 : ev001 : Kv")
    assert (c.keyword, c.query, c.params) == ("record", False, ("on", "kvn_scan1", "ev001", "Kv"))
    q = parse("scan_set=::+20000000")
    assert q.params == ("", "", "+20000000") and q.param(0, "x") == "x"
    assert parse("record?").query and parse("record?").params == ()
    assert str(Reply("record", True, 0, ("on", "1", "s1", "100"))) == "!record? 0 : on : 1 : s1 : 100 ;"
    assert str(Reply("record", False, 1)) == "!record= 1 ;"
    # jive5ab's own spacing reads back the same.
    r = parse_reply("!set_disks?  0 : 3 : /m0 : /m1 : /m2 ;")
    assert (r.keyword, r.query, r.code, r.fields) == ("set_disks", True, 0, ("3", "/m0", "/m1", "/m2"))
    assert parse_reply("!record = 6 : x ;").code == 6
    with pytest.raises(ValueError, match="not a VSI-S reply"):
        parse_reply("hello")


# -- a Field System session ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_field_system_session_records_three_exact_scans(serve: Serve, tmp_path: Path) -> None:
    port = free_udp_port()
    d0, d1 = (str(d) for d in serve.disks)
    replies = serve(f"mode={MODE};net_protocol=pudp:32M:8M:4;net_port={port};set_disks={d0}:{d1};mtu=9000")
    assert [r.code for r in replies] == [0, 0, 0, 0, 0], replies
    assert replies[3].fields == ("2",)
    assert serve.one("mode?").fields == (MODE, "VDIF", "8", "128000000.000", "8192")
    assert serve.one("net_protocol?").fields == ("pudp", "33554432", "8388608", "4")
    assert serve.one("net_port?").fields == (str(port),)
    assert serve.one("set_disks?").fields == ("2", d0, d1)
    assert serve.one("mtu?").fields == ("9000",)
    assert serve.one("status?").fields == ("0x00000001",)
    assert serve.one("record?").fields == ("off",)
    for v in ("version?", "dts_id?", "os_rev?", "rtime?"):
        assert serve.one(v).code == 0
    assert serve.one("version?").fields[:2] == ("vdifrec", vdifrec.__version__)
    frames = [3000, 5000, 2000]
    known_so_far = dropped_before = 0
    for k, n in enumerate(frames, start=1):
        name = f"kvn_scan{k}"
        on = serve.one(f"record=on:{name}")
        assert (on.code, on.fields) == (0, ())
        assert serve.one("status?").fields == ("0x00000059",)
        sent_file = tmp_path / f"sent{k}.vdif"
        before = int(serve.stats()["datagrams"])
        sent = vdifrec.send(("127.0.0.1", port), frames=n, fps=FPS, record_sent=sent_file, ref_epoch=53,
                            start_second=2000 + 10 * k)
        # The kernel counts drops per socket: this scan's are those since the last one.
        d = delivered(("127.0.0.1", port), sent["frames_sent"], lambda: int(serve.stats()["datagrams"]) - before,
                      drops_before=dropped_before)
        dropped = d.kernel_drops
        dropped_before += dropped
        state = serve.one("record?")
        assert state.fields[:3] == ("on", str(k), name)
        assert int(state.fields[3]) == (n - dropped) * FS
        ev = serve.one("evlbi?")
        assert ev.fields[:3] == ("total", str(n - dropped), "loss")
        # How much of the running scan is on disk: never more than it holds, its time as
        # jive5ab writes times (second 2000 + 10k of epoch 53 is 00:33:20 + 10k s on day 182).
        st = serve.stats()
        assert 0 <= int(st["scan_durable_frames"]) <= n - dropped
        assert int(st["scan_durable_bytes"]) == int(st["scan_durable_frames"]) * FS
        up_to = st["scan_durable_up_to"]
        assert (up_to == "None") == (st["scan_durable_frames"] == "0"), st
        assert up_to == "None" or re.fullmatch(rf"2026y182d00h33m{20 + 10 * k}\.[0-9]{{4}}s", up_to), up_to
        assert serve.one("record=off").code == Code.STARTED
        serve.wait_off()
        assert serve.stats()["scan_durable_up_to"] == "None"
        data = vbs_scan(serve.disks, name)
        missing = left_out(frames_of(sent_file), frames_of(data))
        assert len(missing) == dropped
        # Loss is the frames missing between frames received: a frame the kernel dropped after
        # the last one received (possible on an untuned host) is not yet known to be missing.
        last = max(set(range(n)) - set(missing))
        known = sum(1 for j in missing if j < last)
        known_so_far += known
        # evlbi? counts the loss of seconds closed, and a second closes once frames of a later
        # one have come: each scan here lies in one second, so a frame the kernel dropped
        # within a scan (on an untuned host) shows in a later scan's evlbi?.
        reported = int(ev.fields[3].split(" ", 1)[0])
        if known_so_far == 0:
            assert ev.fields[3].startswith("0 (")
        else:
            assert 0 <= reported <= known_so_far, (reported, known_so_far)
        s = scan_summary(serve.disks, name)
        assert s["frames"] == n - dropped and s["invariant_holds"] and s["bytes_written"] == len(data)
        assert s["chunk_size"] == round(8388608 / FS / 128) * 128 * FS  # net_protocol's work buffer, in whole runs
        # Format, tracks (4 channels x 2 bits), first frame's time (epoch 53 is 2026-07-01, day
        # 182), seconds of frames, rate per track, bytes missing, frame size.
        received = n - dropped
        assert serve.one("scan_check?").fields == (
            "?", name, "VDIF", "8", f"2026y182d00h33m{20 + 10 * k:07.4f}s", f"{received / FPS:g}s", "128Mbps",
            str(s["frames_lost"] * FS), str(FS),
        )
        assert serve.one("scan_set?").fields == (str(k - 1), name, "0", "0")
    # The scan set, read back as a flat file by disk2file.
    assert serve.one("scan_set=kvn_scan2").code == 0
    length = len(vbs_scan(serve.disks, "kvn_scan2"))
    assert serve.one("scan_set?").fields == ("1", "kvn_scan2", "0", str(length))
    assert serve.one("disk2file=scan2.vdif:::w").code == Code.STARTED
    serve.wait_copied()
    assert serve.one("disk2file?").fields == ("inactive", str(serve.gather / "scan2.vdif"))
    assert (serve.gather / "scan2.vdif").read_bytes() == vbs_scan(serve.disks, "kvn_scan2")
    # A byte range: the second frame set of kvn_scan1 only.
    assert serve(f"scan_set=kvn_scan1;disk2file=part.vdif:{FS}:+{FS}") == [Reply("scan_set", False, 0), Reply("disk2file", False, 1)]
    serve.wait_copied()
    assert (serve.gather / "part.vdif").read_bytes() == vbs_scan(serve.disks, "kvn_scan1")[FS : 2 * FS]
    log = serve.log.read_text()
    assert re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z 127\.0\.0\.1:\d+ << record=on:kvn_scan1;", log, re.M)
    assert "!record= 0 ;" in log


def test_record_names_follow_jive5ab(serve: Serve) -> None:
    port = free_udp_port()
    assert serve.one(f"net_port={port}").code == 0
    assert serve.one("record=on:s1:ev001:Kv").code == 0
    assert serve.one("record?").fields[:3] == ("on", "1", "ev001_Kv_s1")
    sent = vdifrec.send(("127.0.0.1", port), frames=2000, fps=FPS, **START)
    delivered(("127.0.0.1", port), sent["frames_sent"], lambda: int(serve.stats()["datagrams"]))
    assert serve.one("record=off").code == 1
    # Checked at once, as the Field System does: the scan is set, its tail awaited.
    check = serve.one("scan_check?")
    assert check.code == 0 and check.fields[1] == "ev001_Kv_s1", check
    serve.wait_off()
    # The same name again: jive5ab's suffix, and the reply says the name used.
    assert (serve.disks[0] / "s2").mkdir() is None
    again = serve.one("record=on:s2")
    assert (again.code, again.fields) == (0, ("s2a",))
    serve.one("record=off")
    serve.wait_off()
    assert serve.one("record?mk6").fields == ("0",)
    assert serve("record=mk6:1;record?mk6") == [Reply("record", False, 0), Reply("record", True, 0, ("1",))]


def test_status_names_the_scan_the_field_system_records(tmp_path: Path) -> None:
    port = free_udp_port()
    serve = Serve(tmp_path, "--port", str(port), "--status-listen", "127.0.0.1:0")
    try:
        m = output_line(serve.out, r"status on (http://[0-9.]+:\d+)/status", proc=serve.proc)
        remote = vdifrec.RemoteStatus(m.group(1))
        disks = [str(d) for d in serve.disks]
        assert remote.status()["scan"] is None
        # On disk already: the scan gets jive5ab's suffix, and /status names it as on disk.
        (serve.disks[1] / "ev001_Kv_no0012").mkdir()
        on = serve.one("record=on:no0012:ev001:Kv")
        assert (on.code, on.fields) == (0, ("ev001_Kv_no0012a",))
        sent = vdifrec.send(("127.0.0.1", port), frames=2000, fps=FPS, **START)
        delivered(("127.0.0.1", port), sent["frames_sent"], lambda: int(serve.stats()["datagrams"]))
        doc, lo, hi = around(remote.status, *disks)
        assert isinstance(doc, dict) and doc["scan"] == "ev001_Kv_no0012a"
        # Both disks, as statvfs tells of them; the fullest is the fill.
        assert [d["path"] for d in doc["disks"]] == disks
        for d in doc["disks"]:
            st = os.statvfs(d["path"])
            assert d["size_bytes"] == st.f_blocks * st.f_frsize
            assert lo - FILL_SLACK <= d["fill"] <= hi + FILL_SLACK
        assert doc["disk_fill"] == max(d["fill"] for d in doc["disks"])
        assert serve.one("record=off").code == 1
        serve.wait_off()
        assert remote.status()["scan"] is None
    finally:
        serve.stop()


# -- what is refused -------------------------------------------------------------------------------

BAD = [
    # (command, code, what the message says)
    ("mode=nonsense", 4, "not a valid mode"),
    ("mode=VDIF-8192-4-2", 4, "payload size"),
    ("mode=VDIF_8192-8192-3-2", 8, "power of 2"),
    ("mode=", 4, "Not a mode"),
    ("net_protocol=udt", 8, "udps"),
    ("net_protocol=udps:huge", 8, "not a size"),
    ("net_protocol=udps:0", 8, "out of range"),
    ("net_protocol=udps:32M:2G", 8, "out of range"),
    ("net_protocol=udps:32M:8M:x", 8, "not a number"),
    ("mtu=", 8, "Missing argument"),
    ("mtu=10", 8, "64 to 9000"),
    ("mtu=abc", 8, "64 to 9000"),
    ("net_port=abc", 8, "port 'abc' not a number/out of range"),
    ("net_port=70000", 8, "range"),
    ("net_port=", 8, "Missing argument"),
    ("net_port=@5", 8, "<host>@<port>"),
    ("net_port=46300:46300", 8, "twice"),
    ("set_disks=", 8, "give the disks"),
    ("set_disks=/etc", 8, "0\tno mountpoints matched"),
    ("record=on", 6, "must provide a scan name"),
    ("record=on:a.b", 6, "no data port"),
    ("record=off", 6, "Not doing record"),
    ("record=maybe", 2, "does not apply to record"),
    ("record=mk6:x", 8, "give 1"),
    ("datastream=add:{thread}", 8, "match specification"),
    ("datastream=add::*", 8, "Missing data stream name"),
    ("datastream=add:mine:1-2", 8, "splits a scan by thread"),
    ("datastream=frob", 8, "add, remove or clear"),
    ("datastream=remove:nope", 4, "not defined"),
    ("datastream?nope", 8, "not defined"),
    ("scan_set=", 6, "no scans recorded"),
    ("scan_set=inc", 6, "no recorded scan"),
    ("scan_set=nosuchscan", 4, "does not exist"),
    ("scan_check?", 8, "no scan name given"),
    ("disk2file=x.vdif", 6, "no scan was set"),
    ("reset=now", 8, "reset=abort"),
    ("reset?", 2, "only implemented as command"),
    ("status=1", 2, "only available as query"),
    ("version=1", 2, "query only"),
    ("rtime=1", 2, "only available as query"),
    ("scan_check=1", 2, "only available as query"),
    ("bogus?", 7, "ENOSYS - not implemented"),
    ("bank_set=inc", 7, "ENOSYS - not implemented"),
    ("=5", 3, "keyword"),
    ("rec ord?", 3, "keyword"),
    ("record", 3, "not a command or query"),
]


@pytest.mark.parametrize("command,code,says", BAD, ids=[b[0] for b in BAD])
def test_each_bad_command_gets_its_code_and_one_plain_message(serve: Serve, command: str, code: int, says: str) -> None:
    r = serve.one(command)
    assert r.code == code, r
    # One message field, after any fields jive5ab puts first (written here "lead\tmessage").
    *lead, message = says.split("\t")
    assert list(r.fields[:-1]) == lead and message in r.fields[-1], r
    # Nothing changed: the station is as it was.
    assert serve.one("record?").fields == ("off",) and serve.one("status?").fields == ("0x00000001",)


@pytest.mark.slow
def test_bad_parameters_during_a_scan_change_nothing(tmp_path: Path) -> None:
    # The ring holds the whole scan, so that a slow disk (each vbs chunk synced) cannot make
    # the count here differ from what the kernel dropped.
    serve = Serve(tmp_path, ring=ring_holding(20_000))
    try:
        port = free_udp_port()
        assert serve(f"mode={MODE};net_port={port}") == [Reply("mode", False, 0), Reply("net_port", False, 0)]
        assert serve.one("record=on:busy1").code == 0
        sender = vdifrec.Sender(("127.0.0.1", port), frames=20_000, fps=FPS, record_sent=tmp_path / "sent.vdif",
                                **START)
        refused = serve(f"record=on:other;mode=VDIF_8000-512-1-2;net_port={free_udp_port()};"
                        f"set_disks={serve.disks[0]};net_protocol=udps;datastream=add:{{thread}}:*;scan_set=busy1;"
                        "disk2file=x.vdif;mtu=1500")
        assert [r.code for r in refused] == [6] * 9, refused
        sent = sender.wait(timeout=30)
        assert sent is not None
        d = delivered(("127.0.0.1", port), sent["frames_sent"], lambda: int(serve.stats()["datagrams"]))
        serve.one("record=off")
        serve.wait_off()
        scan = frames_of(vbs_scan(serve.disks, "busy1"))
        assert len(left_out(frames_of(tmp_path / "sent.vdif"), scan)) == d.kernel_drops
        assert scan_summary(serve.disks, "busy1")["ring_overflows"] == 0
    finally:
        serve.stop()


def test_scan_set_and_disk2file_refuse_bad_offsets_and_paths(serve: Serve, tmp_path: Path) -> None:
    port = free_udp_port()
    assert serve(f"net_port={port};record=on:s1")[1].code == 0
    sent = vdifrec.send(("127.0.0.1", port), frames=500, fps=FPS, **START)
    delivered(("127.0.0.1", port), sent["frames_sent"], lambda: int(serve.stats()["datagrams"]))
    serve.one("record=off")
    serve.wait_off()
    cases = [
        ("scan_set=s1:1000", 8, "only relative byte numbers"),
        ("scan_set=s1:+999999999999", 8, "out of bound"),
        # The codes jive5ab 3.1 answers to these, asked by hand on the same disks.
        ("scan_set=s1:x", 8, "only relative byte numbers"),
        ("scan_set=s1:+0x", 4, "failed to parse byte offset or time code from '+0x'"),
        ("scan_set=s1:s:e", 8, "only relative byte numbers"),  # s, c, e and s+ are for the start only
        ("disk2file=x.vdif:::z", 8, "open mode must be n, w, a or resume"),
        ("disk2file=x.vdif:+5", 8, "relative byteoffsets not allowed"),
        ("disk2file=x.vdif:0:999999999999", 8, "outside the scan"),
        ("disk2file=../x.vdif", 8, "outside the gather directory"),
        ("disk2file=/etc/x.vdif", 8, "outside the gather directory"),
        ("disk2file=nodir/x.vdif", 8, "not a directory"),
    ]
    for command, code, says in cases:
        r = serve.one(command)
        assert r.code == code and len(r.fields) == 1 and says in r.fields[0], (command, r)
    assert not (tmp_path / "x.vdif").exists() and not (serve.gather / "x.vdif").exists()
    # s, c, e and relative offsets, as jive5ab reads them.
    n = len(vbs_scan(serve.disks, "s1"))
    assert serve.one("scan_set=s1:c:+8224").code == 0
    assert serve.one("scan_set?").fields == ("0", "s1", str(n // 2), str(n // 2 + 8224))
    assert serve.one("scan_set=:s:-8224").code == 0
    assert serve.one("scan_set?").fields == ("0", "s1", "0", str(n - 8224))
    # A file that exists is never overwritten in mode n (the default).
    (serve.gather / "kept.vdif").write_bytes(b"keep")
    assert serve.one("disk2file=kept.vdif").code == 4
    assert (serve.gather / "kept.vdif").read_bytes() == b"keep"


# -- abuse of the control port while a scan records ------------------------------------------------


@pytest.mark.slow
def test_abuse_of_the_control_port_costs_the_scan_nothing(tmp_path: Path) -> None:
    # The ring holds the whole scan (316 MiB): a slow disk (each vbs chunk synced) cannot make
    # what is on disk differ from what the kernel let through.
    serve = Serve(tmp_path, ring=ring_holding(40_000))
    try:
        abuse_the_control_port(serve, tmp_path)
    finally:
        serve.stop()


def abuse_the_control_port(serve: Serve, tmp_path: Path) -> None:
    port = free_udp_port()
    assert serve(f"mode={MODE};net_port={port};record=on:abused") == [Reply("mode", False, 0), Reply("net_port", False, 0), Reply("record", False, 0)]
    sender = vdifrec.Sender(("127.0.0.1", port), frames=40_000, fps=FPS, record_sent=tmp_path / "sent.vdif", **START)
    # A line that never ends: answered with code 3, then closed.
    with socket.create_connection(serve.address, timeout=10) as s:
        s.sendall(b"x" * (70 * 1024))
        reply = s.makefile("rb").readline().decode()
        assert reply.startswith("!line= 3 : line longer than 64 KiB"), reply
    # A long line that does end: refused all the same.
    with socket.create_connection(serve.address, timeout=10) as s:
        s.sendall(b"record?" + b" " * (70 * 1024) + b";\n")
        reply = s.makefile("rb").readline().decode()
        assert reply.startswith("!line= 3 : line longer than 64 KiB"), reply
    # Binary junk: each piece gets its error, nothing breaks.
    with socket.create_connection(serve.address, timeout=10) as s:
        s.sendall(bytes(range(256)).replace(b"\n", b"").replace(b";", b"") + b";\x00\xff?;\n")
        lines = s.makefile("rb").readline().decode(errors="replace")
        assert re.match(r"^!\S*[=?] (3|7) : ", lines), lines
    # A burst of connections: the first MAX_CLIENTS are served, the rest told busy and closed.
    burst = []
    for _ in range(200):
        try:
            burst.append(socket.create_connection(serve.address, timeout=10))
        except OSError:
            pass
    busy = 0
    for s in burst:
        s.settimeout(0.5)
        try:
            got = s.recv(200)
            busy += got.startswith(b"!connect= 5")
        except TimeoutError:
            pass  # being served: it sent nothing, so nothing came back
    for s in burst:
        s.close()
    assert busy >= len(burst) - 16, busy
    assert serve.one("record?").fields[:3] == ("on", "1", "abused")
    sent = sender.wait(timeout=60)
    assert sent is not None
    d = delivered(("127.0.0.1", port), sent["frames_sent"], lambda: int(serve.stats()["datagrams"]))
    assert serve.one("record=off").code == 1
    serve.wait_off()
    data = vbs_scan(serve.disks, "abused")
    missing = left_out(frames_of(tmp_path / "sent.vdif"), frames_of(data))
    assert len(missing) == d.kernel_drops
    # The scan's loss is the kernel's drops between frames received (not after the last one).
    last = max(set(range(sent["frames_sent"])) - set(missing))
    s = scan_summary(serve.disks, "abused")
    assert s["frames_lost"] == sum(1 for j in missing if j < last) and s["ring_overflows"] == 0


def test_two_clients_racing_for_record_on_one_wins(serve: Serve) -> None:
    assert serve.one(f"net_port={free_udp_port()}").code == 0
    clients = [VSIClient(serve.address) for _ in range(2)]
    results: list[Reply] = []
    gate = threading.Barrier(2)

    def go(c: VSIClient, name: str) -> None:
        gate.wait()
        results.append(c.send(f"record=on:{name}"))

    threads = [threading.Thread(target=go, args=(c, f"race{k}")) for k, c in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(r.code for r in results) == [0, 6], results
    assert "Already doing record" in [r for r in results if r.code == 6][0].fields[0]
    for c in clients:
        c.close()
    assert serve.one("record=off").code == 1
    serve.wait_off()


@pytest.mark.slow
def test_sigterm_during_a_scan_leaves_a_valid_scan(tmp_path: Path) -> None:
    port = free_udp_port()
    serve = Serve(tmp_path, "--port", str(port), "--fps", str(FPS))
    assert serve.one("record=on:cut").code == 0
    sent = vdifrec.send(("127.0.0.1", port), frames=5000, fps=FPS, record_sent=tmp_path / "sent.vdif", **START)
    d = delivered(("127.0.0.1", port), sent["frames_sent"], lambda: int(serve.stats()["datagrams"]))
    assert serve.stop() == 0
    data = vbs_scan(serve.disks, "cut")
    assert len(left_out(frames_of(tmp_path / "sent.vdif"), frames_of(data))) == d.kernel_drops
    s = scan_summary(serve.disks, "cut")
    assert s["invariant_holds"] and s["bytes_written"] == len(data)
    assert "scan cut closed on stop" in serve.log.read_text()


# -- clients ---------------------------------------------------------------------------------------


def test_clients_say_when_nobody_answers(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    assert vdifrec.VSIClient is VSIClient and issubclass(VSIError, ConnectionError)
    with pytest.raises(VSIError, match=f"cannot connect to 127.0.0.1:{closed}.*vdifrec serve"):
        vdifrec.VSIClient(f"127.0.0.1:{closed}")
    r = run_cli("vsi", f"127.0.0.1:{closed}", "record?")
    assert r.returncode == 1 and "cannot connect" in r.stderr
    r = run_cli("vsi", "127.0.0.1:abc", "record?")
    assert r.returncode == 2 and "address" in r.stderr


def test_client_reads_replies_jive5ab_puts_on_one_line() -> None:
    """jive5ab answers a line of commands with one line of replies: the client splits them."""
    with socket.create_server(("127.0.0.1", 0)) as srv:

        def answer() -> None:
            conn, _ = srv.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(b"!record?  0 : off ;!set_disks=  0 : 3 ;\r\n")
                conn.recv(1024)

        t = threading.Thread(target=answer)
        t.start()
        with VSIClient(srv.getsockname()) as c:
            got = c.send_line("record?;set_disks=/m*")
        t.join(timeout=10)
    assert got == [Reply("record", True, 0, ("off",)), Reply("set_disks", False, 0, ("3",))]


def test_vsi_command_prints_replies_and_says_failure_by_exit_status(serve: Serve) -> None:
    where = f"{serve.address[0]}:{serve.address[1]}"
    r = run_cli("vsi", where, "status?;record?")
    assert r.returncode == 0 and r.stdout.splitlines() == ["!status? 0 : 0x00000001 ;", "!record? 0 : off ;"]
    r = run_cli("vsi", where, "record?", "bogus?")
    assert r.returncode == 1 and r.stdout.splitlines()[1] == "!bogus? 7 : ENOSYS - not implemented ;"


def test_a_station_names_the_scan_a_crash_left_once_its_recorder_starts(tmp_path: Path) -> None:
    """A scan no recorder closed (a chunk torn as its writer stopped, no summary) on the disks:
    `serve` started without a port says so when `net_port=` starts its recorder, in its log and
    in /status, and once per session however often the recorder is rebuilt."""
    src = tmp_path / "src.vdif"
    vdifrec.generate(src, frame_size=FS, fps=1000, seconds=0.01, **START)
    chunk = tmp_path / "disk1" / "kvn_crash" / "kvn_crash.00000000"
    chunk.parent.mkdir(parents=True)
    chunk.write_bytes(src.read_bytes()[:7 * FS + 100])
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        status = free.getsockname()[1]
    s = Serve(tmp_path, "--status-listen", f"127.0.0.1:{status}")
    try:
        assert "kvn_crash" not in s.out.read_text()
        assert s.one(f"net_port={free_udp_port()}").code == 0
        assert s.one(f"net_port={free_udp_port()}").code == 0  # rebuilt: not named again
        with urllib.request.urlopen(f"http://127.0.0.1:{status}/status", timeout=10) as r:
            (u,) = json.loads(r.read())["unclosed_scans"]
        assert (u["name"], u["format"], u["frames"], u["torn_bytes"], u["torn_pieces"]) == ("kvn_crash", "vbs", 7, 100, 1)
        log = s.log.read_text()
        assert log.count(u["note"]) == 1, log
        assert re.search(r"^\d{4}-\d\d-\d\dT[0-9:.]+Z vdifrec scan kvn_crash \(vbs on 1 disk\) was never closed", log, re.M)
    finally:
        s.stop()


def test_serve_without_a_data_port_says_when_its_status_opens(tmp_path: Path) -> None:
    """The status is the recorder's, so without --port it opens with net_port=: serve says so
    at the start, and logs the address once it is open."""
    s = Serve(tmp_path, "--status-listen", "127.0.0.1:0")
    try:
        output_line(s.out, r"status on http://127\.0\.0\.1:0/status opens once net_port= gives the data port",
                    proc=s.proc)
        assert s.one("net_port=0").code == 0
        m = output_line(s.log, r"vdifrec status on http://127\.0\.0\.1:(\d+)/status and /metrics", proc=s.proc)
        with urllib.request.urlopen(f"http://127.0.0.1:{m.group(1)}/status", timeout=10) as r:
            assert json.loads(r.read())["state"] == "waiting"
    finally:
        s.stop()


@pytest.mark.slow
def test_a_new_stream_at_another_rate_is_counted_at_its_own(tmp_path: Path) -> None:
    """serve runs for days and streams come and go: a scan's rate, times and counts come from
    its own frames, not from a stream before it (up from 2,000 to 10,000 frames/s, and down)."""
    port = free_udp_port()
    s = Serve(tmp_path, "--port", str(port))
    try:
        fs = 1032
        lost_before = 0
        for k, (fps, seconds, start) in enumerate([(2000, 2, 3000), (10_000, 3, 3000), (2000, 3, 3100)]):
            name = f"rate{k}"
            assert s.one(f"record=on:{name}").code == 0
            sent = vdifrec.send(("127.0.0.1", port), frames=fps * seconds, fps=fps, frame_size=fs, ref_epoch=53,
                                start_second=start)
            d = delivered(("127.0.0.1", port), sent["frames_sent"], lambda: int(s.stats()["datagrams"]))
            assert s.one("record=off").code == 1
            s.wait_off()
            summary = scan_summary(s.disks, name)
            assert summary["frames"] == fps * seconds - d.kernel_drops, summary
            assert summary["frames_out_of_window"] == 0 and summary["time_jumps"] == 0, summary
            r = s.one("scan_check?")
            assert r.fields[1] == name, r
            if d.kernel_drops == 0:
                # Every frame arrived (a small socket buffer may drop some, the last ones too):
                # the scan's rate, times and duration are exactly its own stream's.
                assert {x["frames_per_second"] for x in summary["seconds"]} == {fps}, summary["seconds"]
                assert summary["first_frame"] == f"{vdifrec_time(start)}.000000000"
                assert summary["last_frame"] == f"{vdifrec_time(start + seconds - 1)}.{(fps - 1) * 10**9 // fps:09d}"
                assert r.fields[5] == f"{seconds}s", r
            # The recorder's own count relearned the rate: no frame of the slower stream is
            # counted lost against the faster one's rate.
            stats = s.stats()
            assert (stats["frames_per_second"], stats["frames_per_second_known"]) == (str(fps), "True"), stats
            # Frames the kernel dropped inside a stream count as lost (those at its very end
            # cannot be known of): never more than that.
            lost = int(stats["frames_lost"]) - lost_before
            assert lost <= d.kernel_drops and (lost == 0 or d.kernel_drops > 0), stats
            lost_before = int(stats["frames_lost"])
            # Streams a few seconds apart, as scans are.
            time.sleep(1.5)
    finally:
        s.stop()


def vdifrec_time(second: int) -> str:
    """VDIF epoch 53 (2026-07-01) plus `second`, as a summary writes it (to the second)."""
    import datetime as dt

    t = dt.datetime(2026, 7, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=second)
    return t.strftime("%Y-%m-%dT%H:%M:%S")


@pytest.mark.slow
def test_a_scan_whose_every_disk_fills_closes_by_itself_and_says_so(tmp_path: Path) -> None:
    """Every disk full mid-scan: the scan closes (record? off, status? not recording), /status,
    the page's document and the log say why, and no scan starts until disks are given again."""
    port = free_udp_port()
    disks = [tmp_path / "disk0", tmp_path / "disk1"]
    s = Serve(tmp_path, "--port", str(port), "--chunk-size", "1MiB", "--status-listen", "127.0.0.1:0",
              *[a for d in disks for a in ("--disk-fault", f"{d}=full@2MiB")])
    try:
        m = output_line(s.out, r"status on http://127\.0\.0\.1:(\d+)/status", proc=s.proc)
        status_url = f"http://127.0.0.1:{m.group(1)}/status"
        assert s.one("record=on:full1").code == 0
        sender = vdifrec.Sender(("127.0.0.1", port), frames=8000, fps=2000, frame_size=1032, ref_epoch=53,
                                start_second=4000)
        deadline = time.monotonic() + 20
        while s.one("record?").fields[0] != "off":
            assert time.monotonic() < deadline, "the scan did not close by itself"
            time.sleep(0.1)
        assert sender.wait(timeout=0) is None, "the sender ended before the disks filled: a slow host"
        assert int(s.one("status?").fields[0], 16) & 0x40 == 0
        with urllib.request.urlopen(status_url, timeout=10) as r:
            doc = json.loads(r.read())
        assert doc["scan"] is None and doc["scan_ended"].startswith("scan full1 closed: no disk is left in the set"), doc
        r = s.one("record=on:full2")
        assert r.code == 4 and "every disk has left the set" in r.fields[0], r
        sender.wait(timeout=30)
        log = s.log.read_text()
        assert "scan full1: " in log and "NOT OK - no disk is left in the set" in log, log[-2000:]
        summary = scan_summary(disks, "full1")
        on_disk = sum(p.stat().st_size for d in disks for p in (d / "full1").glob("full1.0*"))
        assert summary["bytes_written"] == on_disk > 0 and summary["bytes_dropped_disk"] > 0, summary
        # Disks given again: a scan records again.
        assert s.one(f"set_disks={tmp_path}/disk*").code == 0
        assert s.one("record=on:full3").code == 0
        assert s.one("record=off").code == 1
    finally:
        s.stop()
