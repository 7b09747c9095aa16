"""The status endpoint (JSON and Prometheus), RemoteStatus and `vdifrec watch`.

Where the host grants the recorder a small socket buffer (no CAP_NET_ADMIN, net.core.rmem_max
untuned) the kernel may drop frames: the counts expected then follow from what it dropped
(conftest.delivered), and are the stream's own where it dropped nothing.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import vdifrec
from conftest import FILL_SLACK, around, delivered, frames_of, left_out, loss_by_second, ring_holding, run_cli

START = dict(ref_epoch=53, start_second=4000)


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def metrics_of(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.mark.slow
def test_status_and_metrics_under_100_requests_per_second(tmp_path) -> None:
    out, sent_file = tmp_path / "s.vdif", tmp_path / "sent.vdif"
    # The ring holds the whole stream: however slow the disk, nothing overflows it.
    rec = vdifrec.Recorder(port=0, ring="160MiB", path=out, status_listen="127.0.0.1:0", fps=5000)
    rec.start()
    assert rec.address is not None and rec.status_address is not None
    host, port = rec.status_address
    assert host == "127.0.0.1"
    base = f"http://{host}:{port}"
    stop = threading.Event()
    answered = {"status": 0, "metrics": 0, "errors": 0, "asked": 0}

    def poll() -> None:
        # 100 requests per second, alternating the two documents, until told to stop and 200
        # asked (however long each takes on this host).
        k = 0
        while (not stop.is_set() or k < 200) and k < 2000:
            t0 = time.monotonic()
            path = "/status" if k % 2 == 0 else "/metrics"
            try:
                code, _, body = get(base + path)
                answered[path[1:]] += code == 200 and len(body) > 0
            except OSError:
                answered["errors"] += 1
            k += 1
            answered["asked"] = k
            time.sleep(max(0.0, 0.01 - (time.monotonic() - t0)))

    poller = threading.Thread(target=poll)
    poller.start()
    sent = vdifrec.send(rec.address, frames=15_000, fps=5000, drop="1:0-49", record_sent=sent_file, **START)
    d = delivered(rec.address, sent["frames_sent"], lambda: rec.stats().datagrams)
    time.sleep(0.3)
    doc = json.loads(get(base + "/status")[2])
    m = metrics_of(get(base + "/metrics")[2].decode())
    stop.set()
    poller.join()
    summary = rec.stop()
    # Nothing lost to the polling: every frame sent (but the 50 left out) arrived, or was
    # dropped by the kernel for a full socket buffer (none where it grants enough) and counted.
    assert sent["frames_sent"] == 14_950 and loss_by_second(frames_of(sent_file), 5000)[4001] == 50
    n = 14_950 - d.kernel_drops
    recorded = frames_of(out)
    assert len(left_out(frames_of(sent_file), recorded)) == d.kernel_drops
    lost = sum(loss_by_second(recorded, 5000).values())
    assert summary.frames_received == n and summary.ring_overflows == 0
    assert summary.kernel_drops == d.kernel_drops and summary.frames_lost == lost
    if d.kernel_drops == 0:
        assert lost == 50
    assert answered["status"] + answered["metrics"] == answered["asked"] >= 200 and answered["errors"] == 0
    # The JSON document.
    for key in ["state", "start_time", "start_unix", "vdif_time", "current_file", "current_file_bytes",
                "ring_fill", "rates", "last_second", "stats"]:
        assert key in doc, key
    assert doc["state"] == "recording"
    assert doc["stats"]["frames_received"] == n
    assert doc["current_file"].endswith("s.vdif")
    assert doc["last_second"]["vdif_seconds"] in (4001, 4002)
    assert doc["vdif_time"].startswith("2026-07-01T01:06:4")  # epoch 53 + 4000 s = 01:06:40
    assert set(doc["rates"]) == {"frames_per_second", "receive_gbps", "write_gbps"}
    # The metrics, parsed by prometheus_client.
    assert m[("vdifrec_frames_received_total", ())] == n
    # Loss by cause as it stood then (the last second's gaps are counted once it completes, at
    # stop): the kernel's drops, and the rest of the gaps.
    assert doc["stats"]["kernel_drops"] == d.kernel_drops and doc["stats"]["frames_lost"] <= lost
    assert m[("vdifrec_frames_lost_total", (("cause", "network"),))] == max(doc["stats"]["frames_lost"] - d.kernel_drops, 0)
    assert m[("vdifrec_frames_lost_total", (("cause", "kernel"),))] == d.kernel_drops
    assert m[("vdifrec_frames_lost_total", (("cause", "ring"),))] == 0
    assert m[("vdifrec_frames_lost_total", (("cause", "malformed"),))] == d.flushes
    assert m[("vdifrec_bytes_written_total", ())] <= n * 8224
    assert 0.0 <= m[("vdifrec_ring_fill_ratio", ())] <= 1.0
    assert m[("vdifrec_datagrams_malformed_total", (("kind", "too_short"),))] == d.flushes
    # After stop the endpoint is gone.
    with pytest.raises(OSError):
        get(base + "/status")


def test_remote_status_gives_the_same_stats_type(tmp_path) -> None:
    with vdifrec.Recorder(port=0, ring="16MiB", frame_size=8224, status_listen="0") as rec:
        assert rec.address is not None and rec.status_address is not None
        sent = vdifrec.send(rec.address, frames=2000, fps=10_000, garbage=7, **START)
        d = delivered(rec.address, 2007, lambda: rec.stats().datagrams)
        remote = vdifrec.RemoteStatus("%s:%d" % rec.status_address).stats()
        local = rec.stats()
        assert isinstance(remote, vdifrec.Stats)
        assert remote.frames_received == local.frames_received
        assert remote.datagrams_malformed == local.datagrams_malformed
        assert remote.datagrams_malformed_by_kind == local.datagrams_malformed_by_kind
        assert remote.kernel_drops == local.kernel_drops == d.kernel_drops
        # 2000 frames and 7 stray datagrams, less what the kernel dropped (none where it could keep them all).
        assert sent["garbage_sent"] == 7
        assert local.frames_received + local.datagrams_malformed == 2007 - d.kernel_drops + d.flushes
        if d.kernel_drops == 0:
            assert local.frames_received == 2000 and local.datagrams_malformed == 7
        code, kind, _ = get("http://%s:%d/nothing" % rec.status_address)
        assert code == 404
        req = urllib.request.Request("http://%s:%d/status" % rec.status_address, method="POST", data=b"x")
        with pytest.raises(urllib.error.HTTPError, match="405"):
            urllib.request.urlopen(req, timeout=5)
    with pytest.raises(ConnectionError, match="no status"):
        vdifrec.RemoteStatus("http://127.0.0.1:9").stats()


@pytest.mark.slow
def test_status_port_in_use_and_bad_address() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        with pytest.raises(vdifrec.PortInUseError, match="cannot serve status"):
            vdifrec.Recorder(port=0, status_listen="127.0.0.1:%d" % s.getsockname()[1]).start()
    finally:
        s.close()
    with pytest.raises(ValueError, match="status_listen: .* is not HOST:PORT"):
        vdifrec.Recorder(port=0, status_listen="somewhere")


@pytest.mark.slow
def test_watch_prints_lines_and_warns_on_loss_and_stall() -> None:
    rec = vdifrec.Recorder(port=0, ring="16MiB", frame_size=8224, status_listen="0", fps=2000)
    rec.start()
    assert rec.address is not None and rec.status_address is not None
    watch = subprocess.Popen(
        [sys.executable, "-m", "vdifrec.cli", "watch", "%s:%d" % rec.status_address, "--every", "0.5",
         "--count", "14", "--stalled-after", "1.5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert watch.stdout is not None
    first = watch.stdout.readline()  # the first poll, before the stream (however slow the start)
    sent = vdifrec.send(rec.address, frames=5000, fps=2000, drop="1:10-29", **START)
    assert sent["frames_sent"] == 4980
    d = delivered(rec.address, 4980, lambda: rec.stats().datagrams)
    out, err = watch.communicate(timeout=60)
    out = first + out
    rec.stop()
    assert watch.returncode == 0, err
    lines = [ln for ln in out.splitlines() if " frames " in ln]
    assert len(lines) >= 10
    frames, lost = map(int, re.findall(r" frames (\d+) .* lost (\d+) ", lines[-1])[0])
    assert frames == 4980 - d.kernel_drops
    losses = re.findall(r"!!! LOSS: (\d+) frames since the last poll \((.*)\) !!!", out)
    if d.kernel_drops == 0:
        assert lost == 20
        assert losses == [("20", "network 20")]
    else:
        # The 20 left out, the kernel's drops (gaps, or before the first or after the last
        # frame), and the empty datagram that carried their count (malformed). A gap is seen
        # before the kernel's count of it arrives, so it may be announced first as network loss.
        assert max(20, d.kernel_drops) + d.flushes <= lost <= 20 + d.kernel_drops + d.flushes
        assert sum(int(n) for n, _ in losses) >= lost
    assert re.search(r"!!! STREAM STOPPED: no packets for \d+ s !!!", out)
    # The original client's fields: VDIF time, total frames, stream capacity, file.
    assert re.search(r"VDIF 2026-07-01T01:06:4\d\.\d+\s+frames \d+\s+stream \d+ B\s+file - 0 B", out)


# -- the scan and the disks ----------------------------------------------------------------------

FS = 8224


def status_of(rec: vdifrec.Recorder) -> dict:
    assert rec.status_address is not None
    return json.loads(get("http://%s:%d/status" % rec.status_address)[2])


def assert_disks(doc: dict, dirs: list[str], lo: float, hi: float) -> None:
    """`disks` lists `dirs` with their file systems' figures as os.statvfs gives them (the fill
    between `lo` and `hi`, what statvfs said just before and after), `disk_fill` the fullest."""
    assert [d["path"] for d in doc["disks"]] == dirs
    for d in doc["disks"]:
        st = os.statvfs(d["path"])
        assert d["error"] is None
        assert d["size_bytes"] == st.f_blocks * st.f_frsize
        assert 0 <= d["used_bytes"] <= d["size_bytes"] and 0 <= d["free_bytes"] <= d["size_bytes"]
        used, free = d["used_bytes"], d["free_bytes"]
        assert d["fill"] == pytest.approx(used / (used + free) if used + free else 0.0, abs=1e-9)
        assert lo - FILL_SLACK <= d["fill"] <= hi + FILL_SLACK, (d, lo, hi)
    assert doc["disk_fill"] == max(d["fill"] for d in doc["disks"])


def test_status_names_the_scan_and_serves_the_fill_of_its_disks(tmp_path) -> None:
    dirs = [str(tmp_path / "disk0"), str(tmp_path / "disk1")]
    for d in dirs:
        os.mkdir(d)
    (tmp_path / "disk0" / "kvn_scan1").mkdir()  # on disk already: the scan gets jive5ab's suffix
    with vdifrec.Recorder(port=0, ring="64MiB", frame_size=FS, disks=dirs, chunk_size="1MiB",
                          status_listen="127.0.0.1:0") as rec:
        assert rec.address is not None and rec.status_address is not None
        url = "http://%s:%d" % rec.status_address
        doc, lo, hi = around(lambda: status_of(rec), *dirs)
        assert doc["scan"] is None
        assert_disks(doc, dirs, lo, hi)

        name = rec.start_scan("kvn_scan1")
        assert name == "kvn_scan1a"
        sent = vdifrec.send(rec.address, frames=3000, fps=10_000, **START)
        delivered(rec.address, sent["frames_sent"], lambda: rec.stats().datagrams)
        doc, lo, hi = around(lambda: status_of(rec), *dirs)
        assert doc["scan"] == "kvn_scan1a"  # the name on disk, not the one asked for
        assert_disks(doc, dirs, lo, hi)
        # The gauges, one per disk, are the same figures.
        m, lo, hi = around(lambda: metrics_of(get(url + "/metrics")[2].decode()), *dirs)
        for d in dirs:
            st = os.statvfs(d)
            assert m[("vdifrec_disk_size_bytes", (("disk", d),))] == st.f_blocks * st.f_frsize
            assert lo - FILL_SLACK <= m[("vdifrec_disk_fill_ratio", (("disk", d),))] <= hi + FILL_SLACK
            assert 0 <= m[("vdifrec_disk_free_bytes", (("disk", d),))] <= st.f_blocks * st.f_frsize
        # One recorder's watch line: the scan and the fullest disk, in percent.
        r, lo, hi = around(lambda: run_cli("watch", "%s:%d" % rec.status_address, "--count", "1", timeout=60), *dirs)
        assert isinstance(r, subprocess.CompletedProcess) and r.returncode == 0, r
        (line,) = r.stdout.splitlines()
        got = re.search(r"  file - 0 B  scan (\S+)  disk (\d+)%  lost \d+  ", line)
        assert got and got[1] == "kvn_scan1a", line
        assert 100 * (lo - FILL_SLACK) - 0.5 <= int(got[2]) <= 100 * (hi + FILL_SLACK) + 0.5, (line, lo, hi)

        summary = rec.stop_scan()
        assert summary.name == "kvn_scan1a" and summary.frames > 0
        # Closed (its tail on disk): no scan is named.
        assert status_of(rec)["scan"] is None


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["vbs", "mk6"])
def test_what_of_a_running_scan_is_on_disk_grows_and_never_passes_what_was_written(tmp_path, fmt) -> None:
    """`scan_durable` while a scan runs: it grows (chunk by chunk for vbs, file sync by file
    sync, about once a second, for mk6), never says more than was written, and ends as the
    summary's durable part, which is the whole scan."""
    dirs = [str(tmp_path / "disk0"), str(tmp_path / "disk1")]
    for d in dirs:
        os.mkdir(d)
    fps, frames = 2500, 12_500  # 5 s at 20 MB/s
    with vdifrec.Recorder(port=0, ring=ring_holding(frames), frame_size=FS, fps=fps, disks=dirs, format=fmt,
                          chunk_size="1MiB", status_listen="127.0.0.1:0") as rec:
        assert rec.address is not None and rec.status_address is not None
        url = "http://%s:%d" % rec.status_address
        assert status_of(rec)["scan_durable"] is None
        rec.start_scan("grows")
        assert status_of(rec)["scan_durable"] == {"frames": 0, "bytes": 0, "up_to": None}
        sender = vdifrec.Sender(rec.address, frames=frames, fps=fps, **START)
        seen = []
        while not sender.finished:
            doc = status_of(rec)
            durable, st = doc["scan_durable"], doc["stats"]
            # One snapshot: the durable part never exceeds what was written, nor says other
            # than the flat fields of the stats.
            assert durable["bytes"] == durable["frames"] * FS <= st["bytes_written"], doc
            assert (st["scan_durable_frames"], st["scan_durable_bytes"], st["scan_durable_up_to"]) == (
                durable["frames"], durable["bytes"], durable["up_to"])
            assert (durable["up_to"] is None) == (durable["frames"] == 0)
            m = metrics_of(get(url + "/metrics")[2].decode())
            assert m[("vdifrec_scan_durable_bytes", ())] <= m[("vdifrec_bytes_written_total", ())]
            seen.append((durable["frames"], durable["up_to"] or ""))
            time.sleep(0.2)
        stats = rec.stats()
        assert stats.scan_durable_bytes <= stats.bytes_written
        sent = sender.wait(timeout=10)
        assert sent is not None
        delivered(rec.address, sent["frames_sent"], lambda: rec.stats().datagrams)
        summary = rec.stop_scan()
        assert status_of(rec)["scan_durable"] is None
        assert rec.stats().scan_durable_up_to is None
    # It only grows (the times are ISO, alike in form), and grew while the scan ran.
    assert seen == sorted(seen), seen
    grown = {f for f, _ in seen if f > 0}
    assert len(grown) >= 2, seen
    assert max(grown) <= summary.frames
    # At the end, all of it: up to the last frame.
    assert (summary.durable_frames, summary.durable_bytes) == (summary.frames, summary.bytes_written)
    assert summary.durable_up_to == summary.last_frame and summary.frames > 0
    assert all(up_to <= summary.durable_up_to for _, up_to in seen)


