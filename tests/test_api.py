"""The Python API for observation scripts: lifecycle, typed results, zero-copy pinned views,
the per-second iterator, and `vdifrec monitor`."""

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

FS = 8224
START = dict(ref_epoch=53, start_second=3000)


def started(**kw) -> vdifrec.Recorder:
    rec = vdifrec.Recorder(port=0, ring=kw.pop("ring", "16MiB"), **kw)
    rec.start()
    assert rec.address is not None
    return rec


def wait_for(rec: vdifrec.Recorder, frames: int, timeout: float = 10) -> vdifrec.Stats:
    deadline = time.monotonic() + timeout
    while True:
        s = rec.stats()
        if s.frames_received + s.ring_overflows >= frames or time.monotonic() > deadline:
            return s
        time.sleep(0.01)


# -- lifecycle ------------------------------------------------------------------------------


def test_start_stop_twice_and_stop_without_start(tmp_path: Path) -> None:
    rec = vdifrec.Recorder(port=0, ring="4MiB")
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
        with vdifrec.Recorder(port=0, ring="16MiB", path=out) as rec:
            assert rec.address is not None
            vdifrec.send(rec.address, frames=500, fps=10_000, **START)
            wait_for(rec, 500)
            raise RuntimeError("scan aborted")
    assert not rec.running
    summary = rec.stop()
    assert summary.frames_received == 500 and summary.ok
    assert out.stat().st_size == 500 * FS


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(port=-1), "port must be in 0..65535"),
        (dict(port=0, ring="lots"), "ring: cannot read"),
        (dict(port=0, file_size="x"), "file_size: cannot read"),
        (dict(port=0, frame_size=0), "frame_size must be"),
        (dict(port=0, fps=0), "fps must be"),
        (dict(port=0, offset=-8), "offset must be"),
        (dict(port=0, capture_cpu=-1), "capture_cpu must be"),
        (dict(port=0, backend="carrier-pigeon"), "backend: .* choose \"udp\""),
        (dict(port=0, path="a.vdif", directory="."), "path and directory: give one"),
        (dict(port=0, ring=True), "ring: expected a size"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        vdifrec.Recorder(**kwargs)


def test_help_documents_every_argument() -> None:
    doc = inspect.getdoc(vdifrec.Recorder) or ""
    for name in inspect.signature(vdifrec.Recorder).parameters:
        assert re.search(rf"\b{name}\b", doc), name
    assert '"8GiB"' in doc  # sizes: bytes or strings with units


def test_typed_results_round_trip(tmp_path: Path) -> None:
    rec = started(path=tmp_path / "t.vdif", fps=5000)
    vdifrec.send(rec.address, frames=5500, fps=5000, **START)
    wait_for(rec, 5500)
    stats = rec.stats()
    assert isinstance(stats, vdifrec.Stats) and stats.state == "recording"
    assert stats.to_dict()["frames_received"] == 5500
    summary = rec.stop()
    assert isinstance(summary, vdifrec.Summary)
    d = summary.to_dict()
    assert d["seconds"][0]["threads"][0]["received"] == 5000
    assert isinstance(summary.seconds[0], vdifrec.SecondRow)
    assert summary.seconds[0].time.year >= 2026


# -- the per-second iterator -----------------------------------------------------------------


def test_seconds_yield_rows_with_the_injected_losses(tmp_path: Path) -> None:
    rec = started(fps=2000)
    sender = vdifrec.Sender(rec.address, frames=8000, fps=2000, drop="0:5-9,2:1000-1099,every:700", **START)
    rows = []
    for row in rec.seconds(timeout=5):
        rows.append(row)
        if row.vdif_seconds == 3002:
            break
    assert sender.wait(20) is not None
    summary = rec.stop()
    # every:700 drops 2 or 3 frames a second (the 700th, 1400th ... frame of the sequence).
    every = {s: sum(1 for k in range(s * 2000, (s + 1) * 2000) if (k + 1) % 700 == 0) for s in range(4)}
    assert [r.lost for r in rows] == [5 + every[0], every[1], 100 + every[2]]
    assert rows[0].time.timestamp() == rows[0].unix_second
    # The iterator picks up where it left off; the last second arrives with the summary.
    assert [r.vdif_seconds for r in summary.seconds] == [3000, 3001, 3002, 3003]


def test_wait_for_frames_and_duration() -> None:
    rec = started()
    sender = vdifrec.Sender(rec.address, frames=3000, fps=6000, **START)
    s = rec.wait(frames=1500, duration=10)
    assert s.frames_received >= 1500
    t0 = time.monotonic()
    rec.wait(duration=0.3)
    assert time.monotonic() - t0 >= 0.3
    with pytest.raises(ValueError, match="give duration"):
        rec.wait()
    sender.wait(10)
    rec.stop()


# -- zero-copy views -------------------------------------------------------------------------


def test_views_are_zero_copy_read_only_and_shared(tmp_path: Path) -> None:
    sent_file = tmp_path / "sent.vdif"
    rec = started(fps=10_000)
    vdifrec.send(rec.address, frames=1200, fps=10_000, record_sent=sent_file, **START)
    wait_for(rec, 1200)
    sent = np.fromfile(sent_file, np.uint8).reshape(-1, FS)
    latest = rec.latest(100)
    assert latest.shape == (100, FS) and latest.dtype == np.uint8
    assert not latest.flags.owndata and not latest.flags.writeable
    np.testing.assert_array_equal(latest, sent[-100:])
    some = rec.frames(1050, 100)
    np.testing.assert_array_equal(some, sent[1050:1150])
    assert np.shares_memory(latest, some)
    with pytest.raises(ValueError):
        latest[0, 0] = 0
    with pytest.raises(IndexError, match="not in the ring"):
        rec.frames(1190, 20)
    # The view outlives the recorder and keeps the ring mapped.
    ref = weakref.ref(rec)
    rec.stop()
    del rec
    gc.collect()
    assert ref() is None
    np.testing.assert_array_equal(latest, sent[-100:])
    np.testing.assert_array_equal(vdifrec.decode(latest), vdifrec.decode(sent[-100:]))


def test_a_held_view_pins_its_frames_and_the_capture_counts_overflows() -> None:
    rec = started(ring="4MiB")  # 384 slots of 8224 bytes (3 runs of 128)
    vdifrec.send(rec.address, frames=300, fps=20_000, **START)
    wait_for(rec, 300)
    with rec.view(300) as frames:
        before = frames.copy()
        first_fnr = int(frames[0, 4:8].view("<u4")[0] & 0xFFFFFF)
        # 2000 more frames at full speed: only 384 - 300 fit while the view pins the oldest.
        sent = vdifrec.send(rec.address, frames=2000, fps=20_000, ref_epoch=53, start_second=3001)
        s = wait_for(rec, 2300)
        np.testing.assert_array_equal(frames, before)
        assert int(frames[0, 4:8].view("<u4")[0] & 0xFFFFFF) == first_fnr
        assert s.frames_received == 384
        assert s.ring_overflows == 2300 - 384 == sent["frames_sent"] + 300 - 384
        assert s.frames_lost == 0  # overflows are not network loss
    # Released: the capture uses the ring again.
    vdifrec.send(rec.address, frames=500, fps=20_000, ref_epoch=53, start_second=3002)
    s = wait_for(rec, 2800)
    assert s.frames_received == 384 + 500
    rec.stop()


def test_views_across_the_ring_end_are_contiguous() -> None:
    rec = started(ring="4MiB")  # 384 slots
    vdifrec.send(rec.address, frames=500, fps=20_000, **START)
    wait_for(rec, 500)
    view = rec.latest(200)  # frames 300..499: slots 300..383 then 0..115
    assert view.flags.c_contiguous and view.strides == (FS, 1)
    fnr = view[:, 4:8].view("<u4")[:, 0] & 0xFFFFFF
    assert list(fnr) == list(range(300, 500))
    rec.stop()


def test_ten_thousand_views_do_not_leak() -> None:
    rec = started(ring="4MiB")
    vdifrec.send(rec.address, frames=200, fps=20_000, **START)
    wait_for(rec, 200)

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
            with rec.view(16) as w:
                assert w.shape[0] == 16
    del v
    gc.collect()
    assert rss() - base < 8 << 20
    # Every pin was released: the capture can fill the whole ring again.
    vdifrec.send(rec.address, frames=384, fps=20_000, ref_epoch=53, start_second=3001)
    s = wait_for(rec, 584)
    assert s.ring_overflows == 0
    rec.stop()


# -- Ctrl-C in a script ---------------------------------------------------------------------


def test_ctrl_c_in_a_script_stops_cleanly_with_a_summary(tmp_path: Path) -> None:
    script = tmp_path / "obs.py"
    out = tmp_path / "obs.vdif"
    script.write_text(textwrap.dedent(f"""
        import vdifrec
        rec = vdifrec.Recorder(port=0, ring="16MiB", path={str(out)!r})
        try:
            with rec:
                print("listening on %s:%d" % rec.address, flush=True)
                for row in rec.seconds():
                    pass
        except KeyboardInterrupt:
            s = rec.stop()
            print("summary", s.frames_received, s.bytes_written, s.ok, flush=True)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    port = int(line.strip().rsplit(":", 1)[1])
    vdifrec.send(("127.0.0.1", port), frames=2000, fps=10_000, **START)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=20)
    assert f"summary 2000 {2000 * FS} True" in stdout, stderr
    assert out.stat().st_size == 2000 * FS


# -- monitor ---------------------------------------------------------------------------------


def test_monitor_prints_vdiftimeudp_lines_with_loss(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "vdifrec.cli", "monitor", "0", "--duration", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    port = int(re.search(r":(\d+)", proc.stdout.readline()).group(1))  # type: ignore[union-attr]
    # 2 threads at 5000 frames per second each: 21000 frames are 2.1 seconds.
    vdifrec.send(("127.0.0.1", port), frames=21_000, fps=5000, threads=2, drop="1:10-19", **START)
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
    # 2 threads: 5000 frames each a second; second 1 misses frames 10..19 on both threads.
    assert totals[0] == (10000, 10000, 2, 0, 0)
    assert totals[1] == (9980, 10000, 2, 20, 0)
    assert totals[2] == (1000, 1000, 2, 0, 0)  # the last, partial second, printed at Ctrl-C
    # Reference epoch 53 (2026-07-01) + 3000 s.
    assert [m[1] for m in lines] == ["2026y182doy 00:50:00", "2026y182doy 00:50:01", "2026y182doy 00:50:02"]
    peak = float(lines[0][7])
    assert peak == pytest.approx(8e-6 * 5000 * 8192, rel=1e-6)
    assert float(lines[0][8]) == pytest.approx(8e-6 * 10000 * 8192, rel=1e-6)
