"""The Python API for observation scripts: lifecycle, typed results, zero-copy pinned views,
the per-second iterator, and `vdifrec monitor`.

Where the host grants the recorder a small socket buffer (no CAP_NET_ADMIN, net.core.rmem_max
untuned) the kernel may drop frames: the counts expected then follow from what it dropped
(conftest.delivered), and are the stream's own where it dropped nothing.
"""

from __future__ import annotations

import gc
import inspect
import re
import signal
import subprocess
import sys
import textwrap
import time
import weakref
from pathlib import Path

import numpy as np
import pytest

import vdifrec
from conftest import delivered, frames_of, left_out, loss_by_second, vdif_keys

FS = 8224
START = dict(ref_epoch=53, start_second=3000)


def started(**kw) -> vdifrec.Recorder:
    # A known frame size lets a small ring (a few runs of frames) be laid out at start.
    rec = vdifrec.Recorder(port=0, ring=kw.pop("ring", "16MiB"), frame_size=kw.pop("frame_size", FS), **kw)
    rec.start()
    assert rec.address is not None
    return rec


def taken(rec: vdifrec.Recorder):  # type: ignore[no-untyped-def]
    """The recorder's count of datagrams, for conftest.delivered."""
    return lambda: rec.stats().datagrams


# -- lifecycle ------------------------------------------------------------------------------


def test_start_stop_twice_and_stop_without_start(tmp_path: Path) -> None:
    rec = vdifrec.Recorder(port=0, ring="4MiB", frame_size=8224)
    with pytest.raises(vdifrec.RecorderError, match="before start"):
        rec.stop()
    with pytest.raises(vdifrec.RecorderError, match="not been started"):
        rec.stats()
    rec.start()
    with pytest.raises(vdifrec.RecorderError, match="started already"):
        rec.start()
    first = rec.stop()
    assert rec.stop() is first
    assert not rec.running
    with pytest.raises(vdifrec.RecorderError, match="has stopped"):
        rec.stats()
    with pytest.raises(vdifrec.RecorderError, match="started already"):
        rec.start()


def test_context_manager_stops_on_exception(tmp_path: Path) -> None:
    out = tmp_path / "cm.vdif"
    with pytest.raises(RuntimeError, match="scan aborted"):
        with vdifrec.Recorder(port=0, ring="16MiB", frame_size=8224, path=out) as rec:
            assert rec.address is not None
            vdifrec.send(rec.address, frames=500, fps=10_000, **START)
            d = delivered(rec.address, 500, taken(rec))
            raise RuntimeError("scan aborted")
    assert not rec.running
    summary = rec.stop()
    assert summary.frames_received == 500 - d.kernel_drops and summary.ok
    assert summary.kernel_drops == d.kernel_drops
    assert out.stat().st_size == summary.frames_received * FS


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(port=-1), "^port: -1 is out of range: give 0..65535"),
        (dict(port=0, ring="lots"), "^ring: cannot read"),
        (dict(port=0, file_size="x"), "^file_size: cannot read"),
        (dict(port=0, frame_size=0), "^frame_size: 0 bytes is not a VDIF frame size: give a multiple of 8"),
        (dict(port=0, fps=0), "^fps: 0 is not a frame rate"),
        (dict(port=0, offset=-8), "^offset: -8 is out of range"),
        (dict(port=0, capture_cpu=-1), "^capture_cpu: -1 is out of range"),
        (dict(port=0, backend="carrier-pigeon"), "^backend: .* choose udp, afpacket or pfring"),
        (dict(port=0, path="a.vdif", directory="."), "^path: give path or directory, not both"),
        (dict(port=0, ring=True), "^ring: invalid type: boolean `true`, expected a size"),
        (dict(port=0, ring="100TiB"), "^ring: 100.00 TiB is more than the .* available now"),
        (dict(port=0, psn=True), "^psn: the 8-byte packet sequence number needs offset 8"),
        (dict(port=0, prot=1), "^prot: no such option; the options are backend, "),
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict, message: str) -> None:
    # Checked by the engine when the Recorder is made, before anything is opened or bound;
    # ArgumentError is a ValueError.
    with pytest.raises(vdifrec.ArgumentError, match=message):
        vdifrec.Recorder(**kwargs)


