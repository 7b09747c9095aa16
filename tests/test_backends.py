"""The afpacket and pfring backends, and `vdifrec doctor`.

AF_PACKET runs in two network namespaces joined by a veth pair (MTU 9000) that the test makes
and removes: the sender in one, the recorder in the other; skipped, with the reason, where
namespaces cannot be made. PF_RING is exercised through a stand-in library the test compiles
(tests/data/pfring_standin.c), exporting PF_RING's functions and fed from a UDP socket.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import netns
import vdifrec
from conftest import free_udp_port, read_until, udp_socket

FS = 8224
START = dict(ref_epoch=53, start_second=6000)
HERE = Path(__file__).resolve().parent
WIRE_PORT = 46227


# -- PF_RING through the stand-in ----------------------------------------------------------


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the PF_RING stand-in")
    out = tmp_path_factory.mktemp("pfring") / "libpfring_standin.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(HERE / "data" / "pfring_standin.c")], check=True)
    return out


def record_through_standin(standin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           **env: str) -> tuple[vdifrec.Summary, list[str], list[str], bytes, bytes]:
    """Records 4000 frames (10 dropped by the sender) through the stand-in with `env` set; the
    recording's stats, its notes, the calls the stand-in saw, what was recorded and what was
    sent."""
    log, out, sent_file = tmp_path / "calls.log", tmp_path / "pf.vdif", tmp_path / "sent.vdif"
    feed = free_udp_port()
    monkeypatch.setenv("VDIFREC_STANDIN_LOG", str(log))
    monkeypatch.setenv("VDIFREC_STANDIN_WIRE_PORT", str(WIRE_PORT))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rec = vdifrec.Recorder(port=WIRE_PORT, backend="pfring", interface=f"udp:{feed}", pfring_library=standin,
                           pfring_check_module=False, ring="32MiB", path=out)
    rec.start()
    notes = list(rec.notes)
    sent = vdifrec.send(("127.0.0.1", feed), frames=4000, fps=10_000, drop="0:100-109", record_sent=sent_file, **START)
    deadline = time.monotonic() + 20
    while rec.stats().frames_received < sent["frames_sent"] and time.monotonic() < deadline:
        time.sleep(0.02)
    feed_socket = udp_socket(feed)
    s = rec.stop()
    assert sent["frames_sent"] == 3990
    # The stand-in's UDP socket plays PF_RING's ring: where it may not grow (no CAP_NET_ADMIN,
    # a small net.core.rmem_max) the kernel drops datagrams before they reach "PF_RING", which no
    # real PF_RING ring would, and the exact counts below are not the binding's to keep.
    if feed_socket is not None and feed_socket[1] > 0:
        pytest.skip(f"the PF_RING stand-in's socket dropped {feed_socket[1]} datagrams (socket buffer too "
                    "small: run as root, or raise net.core.rmem_max to 64 MiB)")
    return s, notes, log.read_text().split("\n"), out.read_bytes(), sent_file.read_bytes()


SETUP_CALLS = ["open", "direction 1", "socket_mode 2", "poll_watermark 128", "application_name vdifrec", "enable_ring"]


def test_pfring_binding_loads_calls_and_receives(standin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s, notes, calls, recorded, sent = record_through_standin(standin, tmp_path, monkeypatch, VDIFREC_STANDIN_DROPS="7")
    assert any("pfring:" in n and "RX only" in n and "receive only" in n for n in notes), notes
    assert not any("not supported" in n or "failed" in n for n in notes), notes
    assert s.frames_received == 3990
    # The drops come through an aligned pfring_stat (the stand-in refuses a misaligned one).
    assert s.frames_lost == 10 and s.kernel_drops == 7
    assert recorded == sent
    assert calls[:6] == SETUP_CALLS
    assert "close" in calls


@pytest.mark.parametrize("unsupported, lacking", [
    ("1", ["pfring_set_direction", "pfring_set_poll_watermark", "pfring_set_application_name", "pfring_stats"]),
    ("socket_mode,poll", ["pfring_set_socket_mode", "pfring_poll"]),
], ids=["pcap-device", "no-socket-mode-no-poll"])
def test_pfring_records_where_optional_calls_are_unsupported(standin: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch, unsupported: str,
                                                             lacking: list[str]) -> None:
    """PF_RING's `pcap:` devices answer PF_RING_ERROR_NOT_SUPPORTED (-7) to the direction, the
    application name and the statistics: the recording goes on (as ntop's pfcount does), each
    missing call told in a note, and every frame counted."""
    s, notes, calls, recorded, sent = record_through_standin(
        standin, tmp_path, monkeypatch, VDIFREC_STANDIN_UNSUPPORTED=unsupported, VDIFREC_STANDIN_DROPS="7")
    for call in lacking:
        assert any(n.startswith(f"pfring: {call} not supported by this device (-7, PF_RING_ERROR_NOT_SUPPORTED): ")
                   for n in notes), (call, notes)
    others = {"pfring_set_direction", "pfring_set_socket_mode", "pfring_set_poll_watermark",
              "pfring_set_application_name", "pfring_stats", "pfring_poll"} - set(lacking)
    assert not any(f"{c} " in n for c in others for n in notes), notes
    summary = next(n for n in notes if n.startswith("pfring: ") and "UDP port" in n)
    assert ("both directions" in summary) == ("pfring_set_direction" in lacking), summary
    assert ("RX only" in summary) == ("pfring_set_direction" not in lacking), summary
    assert s.frames_received == 3990 and s.frames_lost == 10
    assert s.datagrams == 3990 and s.datagrams_malformed == 0
    if "pfring_stats" in lacking:
        assert s.kernel_drops == 0
        assert any("kernel drops cannot be counted" in n for n in notes), notes
    else:
        assert s.kernel_drops == 7
    assert recorded == sent
    assert calls[:6] == SETUP_CALLS and "close" in calls


def test_pfring_enable_failure_stops_with_the_code_explained(standin: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "calls.log"
    feed = free_udp_port()
    monkeypatch.setenv("VDIFREC_STANDIN_LOG", str(log))
    monkeypatch.setenv("VDIFREC_STANDIN_ENABLE_FAILS", "-5")
    with pytest.raises(vdifrec.RecorderError,
                       match=rf"pfring_enable_ring failed on udp:{feed} \(-5, PF_RING_ERROR_WRONG_CONFIGURATION: "):
        vdifrec.Recorder(port=WIRE_PORT, backend="pfring", interface=f"udp:{feed}", pfring_library=standin,
                         pfring_check_module=False, ring="16MiB", frame_size=8224).start()
    assert log.read_text().split("\n")[-2] == "close"  # the ring opened is closed again


def test_pfring_recv_failure_stops_the_recording_with_the_code_explained(
        standin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    feed = free_udp_port()
    monkeypatch.setenv("VDIFREC_STANDIN_RECV_FAILS", "-1")
    out = tmp_path / "r.vdif"
    rec = vdifrec.Recorder(port=WIRE_PORT, backend="pfring", interface=f"udp:{feed}", pfring_library=standin,
                           pfring_check_module=False, ring="16MiB", frame_size=8224, path=out)
    rec.start()
    vdifrec.send(("127.0.0.1", feed), frames=200, fps=10_000, **START)
    stats = rec.wait(duration=10.0)  # returns as soon as the failure ends the capture
    summary = rec.stop()
    assert rec.finished or summary.error is not None
    assert summary.error is not None and re.search(
        rf"pfring_recv failed on udp:{feed} \(-1, PF_RING_ERROR_GENERIC: ", summary.error), summary.error
    assert not summary.ok and stats.socket_errors == 0
    # What was received before the failure is on disk, every byte of it.
    assert summary.frames_received >= 1 and summary.invariant_holds
    assert out.stat().st_size == summary.bytes_written == summary.frames_received * 8224


def test_pfring_keeps_only_its_port(standin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    feed = free_udp_port()
    monkeypatch.setenv("VDIFREC_STANDIN_WIRE_PORT", str(WIRE_PORT + 1))  # packets for another port
    with vdifrec.Recorder(port=WIRE_PORT, backend="pfring", interface=f"udp:{feed}", pfring_library=standin,
                          pfring_check_module=False, ring="16MiB", frame_size=8224) as rec:
        vdifrec.send(("127.0.0.1", feed), frames=500, fps=10_000, **START)
        # Until the stand-in has read every datagram off its socket (or the kernel dropped it)
        # and the queue has stayed empty a moment: only then is "none kept" an answer.
        deadline = time.monotonic() + 20
        calm_since, last = time.monotonic(), udp_socket(feed)
        while time.monotonic() < deadline:
            now = udp_socket(feed)
            assert now is not None, "the stand-in's socket is gone"
            if now != last:
                calm_since, last = time.monotonic(), now
            if now[0] == 0 and time.monotonic() - calm_since >= 0.2:
                break
            time.sleep(0.01)
        else:
            raise AssertionError(f"the stand-in did not read its socket empty in 20 s: {udp_socket(feed)}")
        s = rec.stats()
        assert s.datagrams == 0 and s.frames_received == 0


@pytest.mark.slow
def test_pfring_missing_library_or_module_is_explained(standin: Path, cli) -> None:
    # The loader's own reason is given, not only that loading failed.
    with pytest.raises(vdifrec.RecorderError, match=r"PF_RING is not installed here.*/nonexistent/libpfring.so: "
                                                    r"cannot open shared object file.*the udp backend") as e:
        vdifrec.Recorder(port=WIRE_PORT, backend="pfring", interface="eth0",
                         pfring_library="/nonexistent/libpfring.so").start()
    assert "dlopen failed" not in str(e.value) and "--" not in str(e.value)
    if not Path("/proc/net/pf_ring").exists():
        with pytest.raises(vdifrec.RecorderError, match=r"pf_ring kernel module is not loaded.*modprobe pf_ring"):
            vdifrec.Recorder(port=WIRE_PORT, backend="pfring", interface="udp:1", pfring_library=standin).start()
    with pytest.raises(ValueError, match=r"pfring backend (needs|reads) an interface"):
        vdifrec.Recorder(port=WIRE_PORT, backend="pfring").start()
    r = cli("record", "--backend", "pfring", "--interface", "eth0", "--port", str(WIRE_PORT), "--no-write",
            "--pfring-library", "/nonexistent/libpfring.so")
    assert r.returncode == 1, r.stderr
    assert "PF_RING is not installed here" in r.stderr and "cannot open shared object file" in r.stderr, r.stderr


@pytest.mark.slow
def test_pfring_library_that_does_not_load_gives_the_loaders_reason(tmp_path: Path) -> None:
    fake = tmp_path / "libpfring.so"
    fake.write_text("not a shared library, only text that happens to be named like one\n" * 4)
    with pytest.raises(vdifrec.RecorderError, match="PF_RING could not be loaded") as e:
        vdifrec.Recorder(port=WIRE_PORT, backend="pfring", interface="eth0", pfring_library=fake,
                         pfring_check_module=False).start()
    msg = str(e.value)
    assert f"{fake}: invalid ELF header" in msg, msg
    assert "dlopen failed" not in msg and "the udp backend" in msg, msg
    # A library that loads but is not PF_RING: the missing function, in the loader's words.
    with pytest.raises(vdifrec.RecorderError,
                       match=r"libc\.so\.6 lacks pfring_open \(.*undefined symbol: pfring_open\)"):
        vdifrec.Recorder(port=WIRE_PORT, backend="pfring", interface="eth0", pfring_library="libc.so.6",
                         pfring_check_module=False).start()


# -- AF_PACKET in network namespaces ---------------------------------------------------------


@contextlib.contextmanager
def veth_pair() -> Iterator[dict[str, str]]:
    try:
        with netns.veth_pair() as net:
            yield net
    except netns.NamespacesUnavailable as e:
        pytest.skip(str(e))


def record_in_namespace(net: dict[str, str], to: str, tmp_path: Path, frames: int,
                        *send_args: str) -> tuple[dict, bytes, bytes]:
    """Records `frames` frames with the afpacket backend in the receiver's namespace, sent from
    the sender's with `send_args`. The recorder stops at that count, however long the sender's
    start takes (a Python start inside `ip netns exec`); the minute's --duration only bounds a
    recording that never gets them."""
    out, js, sent_file = tmp_path / "af.vdif", tmp_path / "af.json", tmp_path / "sent.vdif"
    py = [sys.executable, "-m", "vdifrec.cli"]
    sink = netns.port_sink(net["ns_r"], WIRE_PORT, sys.executable)
    try:
        rec = subprocess.Popen(["ip", "netns", "exec", net["ns_r"], *py, "record", "--backend", "afpacket",
                                "--interface", net["if_r"], "--port", str(WIRE_PORT), "--out", str(out),
                                "--ring", "32MiB", "--summary-json", str(js), "--frames", str(frames),
                                "--duration", "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            read_until(rec, "listening on")
            send = netns.sh("ip", "netns", "exec", net["ns_s"], *py, "send", "--to", to, "--record-sent",
                            str(sent_file), *send_args)
            assert send.returncode == 0, send.stderr
            _, err = rec.communicate(timeout=90)
        finally:
            if rec.poll() is None:
                rec.kill()
                rec.communicate(timeout=30)
    finally:
        sink.kill()
        sink.wait()
    assert rec.returncode == 0, err
    return json.loads(js.read_text()), out.read_bytes(), sent_file.read_bytes()


def afpacket_case(net: dict[str, str], to: str, tmp_path: Path) -> None:
    # 3000 frames, 5 of them left out by the sender: the recorder stops at the 2995th.
    s, recorded, sent = record_in_namespace(net, to, tmp_path, 2995, "--frames", "3000", "--fps", "3000",
                                            "--drop", "0:5-9", "--ref-epoch", "53", "--start-second", "6000")
    assert s["frames_received"] == 2995, s
    assert s["frames_lost"] == 5 and s["kernel_drops"] == 0
    assert s["datagrams_malformed"] == 0
    assert recorded == sent


@pytest.mark.slow
@pytest.mark.parametrize("to", [f"{netns.RECEIVER_V4}:{WIRE_PORT}", f"[{netns.RECEIVER_V6}]:{WIRE_PORT}"], ids=["ipv4", "ipv6"])
def test_afpacket_records_across_namespaces(tmp_path: Path, to: str) -> None:
    with veth_pair() as net:
        if to.startswith("[") and net["no_ipv6"]:
            pytest.skip(net["no_ipv6"])
        afpacket_case(net, to, tmp_path)


def test_afpacket_vlan_tagged(tmp_path: Path) -> None:
    with veth_pair() as net:
        if net["no_vlan"]:
            pytest.skip(net["no_vlan"] + "; the in-packet tag parsing is covered by the Rust unit tests")
        afpacket_case(net, f"{netns.RECEIVER_VLAN_V4}:{WIRE_PORT}", tmp_path)


def test_afpacket_needs_privilege_and_an_interface() -> None:
    with pytest.raises(vdifrec.ArgumentError, match="^interface: the afpacket backend reads an interface"):
        vdifrec.Recorder(port=WIRE_PORT, backend="afpacket").start()
    with pytest.raises(vdifrec.RecorderError, match="does not exist"):
        vdifrec.Recorder(port=WIRE_PORT, backend="afpacket", interface="no-such-if0").start()
    with pytest.raises(ValueError, match="select packets by port"):
        vdifrec.Recorder(port=0, backend="afpacket", interface="lo").start()


# -- doctor -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_doctor_runs_quickly_with_every_check(tmp_path: Path, cli) -> None:
    t0 = time.monotonic()
    r = cli("doctor", "--quick", "--json", "--path", str(tmp_path), "--interface", "lo")
    took = time.monotonic() - t0
    assert r.returncode in (0, 1), r.stderr
    d = json.loads(r.stdout)
    for key in ["rmem_max", "netdev_max_backlog", "mtu", "nic_ring", "irq_affinity", "governor", "cstates",
                "hugepages", "mlock", "free_space", "write_test", "pf_ring", "cpus"]:
        assert key in d, key
        assert d[key]["status"] in ("ok", "warn", "fail", "skip")
        assert d[key]["message"]
        if d[key]["status"] in ("warn", "fail") and key not in ("cpus", "free_space", "write_test"):
            assert d[key]["fix"], key
    assert d["mtu"]["value"] == int(Path("/sys/class/net/lo/mtu").read_text())
    assert d["write_test"]["value"] and all(v > 0 for v in d["write_test"]["value"].values())
    # How long it took is the benchmarks' business, not a test's (these machines are shared).
    assert took > 0 and d["duration"]["value"] > 0
    table = cli("doctor", "--quick", "--path", str(tmp_path))
    assert "rmem_max" in table.stdout and "write_test" in table.stdout
    assert list(tmp_path.iterdir()) == []  # the write test cleans up
