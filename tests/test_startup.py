"""Starting a recording into a stream that is already flowing, as at a station.

The ring is allocated, mapped and locked before the socket is bound, so the first datagram
goes straight into a ready ring: nothing is lost to the set-up (the original system lost
197,458 frames in its first 2 s). What the host's socket buffer and scheduler drop from then on
is the kernel's, and counted as such: every gap in what was received is a counted kernel drop,
and nothing overflows the ring.
"""

from __future__ import annotations

import time

import pytest

import vdifrec
from conftest import delivered, free_udp_port

#: A rate any host sustains on loopback (82 MB/s); the reference stream's 125,000 frames a
#: second is the benchmarks' business (a 2-core host cannot be asked to keep up with it here).
FPS = 10_000


@pytest.mark.slow
def test_start_into_a_flowing_stream_loses_nothing_to_the_set_up() -> None:
    # Monitoring (nothing written): what is asserted is the start-up, not this disk's speed.
    port = free_udp_port()
    # The stream flows before anyone listens (refused datagrams are counted by the sender); it
    # goes on until the recorder has over a second of it, and is stopped then.
    sender = vdifrec.Sender(("127.0.0.1", port), duration=120.0, fps=FPS)
    try:
        time.sleep(1.0)
        rec = vdifrec.Recorder(port=port, ring="64MiB")
        rec.start()
        # The ring was allocated before the socket was bound: its note comes first.
        notes = rec.notes
        ring_note = next(i for i, n in enumerate(notes) if n.startswith("ring: "))
        socket_note = next(i for i, n in enumerate(notes) if n.startswith("socket: "))
        assert ring_note < socket_note and "allocated" in notes[ring_note], notes
        stats = rec.wait(duration=60.0, frames=FPS)
        sent = sender.stop()
    finally:
        if not sender.finished:
            sender.stop()
    assert stats.frames_received >= FPS, f"the stream was flowing, yet {stats.frames_received} frames arrived in 60 s"
    assert sent["refused"] > 0, "the stream was flowing before the recorder listened"
    # What reached the socket after the stream stopped is taken or dropped (and counted).
    d = delivered(rec.address, 0)
    summary = rec.stop()
    assert summary.kernel_drops == d.kernel_drops
    assert summary.ring_overflows == 0
    # Every frame missing between the first and the last received is one the kernel dropped
    # (none where the host keeps up): none lost to the set-up, nor anywhere else.
    assert summary.frames_lost <= summary.kernel_drops, [(s.vdif_seconds, s.lost) for s in summary.seconds if s.lost]
    assert summary.frames_lost_network == 0
    assert summary.datagrams == summary.frames_received + d.flushes
    assert summary.datagrams_malformed == d.flushes and summary.invariant_holds