def test_help_documents_every_argument() -> None:
    doc = inspect.getdoc(vdifrec.Recorder) or ""
    for name in vdifrec.defaults["recorder"]:
        assert re.search(rf"\b{name}\b", doc), name
    assert '"8GiB"' in doc  # sizes: bytes or strings with units


@pytest.mark.slow
def test_typed_results_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "t.vdif"
    rec = started(path=out, fps=5000, ring="64MiB")  # the whole stream: the disk's speed does not matter
    vdifrec.send(rec.address, frames=5500, fps=5000, **START)
    delivery = delivered(rec.address, 5500, taken(rec))
    stats = rec.stats()
    assert isinstance(stats, vdifrec.Stats) and stats.state == "recording"
    assert stats.to_dict()["frames_received"] == 5500 - delivery.kernel_drops
    summary = rec.stop()
    assert isinstance(summary, vdifrec.Summary)
    d = summary.to_dict()
    # 5000 in the first second, less any the kernel dropped (the file holds what was received).
    assert d["seconds"][0]["threads"][0]["received"] == (vdif_keys(frames_of(out))[1] == 3000).sum()
    assert isinstance(summary.seconds[0], vdifrec.SecondRow)
    assert summary.seconds[0].time.year >= 2026


# -- the per-second iterator -----------------------------------------------------------------


@pytest.mark.slow
def test_seconds_yield_rows_with_the_injected_losses(tmp_path: Path) -> None:
    out, sent_file = tmp_path / "s.vdif", tmp_path / "sent.vdif"
    rec = started(fps=2000, path=out, ring="96MiB")  # the whole stream: the disk's speed does not matter
    sender = vdifrec.Sender(rec.address, frames=8000, fps=2000, drop="0:5-9,2:1000-1099,every:700",
                            record_sent=sent_file, **START)
    rows = []
    for row in rec.seconds(timeout=5):
        rows.append(row)
        if row.vdif_seconds == 3002:
            break
    sent = sender.wait(20)
    assert sent is not None
    d = delivered(rec.address, sent["frames_sent"], taken(rec))
    summary = rec.stop()
    # every:700 drops 2 or 3 frames a second (the 700th, 1400th ... frame of the sequence).
    every = {s: sum(1 for k in range(s * 2000, (s + 1) * 2000) if (k + 1) % 700 == 0) for s in range(4)}
    injected = [5 + every[0], every[1], 100 + every[2]]
    sent_loss = loss_by_second(frames_of(sent_file), 2000)
    assert [sent_loss[s] for s in (3000, 3001, 3002)] == injected
    # Each row counts those, and any gaps the kernel's drops added (none where it dropped none).
    recorded = frames_of(out)
    assert len(left_out(frames_of(sent_file), recorded)) == d.kernel_drops
    lost = loss_by_second(recorded, 2000)
    assert [r.lost for r in rows] == [lost[s] for s in (3000, 3001, 3002)]
    if d.kernel_drops == 0:
        assert [r.lost for r in rows] == injected
    assert rows[0].time.timestamp() == rows[0].unix_second
    # The iterator picks up where it left off; the last second arrives with the summary.
    assert [r.vdif_seconds for r in summary.seconds] == [3000, 3001, 3002, 3003]


@pytest.mark.slow
def test_wait_for_frames_and_duration() -> None:
    rec = started()
    sender = vdifrec.Sender(rec.address, frames=3000, fps=6000, **START)
    t0 = time.monotonic()
    s = rec.wait(frames=1500, duration=10)
    waited = time.monotonic() - t0
    assert sender.wait(10) is not None
    d = delivered(rec.address, 3000, taken(rec))
    # It returns once 1500 frames are buffered, else after the 10 s: the first, unless the
    # kernel dropped more than half of the stream.
    if 3000 - d.kernel_drops >= 1500:
        assert s.frames_received >= 1500 and waited < 10
    else:
        assert waited >= 10
    t0 = time.monotonic()
    rec.wait(duration=0.3)
    assert time.monotonic() - t0 >= 0.3
    with pytest.raises(ValueError, match="give duration"):
        rec.wait()
    rec.stop()


# -- zero-copy views -------------------------------------------------------------------------


