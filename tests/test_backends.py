"""The afpacket and pfring backends, and `vdifrec doctor`.

AF_PACKET runs in two network namespaces joined by a veth pair (MTU 9000) that the test makes
and removes: the sender in one, the recorder in the other; skipped, with the reason, where
namespaces cannot be made. PF_RING is exercised through a stand-in library the test compiles
(tests/data/pfring_standin.c), exporting PF_RING's functions and fed from a UDP socket.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import netns
import vdifrec
from conftest import free_udp_port

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


def test_pfring_binding_loads_calls_and_receives(standin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log, out, sent_file = tmp_path / "calls.log", tmp_path / "pf.vdif", tmp_path / "sent.vdif"
    feed = free_udp_port()
    monkeypatch.setenv("VDIFREC_STANDIN_LOG", str(log))
    monkeypatch.setenv("VDIFREC_STANDIN_DROPS", "7")
    monkeypatch.setenv("VDIFREC_STANDIN_WIRE_PORT", str(WIRE_PORT))
    rec = vdifrec.Recorder(port=WIRE_PORT, backend="pfring", interface=f"udp:{feed}", pfring_library=standin,
                           pfring_check_module=False, ring="32MiB", path=out)
    rec.start()
    assert any("pfring:" in n and "RX only" in n for n in rec.notes)
    sent = vdifrec.send(("127.0.0.1", feed), frames=4000, fps=10_000, drop="0:100-109", record_sent=sent_file, **START)
    deadline = time.monotonic() + 20
    while rec.stats().frames_received < sent["frames_sent"] and time.monotonic() < deadline:
        time.sleep(0.02)
    s = rec.stop()
    assert s.frames_received == sent["frames_sent"] == 3990
    assert s.frames_lost == 10 and s.kernel_drops == 7
    assert out.read_bytes() == sent_file.read_bytes()
    calls = log.read_text().split("\n")
    assert calls[:6] == ["open", "direction 1", "socket_mode 2", "poll_watermark 128", "application_name vdifrec",
                         "enable_ring"]
    assert "close" in calls


def test_pfring_keeps_only_its_port(standin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    feed = free_udp_port()
    monkeypatch.setenv("VDIFREC_STANDIN_WIRE_PORT", str(WIRE_PORT + 1))  # packets for another port
    with vdifrec.Recorder(port=WIRE_PORT, backend="pfring", interface=f"udp:{feed}", pfring_library=standin,
                          pfring_check_module=False, ring="16MiB") as rec:
        vdifrec.send(("127.0.0.1", feed), frames=500, fps=10_000, **START)
        time.sleep(0.5)
        s = rec.stats()
        assert s.datagrams == 0 and s.frames_received == 0


def test_pfring_missing_library_or_module_is_explained(standin: Path, cli) -> None:
    with pytest.raises(vdifrec.RecorderError, match=r"PF_RING is not installed here.*--backend udp"):
        vdifrec.Recorder(port=WIRE_PORT, backend="pfring", interface="eth0",
                         pfring_library="/nonexistent/libpfring.so").start()
    if not Path("/proc/net/pf_ring").exists():
        with pytest.raises(vdifrec.RecorderError, match=r"pf_ring kernel module is not loaded.*modprobe pf_ring"):
            vdifrec.Recorder(port=WIRE_PORT, backend="pfring", interface="udp:1", pfring_library=standin).start()
    with pytest.raises(ValueError, match="needs an interface"):
        vdifrec.Recorder(port=WIRE_PORT, backend="pfring").start()
    r = cli("record", "--backend", "pfring", "--interface", "eth0", "--port", str(WIRE_PORT), "--no-write",
            "--pfring-library", "/nonexistent/libpfring.so")
    assert r.returncode == 1 and "--backend udp" in r.stderr


# -- AF_PACKET in network namespaces ---------------------------------------------------------


@contextlib.contextmanager
def veth_pair() -> Iterator[dict[str, str]]:
    try:
        with netns.veth_pair() as net:
            yield net
    except netns.NamespacesUnavailable as e:
        pytest.skip(str(e))


def record_in_namespace(net: dict[str, str], to: str, tmp_path: Path, *send_args: str) -> tuple[dict, bytes, bytes]:
    out, js, sent_file = tmp_path / "af.vdif", tmp_path / "af.json", tmp_path / "sent.vdif"
    py = [sys.executable, "-m", "vdifrec.cli"]
    sink = netns.port_sink(net["ns_r"], WIRE_PORT, sys.executable)
    rec = subprocess.Popen(["ip", "netns", "exec", net["ns_r"], *py, "record", "--backend", "afpacket",
                            "--interface", net["if_r"], "--port", str(WIRE_PORT), "--out", str(out),
                            "--ring", "32MiB", "--summary-json", str(js), "--duration", "6"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert rec.stdout is not None
    line = ""
    for _ in range(20):
        line = rec.stdout.readline()
        if "listening on" in line:
            break
    if "listening on" not in line:
        rec.kill()
        sink.kill()
        sink.wait()
        pytest.fail(f"the recorder did not start: {rec.communicate()[1]}")
    send = netns.sh("ip", "netns", "exec", net["ns_s"], *py, "send", "--to", to, "--record-sent", str(sent_file),
              *send_args)
    assert send.returncode == 0, send.stderr
    _, err = rec.communicate(timeout=60)
    sink.kill()
    sink.wait()
    assert rec.returncode == 0, err
    return json.loads(js.read_text()), out.read_bytes(), sent_file.read_bytes()


def afpacket_case(net: dict[str, str], to: str, tmp_path: Path) -> None:
    s, recorded, sent = record_in_namespace(net, to, tmp_path, "--frames", "3000", "--fps", "3000",
                                            "--drop", "0:5-9", "--ref-epoch", "53", "--start-second", "6000")
    assert s["frames_received"] == 2995, s
    assert s["frames_lost"] == 5 and s["kernel_drops"] == 0
    assert s["datagrams_malformed"] == 0
    assert recorded == sent


@pytest.mark.parametrize("to", [f"{netns.RECEIVER_V4}:{WIRE_PORT}", f"[{netns.RECEIVER_V6}]:{WIRE_PORT}"], ids=["ipv4", "ipv6"])
def test_afpacket_records_across_namespaces(tmp_path: Path, to: str) -> None:
    with veth_pair() as net:
        afpacket_case(net, to, tmp_path)


def test_afpacket_vlan_tagged(tmp_path: Path) -> None:
    with veth_pair() as net:
        if net["no_vlan"]:
            pytest.skip(net["no_vlan"] + "; the in-packet tag parsing is covered by the Rust unit tests")
        afpacket_case(net, f"{netns.RECEIVER_VLAN_V4}:{WIRE_PORT}", tmp_path)


def test_afpacket_needs_privilege_and_an_interface() -> None:
    with pytest.raises(ValueError, match="needs an interface"):
        vdifrec.Recorder(port=WIRE_PORT, backend="afpacket").start()
    with pytest.raises(vdifrec.RecorderError, match="does not exist"):
        vdifrec.Recorder(port=WIRE_PORT, backend="afpacket", interface="no-such-if0").start()
    with pytest.raises(ValueError, match="select packets by port"):
        vdifrec.Recorder(port=0, backend="afpacket", interface="lo").start()


# -- doctor -----------------------------------------------------------------------------------


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
    assert took < 15
    assert d["duration"]["value"] < 5
    table = cli("doctor", "--quick", "--path", str(tmp_path))
    assert "rmem_max" in table.stdout and "write_test" in table.stdout
    assert list(tmp_path.iterdir()) == []  # the write test cleans up
