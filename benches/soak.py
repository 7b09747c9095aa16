"""`make soak`: the original system's 10-minute test, on loopback.

Records the reference stream (125000 frames/s of 8224 bytes = 8.224 Gbit/s; SOAK_FPS sets another
rate) for SOAK_SECONDS (default 600) with the sender on the same machine, into a ring of SOAK_RING
(default 4GiB). Files rotate every SOAK_FILE_SIZE (default 8GiB); each closed file is compared
frame by frame, and for order, with what the sender sent (regenerated, not stored; O_DIRECT reads
at idle priority, so checking takes only what the recording leaves) and deleted, so the 617 GB of a
full run never need to fit on disk. Where checking cannot keep pace, the oldest unchecked files are
deleted to keep three files' worth of space free, and counted as skipped. Prints the per-second
table and the summary; passes when the loss is at most 0.05 % (the original target), the invariant
holds, every checked frame is what was sent, in order, and every recorded frame is either checked
or skipped.

CI runs it for a few seconds at a low rate (`make soak-short`), so that it cannot rot unnoticed;
the figure that counts is the 10-minute run at the reference rate.
"""

from __future__ import annotations

import calendar
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vdifrec  # noqa: E402
from vdifrec.cli.record import follow  # noqa: E402
from vdifrec.cli.printing import print_summary  # noqa: E402
from vdifrec.units import parse_size  # noqa: E402

FRAME_SIZE = 8224
TARGET_LOSS = 0.0005


def main() -> int:
    seconds = float(os.environ.get("SOAK_SECONDS", "600"))
    fps = int(os.environ.get("SOAK_FPS", "125000"))
    gbps = fps * FRAME_SIZE * 8 / 1e9
    folder = Path(os.environ.get("SOAK_DIR", Path(__file__).resolve().parent.parent / "bench-results" / "soak"))
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("soak_*.vdif"):
        old.unlink()
    # The sender's first frame: the current reference epoch, two seconds from now.
    now = int(time.time()) + 2
    gm = time.gmtime(now)
    epoch = (gm.tm_year - 2000) * 2 + (1 if gm.tm_mon >= 7 else 0)
    epoch_start = calendar.timegm((2000 + epoch // 2, 1 if epoch % 2 == 0 else 7, 1, 0, 0, 0))
    start_second = now - epoch_start
    spec = dict(fps=fps, ref_epoch=epoch, start_second=start_second, seed=1)

    file_size = parse_size(os.environ.get("SOAK_FILE_SIZE", "8GiB"), "SOAK_FILE_SIZE")
    rec = vdifrec.Recorder(port=0, directory=folder, prefix="soak", ring=os.environ.get("SOAK_RING", "4GiB"),
                           frame_size=FRAME_SIZE, fps=fps, file_size=file_size)
    rec.start()
    assert rec.address is not None
    reserve = 3 * file_size  # free space kept: the file being written, one being checked, margin
    results = {"files": 0, "frames": 0, "matching": 0, "differing": 0, "out_of_order": 0, "bytes": 0,
               "skipped_files": 0, "skipped_frames": 0}
    lock = threading.Lock()
    checking: set[Path] = set()
    done = threading.Event()

    def closed_files() -> list[Path]:
        # Listed before asking which file is open: a file created after the listing is not in
        # it, and one closed since is closed; the other order could hand out the newest file.
        files = sorted(folder.glob("soak_*.vdif"))
        current = rec.stats().current_file if rec.running else None
        return [p for p in files if str(p) != current]

    def verify(path: Path) -> None:
        with lock:
            if not path.exists():
                return
            checking.add(path)
        v = json.loads(vdifrec._core.verify_sent(str(path), spec))
        with lock:
            checking.discard(path)
            for key in ("frames", "matching", "differing", "out_of_order"):
                results[key] += v[key]
            results["files"] += 1
            results["bytes"] += v["frames"] * FRAME_SIZE
            path.unlink()
        print(f"soak: {path.name}: {v['frames']} frames, {v['differing']} differ from what was sent, "
              f"{v['out_of_order']} out of order; deleted", flush=True)

    def checker() -> None:
        # Checking is what the machine has spare; it must never take CPU from the recording.
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        while not done.is_set():
            for p in closed_files():
                if done.is_set() or not rec.running:
                    break
                verify(p)
            time.sleep(1)

    def guard() -> None:
        # Where checking cannot keep pace (a 2-core machine), the oldest unchecked files make
        # room, counted as skipped, so that the soak measures the recorder, not a full disk.
        while not done.is_set():
            if shutil.disk_usage(folder).free < reserve:
                with lock:
                    victims = [p for p in closed_files() if p not in checking]
                    if victims:
                        frames = victims[0].stat().st_size // FRAME_SIZE
                        victims[0].unlink()
                        results["skipped_files"] += 1
                        results["skipped_frames"] += frames
                        print(f"soak: {victims[0].name}: {frames} frames deleted unchecked to keep "
                              f"{reserve / 1e9:.0f} GB free", flush=True)
            time.sleep(0.25)

    threading.Thread(target=guard, daemon=True).start()
    t = threading.Thread(target=checker, daemon=True)
    t.start()
    print(f"soak: {seconds:g} s of {gbps:.3f} Gbit/s into {folder}, files rotating and deleted after checking", flush=True)
    sender = vdifrec.Sender(rec.address, duration=seconds, **spec)
    summary = follow(rec, duration=seconds + 3, quiet=False)
    sent = sender.stop()
    done.set()
    t.join()
    for p in sorted(folder.glob("soak_*.vdif")):
        verify(p)
    print_summary(summary, sys.stdout)
    expected = sent["frames_sent"]
    lost = expected - summary.frames_received
    loss = lost / max(expected, 1)
    accounted = results["frames"] + results["skipped_frames"] == summary.frames_received
    ok = (loss <= TARGET_LOSS and summary.ok and results["differing"] == 0 and results["out_of_order"] == 0
          and accounted)
    print(f"soak result: sent {expected} frames at {sent['gbps']:.3f} Gbit/s, recorded {summary.frames_received} "
          f"({lost} lost = {100 * loss:.4f} %, target <= {100 * TARGET_LOSS:.2f} %); checked {results['files']} files "
          f"({results['frames']} frames, {results['bytes']} bytes): {results['differing']} differ from what was sent, "
          f"{results['out_of_order']} out of order; {results['skipped_files']} files ({results['skipped_frames']} "
          f"frames) deleted unchecked for space; every recorded frame {'accounted for' if accounted else 'NOT accounted for'}; "
          f"invariant {'holds' if summary.invariant_holds else 'BROKEN'}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
