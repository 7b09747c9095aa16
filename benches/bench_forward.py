"""Forwarding while recording (e-VLBI), against a plain sendmmsg loop measured in the same run.

The reference stream (125000 frames/s of 8224 bytes = 8.224 Gbit/s; BENCH_FORWARD_FPS sets
another rate) from the project's sender on loopback into a Recorder that writes it to disk (a
temporary folder under BENCH_DIR, default bench-results/ on the project's disk, as
bench_record; files rotate every 4 GiB and are deleted as they close) and forwards it, with
``forward=["udp://127.0.0.1:PORT"]``, to a plain recvmmsg-and-discard loop on the same host
(the far end), for BENCH_FORWARD_SECONDS (20). Per run:

- recorded frames lost (frames_lost, which counts the kernel's drops, + ring_overflows; and
  frames sent but not recorded; target 0);
- frames forwarded (ForwardStats.frames) against datagrams received at the far end, and the
  frames the forwarder skipped (target: all forwarded, all received, none skipped);
- the forwarder's CPU per frame (its thread's CPU seconds / frames forwarded).

Baselines, each run: (b) the same number of frames at the same rate sent by a plain sendmmsg
loop (64 a call, from 1024 frames in memory) to another discard loop, alone on the host; and,
unless BENCH_FORWARD_LOADED=0, (c) the same loop while the same recording runs without
forwarding, so that it shares the machine as the forwarder does (and the recording's own
loss without forwarding is seen). Runs are interleaved; BENCH_FORWARD_REPEATS (3) of each,
medians. Target: forwarder CPU per frame <= 1.2 x the plain loop's.

On loopback a sender's CPU time includes the kernel's delivery of each datagram into the
receiving socket (the copy into its queue runs in the sending thread), for the forwarder and
the loop alike. Where the machine has 6 CPUs or more, the sender, capture, writer, forwarder
(or the loop) and far end each get one; on fewer nothing is pinned (said in the output).
A run that loses frames is reported, not failed: a 2-core machine running the sender, the
capture, the writer, the forwarder and the far end at once may not keep up.

``python benches/bench_forward.py --tiny`` (or ``run.py --tiny forward``) runs it for a
second at 10000 frames/s: seconds, figures meaningless.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import vdifrec

from common import env_float, env_int, report

FS = 8224
REF_FPS = 125_000
TARGET = 1.2


def base_dir() -> Path:
    """Where the recordings go: BENCH_DIR, else bench-results/ on the project's disk (not /tmp, if tmpfs)."""
    base = Path(os.environ.get("BENCH_DIR", Path(__file__).resolve().parent.parent / "bench-results"))
    base.mkdir(parents=True, exist_ok=True)
    return base


def disk_dir() -> Path:
    """A new temporary folder there."""
    return Path(tempfile.mkdtemp(prefix="bench-forward-", dir=base_dir()))


def cpu_plan() -> dict[str, int] | None:
    """One CPU each for the sender, capture, writer, forwarder (or loop) and far end, where
    this process may use 6 or more; else None (nothing pinned)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 6:
        return None
    return dict(zip(["sender", "capture", "writer", "forwarder", "far_end"], cpus[:5]))


def cpu_for(plan: dict[str, int] | None, role: str) -> int | None:
    return None if plan is None else plan[role]


@contextlib.contextmanager
def this_thread_on(cpu: int | None) -> Iterator[None]:
    """This thread (and the threads it starts meanwhile) on `cpu`; as before afterwards."""
    if cpu is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def pin_named(name: str, cpu: int | None) -> int:
    """Pins this process's threads called `name` to `cpu`; how many."""
    if cpu is None:
        return 0
    deadline = time.monotonic() + 2  # a thread just started names itself a moment later
    while True:
        n = 0
        for task in Path("/proc/self/task").iterdir():
            with contextlib.suppress(OSError):
                if (task / "comm").read_text().strip() == name:
                    os.sched_setaffinity(int(task.name), {cpu})
                    n += 1
        if n or time.monotonic() > deadline:
            return n
        time.sleep(0.01)


def far_end(plan: dict[str, int] | None) -> Any:
    """A plain recvmmsg-and-discard loop on 127.0.0.1 (its thread on the far end's CPU)."""
    with this_thread_on(cpu_for(plan, "far_end")):
        return vdifrec._core.DiscardReceiver(bind="127.0.0.1", port=0)


