"""The recorder's live quality monitor, its per-stage latency stamps, and views that yield to
the capture at the reference rate.

Counts follow from what the recorder received (the kernel may drop datagrams on an untuned
host); what vdifrec promises is asserted: no frame lost to the ring, stale views reported with
the exact count, tones where the generator put them, stamps in stage order.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import vdifrec
from conftest import delivered, first_live_look, frames_of, free_udp_port, metric, output_line

pytestmark = pytest.mark.network

FS = 8224
TONE_MHZ = 10.0


def wait_for(check, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


def status_of(rec: vdifrec.Recorder) -> dict:  # type: ignore[type-arg]
    assert rec.status_address is not None
    host, port = rec.status_address
    with urllib.request.urlopen(f"http://{host}:{port}/status", timeout=5) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


# -- the live monitor ------------------------------------------------------------------------


@pytest.mark.slow
def test_the_live_monitor_finds_the_tone_and_the_bit_statistics_in_every_channel(tmp_path: Path) -> None:
    rec = vdifrec.Recorder(port=0, ring="128MiB", status_listen="127.0.0.1:0")
    rec.start()
    assert rec.address is not None and rec.status_address is not None
    # The stream flows until the monitor has looked (it looks only while frames arrive).
    sender = vdifrec.Sender(rec.address, duration=300.0, fps=20_000, threads=2, tone_mhz=TONE_MHZ)
    try:
        look = first_live_look(rec.live, "http://%s:%d" % rec.status_address)
        doc = status_of(rec)["live"]
    finally:
        sender.stop()
        summary = rec.stop()
    assert summary.ring_overflows == 0
    # The sender's frames: 4 channels of 2-bit real samples, 8192-byte payloads at 20000 fps.
    # The frame rate is learned as the highest frame number seen + 1: short of 20000 only where
    # the kernel dropped the tail of each second (see test_page), by at most what it dropped.
    fps_seen = round(look.sample_rate_hz / 8192)
    assert look.sample_rate_hz == fps_seen * 8192
    assert fps_seen == 20_000 or 20_000 - summary.kernel_drops <= fps_seen < 20_000, (fps_seen, summary.kernel_drops)
    assert look.bandwidth_hz == pytest.approx(look.sample_rate_hz / 2)
    assert look.threads == [0, 1] and look.power.shape == (2, 4, 1024)
    bin_hz = look.bandwidth_hz / look.nfft
    for t in (0, 1):
        for c in range(4):
            tones = [x for x in look.tones if (x.thread, x.channel) == (t, c)]
            assert tones, f"no tone in thread {t} channel {c}"
            assert abs(tones[0].frequency - TONE_MHZ * 1e6) <= bin_hz
            # The spectrum peaks there too.
            assert abs(look.freq[int(np.argmax(look.power[t, c]))] - TONE_MHZ * 1e6) <= bin_hz
    # Bit statistics, against the same signal made here (the generator's noise, tone and
    # thresholds; vdifrec.bstate counting them): the look is a sample of it, as large as the
    # spare CPU allowed (smaller on a starved host), so it agrees within 5 sigma of a binomial
    # with the look's samples per thread and channel (and the reference's own).
    expected = np.asarray(vdifrec._core.two_bit_state_fractions(vdifrec._core.TWO_BIT_THRESHOLD_SIGMA))
    assert np.allclose(look.expected, expected)
    ref_file = tmp_path / "reference.vdif"
    vdifrec.generate(ref_file, seconds=0.1, fps=20_000, threads=2, tone_mhz=TONE_MHZ)
    reference = vdifrec.bstate(frames_of(ref_file))
    assert reference.thread_ids == [0, 1]
    # The signal itself is Gaussian noise at the optimal 2-bit thresholds, within 0.5 points.
    assert np.all(np.abs(reference.fractions - expected) * 100 < 0.5)
    p = reference.fractions
    n_ref = len(frames_of(ref_file)) // 2 * 8192
    n = max(look.frames // 2 - 1, 1) * 8192  # samples per thread and channel (frames alternate threads)
    sigma = np.sqrt(p * (1 - p) * (1 / n + 1 / n_ref))
    assert np.all(np.abs(look.fractions - p) <= 5 * sigma), (look.frames, np.abs(look.fractions - p) / sigma)
    # The deviation reported is the look's own largest difference from Gaussian noise.
    assert np.allclose(look.deviation_pp, 100 * np.max(np.abs(look.fractions - expected), axis=-1))
    # /status serves the same kind of document: a flat tone list and the second it describes.
    assert {(x["thread"], x["channel"]) for x in doc["tones"]} == {(t, c) for t in (0, 1) for c in range(4)}
    when = datetime.datetime.fromtimestamp(doc["unix_second"], datetime.timezone.utc)
    assert doc["vdif_second"][:19] == when.strftime("%Y-%m-%dT%H:%M:%S")
    assert doc["frames"] >= 1 and 0 < doc["fraction"] <= 1
    assert summary.live_computed is not None and summary.live_computed >= 1


@pytest.mark.slow
def test_the_live_monitor_is_off_without_the_status_or_when_told() -> None:
    for options in ({}, {"status_listen": "127.0.0.1:0", "live": False}):
        rec = vdifrec.Recorder(port=0, ring="32MiB", **options)  # type: ignore[arg-type]
        rec.start()
        assert rec.address is not None
        vdifrec.send(rec.address, frames=3000, fps=2000)
        assert rec.live() is None
        s = rec.stop()
        assert s.live_computed is None and s.live_skips is None


def busy_loops(seconds: float, per_cpu: int = 3) -> list[subprocess.Popen[bytes]]:
    """`per_cpu` CPU-bound processes per CPU at normal priority, each ending by itself after
    `seconds`."""
    code = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(per_cpu * (os.cpu_count() or 1))]


@pytest.mark.slow
def test_a_starved_live_monitor_skips_and_the_recording_loses_nothing(tmp_path: Path) -> None:
    # Every CPU kept busy at normal priority, three processes each: the monitor, at the lowest
    # (SCHED_IDLE), gets next to none, so its looks (a whole second each, as much as an eighth
    # of the ring holds) cannot keep up with the seconds, on any host. It skips and counts them;
    # the recording goes on and loses nothing to them.
    out = tmp_path / "starved.vdif"
    # 16 MB/s: the ring holds 8 s of it should the writer fall behind while the CPUs are busy.
    fps = 2000
    rec = vdifrec.Recorder(port=0, ring="128MiB", path=out, status_listen="127.0.0.1:0", live_fraction=1.0)
    rec.start()
    assert rec.address is not None and rec.status_address is not None
    base = "http://%s:%d" % rec.status_address
    # The stream flows until the test has what it needs, and is stopped then.
    sender = vdifrec.Sender(rec.address, duration=300.0, fps=fps)
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        # Once it has looked, starve it until it has counted a further second skipped (bounded).
        first_live_look(rec.live, base)
        skipped_before = metric(base, "vdifrec_live_skips_total")
        hogs = busy_loops(60)
        wait_for(lambda: metric(base, "vdifrec_live_skips_total") > skipped_before, 30.0,
                 "a second skipped by the starved monitor")
        sent = sender.stop()
        d = delivered(rec.address, sent["frames_sent"], lambda: rec.stats().datagrams)
        s = rec.stop()
    finally:
        if not sender.finished:
            sender.stop()
        for h in hogs:
            h.kill()
            h.wait(timeout=10)
    assert s.ring_overflows == 0 and s.bytes_dropped_disk == 0 and s.ok
    # Whatever the busy host made the kernel drop is counted as such; all else is on disk.
    assert s.frames_received == sent["frames_sent"] - d.kernel_drops
    assert out.stat().st_size == s.frames_received * FS
    assert s.live_skips is not None and s.live_skips > skipped_before, (s.live_computed, s.live_skips, skipped_before)


# -- latency stamps --------------------------------------------------------------------------


@pytest.mark.slow
def test_latency_stamps_are_in_stage_order_and_count_the_sampled_frames(tmp_path: Path) -> None:
    out = tmp_path / "lat.vdif"
    # Buffered writes: every range reaches the device through sync_file_range or the closing
    # fdatasync, so every sampled frame has all five stamps.
    rec = vdifrec.Recorder(port=0, ring="64MiB", path=out, direct=False, latency=True, status_listen="127.0.0.1:0")
    rec.start()
    assert rec.address is not None
    # A second and a half: the frame numbers wrap, so the frame rate (and with it each
    # frame's VDIF time, for `off`) is known for sure from then on.
    sent = vdifrec.send(rec.address, frames=30_000, fps=20_000)
    delivered(rec.address, sent["frames_sent"], lambda: rec.stats().datagrams)
    during = status_of(rec)["latency"]
    s = rec.stop()
    assert s.latency is not None
    stages = s.latency["stages"]
    every = s.latency["sample_every"]
    assert every == 64
    sampled = math.ceil(s.frames_received / every)
    # Frames 0, 64, 128, ... of the received: exactly these are stamped at each stage.
    for stage in ("kernel", "capture", "write", "durable"):
        assert stages[stage]["count"] == sampled, stage
        assert sum(n for _, n in stages[stage]["buckets"]) == sampled
    # `off` once the frame rate is known (never from a running estimate of it).
    assert 0 < stages["off"]["count"] < sampled
    assert sum(n for _, n in stages["off"]["buckets"]) == stages["off"]["count"]
    for stage in ("kernel", "capture", "write", "durable"):
        st = stages[stage]
        assert st["negative"] == 0, stage
        assert 0 <= st["p50"] <= st["p99"] <= st["p999"] and st["max"] >= 0
    # /status served the same histograms while recording, fewer or as many stamps.
    assert 0 < during["stages"]["capture"]["count"] <= sampled
    traces = s.latency["traces"]
    assert len(traces) == 64
    for t in traces:
        assert t["seq"] % every == 0
        assert t["kernel"] <= t["returned"] <= t["published"] <= t["written"] <= t["durable"], t


@pytest.mark.slow
def test_a_scans_chunks_are_stamped_when_their_write_returns(tmp_path: Path) -> None:
    disks = [tmp_path / "d0", tmp_path / "d1"]
    for d in disks:
        d.mkdir()
    rec = vdifrec.Recorder(port=0, ring="64MiB", disks=disks, format="vbs", chunk_size="8MiB", latency=True)
    rec.start()
    assert rec.address is not None
    rec.start_scan("lat")
    sent = vdifrec.send(rec.address, frames=10_000, fps=20_000)
    delivered(rec.address, sent["frames_sent"], lambda: rec.stats().datagrams)
    s = rec.stop()
    assert s.latency is not None and s.scans[0].frames == s.frames_received
    stages = s.latency["stages"]
    sampled = math.ceil(s.frames_received / 64)
    for stage in ("kernel", "capture", "write"):
        assert stages[stage]["count"] == sampled, stage
    assert stages["off"]["count"] <= sampled
    # A vbs chunk is synced before its write returns: no durable stage of its own.
    assert stages["durable"]["count"] == 0
    for t in s.latency["traces"]:
        assert t["kernel"] <= t["returned"] <= t["published"] <= t["written"] and t["durable"] is None


def test_record_latency_prints_the_table_and_no_live_turns_the_monitor_off(tmp_path: Path) -> None:
    port = free_udp_port()
    log = tmp_path / "out.txt"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vdifrec.cli", "record", "--port", str(port), "--no-write", "--frames", "3000",
             "--latency", "--status-listen", "0", "--no-live", "--quiet", "--ring", "32MiB"],
            stdout=out, stderr=subprocess.STDOUT, text=True,
        )
        try:
            output_line(log, r"listening on", proc=proc)
            # Until the recorder has its 3000 frames (the kernel may drop some: send again).
            for second in range(100, 110):
                if proc.poll() is not None:
                    break
                vdifrec.send(("127.0.0.1", port), frames=3000, fps=20_000, ref_epoch=53, start_second=second)
                time.sleep(0.3)
            assert proc.wait(timeout=30) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    assert "Stream Good Packet: 3000" in text
    rows = dict(re.findall(r"^(kernel|capture|write|durable|off)\s+(\d+)\s", text, re.M))
    # 3000 frames, one in 64 stamped: 47; nothing written when monitoring.
    assert set(rows) == {"kernel", "capture", "write", "durable", "off"}, text
    assert (rows["kernel"], rows["capture"], rows["write"], rows["durable"]) == ("47", "47", "0", "0"), text
    assert "LATENCY (one frame in 64" in text
    # --no-live: the summary has no live-monitor line.
    assert "Live monitor" not in text


# -- views at the reference rate -------------------------------------------------------------


def ring_slots(rec: vdifrec.Recorder) -> int:
    """The frames the ring holds, as the recorder laid it out (huge pages change the count)."""
    found = [int(m.group(1)) for n in rec.notes if (m := re.search(r"in (\d+) slots of", n))]
    assert found, rec.notes
    return found[0]


@pytest.mark.slow
def test_a_view_lapped_at_the_reference_rate_is_stale_and_nothing_is_lost() -> None:
    # FILA10G frames at 125,000 per second: a 256 MiB ring holds about a quarter of a second,
    # so a view kept for 0.6 s is lapped. It yields: no frame is dropped for it.
    rec = vdifrec.Recorder(port=0, ring="256MiB", frame_size=FS)
    rec.start()
    assert rec.address is not None
    nslots = ring_slots(rec)
    rate = 125_000 * 8192  # samples per second per channel (EDV 0 headers do not say)
    # The sender runs until the test has what it needs (however fast this host sends).
    sender = vdifrec.Sender(rec.address, duration=60.0, fps=125_000, tone_mhz=TONE_MHZ)
    wait_for(lambda: rec.stats().frames_received > 20_000, 20.0, "20,000 frames")
    with rec.view(3000) as frames:
        assert frames.valid and not frames.held and frames.shape == (3000, FS)
        first = frames.first_frame
        wait_for(lambda: rec.stats().frames_received > first + nslots + 3000, 40.0, "the capture lapping the view")
        assert not frames.valid and frames.stale_frames == 3000
        with pytest.raises(vdifrec.StaleViewError, match=rf"spectrum: the view of frames {first}\.\.{first + 3000} is stale"):
            vdifrec.spectrum(frames, nfft=512, sample_rate=rate)
        # A fresh view of a fraction of a second (a few ms), used at once, has the tone. On a
        # host too slow to read it before the capture comes round, a smaller one.
        spectrum = None
        for n in (800, 400, 200, 100):
            try:
                with rec.view(n) as fresh:
                    spectrum = vdifrec.spectrum(fresh, nfft=512, sample_rate=rate)
                break
            except vdifrec.StaleViewError:
                continue
        assert spectrum is not None, "no fresh view could be read before the capture lapped it"
        sender.stop()
        summary = rec.stop()
        assert summary.ring_overflows == 0
        assert frames.stale_frames == min(3000, max(0, summary.frames_received - nslots - first)) == 3000
    bin_hz = rate / 2 / 512
    for ch in range(4):
        tones = [t for t in vdifrec.find_tones(spectrum) if t.channel == ch]
        assert tones and abs(tones[0].frequency - TONE_MHZ * 1e6) <= bin_hz