def test_views_are_zero_copy_read_only_and_shared(tmp_path: Path) -> None:
    out, sent_file = tmp_path / "v.vdif", tmp_path / "sent.vdif"
    rec = started(fps=10_000, path=out)
    vdifrec.send(rec.address, frames=1200, fps=10_000, record_sent=sent_file, **START)
    d = delivered(rec.address, 1200, taken(rec))
    n = 1200 - d.kernel_drops  # frames received: all 1200 where the kernel dropped none
    latest = rec.latest(100)
    assert latest.shape == (100, FS) and latest.dtype == np.uint8
    assert not latest.flags.owndata and not latest.flags.writeable
    some = rec.frames(n - 150, 100)
    assert np.shares_memory(latest, some)
    with pytest.raises(ValueError):
        latest[0, 0] = 0
    with pytest.raises(IndexError, match="not in the ring"):
        rec.frames(n - 10, 20)
    # The view outlives the recorder and keeps the ring mapped.
    ref = weakref.ref(rec)
    rec.stop()
    del rec
    gc.collect()
    assert ref() is None
    # The views hold the frames received, in arrival order: those sent (less the kernel's drops),
    # as the file has them.
    received = frames_of(out)
    assert len(received) == n and len(left_out(frames_of(sent_file), received)) == d.kernel_drops
    np.testing.assert_array_equal(latest, received[-100:])
    np.testing.assert_array_equal(some, received[n - 150:n - 50])
    np.testing.assert_array_equal(vdifrec.decode(latest), vdifrec.decode(received[-100:]))


def test_a_view_before_any_frame_is_empty_and_analyses_say_so() -> None:
    rec = started()  # the frame size is given: the ring is laid out before any frame
    with rec.view(10) as frames:
        assert frames.shape == (0, FS)
        for analysis in (vdifrec.spectrum, vdifrec.bstate):
            with pytest.raises(ValueError, match="the frames array holds no frame"):
                analysis(frames)
    rec.stop()


def test_a_view_of_more_frames_than_have_arrived_holds_those_that_have() -> None:
    rec = started(fps=10_000)
    vdifrec.send(rec.address, frames=3, fps=10_000, **START)
    d = delivered(rec.address, 3, taken(rec))
    with rec.view(100) as frames:
        # Only frames received and pinned: never ring memory nothing has been written to.
        assert frames.shape == (3 - d.kernel_drops, FS)
        if d.kernel_drops == 0:
            assert [vdifrec.Header.from_bytes(bytes(f[:32])).frame_nr for f in frames] == [0, 1, 2]
    assert rec.latest(100).shape[0] == 3 - d.kernel_drops
    rec.stop()


def test_a_held_view_pins_its_frames_and_the_capture_counts_overflows() -> None:
    rec = started(ring="4MiB", frame_size=8224)  # 384 slots of 8224 bytes (3 runs of 128)
    vdifrec.send(rec.address, frames=150, fps=20_000, **START)
    d1 = delivered(rec.address, 150, taken(rec))
    n = 150 - d1.kernel_drops  # all 150 where the kernel dropped none
    with rec.view(n, hold=True) as frames:
        assert frames.held and frames.valid
        before = frames.copy()
        first_fnr = int(frames[0, 4:8].view("<u4")[0] & 0xFFFFFF)
        # 2000 more frames at full speed: only 384 - n fit while the view pins the oldest.
        sent = vdifrec.send(rec.address, frames=2000, fps=20_000, ref_epoch=53, start_second=3001)
        d2 = delivered(rec.address, 2150 + d1.flushes, taken(rec))
        s = rec.stats()
        np.testing.assert_array_equal(frames, before)
        assert int(frames[0, 4:8].view("<u4")[0] & 0xFFFFFF) == first_fnr
        assert frames.valid and frames.stale_frames == 0
        assert s.frames_received == 384
        assert s.kernel_drops == d2.kernel_drops
        assert s.ring_overflows == sent["frames_sent"] + 150 - d2.kernel_drops - 384
        assert s.frames_lost <= s.kernel_drops  # overflows are not loss; gaps are the kernel's drops
    # Released: the capture uses the ring again.
    vdifrec.send(rec.address, frames=500, fps=20_000, ref_epoch=53, start_second=3002)
    d3 = delivered(rec.address, 2650 + d1.flushes + d2.flushes, taken(rec))
    s = rec.stats()
    assert s.frames_received == 384 + 500 - (d3.kernel_drops - d2.kernel_drops)
    rec.stop()