def stop_far_end(rx: Any, expect: int) -> dict[str, Any]:
    deadline = time.monotonic() + 5
    while rx.received() < expect and time.monotonic() < deadline:
        time.sleep(0.01)
    got: dict[str, Any] = json.loads(rx.stop())
    return got


def plain_loop(port: int, frames: int, fps: int, cpu: int | None, out: dict[str, Any]) -> None:
    """The baseline: `frames` frames at `fps` by a plain sendmmsg loop (run in a thread)."""
    with this_thread_on(cpu):
        out.update(json.loads(vdifrec._core.sendmmsg_loop("127.0.0.1", port, frames, frame_size=FS, per_second=float(fps))))


def loop_alone(frames: int, fps: int, plan: dict[str, int] | None) -> dict[str, Any]:
    """(b) the plain loop alone on the host, into its own far end."""
    rx = far_end(plan)
    sent: dict[str, Any] = {}
    t = threading.Thread(target=plain_loop, args=(rx.port, frames, fps, cpu_for(plan, "forwarder"), sent))
    t.start()
    t.join()
    return {"loop": sent, "far": stop_far_end(rx, sent.get("frames", 0))}


def recording(frames: int, fps: int, ring: str, plan: dict[str, int] | None, *, forward: bool) -> dict[str, Any]:
    """The sender into a Recorder writing to disk, forwarding to a far end (`forward`) or, for
    (c), with the plain loop sending the same number of frames to it meanwhile."""
    folder = disk_dir()
    stop = threading.Event()

    def delete_closed(rec: vdifrec.Recorder) -> None:
        # Closed files are complete: delete them, keep the disk from filling (as bench_record).
        while not stop.is_set():
            cur = rec.stats().current_file if rec.running else None
            for p in folder.glob("fwd_*.vdif"):
                if cur is not None and str(p) != cur:
                    p.unlink(missing_ok=True)
            time.sleep(0.5)

    rx = far_end(plan)
    options: dict[str, Any] = {}
    if plan:
        options = {"capture_cpu": plan["capture"], "writer_cpu": plan["writer"]}
    if forward:
        options["forward"] = [f"udp://127.0.0.1:{rx.port}"]
    rec = vdifrec.Recorder(port=0, directory=folder, prefix="fwd", ring=ring, frame_size=FS, fps=fps, file_size="4GiB", **options)
    rec.start()
    assert rec.address is not None
    pinned = pin_named("vdifrec-forward", cpu_for(plan, "forwarder")) if forward else 0
    cleaner = threading.Thread(target=delete_closed, args=(rec,), daemon=True)
    cleaner.start()
    loop: dict[str, Any] = {}
    looper = None
    if not forward:
        looper = threading.Thread(target=plain_loop, args=(rx.port, frames, fps, cpu_for(plan, "forwarder"), loop))
        looper.start()
    sender = vdifrec.Sender(rec.address, frames=frames, fps=fps, **({"cpu": plan["sender"]} if plan else {}))
    t0 = time.monotonic()
    sent = sender.wait()
    assert sent is not None
    wall = time.monotonic() - t0
    deadline = time.monotonic() + 5
    while rec.stats().frames_received < sent["frames_sent"] and time.monotonic() < deadline:
        time.sleep(0.02)
    if forward:
        # Let the forwarder catch up with the capture before stopping (stop() drains 3 s at most).
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            s = rec.stats()
            f = s.forward[0]
            if f.frames + f.skipped >= s.frames_received:
                break
            time.sleep(0.02)
    if looper is not None:
        looper.join()
    summary = rec.stop()
    stop.set()
    cleaner.join()
    shutil.rmtree(folder, ignore_errors=True)
    fwd = summary.forward[0] if summary.forward else None
    far = stop_far_end(rx, fwd.frames if fwd else loop.get("frames", 0))
    return {"sent": sent, "wall": wall, "summary": summary, "forward": fwd, "far": far, "loop": loop, "pinned": pinned}


def lost(s: vdifrec.Summary) -> int:
    """Recorded frames lost, all causes: gaps in the sequence (the kernel's drops among them)
    and ring overflows."""
    return s.frames_lost + s.ring_overflows


