"""e-VLBI over VSI-S: `mem2net`, `ipd` and `net_protocol` as jive5ab 3.1 spells them
(docs/reference/formats/vsi.md), against `vdifrec serve` with a sender and receivers on
127.0.0.1. The stream forwarded is checked against what the sender sent (udps sequence numbers
one apart, each frame byte for byte, in order), the scan recorded meanwhile against the same,
and every wait is bounded.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import delivered, free_udp_port, frames_of, left_out, ring_holding, udp_socket
from test_vsi import FS, MODE, START, Serve, vbs_scan

import vdifrec

FPS = 1000  # slow enough that the paused, paced and quiet phases are seen while it sends


class Datagrams:
    """A UDP receiver on 127.0.0.1 that keeps every datagram, in a thread of its own."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port: int = self.sock.getsockname()[1]
        self.got: list[tuple[float, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.got.append((time.monotonic(), self.sock.recv(65536)))
            except TimeoutError:
                pass

    def __len__(self) -> int:
        return len(self.got)

    def since(self, t: float) -> int:
        return sum(1 for at, _ in list(self.got) if at >= t)

    def quiet(self, for_s: float = 0.2, most_s: float = 5.0) -> None:
        """Waits until nothing has come for `for_s` seconds (at most `most_s`)."""
        deadline = time.monotonic() + most_s
        while time.monotonic() < deadline:
            last = self.got[-1][0] if self.got else 0.0
            if time.monotonic() - last >= for_s:
                return
            time.sleep(0.02)
        raise AssertionError(f"datagrams still coming after {most_s} s")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


def until(what: str, ok: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.02)


def in_order_of(sent: np.ndarray, frames: list[bytes]) -> list[int]:
    """Where each frame forwarded is among those sent: each one of them byte for byte, in the
    order sent (a frame passed over is fine: the forwarder skips ahead, never back)."""
    index = {r[:32].tobytes(): k for k, r in enumerate(sent)}
    at = [index[f[:32]] for f in frames]
    assert all(b > a for a, b in zip(at, at[1:])), "frames forwarded out of order"
    assert all(sent[k].tobytes() == f for k, f in zip(at, frames)), "a frame forwarded differs from the one sent"
    return at


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    s = Serve(tmp_path, ring=ring_holding(8000))
    yield s
    s.stop()


@pytest.mark.slow
@pytest.mark.network
def test_mem2net_forwards_a_scan_in_udps_while_it_records(serve: Serve, tmp_path: Path) -> None:
    port = free_udp_port()
    rx = Datagrams()
    try:
        assert [r.code for r in serve(f"net_protocol=udps;net_port={port}")] == [0, 0]
        assert serve.one("net_protocol?").fields[0] == "udps"
        # Refused before a connect, and a connect that cannot be.
        assert serve.one("mem2net?").fields == ("inactive",)
        for command, code, says in [
            ("mem2net=on", 6, "mem2net not connected"),
            ("mem2net=off", 6, "mem2net not connected"),
            ("mem2net=disconnect", 6, "Not doing mem2net"),
            ("mem2net=connect:127.0.0.1", 6, "own data port"),  # net_port's port, here: a loop
        ]:
            r = serve.one(command)
            assert (r.code, len(r.fields)) == (code, 1) and says in r.fields[0], (command, r)
        assert serve.one("mem2net?").fields == ("inactive",)

        assert serve.one("record=on:fwd1").code == 0
        sent_file = tmp_path / "sent.vdif"
        sender = vdifrec.Sender(("127.0.0.1", port), frames=8000, fps=FPS, psn=True, record_sent=sent_file, **START)
        until("the station receives", lambda: int(serve.stats()["datagrams"]) > 0)

        # Connected, paused: nothing is sent.
        dest = f"127.0.0.1@{rx.port}"
        assert serve.one(f"mem2net=connect:{dest}").code == 0
        assert serve.one("mem2net?").fields == (dest, "<CONNECTED,>")
        again = serve.one(f"mem2net=connect:{dest}")
        assert (again.code, again.fields) == (6, ("Already doing mem2net",))
        time.sleep(0.3)
        assert len(rx) == 0

        # On: the stream arrives.
        assert serve.one("mem2net=on").code == 0
        assert serve.one("mem2net?").fields == (dest, "<RUN,CONNECTED,>")
        until("200 datagrams forwarded", lambda: len(rx) >= 200)

        # ipd changes the pacing live: a datagram each 20 ms at most.
        assert serve.one("ipd=20000").code == 0
        assert serve.one("ipd?").fields == ("20000",)
        time.sleep(0.3)
        t = time.monotonic()
        time.sleep(1.0)
        paced = rx.since(t)
        assert 5 <= paced <= 1.0 / 0.020 + 5, paced
        assert serve.one("ipd=0").code == 0
        n = len(rx)
        until("the stream at full rate again", lambda: len(rx) >= n + 200)

        # Off (vdifrec's pause): connected still, nothing more sent.
        assert serve.one("mem2net=off").code == 0
        assert serve.one("mem2net?").fields == (dest, "<PAUSE,CONNECTED,>")
        rx.quiet()
        n_off = len(rx)
        time.sleep(0.5)
        assert len(rx) == n_off
        st = serve.stats()
        assert st["mem2net_state"] == "paused"
        assert sender.wait(timeout=0) is None, "the sender ended before the pause was seen: a slow host"

        # Stop, as jive5ab's: no more sending, the connection kept; then disconnect.
        assert serve.one("mem2net=stop").code == 0
        assert serve.one("mem2net?").fields == (dest, "<CONNECTED,>")
        assert serve.one("mem2net=disconnect").code == 0
        assert serve.one("mem2net?").fields == ("inactive",)
        assert not any(k.startswith("mem2net_") for k in serve.stats())

        sent = sender.wait(timeout=30)
        assert sent is not None
        d = delivered(("127.0.0.1", port), sent["frames_sent"], lambda: int(serve.stats()["datagrams"]))
        assert serve.one("record=off").code == 1
        serve.wait_off()
        rx_state = udp_socket(rx.port)
    finally:
        rx.close()

    # The scan is whole: forwarding never cost it a frame.
    sent_frames = frames_of(sent_file)
    assert len(left_out(sent_frames, frames_of(vbs_scan(serve.disks, "fwd1")))) == d.kernel_drops
    # What was forwarded: udps datagrams, each a sequence number (little-endian) and a frame
    # sent; the sequence goes up by one through the ipd= changes (applied live, on the same
    # connection), a gap only where this test's socket dropped a datagram.
    packets = [p for _, p in rx.got]
    assert all(len(p) == 8 + FS for p in packets)
    seq = [struct.unpack_from("<Q", p)[0] for p in packets]
    assert all(b > a for a, b in zip(seq, seq[1:])), seq
    # Each number missing between the first and the last is a datagram the socket dropped (it
    # may also have dropped some after the last, which leave no gap).
    assert seq[-1] - seq[0] + 1 - len(seq) <= (rx_state[1] if rx_state else 0)
    assert all(s < 2**31 for s in seq[:1])
    in_order_of(sent_frames, [p[8:] for p in packets])


@pytest.mark.network
def test_mem2net_to_any_spelling_of_this_host_at_net_port_is_refused_and_brackets_are_read(serve: Serve) -> None:
    """The recorder's own rule (an address of this host at a port it receives on), as the API
    and the CLI apply it; an IPv6 address may come in brackets."""
    port = free_udp_port()
    assert [r.code for r in serve(f"net_protocol=udps;net_port={port}")] == [0, 0]
    for host in ("0.0.0.0", "127.0.0.1", "127.1.2.3", "[::ffff:127.0.0.1]", "::ffff:127.0.0.1", "localhost",
                 f"0.0.0.0@{port}", f"[::]@{port}"):
        r = serve.one(f"mem2net=connect:{host}")
        assert (r.code, len(r.fields)) == (6, 1) and "own data port" in r.fields[0], (host, r)
        assert serve.one("mem2net?").fields == ("inactive",)
    if socket.has_ipv6:
        other = free_udp_port()
        r = serve.one(f"mem2net=connect:[::1]@{other}")
        assert r.code == 0, r
        # The reply's fields are split at colons, an IPv6 host's too (as jive5ab's would be).
        fields = serve.one("mem2net?").fields
        assert (":".join(fields[:-1]), fields[-1]) == (f"[::1]@{other}", "<CONNECTED,>"), fields
        assert serve.one("mem2net=disconnect").code == 0
    r = serve.one("mem2net=connect:[::1]")
    assert r.code == 6 and "own data port" in r.fields[0], r


@pytest.mark.slow
@pytest.mark.network
def test_mem2net_in_tcp_goes_to_net_ports_port_and_survives_a_new_net_port(serve: Serve, tmp_path: Path) -> None:
    port = free_udp_port()
    # jive5ab's form: mem2net=connect:<host> sends to net_port's port, here TCP on 127.0.0.1
    # (the station receives UDP on the same number).
    listener = socket.create_server(("127.0.0.1", port))
    listener.settimeout(10)
    assert [r.code for r in serve(f"net_port={port};net_protocol=tcp")] == [0, 0]
    assert serve.one("net_protocol?").fields[0] == "tcp"
    sent_file = tmp_path / "sent.vdif"
    sender = vdifrec.Sender(("127.0.0.1", port), frames=3000, fps=FPS, record_sent=sent_file, **START)
    conns: list[socket.socket] = []
    try:
        until("the station receives", lambda: int(serve.stats()["datagrams"]) > 0)
        assert serve.one("mem2net=connect:127.0.0.1").code == 0
        conns.append(listener.accept()[0])
        assert serve.one("mem2net?").fields == ("127.0.0.1", "<CONNECTED,>")
        assert serve.one("mem2net=on").code == 0
        first = read_frames(conns[0], 100)
        # net_port= rebuilds the recorder: the destination comes again (a new connection).
        port2 = free_udp_port()
        assert serve.one(f"net_port={port2}").code == 0
        conns.append(listener.accept()[0])
        assert serve.one("mem2net?").fields == ("127.0.0.1", "<RUN,CONNECTED,>")
        sent2_file = tmp_path / "sent2.vdif"
        more = vdifrec.send(("127.0.0.1", port2), frames=300, fps=FPS, record_sent=sent2_file, ref_epoch=53, start_second=3000)
        assert more["frames_sent"] == 300
        second = read_frames(conns[1], 100)
        assert serve.one("mem2net=disconnect").code == 0
        sender.stop()
    finally:
        for c in conns:
            c.close()
        listener.close()
    in_order_of(frames_of(sent_file), first)
    in_order_of(frames_of(sent2_file), second)
    # A destination that refuses: code 4, and nothing connected.
    with socket.create_server(("127.0.0.1", 0)) as s:
        closed = s.getsockname()[1]
    r = serve.one(f"mem2net=connect:127.0.0.1@{closed}")
    assert r.code == 4 and "refused" in r.fields[0], r
    assert serve.one("mem2net?").fields == ("inactive",)


def read_frames(conn: socket.socket, n: int, timeout: float = 10.0) -> list[bytes]:
    """`n` frames back to back from a TCP connection (bounded in time)."""
    conn.settimeout(timeout)
    buf = b""
    while len(buf) < n * FS:
        chunk = conn.recv(1 << 20)
        assert chunk, "the station closed the connection"
        buf += chunk
    return [buf[k * FS : (k + 1) * FS] for k in range(n)]


@pytest.mark.network
def test_ipd_net_protocol_and_mem2net_answer_as_jive5ab(serve: Serve) -> None:
    # No data port yet: nothing to send.
    r = serve.one("mem2net=connect:127.0.0.1")
    assert r.code == 6 and "net_port" in r.fields[0], r
    # ipd: microseconds, n/ns nanoseconds, negative auto; shown in microseconds.
    assert serve.one("ipd?").fields == ("0",)
    for given, shown in [("10", "10"), ("1500n", "1.500000"), ("2500ns", "2.500000"), ("1.5u", "1.500000"), ("0", "0")]:
        assert serve.one(f"ipd={given}").code == 0
        assert serve.one("ipd?").fields == (shown,), given
    assert serve.one("ipd=-1").code == 0
    assert serve.one("ipd?").fields == ("-1", "0")  # auto: the theoretical gap, none before a connect
    for command, code, says in [
        ("ipd=", 8, "Command must have argument"),
        ("ipd=fast", 8, "not a number"),
        ("ipd=99999999", 8, "out of range"),
        ("ipd=-2", 8, "out of range"),
        ("net_protocol=udt", 8, "not supported by vdifrec"),
        ("net_protocol=rtcp", 8, "not supported by vdifrec"),
        ("net_protocol=carrier_pigeon", 8, "not recognized"),
        ("mem2net=", 2, "w/o actual commands"),
        ("mem2net=frob", 2, "frob does not apply to mem2net"),
    ]:
        r = serve.one(command)
        assert (r.code, len(r.fields)) == (code, 1) and says in r.fields[0], (command, r)
    # The theoretical gap of ipd auto, computed at connect from the mode: 1/1.1 of a frame's
    # time (VDIF_8192-1024-4-2: 8224 bytes at 1024 Mbit/s, 58.409 us).
    rx = Datagrams()
    try:
        assert [r.code for r in serve(f"mode={MODE};net_port={free_udp_port()}")] == [0, 0]
        assert serve.one(f"mem2net=connect:127.0.0.1@{rx.port}").code == 0
        assert serve.one("ipd?").fields == ("-1", "58.409000")
        assert serve.one("mem2net=disconnect").code == 0
    finally:
        rx.close()
    # udp is udps, as jive5ab takes it; pudp plain frames; tcp only sends.
    for given, shown in [("udp", "udps"), ("pudp", "pudp"), ("tcp", "tcp"), ("udps:8M:32M:8", "udps")]:
        assert serve.one(f"net_protocol={given}").code == 0
        assert serve.one("net_protocol?").fields[0] == shown
    assert serve.one("net_protocol?").fields == ("udps", "8388608", "33554432", "8")
