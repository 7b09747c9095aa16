"""Each finished scan pushed to the correlator while the next one records: one scan at a
time, at low priority (``nice``) and within the rate asked for, so that shipping never takes
the disks or the CPU from the recording."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

from ..transfer import push

#: How long a push keeps trying a receiver that does not answer (seconds).
RETRY_SECONDS = 60.0


class Shipper:
    """Pushes scans (by name on ``disks``) to ``to`` in the order given; ``state(name)`` says
    where each stands: ``queued``, ``sending``, ``verified`` or ``failed: ...``."""

    def __init__(
        self,
        to: str,
        token_file: str | os.PathLike[str],
        disks: list[str],
        rate: str | None = None,
        on_done: Callable[[str, str], None] | None = None,
    ) -> None:
        self._to, self._token, self._disks, self._rate = to, token_file, disks, rate
        self._on_done = on_done
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._states: dict[str, str] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="vdifrec-ship", daemon=True)
        self._thread.start()

    def ship(self, scan: str) -> None:
        self._set(scan, "queued")
        self._queue.put(scan)

    def state(self, scan: str) -> str:
        with self._lock:
            return self._states.get(scan, "")

    def _set(self, scan: str, state: str) -> None:
        with self._lock:
            self._states[scan] = state

    def _run(self) -> None:
        while (scan := self._queue.get()) is not None:
            self._set(scan, "sending")
            try:
                summary = push(
                    scan,
                    to=self._to,
                    token_file=self._token,
                    disks=self._disks,
                    rate=self._rate,
                    nice=True,
                    retry_seconds=RETRY_SECONDS,
                    check=False,
                )
                items = summary.get("items", [])
                bad = [i for i in items if i["state"] not in ("sent", "resumed", "skipped")]
                if summary.get("ok") and items and not bad:
                    state = "verified"
                else:
                    why = "; ".join(f"{i['state']}: {i.get('error') or ''}" for i in bad) or summary.get("error") or "not sent"
                    state = f"failed: {why}"
            except Exception as exc:  # noqa: BLE001 - the session reports it and goes on
                state = f"failed: {exc}"
            self._set(scan, state)
            if self._on_done is not None:
                self._on_done(scan, state)

    def finish(self, timeout: float | None = None) -> bool:
        """Waits for every scan handed over to be shipped; whether all were within ``timeout``."""
        self._queue.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()
