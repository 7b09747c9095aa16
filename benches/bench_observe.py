"""Observing from a VEX schedule (issue 26: `vdifrec plan`, `vdifrec observe`), each part with
its baseline measured in the same run.

(a) The plan of a long schedule: 184 scans, 19 stations (`tests/vexgen.py`'s `make_large_vex`),
    in VEX 1.5 and in VEX 2.0. Timed: `Schedule.read` + `make_plan` of one station (Ky), and
    `Schedule.read` + `make_plan` of each of the 19 stations; medians of BENCH_OBSERVE_PLAN_REPEATS
    (5). Baseline: reading the same file's bytes and splitting the text into statements
    (`text.split(";")`), the floor of any VEX parser.

(b) Back-to-back scans at 8.224 Gbit/s (8224-byte frames, 125,000 frames/s, one thread) for
    BENCH_OBSERVE_SECONDS (20) in scans of BENCH_OBSERVE_SCAN_SECONDS (2) each: a schedule of
    that many scans back to back, the first starting 4-5 s from now (time to lock the ring and
    start the sender a second early), run by the session of `vdifrec.observe` (built directly,
    `vdifrec.observing.session.Session`, to reach its recorder) with `format="vbs"`,
    `ring=BENCH_OBSERVE_RING` (`1GiB`), `fps=125000`, one disk, while `vdifrec.Sender` sends
    from a second before the first window (it starts at a whole second, as a real source does)
    to 0.2 s after the last. Reported per run:
    - boundary loss: frames received whose VDIF time lies in the windows (the recording's
      per-second rows: frames that reached the ring) but that are in no scan. Target: 0.
      Frames dropped for a full ring (a disk too slow) are counted apart, per second of window.
    - each scan's `frames_lost_at_edges`, and its first and last frame against its window:
      scan k's last frame and scan k+1's first frame must be consecutive frames.
    - frames in the scans against the sender's frames in the windows (125,000 per second of
      window); the kernel's drops (the socket's count over the whole run) apart: on loopback on
      a 2-core host, at this rate, the kernel may drop datagrams, which is not boundary loss.
    - capture CPU per frame (`capture_cpu_s / frames_received` of the session's recorder).
      The session stops its recorder as soon as its last scan is closed, so the sender's last
      fraction of a second is not received: frames sent exceed frames received with no drop.
    Baseline: ONE scan over the same span, same schedule timing and sender, by a plain
    `vdifrec.Recorder(disks=[...], format="vbs", ring="1GiB")` with `start_scan(name, start,
    stop)`: its capture CPU per frame. The ratio observe / one scan is the cost of the session
    (its polling, per-scan queueing and status document) on the capture; medians over
    BENCH_OBSERVE_RUNS (3) runs of each, interleaved.

The disk: 20 s at 8.224 Gbit/s is 20.6 GB, more than most hosts' memory, and the measurement
is of the capture and of the scans' edges, not of a disk. The scans go to a directory on
/dev/shm when it (and the memory behind it) has room for two scans and a margin, else to the
project's disk (`bench-results/`, where a disk slower than 1 GB/s shows as ring overflows,
counted apart); BENCH_OBSERVE_DIR chooses another. Closed vbs chunks are deleted as they close
(a chunk is closed once one numbered two higher exists: one writer), and the rest of each scan
as soon as its summary is in, in both the session and the baseline, so that only a few chunks
are ever held. BENCH_OBSERVE_SECONDS must be a whole number of scans and of seconds.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import vdifrec
from bench_record import disk_dir
from common import env_float, env_int, median_seconds, report
from vdifrec.observing import session as session_module
from vdifrec.observing.session import Session
from vdifrec.schedule import make_plan
from vdifrec.units import parse_size

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from vexgen import STATIONS_19, make_large_vex, make_vex  # noqa: E402

FS = 8224
FPS = 125_000
#: The sender starts this long before the first window, so that its edge is inside the stream.
PREROLL_S = 1
#: The sender goes on this long past the last window, so that a frame past its stop closes it.
TAIL_S = 0.2


def recorder_options(ring: str) -> dict[str, Any]:
    """The recorder's options, the same for the session and the baseline. The frame rate is
    given (as a station knows it), so that a window that starts or stops within a second is
    gated from the first frame, not once the stream has shown its rate."""
    return {"port": 0, "ring": ring, "format": "vbs", "fps": FPS}


def lead_s(ring: str) -> float:
    """Seconds from now to the first window (then up to the next whole second): the recorder is
    up (its ring allocated and locked: 2.5 s per GiB on the 2-core machine) and the sender
    made before the pre-roll by then."""
    return PREROLL_S + 0.5 + max(1.0, 2.5 * parse_size(ring, "ring") / 2**30)


# -- (a) the plan of a long schedule -----------------------------------------------------------


def plan_part(repeats: int) -> dict[str, float]:
    results: dict[str, float] = {}
    folder = Path(tempfile.mkdtemp(prefix="bench-observe-plan-"))
    try:
        for version in ("1.5", "2.0"):
            path = make_large_vex(folder / f"large_{version}.vex", version=version)
            disks = [str(folder)]

            def one() -> object:
                return make_plan(vdifrec.Schedule.read(path), "Ky", disks=disks)

            def every() -> object:
                schedule = vdifrec.Schedule.read(path)
                return [make_plan(schedule, code, disks=disks) for code in STATIONS_19]

            def floor() -> object:
                return path.read_bytes().decode("utf-8").split(";")

            schedule = vdifrec.Schedule.read(path)
            scans = len(schedule.scans("Ky"))
            statements = len(floor())  # type: ignore[arg-type]
            warmup = 1 if repeats > 1 else 0  # one timed run only: a size check, not a figure
            t_one = median_seconds(one, repeats, warmup)
            t_all = median_seconds(every, repeats, warmup)
            t_floor = median_seconds(floor, repeats, warmup)
            report(
                f"(a) plan of a {scans}-scan, {len(schedule.stations)}-station schedule, VEX {version} "
                f"({path.stat().st_size / 1e3:.0f} kB, {statements} statements), median of {repeats}",
                [
                    ("Schedule.read + make_plan, one station", t_one * 1e3, "ms"),
                    ("Schedule.read + make_plan of all 19 stations", t_all * 1e3, "ms"),
                    ("baseline: read the bytes, split at ';'", t_floor * 1e3, "ms"),
                ],
                [
                    ("one station / split", t_one / t_floor, "none; the split is the floor"),
                    ("all 19 stations / split", t_all / t_floor, "none; the split is the floor"),
                ],
            )
            key = version.replace(".", "")
            results[f"a_plan_one_ms_v{key}"] = t_one * 1e3
            results[f"a_plan_all_ms_v{key}"] = t_all * 1e3
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return results


# -- (b) back-to-back scans ------------------------------------------------------------------


def meminfo_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def choose_base(scan_s: float) -> tuple[Path, str]:
    """Where the scans go, and why there."""
    given = os.environ.get("BENCH_OBSERVE_DIR")
    if given:
        base = Path(given)
        base.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="bench-observe-", dir=base)), f"{given} (BENCH_OBSERVE_DIR)"
    need = 2 * scan_s * FPS * FS + (4 << 30)  # two scans, the ring and a margin
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        room = min(shutil.disk_usage(shm).free, meminfo_available() - (1 << 30))
        if room >= need:
            return Path(tempfile.mkdtemp(prefix="bench-observe-", dir=shm)), "/dev/shm (tmpfs)"
    return disk_dir(), f"the project's disk (/dev/shm has less than {need / 1e9:.1f} GB free)"


class Reaper:
    """Deletes the closed vbs chunks of every scan under `disks` as they close, and a whole scan
    once it is done. A chunk is taken as closed once one numbered `behind` higher exists on any
    disk (2 with one writer; deleting one a writer still fills costs nothing measured here: the
    file goes once the writer closes it). With `names`, only the scans it names (disks holding
    many other scans are not listed)."""

    def __init__(self, disks: Path | list[Path], names: Callable[[], list[str]] | None = None, behind: int = 2) -> None:
        self.disks = [disks] if isinstance(disks, Path) else list(disks)
        self.names = names
        self.behind = behind
        self.done: set[str] = set()
        self.deleted = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            if self.names is None:
                names = sorted({p.name for d in self.disks for p in d.iterdir() if p.is_dir()})
            else:
                names = self.names()
            for name in names:
                found: dict[int, Path] = {}
                for d in self.disks:
                    if not (d / name).is_dir():
                        continue
                    for p in (d / name).glob(f"{name}.0*"):
                        try:
                            found[int(p.name.rsplit(".", 1)[1])] = p
                        except ValueError:
                            continue
                top = max(found, default=-1)
                for n, p in found.items():
                    if n + self.behind <= top:
                        p.unlink(missing_ok=True)
                        self.deleted += 1
            time.sleep(0.2)

    def scan_done(self, name: str) -> None:
        with self.lock:
            if name not in self.done:
                self.done.add(name)
                for d in self.disks:
                    shutil.rmtree(d / name, ignore_errors=True)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()


def iso_unix(text: str) -> float:
    """POSIX seconds of an ISO 8601 UTC frame time (``2026-12-02T10:37:11.000008000``)."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    t = dt.datetime.fromisoformat(whole).replace(tzinfo=dt.timezone.utc).timestamp()
    return t + (float("0." + fraction) if fraction else 0.0)