def test_a_view_yields_to_the_capture_and_says_it_is_stale() -> None:
    # Monitoring (no writer): only a held view could make the capture drop a frame.
    rec = started(ring="4MiB", frame_size=8224)  # 384 slots
    vdifrec.send(rec.address, frames=150, fps=20_000, **START)
    d1 = delivered(rec.address, 150, taken(rec))
    n = 150 - d1.kernel_drops
    with rec.view(n) as frames:
        assert not frames.held and frames.valid and frames.first_frame == 0
        spectrum = vdifrec.spectrum(frames, nfft=256, sample_rate=20_000 * 8192)
        assert spectrum.nint > 0
        # 300 more frames lap the ring: frames 384.. take the slots of the view's first frames.
        vdifrec.send(rec.address, frames=300, fps=20_000, ref_epoch=53, start_second=3001)
        d2 = delivered(rec.address, 450 + d1.flushes, taken(rec))
        received = 450 - d2.kernel_drops
        assert rec.stats().ring_overflows == 0 and rec.stats().frames_received == received
        # While the capture runs, a reservation of the next batch counts as taken too.
        assert frames.stale_frames >= min(n, received - 384)
        stopped = rec.stop()
        assert stopped.ring_overflows == 0
        # Stopped: exactly the frames rewritten.
        assert frames.stale_frames == min(n, max(0, received - 384))
        if received > 384:
            assert not frames.valid
            with pytest.raises(vdifrec.StaleViewError, match=rf"spectrum: the view of frames 0\.\.{n} is stale: the capture has taken back {received - 384} of its {n} frames"):
                vdifrec.spectrum(frames, nfft=256, sample_rate=20_000 * 8192)
            with pytest.raises(vdifrec.StaleViewError, match="bstate"):
                vdifrec.bstate(frames[:10])
            with pytest.raises(vdifrec.StaleViewError, match="decode"):
                vdifrec.decode(np.asarray(frames))


def test_a_view_of_more_than_half_the_ring_is_refused() -> None:
    rec = started(ring="4MiB", frame_size=8224)  # 384 slots
    vdifrec.send(rec.address, frames=300, fps=20_000, **START)
    delivered(rec.address, 300, taken(rec))
    for hold in (False, True):
        with pytest.raises(vdifrec.ArgumentError, match=r"n: a view of 193 frames is more than half the ring \(192 of its 384 frames\)"):
            rec.latest(193, hold=hold)
    assert rec.latest(192).shape[0] == 192
    rec.stop()


def test_views_across_the_ring_end_are_contiguous(tmp_path: Path) -> None:
    out = tmp_path / "e.vdif"
    rec = started(ring="4MiB", frame_size=8224, path=out)  # 384 slots
    # 500 frames received: 500 sent, and as many again as the kernel dropped (if it did).
    sent = flushes = 0
    for second in range(3000, 3020):
        want = 500 - rec.stats().frames_received
        if want == 0:
            break
        vdifrec.send(rec.address, frames=want, fps=20_000, ref_epoch=53, start_second=second)
        sent += want
        d = delivered(rec.address, sent + flushes, taken(rec))
        flushes += d.flushes
    view = rec.latest(190)  # frames 310..499: slots 310..383 then 0..115
    assert view.flags.c_contiguous and view.strides == (FS, 1)
    copy = view.copy()
    rec.stop()
    np.testing.assert_array_equal(copy, frames_of(out)[310:500])
    if sent == 500:  # the kernel dropped none
        fnr = view[:, 4:8].view("<u4")[:, 0] & 0xFFFFFF
        assert list(fnr) == list(range(310, 500))


def test_ten_thousand_views_do_not_leak() -> None:
    rec = started(ring="4MiB", frame_size=8224)
    vdifrec.send(rec.address, frames=200, fps=20_000, **START)
    d = delivered(rec.address, 200, taken(rec))

    def rss() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * 4096

    for _ in range(500):
        rec.latest(64)
    gc.collect()
    base = rss()
    for i in range(10_000):
        v = rec.latest(64)
        assert v.shape == (64, FS)
        if i % 3 == 0:
            with rec.view(16, hold=True) as w:
                assert w.shape[0] == 16
    del v
    gc.collect()
    assert rss() - base < 8 << 20
    # Every pin was released: the capture can fill the whole ring again.
    vdifrec.send(rec.address, frames=384, fps=20_000, ref_epoch=53, start_second=3001)
    delivered(rec.address, 584 + d.flushes, taken(rec))
    s = rec.stats()
    assert s.ring_overflows == 0 and s.frames_received + s.kernel_drops == 584
    rec.stop()