def us_per_frame(cpu_s: float, frames: int) -> float:
    return cpu_s / max(frames, 1) * 1e6


def tiny_defaults() -> None:
    """`--tiny` on this script's own command line: run.py's TINY sizes for this benchmark."""
    from run import TINY

    for key, value in TINY.items():
        if key.startswith("BENCH_FORWARD_"):
            os.environ.setdefault(key, value)


def main() -> dict[str, float]:
    seconds = env_float("BENCH_FORWARD_SECONDS", 20.0)
    fps = env_int("BENCH_FORWARD_FPS", REF_FPS)
    repeats = env_int("BENCH_FORWARD_REPEATS", 3)
    ring = os.environ.get("BENCH_FORWARD_RING", "2GiB")
    loaded = os.environ.get("BENCH_FORWARD_LOADED", "1") != "0"
    frames = int(round(seconds * fps))
    gbps = fps * FS * 8 / 1e9
    plan = cpu_plan()
    ncpu = len(os.sched_getaffinity(0))
    print(f"\n(forward) {frames} frames ({seconds:g} s at {fps} frames/s = {gbps:.3f} Gbit/s) recorded to disk under "
          f"{base_dir()} and forwarded over udp to a discard loop on 127.0.0.1, {repeats} run(s), ring {ring}")
    print("  " + (f"pinned: {plan}" if plan else f"{ncpu} CPUs: nothing pinned (6 or more needed); sender, capture, writer, "
                  "forwarder and far end share them"))
    print("  on loopback a sender's CPU includes the kernel's delivery into the receiving socket, for the forwarder "
          "and the plain loop alike")

    fwd_runs: list[dict[str, Any]] = []
    alone_runs: list[dict[str, Any]] = []
    loaded_runs: list[dict[str, Any]] = []
    for i in range(repeats):
        # Interleaved, the order turned each run, so that a drift of the host hits all alike.
        steps = ["forward", "alone", "loaded"] if loaded else ["forward", "alone"]
        if i % 2:
            steps.reverse()
        for step in steps:
            if step == "forward":
                r = recording(frames, fps, ring, plan, forward=True)
                fwd_runs.append(r)
                s, f, far = r["summary"], r["forward"], r["far"]
                print(f"  run {i + 1} forward: sent {r['sent']['frames_sent']} ({r['sent']['gbps']:.2f} Gbit/s), recorded "
                      f"{s.frames_received}, lost {lost(s)} (kernel drops among them {s.kernel_drops}, ring overflows {s.ring_overflows}); "
                      f"forwarded {f.frames}, skipped {f.skipped}, torn {f.torn}, far end got {far['datagrams']} "
                      f"(kernel drops {far['kernel_drops']}); forwarder CPU {f.cpu_s:.2f} s = "
                      f"{us_per_frame(f.cpu_s, f.frames):.2f} us/frame; state {f.state}{', ' + f.error if f.error else ''}"
                      f"{'' if not plan else ', forwarder thread pinned: ' + str(r['pinned'])}")
            elif step == "alone":
                r = loop_alone(frames, fps, plan)
                alone_runs.append(r)
                print(f"  run {i + 1} plain loop alone: sent {r['loop']['frames']} in {r['loop']['wall_s']:.1f} s, far end got "
                      f"{r['far']['datagrams']} (kernel drops {r['far']['kernel_drops']}); loop CPU {r['loop']['cpu_s']:.2f} s = "
                      f"{us_per_frame(r['loop']['cpu_s'], r['loop']['frames']):.2f} us/frame")
            else:
                r = recording(frames, fps, ring, plan, forward=False)
                loaded_runs.append(r)
                s = r["summary"]
                print(f"  run {i + 1} plain loop beside the same recording (no forwarding): recorded {s.frames_received}, lost "
                      f"{lost(s)} (kernel drops among them {s.kernel_drops}, ring overflows {s.ring_overflows}); loop sent "
                      f"{r['loop']['frames']}, far end got {r['far']['datagrams']}; loop CPU {r['loop']['cpu_s']:.2f} s = "
                      f"{us_per_frame(r['loop']['cpu_s'], r['loop']['frames']):.2f} us/frame")

    med = statistics.median
    fwd_us = med(us_per_frame(r["forward"].cpu_s, r["forward"].frames) for r in fwd_runs)
    alone_us = med(us_per_frame(r["loop"]["cpu_s"], r["loop"]["frames"]) for r in alone_runs)
    worst_lost = max(lost(r["summary"]) for r in fwd_runs)
    rows = [
        ("frames sent per run (sender)", med(r["sent"]["frames_sent"] for r in fwd_runs), "frames"),
        ("sender rate reached", med(r["sent"]["gbps"] for r in fwd_runs), "Gbit/s"),
        ("recorded frames lost, worst run (target 0)", worst_lost, "frames"),
        ("  of which ring overflows, worst run", max(r["summary"].ring_overflows for r in fwd_runs), "frames"),
        ("  of which kernel drops, worst run", max(r["summary"].kernel_drops for r in fwd_runs), "datagrams"),
        ("frames sent and not recorded, worst run", max(r["sent"]["frames_sent"] - r["summary"].frames_received for r in fwd_runs), "frames"),
        ("recordings ok (written == buffered), runs", sum(r["summary"].ok for r in fwd_runs), f"of {repeats}"),
        ("forwarded (ForwardStats.frames), median", med(r["forward"].frames for r in fwd_runs), "frames"),
        ("received at the far end, median", med(r["far"]["datagrams"] for r in fwd_runs), "datagrams"),
        ("forwarded - received, worst run", max(r["forward"].frames - r["far"]["datagrams"] for r in fwd_runs), "frames"),
        ("skipped by the forwarder, worst run", max(r["forward"].skipped for r in fwd_runs), "frames"),
        ("forwarder CPU per frame", fwd_us, "us"),
        ("plain sendmmsg loop alone, CPU per frame", alone_us, "us"),
        ("far end CPU per datagram, forwarded", med(us_per_frame(r["far"]["cpu_s"], r["far"]["datagrams"]) for r in fwd_runs), "us"),
        ("far end CPU per datagram, loop alone", med(us_per_frame(r["far"]["cpu_s"], r["far"]["datagrams"]) for r in alone_runs), "us"),
        ("capture CPU per frame, forwarding", med(us_per_frame(r["summary"].capture_cpu_s, r["summary"].frames_received) for r in fwd_runs), "us"),
        ("writer CPU per frame, forwarding", med(us_per_frame(r["summary"].writer_cpu_s, r["summary"].frames_received) for r in fwd_runs), "us"),
    ]
    ratios = [("forwarder / plain loop alone, CPU per frame", fwd_us / alone_us, f"<= {TARGET}")]
    results = {"lost": float(worst_lost), "cpu_ratio": fwd_us / alone_us}
    if loaded_runs:
        loaded_us = med(us_per_frame(r["loop"]["cpu_s"], r["loop"]["frames"]) for r in loaded_runs)
        rows += [
            ("plain loop beside the recording, CPU per frame", loaded_us, "us"),
            ("recorded frames lost without forwarding, worst run", max(lost(r["summary"]) for r in loaded_runs), "frames"),
        ]
        ratios.append(("forwarder / plain loop beside the recording", fwd_us / loaded_us, "close to 1"))
        results["cpu_ratio_loaded"] = fwd_us / loaded_us
    report(
        f"forwarding {gbps:.3f} Gbit/s over udp on loopback while recording it to disk, {seconds:g} s runs, "
        f"{'medians of ' + str(repeats) if repeats > 1 else 'one run'} ({ncpu} CPUs)",
        rows,
        ratios,
    )
    problems = []
    if worst_lost:
        problems.append(f"the recording lost frames (worst run {worst_lost})")
    if any(r["forward"].skipped for r in fwd_runs):
        problems.append("the forwarder skipped frames")
    if any(r["forward"].frames != r["far"]["datagrams"] for r in fwd_runs):
        problems.append("the far end did not receive every forwarded frame")
    if fwd_us / alone_us > TARGET:
        problems.append(f"forwarder CPU per frame {fwd_us / alone_us:.2f} x the plain loop's (target <= {TARGET})")
    if problems:
        print(f"  NOT MET: {'; '.join(problems)}" + ("" if ncpu >= 6 else f" (on {ncpu} CPUs shared by all five parties)"))
    else:
        print("  met: nothing lost, every forwarded frame received, CPU within target")
    return results


if __name__ == "__main__":
    if "--tiny" in sys.argv[1:]:
        tiny_defaults()
    main()