def frame_at(iso: str | None, t0: float) -> int | None:
    """The frame number, counted from `t0` (a whole second), of an ISO UTC frame time."""
    return None if iso is None else round((iso_unix(iso) - t0) * FPS)


def first_window(ring: str) -> float:
    """The first window's start: the first whole second at least `lead_s(ring)` from now."""
    return float(math.ceil(time.time() + lead_s(ring)))


def schedule(folder: Path, t0: float, n: int, scan_s: float) -> Path:
    start = dt.datetime.fromtimestamp(t0, dt.timezone.utc)
    scans = [(f"b{k + 1:03d}", start + dt.timedelta(seconds=k * scan_s), scan_s, 0) for k in range(n)]
    return Path(make_vex(folder / "b2b.vex", experiment="BOBS", stations=["Ky"], scans=scans, frame_size=FS, fps=FPS))


def send(address: tuple[str, int], t0: float, t1: float) -> tuple[vdifrec.Sender, float]:
    """The sender, made so that it starts (at a whole second, as a real source does) PREROLL_S
    before the first window, and sends until TAIL_S after the last: (sender, its first second).
    Where the recorder came up too late for that, it starts at the next whole second."""
    due = t0 - PREROLL_S - 0.5
    if time.time() < due:
        time.sleep(due - time.time())
    first = float(math.floor(time.time()) + 1)
    return vdifrec.Sender(address, frame_size=FS, fps=FPS, duration=t1 + TAIL_S - first), first


