"""The copy behind ``disk2file=``: a range of a recorded scan's bytes written into one flat file
by a thread of its own, which ``disk2file?`` watches and ``reset=abort`` stops."""

from __future__ import annotations

import os
import threading
from pathlib import Path


class Disk2File:
    """A scan's bytes (a range of them) copied into one flat file, in a thread of its own."""

    def __init__(self, scan: str, disks: list[str], path: Path, start: int, end: int, mode: str) -> None:
        self.scan, self.disks, self.path = scan, disks, path
        self.start, self.end, self.mode = start, end, mode
        self.done = start
        self.error: str | None = None
        self._stop = threading.Event()
        flags = {"n": os.O_CREAT | os.O_EXCL, "w": os.O_CREAT | os.O_TRUNC, "a": os.O_CREAT | os.O_APPEND, "resume": os.O_CREAT}[mode]
        # Opened here, so that a target that cannot be written is the command's error (code 4).
        self._fd = os.open(path, os.O_WRONLY | flags, 0o644)
        if mode == "resume":
            # Resume: what the file holds already is the start of the range.
            self.done = min(end, start + os.fstat(self._fd).st_size)
            os.lseek(self._fd, 0, os.SEEK_END)
        self._file = os.fdopen(self._fd, "wb")
        self.thread = threading.Thread(target=self._run, name="vsi-disk2file", daemon=True)
        self.thread.start()

    @property
    def active(self) -> bool:
        return self.thread.is_alive()

    def abort(self) -> None:
        self._stop.set()
        self.thread.join(timeout=10)

    def _run(self) -> None:
        from ..reader import open as open_scan

        try:
            # Only the frames' bytes are read, never their time: any rate serves.
            with open_scan(self.scan, disks=self.disks, sample_rate=1.0) as fh:
                parts = fh.frames
                parts = parts if isinstance(parts, list) else [parts]
                at = 0
                for p in parts:
                    flat = p.reshape(-1)
                    lo, hi = max(self.done - at, 0), min(self.end - at, flat.size)
                    k = lo
                    while k < hi and not self._stop.is_set():
                        step = min(hi - k, 16 << 20)
                        self._file.write(flat[k : k + step].data)
                        k += step
                        self.done = at + k
                    at += flat.size
                    if at >= self.end or self._stop.is_set():
                        break
        except Exception as exc:  # the copy's failure is told by disk2file?, never raised
            self.error = str(exc)
        finally:
            self._file.close()
