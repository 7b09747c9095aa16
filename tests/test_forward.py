"""Forwarding the stream live while recording it (e-VLBI), through the Python API and the
command line: what reaches the far end is the recording, frame for frame; a slow or absent
destination costs the recording nothing; every destination is accounted for."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import delivered, free_udp_port, frames_of, left_out, loss_by_second, read_until, run_cli

import vdifrec

pytestmark = pytest.mark.network

FS = 8224


def inside(missing: list[int], n: int) -> list[int]:
    """Of the `missing` indices among `n` in a row, those between the first and the last one
    that arrived: a receiver counts a gap only there (what is missing before its first or after
    its last datagram it cannot know of)."""
    kept = sorted(set(range(n)) - set(missing))
    return [m for m in missing if kept and kept[0] < m < kept[-1]]


def test_the_forwarded_streams_are_the_recording_frame_for_frame(tmp_path: Path) -> None:
    # Two far ends: plain udp, and udps counted by its packet sequence numbers.
    far_udp = vdifrec.Recorder(port=0, path=tmp_path / "far_udp.vdif", ring="64MiB", frame_size=FS).start()
    far_udps = vdifrec.Recorder(port=0, path=tmp_path / "far_udps.vdif", ring="64MiB", frame_size=FS,
                                psn=True, offset=8).start()
    assert far_udp.address and far_udps.address
    near = vdifrec.Recorder(port=0, path=tmp_path / "near.vdif", ring="64MiB", frame_size=FS,
                            forward=[f"udp://127.0.0.1:{far_udp.address[1]}", f"udps://127.0.0.1:{far_udps.address[1]}"])
    near.start()
    assert near.address
    sent = vdifrec.send(near.address, frames=6000, fps=2000, record_sent=tmp_path / "sent.vdif")
    assert sent["frames_sent"] == 6000
    at_near = delivered(near.address, 6000, taken=lambda: near.stats().frames_received)
    summary = near.stop()
    assert summary.ok
    # The local recording: what was sent, less what this host's kernel dropped.
    sent_frames = frames_of(tmp_path / "sent.vdif")
    near_frames = frames_of(tmp_path / "near.vdif")
    assert len(left_out(sent_frames, near_frames)) == at_near.kernel_drops
    fwd = {f.destination.split(":")[0]: f for f in summary.forward}
    assert set(fwd) == {"udp", "udps"}
    for f in summary.forward:
        # Every frame recorded went on, none skipped, none overwritten under the forwarder.
        assert (f.frames, f.skipped, f.torn, f.refused) == (summary.frames_received, 0, 0, 0), f
        assert f.frames_out == f.frames
        assert f.bytes == f.frames * (FS + (8 if f.scheme == "udps" else 0))
        assert f.state == "closed" and f.error is None
    # Each far end holds exactly the near recording, less its own kernel's drops.
    for far, name in ((far_udp, "far_udp"), (far_udps, "far_udps")):
        assert far.address
        at_far = delivered(far.address, summary.frames_received, taken=lambda far=far: far.stats().frames_received)
        s = far.stop()
        missing = left_out(near_frames, frames_of(tmp_path / f"{name}.vdif"))
        assert len(missing) == at_far.kernel_drops, name
        if name == "far_udps":
            # One sequence number per datagram, in order: a gap exactly where the kernel dropped
            # one between the first and the last that arrived.
            assert s.psn_out_of_order == 0
            assert s.psn_lost == len(inside(missing, len(near_frames)))
    # The rows say, second by second, what went on; together, no more than all of it.
    per_row = [f for row in summary.seconds for f in row.forward if f.destination.startswith("udp:")]
    assert per_row and sum(f.frames for f in per_row) <= summary.frames_received
    assert all(f.skipped == 0 for f in per_row)


def test_a_dropped_datagram_is_one_gap_in_the_far_ends_sequence(tmp_path: Path) -> None:
    far = vdifrec.Recorder(port=0, path=tmp_path / "far.vdif", ring="32MiB", frame_size=FS, psn=True,
                           offset=8).start()
    assert far.address
    s = vdifrec.send(f"udps://127.0.0.1:{far.address[1]}", frames=3000, fps=2000, drop="0:100-100",
                     record_sent=tmp_path / "sent.vdif")
    assert (s["frames_sent"], s["frames_dropped"]) == (2999, 1)
    at_far = delivered(far.address, 2999, taken=lambda: far.stats().frames_received)
    summary = far.stop()
    # Besides the one dropped at the source, only what this host's kernel dropped is missing,
    # and each one between the first and the last that arrived is one more gap.
    missing = left_out(frames_of(tmp_path / "sent.vdif"), frames_of(tmp_path / "far.vdif"))
    assert len(missing) == at_far.kernel_drops
    kept = sorted(set(range(2999)) - set(missing))
    assert kept[0] < 100 <= kept[-1], "the source's gap lies inside what arrived"
    assert summary.psn_lost == 1 + len(inside(missing, 2999))
    assert summary.psn_out_of_order == 0
    assert summary.frames_lost == 1 + len(inside(missing, 2999))


def test_a_psn_receiver_counts_no_sequence_from_datagrams_that_are_not_its_frames() -> None:
    # Plain frames to a receiver that strips an 8-byte sequence number: once stripped, each is
    # 8 bytes short of a frame, so none is a frame of the stream, and none may count in its
    # packet sequence either.
    far = vdifrec.Recorder(port=0, ring="32MiB", frame_size=FS, psn=True, offset=8).start()
    assert far.address
    vdifrec.send(far.address, frames=500, fps=2000)
    at_far = delivered(far.address, 500, taken=lambda: far.stats().datagrams)
    s = far.stop()
    assert s.frames_received == 0
    assert s.datagrams_malformed == 500 - at_far.kernel_drops
    assert (s.psn_lost, s.psn_out_of_order) == (0, 0)


class SlowReader:
    """A TCP destination slower than the stream: reads `per_read` bytes every `pause` s."""

    def __init__(self, per_read: int, pause: float) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.listener.settimeout(20)
        self.port = self.listener.getsockname()[1]
        self.data = bytearray()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, args=(per_read, pause), daemon=True)
        self.thread.start()

    def run(self, per_read: int, pause: float) -> None:
        conn, _ = self.listener.accept()
        conn.settimeout(0.5)
        deadline = time.monotonic() + 60
        with conn:
            while not self.stop.is_set() and time.monotonic() < deadline:
                try:
                    got = conn.recv(per_read)
                except TimeoutError:
                    continue
                if not got:
                    break
                self.data += got
                time.sleep(pause)

    def close(self) -> bytes:
        self.stop.set()
        self.thread.join(10)
        self.listener.close()
        return bytes(self.data)


def test_a_slow_tcp_destination_skips_whole_frames_and_the_recording_is_whole(tmp_path: Path) -> None:
    reader = SlowReader(per_read=32768, pause=0.05)  # about 0.6 MB/s against 33 MB/s
    out, summary_json = tmp_path / "near.vdif", tmp_path / "summary.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "vdifrec.cli", "record", "--port=0", f"--out={out}", "--ring=16MiB",
         "--frame-size=8224", f"--forward=tcp://127.0.0.1:{reader.port}", f"--summary-json={summary_json}", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = int(read_until(proc, r"listening on [\d.]+:(\d+)")[0][1])
        # 164 MB in 5 s: more than a tuned host's socket buffers (a 32 MiB send buffer the
        # kernel doubles, and the reader's) and half the ring hold, so it skips while it runs.
        vdifrec.send(("127.0.0.1", port), frames=20000, fps=4000, record_sent=tmp_path / "sent.vdif")
        at_near = delivered(("127.0.0.1", port), 20000)
    finally:
        proc.send_signal(2)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    got = reader.close()
    summary = json.loads(summary_json.read_text())
    sent = frames_of(tmp_path / "sent.vdif")
    assert len(left_out(sent, frames_of(out))) == at_near.kernel_drops
    f = summary["forward"][0]
    # Frames went on or were skipped, whole, and none was taken from the recording.
    assert f["skipped"] > 0 and f["frames"] > 0 and f["torn"] == 0
    assert f["frames"] + f["skipped"] == summary["frames_received"]
    assert sum(row["forward"][0]["skipped"] for row in summary["seconds"] if row.get("forward")) > 0
    # What arrived is whole frames, each one that was sent, in the order sent (the last one
    # may be cut short where the reader stopped reading).
    arrived = np.frombuffer(got[: len(got) // FS * FS], np.uint8).reshape(-1, FS)
    assert len(arrived) > 0
    left_out(sent, arrived)


def test_a_destination_the_stream_does_not_fit_is_refused_and_record_exits_2(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        far_port = s.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "vdifrec.cli", "record", "--port=0", "--no-write", "--ring=32MiB", "--quiet",
             f"--forward=udp://127.0.0.1:{far_port}?channels=99", "--duration=4"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        port = int(read_until(proc, r"listening on [\d.]+:(\d+)")[0][1])
        vdifrec.send(("127.0.0.1", port), frames=2000, fps=2000, nchan=16)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, (out, err)
    assert "--forward udp://127.0.0.1" in err and "channels" in err and "the recording is intact" in err
    assert "refused" in out


def test_bad_destinations_are_refused_before_anything_starts() -> None:
    for dest, says in (("udp://nowhere", "not HOST:PORT"), ("udp://127.0.0.1:65536", "1 to 65535"),
                       ("sctp://127.0.0.1:46227", "unknown scheme"), ("udp://127.0.0.1:46227?channels=x", "channels")):
        r = run_cli("record", "--port=0", "--no-write", "--duration=1", f"--forward={dest}", timeout=60)
        assert r.returncode == 2, (dest, r.stderr)
        assert r.stderr.count("\n") == 1 and "--forward" in r.stderr and says in r.stderr, r.stderr
        with pytest.raises(vdifrec.ArgumentError, match="^forward: "):
            vdifrec.Recorder(port=0, forward=[dest])


@pytest.mark.parametrize("pace", ["rate=40Mbps", "ipd=1000"])
def test_a_paced_destination_never_goes_faster_than_its_cap(pace: str) -> None:
    far = vdifrec.Recorder(port=0, ring="32MiB", frame_size=FS).start()
    assert far.address
    near = vdifrec.Recorder(port=0, ring="32MiB", frame_size=FS, forward=[f"udp://127.0.0.1:{far.address[1]}?{pace}"])
    near.start()
    assert near.address
    t0 = time.monotonic()
    vdifrec.send(near.address, frames=6000, fps=2000)  # 16.4 MB/s for 3 s
    delivered(near.address, 6000, taken=lambda: near.stats().frames_received)
    summary = near.stop()
    f = summary.forward[0]
    elapsed = time.monotonic() - t0
    far.stop()
    # The cap is 5 MB/s of datagrams, or one datagram a millisecond: about a third of the
    # stream (or half) goes on, the rest is skipped, whole frames each.
    most = 5e6 * elapsed if pace.startswith("rate") else 1000 * elapsed * FS
    assert 0 < f.bytes <= most + 16 * FS, (f, elapsed)
    assert f.skipped > 0 and f.frames + f.skipped == summary.frames_received, f


def test_a_corner_turned_and_reframed_stream_is_the_input_channels_sample_for_sample(tmp_path: Path) -> None:
    import io

    from baseband.vdif import VDIFFrame

    # 4 channels of 2 bits in 8192-byte payloads; channels 1 and 3 go on as threads 1 and 3
    # (thread 0 x 4 channels + channel), each 2048 bytes a frame, re-framed to 512: every
    # input frame becomes 2 x 4 frames of 544 bytes, frame numbers 4 f + i.
    far = vdifrec.Recorder(port=0, path=tmp_path / "far.vdif", ring="32MiB", frame_size=544).start()
    assert far.address
    near = vdifrec.Recorder(port=0, path=tmp_path / "near.vdif", ring="32MiB", frame_size=FS,
                            forward=[f"udp://127.0.0.1:{far.address[1]}?channels=1,3&payload=512"])
    near.start()
    assert near.address
    vdifrec.send(near.address, frames=2000, fps=1000, nchan=4, bits=2)
    delivered(near.address, 2000, taken=lambda: near.stats().frames_received)
    summary = near.stop()
    f = summary.forward[0]
    assert (f.frames, f.frames_out, f.skipped, f.refused) == (summary.frames_received, 8 * summary.frames_received, 0, 0)
    at_far = delivered(far.address, f.frames_out, taken=lambda: far.stats().frames_received)
    far_summary = far.stop()
    assert far_summary.frames_received == f.frames_out - at_far.kernel_drops
    # Each input frame by (seconds, frame number), decoded by baseband.
    near_raw = (tmp_path / "near.vdif").read_bytes()
    inputs = {}
    for k in range(len(near_raw) // FS):
        frame = VDIFFrame.fromfile(io.BytesIO(near_raw[k * FS:(k + 1) * FS]))
        inputs[(frame.header["seconds"], frame.header["frame_nr"])] = frame.data
    far_raw = (tmp_path / "far.vdif").read_bytes()
    assert len(far_raw) % 544 == 0
    seen = 0
    for k in range(len(far_raw) // 544):
        out = VDIFFrame.fromfile(io.BytesIO(far_raw[k * 544:(k + 1) * 544]))
        h = out.header
        assert (h.nchan, h.bps, h.edv, h.frame_nbytes) == (1, 2, 0, 544)
        assert h["thread_id"] in (1, 3)
        data = inputs[(h["seconds"], h["frame_nr"] // 4)]
        part = h["frame_nr"] % 4
        n = 512 * 8 // 2
        assert np.array_equal(out.data[:, 0], data[part * n:(part + 1) * n, h["thread_id"]])
        seen += 1
    assert seen == far_summary.frames_received
    # Its headers are a valid stream: 2 threads at 4 x 1000 frames/s, nothing invalid.
    report = json.loads(run_cli("check", str(tmp_path / "far.vdif"), "--json").stdout)
    assert report["threads"] == [1, 3] and report["frames_per_second"] == 4000
    assert report["totals"]["invalid"] == 0
    assert report["totals"]["lost"] == sum(loss_by_second(frames_of(far_raw, 544), 4000).values())
    assert report["totals"]["lost"] <= at_far.kernel_drops


# -- a forward that would feed the recorder itself ----------------------------------------------


def _own_spellings(port: int) -> list[str]:
    """Destinations that are this host at `port`, in the spellings a user might write."""
    spellings = [f"udp://127.0.0.1:{port}", f"udp://127.9.8.7:{port}", f"udp://0.0.0.0:{port}",
                 f"udp://[::ffff:127.0.0.1]:{port}", f"udps://[::ffff:0.0.0.0]:{port}", f"udp://[::]:{port}"]
    if socket.has_ipv6:
        spellings.append(f"udp://[::1]:{port}")
    return spellings


def test_every_spelling_of_the_recorders_own_port_is_refused_by_the_api_and_the_cli() -> None:
    port = free_udp_port()
    rec = vdifrec.Recorder(port=port, ring="32MiB", frame_size=FS).start()
    try:
        for dest in _own_spellings(port):
            assert rec.forward_feeds_itself(dest), dest
            with pytest.raises(vdifrec.ArgumentError, match="own data port"):
                rec.add_forward(dest)
        # Another port of this host, TCP, and another host at the same port are no loop.
        assert not rec.forward_feeds_itself(f"udp://127.0.0.1:{port + 1 if port < 65535 else port - 1}")
        assert not rec.forward_feeds_itself(f"tcp://127.0.0.1:{port}")
        assert not rec.forward_feeds_itself(f"udp://198.51.100.7:{port}")  # a documentation address
        assert rec.forwards() == []
    finally:
        rec.stop()
    for dest in _own_spellings(port)[:4]:
        r = run_cli("record", f"--port={port}", "--no-write", "--duration=1", f"--forward={dest}", timeout=60)
        assert r.returncode == 2 and "--forward" in r.stderr and "own data port" in r.stderr, (dest, r.stderr)


_IN_NAMESPACE = """
import json, sys, time
import vdifrec
port, fs = int(sys.argv[1]), int(sys.argv[2])
# Bound to every address of this namespace: its own interface address at the port is a loop.
rec = vdifrec.Recorder(port=port, bind="0.0.0.0", ring="32MiB", frame_size=fs)
rec.start()
own = {d: rec.forward_feeds_itself(d) for d in sys.argv[3:]}
fid = rec.add_forward(f"udp://198.18.0.1:{port}")
print("ready", flush=True)
deadline = time.monotonic() + 30
while rec.stats().frames_received < 2000 and time.monotonic() < deadline:
    time.sleep(0.05)