def test_a_continuous_recording_serves_its_files_disk_and_no_scan(tmp_path, monkeypatch) -> None:
    # A file named without a directory: the disk is the working directory, shown absolute.
    monkeypatch.chdir(tmp_path)
    with vdifrec.Recorder(port=0, ring="16MiB", frame_size=FS, path="c.vdif", status_listen="127.0.0.1:0") as rec:
        assert rec.address is not None
        vdifrec.send(rec.address, frames=500, fps=10_000, **START)
        delivered(rec.address, 500, lambda: rec.stats().datagrams)
        doc, lo, hi = around(lambda: status_of(rec), tmp_path)
        assert doc["current_file"].endswith("c.vdif")
        # A continuous recording is no scan: its file is current_file.
        assert doc["scan"] is None
        assert_disks(doc, [str(tmp_path)], lo, hi)
    # Monitoring writes nowhere: no disks, no fill; the gauges' families are there, empty.
    with vdifrec.Recorder(port=0, ring="16MiB", frame_size=FS, status_listen="127.0.0.1:0") as rec:
        assert rec.status_address is not None
        doc = status_of(rec)
        assert (doc["scan"], doc["disk_fill"], doc["disks"]) == (None, None, [])
        text = get("http://%s:%d/metrics" % rec.status_address)[2].decode()
        assert "# TYPE vdifrec_disk_fill_ratio gauge" in text
        assert not [k for k in metrics_of(text) if k[0].startswith("vdifrec_disk_")]