# -- Ctrl-C in a script ---------------------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_in_a_script_stops_cleanly_with_a_summary(tmp_path: Path) -> None:
    script = tmp_path / "obs.py"
    out = tmp_path / "obs.vdif"
    script.write_text(textwrap.dedent(f"""
        import vdifrec
        rec = vdifrec.Recorder(port=0, ring="32MiB", path={str(out)!r})
        try:
            with rec:
                print("listening on %s:%d" % rec.address, flush=True)
                for row in rec.seconds():
                    pass
        except KeyboardInterrupt:
            s = rec.stop()
            print("summary", s.frames_received, s.bytes_written, s.ok, s.kernel_drops, flush=True)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    port = int(line.strip().rsplit(":", 1)[1])
    vdifrec.send(("127.0.0.1", port), frames=2000, fps=10_000, **START)
    d = delivered(("127.0.0.1", port), 2000)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=20)
    n = 2000 - d.kernel_drops  # all 2000 where the kernel dropped none
    assert f"summary {n} {n * FS} True {d.kernel_drops}" in stdout, stderr
    assert out.stat().st_size == n * FS


# -- monitor ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_monitor_prints_vdiftimeudp_lines_with_loss(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "vdifrec.cli", "monitor", "0", "--duration", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    port = int(re.search(r":(\d+)", proc.stdout.readline()).group(1))  # type: ignore[union-attr]
    # 2 threads at 5000 frames per second each: 21000 frames are 2.1 seconds.
    sent = vdifrec.send(("127.0.0.1", port), frames=21_000, fps=5000, threads=2, drop="1:10-19", **START)
    assert sent["frames_sent"] == 20_980
    d = delivered(("127.0.0.1", port), sent["frames_sent"])
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr
    assert stdout.count("----- VDIF Time") == 1
    lines = re.findall(
        r"VDIF frame#(\d+)\s+(\d{4}y\d{3}doy \d\d:\d\d:\d\d) : PC (\S+ \S+) : off\s+(\S+)s : (\d+)/(\d+) fps : "
        r"(\d+)x(\S+) Mbps : (\S+) Mbps : (\S+) Mbps : lost (\d+) : ooo (\d+)",
        stdout,
    )
    assert len(lines) == 3, stdout
    totals = [(int(m[4]), int(m[5]), int(m[6]), int(m[10]), int(m[11])) for m in lines]
    # Reference epoch 53 (2026-07-01) + 3000 s.
    assert [m[1] for m in lines] == ["2026y182doy 00:50:00", "2026y182doy 00:50:01", "2026y182doy 00:50:02"]
    # The nominal rate: the frames received, in Mbit/s (printed to 2 decimals).
    for m, (received, _, _, _, _) in zip(lines, totals):
        assert float(m[8]) == pytest.approx(8e-6 * received * 8192, abs=0.005)
    if d.kernel_drops == 0:
        # 2 threads: 5000 frames each a second; second 1 misses frames 10..19 on both threads.
        assert totals[0] == (10000, 10000, 2, 0, 0)
        assert totals[1] == (9980, 10000, 2, 20, 0)
        assert totals[2] == (1000, 1000, 2, 0, 0)  # the last, partial second, printed at Ctrl-C
        assert float(lines[0][7]) == pytest.approx(8e-6 * 5000 * 8192, rel=1e-6)
    # Whatever the kernel dropped: every frame sent was received or dropped, and the lost ones
    # are the 20 left out and at most those it dropped.
    assert all(t[2] == 2 and t[4] == 0 for t in totals)
    assert sum(t[0] for t in totals) == 20_980 - d.kernel_drops
    assert totals[1][3] >= 20 and 20 <= sum(t[3] for t in totals) <= 20 + d.kernel_drops
    assert all(t[0] <= t[1] <= [10_000, 10_000, 1000][i] for i, t in enumerate(totals))