s = rec.stop()
f = s.forward[0]
print(json.dumps({"own": own, "received": s.frames_received, "forwarded": f.frames, "refused": f.refused}), flush=True)
"""

_FAR_END = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind(("198.18.0.1", int(sys.argv[1])))
s.settimeout(1.0)
print("ready", flush=True)
n, deadline = 0, time.monotonic() + 40
while n < 2000 and time.monotonic() < deadline:
    try:
        s.recv(65536)
        n += 1
    except TimeoutError:
        pass
print(n, flush=True)
"""


@pytest.mark.slow
def test_a_recorder_on_every_address_forwards_to_another_host_at_its_own_port_number(tmp_path: Path) -> None:
    """Station and correlator at the same port number on two hosts (two network namespaces of
    the test's own): forwarding there is no loop, while the recorder's own interface address at
    that port is."""
    import netns

    try:
        pair = netns.veth_pair()
        net = pair.__enter__()
    except netns.NamespacesUnavailable as e:
        pytest.skip(str(e))
    try:
        port = 47_123
        own, other = f"udp://{netns.RECEIVER_V4}:{port}", f"udp://{netns.SENDER_V4}:{port}"
        far = subprocess.Popen(["ip", "netns", "exec", net["ns_s"], sys.executable, "-c", _FAR_END, str(port)],
                               stdout=subprocess.PIPE, text=True)
        rec = subprocess.Popen(["ip", "netns", "exec", net["ns_r"], sys.executable, "-c", _IN_NAMESPACE, str(port),
                                str(FS), own, other, f"udp://0.0.0.0:{port}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert far.stdout is not None and far.stdout.readline().strip() == "ready"
            assert rec.stdout is not None and rec.stdout.readline().strip() == "ready", rec.communicate(timeout=30)
            send = netns.sh("ip", "netns", "exec", net["ns_s"], sys.executable, "-m", "vdifrec.cli", "send", "--to",
                            f"{netns.RECEIVER_V4}:{port}", "--frames", "2000", "--fps", "2000")
            assert send.returncode == 0, send.stderr
            out, err = rec.communicate(timeout=60)
            got = int(far.communicate(timeout=60)[0].strip())
        finally:
            for p in (far, rec):
                if p.poll() is None:
                    p.kill()
                    p.communicate(timeout=30)
        assert rec.returncode == 0, err
        result = json.loads(out.strip().splitlines()[-1])
        assert result["own"] == {own: True, other: False, f"udp://0.0.0.0:{port}": True}
        assert result["refused"] == 0 and result["received"] == 2000, result
        # Every frame recorded went on to the other host (a veth pair drops nothing).
        assert result["forwarded"] == 2000 and got == 2000, (result, got)
    finally:
        pair.__exit__(None, None, None)
