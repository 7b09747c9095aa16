"""Running an observation from its VEX schedule (`vdifrec observe`, `vdifrec.observe`): every
scan holds exactly the frames of its window, byte for byte against what the sender sent, back
to back scans lose nothing between them; a stream not in the schedule's mode, or off the host
clock, is flagged while it is recorded; a session restarted midway leaves what is on the disks
alone and joins the scan under way; each scan shipped arrives verified.

The schedules are written here (tests/vexgen.py), starting a few seconds after the test does;
the sender sends 125,000 frames/s of 544 bytes (the rate of the reference workload in frames,
in small frames so that a test's seconds stay small on disk), in real time, on loopback. Where
the kernel drops datagrams (a small socket buffer on a busy host), what each scan must hold
follows from what was sent and what the recording lacks, and the scan is then NOT OK.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vdifrec
from conftest import free_udp_port, frames_of, left_out, read_until, run_cli, vdif_keys
from vexgen import make_vex

FS, FPS = 544, 125_000
# 4 channels x 2 bits x 64 Ms/s / (8 x 512 payload bytes) = 125,000 frames/s.
FORMAT = dict(frame_size=FS, fps=FPS, channels=4, bits=2)
SIGNAL = dict(frame_size=FS, fps=FPS, nchan=4, bits=2)
#: Seconds from now to the first scan: the recorder is up and the sender started by then.
LEAD = 6


def whole_second_from_now(seconds: int) -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0) + dt.timedelta(seconds=seconds + 1)


def vdif_unix(rows: np.ndarray, fps: int = FPS) -> np.ndarray:
    """POSIX time of each frame (ref epoch from word 1), to the frame."""
    w = np.ascontiguousarray(rows[:, :8]).view("<u4")
    epoch = (w[:, 1] >> 24) & 0x3F
    epoch_unix = np.array([vdifrec.observing.checks.ref_epoch_unix(int(e)) for e in np.unique(epoch)])
    base = epoch_unix[np.searchsorted(np.unique(epoch), epoch)]
    _, seconds, fnr = vdif_keys(rows)
    return base + seconds.astype(np.float64) + fnr / fps


def observe_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "vdifrec.cli", "observe", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=30)
        raise AssertionError(f"observe did not end within {timeout} s: {out}\n{err}") from None
    return proc.returncode, out + err


def check_scan(result: dict[str, Any], sent: np.ndarray, t_sent: np.ndarray, disks: list[Path],
               start: float, stop: float) -> bytes:
    """The scan holds exactly the frames sent whose VDIF time is in [start, stop), less only
    what the kernel dropped (then it is NOT OK); its bytes."""
    want = sent[(t_sent >= start) & (t_sent < stop)]
    assert len(want) == round((stop - start) * FPS), "the sender covered the window"
    out = disks[0].parent / f"{result['disk_name']}.gathered.vdif"
    vdifrec.gather(result["disk_name"], [str(d) for d in disks], out)
    data = out.read_bytes()
    out.unlink()
    got = frames_of(data, FS)
    missing = left_out(want, got)
    assert result["frames_recorded"] == len(got)
    assert result["frames_expected"] == len(want)
    s = result["summary"]
    if not missing:
        assert result["state"] == "OK", (result["why"], result["lost"], result["summary"])
        assert s["first_frame"].startswith(dt.datetime.fromtimestamp(start, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"))
        assert vdif_unix(got[:1])[0] == start and abs(vdif_unix(got[-1:])[0] - (stop - 1 / FPS)) < 1e-9
    else:
        assert result["state"] == "NOT OK" and sum(result["lost"].values()) == len(missing), result
    return data


@pytest.mark.slow
def test_a_session_records_each_window_exactly_and_ships_every_scan(tmp_path: Path, token: Path) -> None:
    t0 = whole_second_from_now(LEAD)
    s = dt.timedelta(seconds=1)
    # s1 and s2 back to back; s3 a second later, its data good a second after its start.
    vex = make_vex(tmp_path / "vt26a.vex", experiment="VT26A", stations=["Ky", "Kt"], **FORMAT,
                   scans=[("s1", t0, 2, 0), ("s2", t0 + 2 * s, 3, 0), ("s3", t0 + 5 * s, 2, 1)])
    disks = [tmp_path / "disk0", tmp_path / "disk1"]
    for d in disks:
        d.mkdir()
    # The sender paces the stream from its own start: on a busy host it falls behind the clock,
    # which the clock check would flag (its own test is apart); windows are cut by VDIF time.
    port = free_udp_port()
    incoming = tmp_path / "incoming"
    with vdifrec.Receiver(incoming, listen="127.0.0.1:0", token_file=token) as receiver:
        proc = observe_cli(str(vex), "--station", "ky", "--port", str(port), "--disk", str(disks[0]), "--disk",
                           str(disks[1]), "--format", "vbs", "--ring", "256MiB", "--summary-json",
                           str(tmp_path / "session.json"), "--ship-to", receiver.address, "--token-file", str(token),
                           "--ship-rate", "2Gbps", "--clock-limit", "30")
        read_until(proc, r"^listening on ")
        sent_file = tmp_path / "sent.vdif"
        until_end = (t0 + 8 * s - dt.datetime.now(dt.timezone.utc)).total_seconds() + 1
        sender = vdifrec.Sender(("127.0.0.1", port), duration=until_end, record_sent=sent_file, **SIGNAL)
        code, out = finish(proc, timeout=until_end + 90)
        sender.wait(30)
    session = json.loads((tmp_path / "session.json").read_text())
    assert [r["disk_name"] for r in session["scans"]] == ["VT26A_Ky_s1", "VT26A_Ky_s2", "VT26A_Ky_s3"]
    sent = frames_of(sent_file, FS)
    t_sent = vdif_unix(sent)
    base = t0.timestamp()
    windows = [(base, base + 2), (base + 2, base + 5), (base + 6, base + 8)]
    for r, (a, b) in zip(session["scans"], windows, strict=True):
        data = check_scan(r, sent, t_sent, disks, a, b)
        assert f"{r['name']:<10} {r['disk_name']:<24} frames {r['frames_recorded']}/{r['frames_expected']}" in out
        # Shipped while the next recorded, and arrived whole: byte for byte what is on the disks.
        assert r["shipped"] == "verified", r
        assert (incoming / r["disk_name"]).read_bytes() == data
        assert r["mismatch"] == []
    # Back to back: s2 starts with the frame after s1's last.
    assert session["scans"][1]["summary"]["first_frame"] > session["scans"][0]["summary"]["last_frame"]
    ok = all(r["state"] == "OK" for r in session["scans"])
    assert session["ok"] == ok and code == (0 if ok else 1), out
    assert session["scans_planned"] == 3 and session["scans_shipped_verified"] == 3
    assert "session VT26A at Ky: 3 scan(s) planned" in out
    # Read back as samples, and against baseband reading the copy that was shipped (the oracle).
    baseband_vdif = pytest.importorskip("baseband.vdif")
    u = pytest.importorskip("astropy.units")
    name = session["scans"][2]["disk_name"]
    with vdifrec.open(name, disks=[str(d) for d in disks]) as fh:
        ours = fh.read(4096)
        assert fh.start_time.timestamp() == windows[2][0]
    with baseband_vdif.open(str(incoming / name), "rs", sample_rate=64 * u.MHz) as fh:
        theirs = fh.read(4096)
    np.testing.assert_array_equal(ours, theirs)


def status(address: tuple[str, int]) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{address[0]}:{address[1]}/status", timeout=5) as r:
        doc: dict[str, Any] = json.loads(r.read())
    return doc


@pytest.mark.slow
def test_a_stream_not_in_the_mode_or_off_the_clock_is_flagged_and_recorded(tmp_path: Path) -> None:
    t0 = whole_second_from_now(LEAD)
    vex = make_vex(tmp_path / "s.vex", experiment="VT26B", stations=["Ky"], **FORMAT, scans=[("m1", t0, 4, 0)])
    disk = tmp_path / "disk0"
    disk.mkdir()
    port = free_udp_port()
    lines: list[str] = []
    result: dict[str, Any] = {}

    def run() -> None:
        result["summary"] = vdifrec.observe(vex, "Ky", disks=str(disk), port=str(port), ring="64MiB",
                                            status_listen="127.0.0.1:0", on_line=lines.append)

    session = threading.Thread(target=run)
    session.start()
    deadline = time.monotonic() + 30
    while not any(line.startswith("status on ") for line in lines) and time.monotonic() < deadline:
        time.sleep(0.05)
    host, _, rest = next(line for line in lines if line.startswith("status on ")).removeprefix("status on http://").partition(":")
    address = (host, int(rest.split("/")[0]))
    # 8224-byte frames of one channel at 2,000 frames/s, their VDIF time 2 s ahead of the clock
    # (a little less if the sender falls behind on a busy host).
    # Sent from a whole second of the clock on, stamped two seconds later.
    time.sleep(math.ceil(time.time()) - time.time())
    now = round(time.time())
    today = dt.datetime.now(dt.timezone.utc)
    epoch = (today.year - 2000) * 2 + (today.month >= 7)
    ahead = now + 2 - vdifrec.observing.checks.ref_epoch_unix(epoch)
    # The window, [t0, t0 + 4 s) in VDIF time, passes 2 s early by the host clock.
    until_end = t0.timestamp() + 3 - now
    sender = vdifrec.Sender(("127.0.0.1", port), duration=until_end, frame_size=8224, fps=2000, nchan=1, bits=2,
                            ref_epoch=epoch, start_second=ahead)
    seen: dict[str, Any] = {}
    while session.is_alive() and time.monotonic() < deadline + until_end:
        doc = status(address).get("observation") or {}
        if doc.get("warnings") and doc.get("scans_mismatched") is not None:
            seen = doc
        if seen and any("clock" in w for w in seen["warnings"]) and any("mode" in w for w in seen["warnings"]):
            break
        time.sleep(0.2)
    sender.wait(30)
    session.join(60)
    assert not session.is_alive()
    summary: vdifrec.SessionSummary = result["summary"]
    [scan] = summary.scans
    # Flagged loudly: in the scan's line, the session's warnings and /status; recorded all the same.
    assert "frame size 8224, the schedule says 544" in scan.mismatch
    assert "channels 1, the schedule says 4" in scan.mismatch
    assert "frames/s per thread 2000, the schedule says 125000" in scan.mismatch
    assert "MISMATCH" in scan.line() and not summary.ok and summary.mismatched == 1
    assert scan.frames is not None and scan.frames > 0
    clock = [w for w in summary.warnings if w.startswith("clock:")]
    assert clock and " s ahead of the host clock" in clock[0], summary.warnings
    assert summary.clock_offset_s is not None and 0.5 < summary.clock_offset_s < 2.5
    assert any(w.startswith("clock:") for w in seen["warnings"]) and any("NOT the schedule's mode" in w for w in seen["warnings"])


@pytest.mark.slow
def test_a_session_restarted_midway_leaves_the_recorded_scans_and_joins_the_one_under_way(tmp_path: Path) -> None:
    t0 = whole_second_from_now(LEAD)
    s = dt.timedelta(seconds=1)
    vex = make_vex(tmp_path / "r.vex", experiment="VT26C", stations=["Ky"], **FORMAT,
                   scans=[("r1", t0, 2, 0), ("r2", t0 + 2 * s, 5, 0), ("r3", t0 + 8 * s, 2, 0)])
    disk = tmp_path / "disk0"
    disk.mkdir()
    port = free_udp_port()
    args = [str(vex), "--station", "Ky", "--port", str(port), "--disk", str(disk), "--format", "mk6", "--ring", "128MiB"]
    first = observe_cli(*args, "--summary-json", str(tmp_path / "first.json"))
    read_until(first, r"^listening on ")
    until_end = (t0 + 10 * s - dt.datetime.now(dt.timezone.utc)).total_seconds() + 1
    sender = vdifrec.Sender(("127.0.0.1", port), duration=until_end, **SIGNAL)
    # Stopped in the middle of r2 (SIGTERM, as a station's shutdown does), then started again.
    time.sleep(max(0.0, t0.timestamp() + 3 - time.time()))
    first.send_signal(signal.SIGTERM)
    code, out = finish(first, timeout=30)
    assert code == 1, out
    before = {r["name"]: r for r in json.loads((tmp_path / "first.json").read_text())["scans"]}
    assert before["r1"]["state"] in ("OK", "NOT OK") and before["r2"]["state"] == "interrupted"
    assert before["r3"]["state"] == "interrupted" and "stopped before it began" in before["r3"]["why"]
    second = observe_cli(*args, "--summary-json", str(tmp_path / "second.json"))
    code, out = finish(second, timeout=until_end + 60)
    sender.wait(30)
    after = {r["name"]: r for r in json.loads((tmp_path / "second.json").read_text())["scans"]}
    if before["r1"]["state"] == "OK":
        assert after["r1"]["state"] == "recorded before" and "left alone" in after["r1"]["why"]
    # r2 was under way: joined from then on, under jive5ab's suffix, saying so.
    assert after["r2"]["disk_name"] == "VT26C_Ky_r2a"
    assert after["r2"]["state"] == "NOT OK" and "joined under way" in after["r2"]["why"], after["r2"]
    assert "recorded as VT26C_Ky_r2a" in after["r2"]["why"]
    r2a = after["r2"]["summary"]
    assert r2a["last_frame"] is not None and after["r2"]["frames_recorded"] > 0
    assert after["r3"]["disk_name"] == "VT26C_Ky_r3" and after["r3"]["frames_expected"] == 2 * FPS
    assert after["r3"]["state"] in ("OK", "NOT OK")
    if after["r3"]["state"] == "OK":
        assert after["r3"]["frames_recorded"] == 2 * FPS
    names = {x["name"]: x for x in vdifrec.scans(str(disk))}
    assert {"VT26C_Ky_r1", "VT26C_Ky_r2", "VT26C_Ky_r2a", "VT26C_Ky_r3"} <= set(names)
    assert all(names[n]["closed"] for n in names)


def test_bad_arguments_name_what_is_wrong(tmp_path: Path) -> None:
    t0 = whole_second_from_now(3600)
    vex = make_vex(tmp_path / "b.vex", experiment="VT26D", stations=["Ky", "Kt"], **FORMAT, scans=[("b1", t0, 2, 0)])
    disk = tmp_path / "disk0"
    disk.mkdir()
    base = ["observe", str(vex), "--port", "0", "--disk", str(disk)]
    r = run_cli(*base, "--station", "Xx")
    assert r.returncode == 2 and "Xx" in r.stderr and "Ky" in r.stderr and "Kt" in r.stderr, r.stderr
    r = run_cli(*base, "--station", "Ky", "--ship-to", "127.0.0.1:1")
    assert r.returncode == 2 and "--ship-to needs --token-file" in r.stderr, r.stderr
    r = run_cli(*base, "--station", "Ky", "--from", "b9")
    assert r.returncode == 2 and "no scan b9" in r.stderr and "b1" in r.stderr, r.stderr
    (tmp_path / "bad.vex").write_text("VEX_rev = 1.5;\n$EXPER;\ndef x; exper_name = X\nenddef;\n")
    r = run_cli("observe", str(tmp_path / "bad.vex"), "--station", "Ky", "--port", "0", "--disk", str(disk))
    assert r.returncode == 2 and "bad.vex:" in r.stderr, r.stderr


def test_a_schedule_past_and_not_vdif_is_missed_with_the_reason(tmp_path: Path) -> None:
    """Scans whose window has passed, and a mode that is not VDIF, are missed at once, saying
    why; nothing is recorded and the session ends without waiting."""
    past = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(seconds=60)
    vex = make_vex(tmp_path / "p.vex", experiment="VT26E", stations=["Ky"], **FORMAT,
                   scans=[("p1", past, 2, 0), ("p2", past + dt.timedelta(seconds=10), 2, 0)])
    disk = tmp_path / "disk0"
    disk.mkdir()
    summary = vdifrec.observe(vex, "Ky", disks=str(disk), port="0")
    assert [r.state for r in summary.scans] == ["missed", "missed"]
    assert all(r.why == "its window had passed when the session started" for r in summary.scans)
    assert not summary.ok and summary.recorded == 0 and os.listdir(disk) == []


@pytest.mark.slow
def test_a_scan_no_disk_takes_is_recorded_as_nothing_and_its_summary_is_on_the_disk(tmp_path: Path) -> None:
    """The only disk is full before the scan's first frame fits: the scan is not recorded (its
    line says 0 frames and why), it closes at once, and its summary lies on the disk all the
    same. (Frames that fit are kept: tests/test_scan_record.py.)"""
    t0 = whole_second_from_now(LEAD)
    vex = make_vex(tmp_path / "f.vex", experiment="VT26K", stations=["Ky"], **FORMAT, scans=[("f1", t0, 2, 0)])
    disk = tmp_path / "disk0"
    disk.mkdir()
    port = free_udp_port()
    proc = observe_cli(str(vex), "--station", "Ky", "--port", str(port), "--disk", str(disk), "--format", "vbs",
                       "--chunk-size", "1MiB", "--disk-fault", f"{disk}=full@100", "--ring", "64MiB",
                       "--summary-json", str(tmp_path / "session.json"), "--clock-limit", "30")
    read_until(proc, r"^listening on ")
    until_end = (t0 + dt.timedelta(seconds=2) - dt.datetime.now(dt.timezone.utc)).total_seconds() + 1
    sender = vdifrec.Sender(("127.0.0.1", port), duration=until_end, **SIGNAL)
    code, out = finish(proc, timeout=until_end + 90)
    sender.wait(30)
    session = json.loads((tmp_path / "session.json").read_text())
    (r,) = session["scans"]
    assert code == 1 and r["state"] == "NOT OK" and r["frames_recorded"] == 0, r
    assert "none of its" in r["why"] and "reached a disk" in r["why"], r["why"]
    dropped = r["summary"]["bytes_dropped_disk"] // FS
    line = next(x for x in out.splitlines() if x.startswith("f1 "))
    assert dropped > 0 and f"frames 0/{r['frames_expected']}  lost: " in line and f"disk {dropped}" in line, out
    on_disk = json.loads((disk / "VT26K_Ky_f1" / "VT26K_Ky_f1.summary.json").read_text())
    assert on_disk["bytes_written"] == 0 and "no disk is left in the set" in on_disk["error"], on_disk


def test_an_empty_window_is_missed_with_a_warning_and_a_far_time_exits_2(tmp_path: Path) -> None:
    """A scan whose data_stop is its data_good is missed saying so, and warned of; a time no date
    holds is a schedule error naming its line, as every other bad schedule is."""
    t0 = whole_second_from_now(3600)
    vex = make_vex(tmp_path / "e.vex", experiment="VT26J", stations=["Ky"], **FORMAT, scans=[("e1", t0, 0, 3)])
    disk = tmp_path / "disk0"
    disk.mkdir()
    summary = vdifrec.observe(vex, "Ky", disks=str(disk), port="0")
    why = "its window is empty (data_stop = data_good): there is nothing to record"
    assert [(r.state, r.why) for r in summary.scans] == [("missed", why)]
    assert summary.warnings == [f"e1: {why}"] and os.listdir(disk) == []
    far = tmp_path / "far.vex"
    far.write_text(vex.read_text().replace("station=Ky: 3 sec: 3 sec:", "station=Ky: 3 sec: 1e300 sec:"))
    assert far.read_text() != vex.read_text()
    r = run_cli("observe", str(far), "--station", "Ky", "--port", "0", "--disk", str(disk))
    assert r.returncode == 2 and "far.vex:" in r.stderr and "1e+300 sec" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_a_window_within_a_second_one_inside_another_and_a_stream_that_stops(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads at 50,000 frames/s each. f1's window starts half a second in: it is queued
    once the stream has shown its frame rate. n1's window lies inside f1's: missed (f1 takes its
    frames). The stream stops before d1: d1 is NOT OK, with nothing in it."""
    monkeypatch.setattr(vdifrec.observing.session, "STALL_S", 1.0)
    t0 = whole_second_from_now(LEAD)
    s = dt.timedelta(seconds=1)
    fmt = dict(FORMAT, fps=50_000, threads=2)
    vex = make_vex(tmp_path / "w.vex", experiment="VT26F", stations=["Ky"], **fmt,
                   scans=[("f1", t0, 1.5, 0.5), ("n1", t0 + s, 0.5, 0), ("d1", t0 + 4 * s, 1, 0)])
    disk = tmp_path / "disk0"
    disk.mkdir()
    port = free_udp_port()
    # The sender starts at the next whole second: its last frame is before t0 + 3.3 s.
    until_stop = (t0 + 2.3 * s - dt.datetime.now(dt.timezone.utc)).total_seconds()
    sent_file = tmp_path / "sent.vdif"
    sender = vdifrec.Sender(("127.0.0.1", port), duration=until_stop, record_sent=sent_file, threads=2,
                            **dict(SIGNAL, fps=50_000))
    lines: list[str] = []
    summary = vdifrec.observe(vex, "Ky", disks=str(disk), format="file", port=str(port), ring="128MiB",
                              on_line=lines.append)
    sender.wait(30)
    f1, n1, d1 = summary.scans
    assert n1.state == "missed" and n1.why == "its window is inside f1's, which the recorder takes first"
    assert d1.state == "NOT OK" and d1.frames == 0 and "no frame of its window arrived" in d1.why, d1
    assert d1.mismatch == [] and not summary.ok
    # f1 holds exactly the frames of [t0 + 0.5 s, t0 + 2 s) of both threads.
    assert f1.frames_expected == 150_000
    sent = frames_of(sent_file, FS)
    t_sent = vdif_unix(sent, fps=50_000)
    want = sent[(t_sent >= t0.timestamp() + 0.5) & (t_sent < t0.timestamp() + 2)]
    assert len(want) == 150_000
    got = frames_of(disk / "VT26F_Ky_f1.vdif", FS)
    missing = left_out(want, got)
    assert f1.frames == len(got) and (f1.state == "OK") == (not missing), (f1.state, f1.why, len(missing))
    assert f1.mismatch == [], f1.mismatch