def in_windows(summary: vdifrec.Summary, t0: float, t1: float) -> tuple[int, int]:
    """Frames received, and frames seen but dropped for a full ring, whose VDIF second lies in
    [t0, t1) (whole seconds), from the recording's per-second rows."""
    rows = [r for r in summary.seconds if t0 <= r.unix_second < t1]
    return sum(r.received for r in rows), sum(r.ring_overflow for r in rows)


def observe_run(n: int, scan_s: float, ring: str, disks: list[Path] | None = None) -> dict[str, Any]:
    """One observe run onto a disk of its own, or onto `disks` (which may hold other scans)."""
    session: Session
    if disks is None:
        disk, where = choose_base(scan_s)
        targets, reapers = [disk], [Reaper(disk)]
    else:
        where = f"{len(disks)} disks holding other scans"
        targets = disks

        def ours() -> list[str]:
            try:
                return [r.disk_name for r in list(session.summary.scans) if r.disk_name]
            except NameError:  # the session is not made yet
                return []

        reapers = [Reaper(disks, ours, behind=4)]
    folder = Path(tempfile.mkdtemp(prefix="bench-observe-vex-"))
    try:
        t0 = first_window(ring)
        t1 = t0 + n * scan_s
        vex = schedule(folder, t0, n, scan_s)
        listening = threading.Event()

        def on_line(line: str) -> None:
            if line.startswith("listening on "):
                listening.set()
            for r in session.summary.scans:
                if r.summary is not None:
                    for reaper in reapers:
                        reaper.scan_done(r.disk_name)

        session = Session(vdifrec.Schedule.read(vex), "Ky", recorder_options(ring), [str(d) for d in targets],
                          on_line=on_line)
        out: dict[str, Any] = {}

        def run() -> None:
            try:
                out["summary"] = session.run()
            except BaseException as exc:
                out["error"] = exc
                listening.set()

        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        if not listening.wait(30):
            raise RuntimeError("the session did not start listening within 30 s")
        ready = time.time() - t0  # the recorder's start, against the first window's
        if "error" in out:
            raise RuntimeError(f"the session failed: {out['error']}") from out["error"]
        assert session.recorder is not None and session.recorder.address is not None
        sender, first = send(session.recorder.address, t0, t1)
        sent = sender.wait()
        assert sent is not None
        runner.join(60 + n * scan_s)
        if runner.is_alive():
            raise RuntimeError("the session did not end within a minute of its last scan")
        if "error" in out:
            raise RuntimeError(f"the session failed: {out['error']}") from out["error"]
        rec = session.recorder.stop()  # the summary the session's own stop() made
    finally:
        for reaper in reapers:
            reaper.finish()
        if disks is None:
            shutil.rmtree(targets[0], ignore_errors=True)
        else:
            for d in disks:
                for name in (r.disk_name for r in session.summary.scans if r.disk_name):
                    shutil.rmtree(d / name, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
    results = out["summary"].scans
    scans = [r.summary for r in results]
    # Each recorded scan's first and last frame (frame numbers from t0) against its window's,
    # and between scans recorded one after the other, the step from one's last to the next's first.
    edges: list[tuple[int, int | None, int | None, int, int]] = []
    seams: list[tuple[int, int]] = []
    for k, sc in enumerate(scans):
        if sc is None or sc.frames == 0:
            continue
        a, b = frame_at(sc.first_frame, t0), frame_at(sc.last_frame, t0)
        edges.append((k, a, b, round(k * scan_s * FPS), round((k + 1) * scan_s * FPS) - 1))
        prev = scans[k - 1] if k else None
        if prev is not None and prev.frames and a is not None and prev.last_frame is not None:
            seams.append((k, a - round((iso_unix(prev.last_frame) - t0) * FPS)))
    in_scans = sum(sc.frames for sc in scans if sc is not None)
    received, overflows = in_windows(rec, t0, t1)
    # Scans the session did not record (missed: their window passed before they could be
    # queued): the frames of their windows, where those are whole seconds.
    missed = [k for k, sc in enumerate(scans) if sc is None or sc.frames == 0]
    whole = float(scan_s).is_integer()
    in_missed = sum(in_windows(rec, t0 + k * scan_s, t0 + (k + 1) * scan_s)[0] for k in missed) if whole else None
    whys: dict[str, int] = {}
    for r in results:
        if r.state != "OK":
            key = f"{r.scan.name} {r.state}: {r.why}"
            whys[key] = whys.get(key, 0) + 1
    return {
        "where": where,
        "sent": sent,
        "sender_lead": t0 - first,
        "sender_lag": sent["duration_s"] - sent["frames_sent"] / FPS,
        "rec": rec,
        "scans": scans,
        "states": [r.state for r in results],
        "why": whys,
        "edges": edges,
        "seams": seams,
        "missed": missed,
        "in_missed": in_missed,
        "in_scans": in_scans,
        "overflows": overflows,
        "received_in_windows": received,
        "boundary_loss": received - in_scans - (in_missed or 0),
        "at_edges": sum(sc.frames_lost_at_edges for sc in scans if sc is not None),
        "window_frames": round(n * scan_s * FPS),
        "cpu_ns": rec.capture_cpu_s / max(rec.frames_received, 1) * 1e9,
        "ready_after_first_window_s": ready,
    }


def one_scan_run(n: int, scan_s: float, ring: str) -> dict[str, Any]:
    disk, where = choose_base(scan_s)
    reaper = Reaper(disk)
    try:
        t0 = first_window(ring)
        t1 = t0 + n * scan_s
        rec = vdifrec.Recorder(**recorder_options(ring), disks=[str(disk)])
        rec.start()
        assert rec.address is not None
        name = rec.start_scan("BOBS_Ky_long", start=t0, stop=t1)
        sender, first = send(rec.address, t0, t1)
        sent = sender.wait()
        assert sent is not None
        scan = rec.wait_scan(timeout=30, name=name)
        if scan is None:
            scan = rec.stop_scan(name=name)
        reaper.scan_done(name)
        summary = rec.stop()
    finally:
        reaper.finish()
        shutil.rmtree(disk, ignore_errors=True)
    received, overflows = in_windows(summary, t0, t1)
    return {
        "where": where,
        "sent": sent,
        "sender_lead": t0 - first,
        "rec": summary,
        "scan": scan,
        "received_in_windows": received,
        "overflows": overflows,
        "boundary_loss": received - scan.frames,
        "window_frames": round(n * scan_s * FPS),
        "cpu_ns": summary.capture_cpu_s / max(summary.frames_received, 1) * 1e9,
    }


def back_to_back(seconds: float, scan_s: float, runs: int, ring: str) -> dict[str, float]:
    n = round(seconds / scan_s)
    if n < 1 or not math.isclose(n * scan_s, seconds) or not float(seconds).is_integer():
        raise ValueError(f"BENCH_OBSERVE_SECONDS={seconds:g} must be a whole number of seconds and of "
                         f"BENCH_OBSERVE_SCAN_SECONDS={scan_s:g} scans")
    obs, one = [], []
    for _ in range(runs):
        obs.append(observe_run(n, scan_s, ring))
        one.append(one_scan_run(n, scan_s, ring))
    for i, o in enumerate(obs):
        bad_edges = [e for e in o["edges"] if e[1] != e[3] or e[2] != e[4]]
        bad_seams = [x for x in o["seams"] if x[1] != 1]
        r, sent = o["rec"], o["sent"]
        missed = "" if not o["missed"] else (
            "(windows not whole seconds: their frames are in the boundary loss)" if o["in_missed"] is None
            else f"({o['in_missed']} frames received in their windows)")
        report(
            f"(b) run {i + 1}/{runs}: {n} back-to-back scans of {scan_s:g} s at 8.224 Gbit/s into vbs on {o['where']}, "
            f"ring {ring}",
            [
                ("frames sent (whole run)", sent["frames_sent"], "frames"),
                ("frames received (whole run)", r.frames_received, "frames"),
                ("kernel drops (whole run)", r.kernel_drops, "datagrams"),
                ("ring overflows (whole run)", r.ring_overflows, "frames"),
                ("sender's first frame before the first window", o["sender_lead"], "s"),
                ("sender's lag behind real time at its end", o["sender_lag"], "s"),
                ("sender's frames in the windows", o["window_frames"], "frames"),
                ("received in the windows", o["received_in_windows"], "frames"),
                ("ring overflows in the windows (ring full)", o["overflows"], "frames"),
                ("in the scans (sum)", o["in_scans"], "frames"),
                ("scans not recorded at all", len(o["missed"]), missed),
                ("boundary loss: in a recorded scan's window, in no scan", o["boundary_loss"], "frames"),
                ("frames_lost_at_edges (sum over scans)", o["at_edges"], "frames"),
                ("scans whose first/last frame is not the window's", len(bad_edges),
                 f"of {len(o['edges'])} recorded " + (str(bad_edges[:2]) if bad_edges else "")),
                ("seams where next first - last != 1 frame", len(bad_seams),
                 f"of {len(o['seams'])} " + (str(bad_seams[:3]) if bad_seams else "")),
                ("scans OK", sum(x == "OK" for x in o["states"]), f"of {n}"),
                ("capture CPU per frame", o["cpu_ns"], "ns/frame"),
                ("sender rate achieved", sent["gbps"], "Gbit/s"),
            ],
            [("in the scans / sender's frames in the windows", o["in_scans"] / o["window_frames"], "1.00 less kernel drops")],
        )
        for why, count in sorted(o["why"].items(), key=lambda x: -x[1])[:10]:
            print(f"  {count} x {why}")
        if o["sender_lag"] > 1:
            stall = getattr(session_module, "STALL_S", "a few")
            print(f"  NOTE: the sender ran {o['sender_lag']:.1f} s behind real time (the host is short of CPU). The session "
                  f"judges windows by the host clock: it closes a scan no frame past whose stop arrived {stall} s after "
                  "it (frames of its window arriving later are in no scan), and skips a scan whose window passed before it "
                  "could be queued; losses in this run are that, not the gate.")
    for i, b in enumerate(one):
        s, r = b["scan"], b["rec"]
        report(
            f"(b) baseline run {i + 1}/{runs}: one scan of {n * scan_s:g} s over the same span, plain Recorder, on {b['where']}",
            [
                ("frames sent (whole run)", b["sent"]["frames_sent"], "frames"),
                ("frames received (whole run)", r.frames_received, "frames"),
                ("kernel drops (whole run)", r.kernel_drops, "datagrams"),
                ("ring overflows (whole run)", r.ring_overflows, "frames"),
                ("sender's first frame before the window", b["sender_lead"], "s"),
                ("received in the window", b["received_in_windows"], "frames"),
                ("ring overflows in the window (ring full)", b["overflows"], "frames"),
                ("in the scan", s.frames, "frames"),
                ("received in the window, not in the scan", b["boundary_loss"], "frames"),
                ("frames_lost_at_edges", s.frames_lost_at_edges, "frames"),
                ("capture CPU per frame", b["cpu_ns"], "ns/frame"),
                ("sender's lag behind real time at its end", b["sent"]["duration_s"] - b["sent"]["frames_sent"] / FPS, "s"),
                ("sender rate achieved", b["sent"]["gbps"], "Gbit/s"),
            ],
            [("in the scan / sender's frames in the window", s.frames / b["window_frames"], "1.00 less kernel drops")],
        )
    cpu_obs = statistics.median(o["cpu_ns"] for o in obs)
    cpu_one = statistics.median(b["cpu_ns"] for b in one)
    boundary = max(o["boundary_loss"] for o in obs)
    seams = sum(sum(d != 1 for _, d in o["seams"]) for o in obs)
    report(
        f"(b) {n} back-to-back scans of {scan_s:g} s against one scan of {n * scan_s:g} s, medians of {runs}",
        [
            ("observe: capture CPU per frame", cpu_obs, "ns/frame"),
            ("one scan: capture CPU per frame", cpu_one, "ns/frame"),
            ("observe: boundary loss (worst run)", boundary, "frames"),
            ("observe: scans not recorded (all runs)", sum(len(o["missed"]) for o in obs), f"of {n * runs}"),
            ("observe: seams not consecutive (all runs)", seams, ""),
            ("observe: kernel drops (median)", statistics.median(o["rec"].kernel_drops for o in obs), "datagrams"),
            ("one scan: kernel drops (median)", statistics.median(b["rec"].kernel_drops for b in one), "datagrams"),
        ],
        [("capture CPU per frame, observe / one scan", cpu_obs / cpu_one, "close to 1")],
    )
    return {"b_boundary_loss": float(boundary), "b_seams_bad": float(seams), "b_cpu_ratio": cpu_obs / cpu_one}


def main() -> dict[str, float]:
    results = plan_part(env_int("BENCH_OBSERVE_PLAN_REPEATS", 5))
    results |= back_to_back(env_float("BENCH_OBSERVE_SECONDS", 20), env_float("BENCH_OBSERVE_SCAN_SECONDS", 2),
                            env_int("BENCH_OBSERVE_RUNS", 3), os.environ.get("BENCH_OBSERVE_RING", "1GiB"))
    return results


if __name__ == "__main__":
    main()
