"""A TCP relay on 127.0.0.1 that stands between `vdifrec push` and `vdifrec receive`, as a
long path and its faults would: it caps each connection's rate (a bounded TCP window over a
long round trip) and the total (the path), cuts connections, and flips a byte in flight.

Connections are numbered in the order accepted: with a push, 0 is the control connection and
1, 2, ... the data connections. Every loop is bounded by the sockets closing and by `close()`.

The relayed sockets stay blocking, as a path would: a receiver that pauses holds the sender up
(TCP's own flow control), never cuts it. A timeout is a property of the socket object, shared by
both directions' threads: one set for polling would make the other direction's `sendall` fail
whenever the receiver paused that long. So each thread polls for `close()` with `select`
before it reads, and `close()` shuts the sockets down, which ends a `sendall` held up.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from dataclasses import dataclass, field


class _Bucket:
    """Bytes per second, shared by whoever takes from it; None: no cap."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.lock = threading.Lock()
        self.next = time.monotonic()

    def take(self, n: int) -> None:
        if self.rate is None:
            return
        with self.lock:
            now = time.monotonic()
            self.next = max(self.next, now - 0.05) + n / self.rate  # at most 50 ms of burst
            wait = self.next - now
        if wait > 0:
            time.sleep(wait)


@dataclass
class Relay:
    target: tuple[str, int]
    per_connection: float | None = None
    """Bytes per second of each connection, sender to receiver."""
    total: float | None = None
    """Bytes per second of all connections together."""
    cut: dict[int, int] = field(default_factory=dict)
    """Connection number -> bytes forwarded (sender to receiver) after which it is cut."""
    cut_all_at: float | None = None
    """Seconds after the first connection at which every open connection is cut (an outage)."""
    flip: dict[int, int] = field(default_factory=dict)
    """Connection number -> offset of the byte (sender to receiver) to invert."""

    def __post_init__(self) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.2)
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.accepted = 0
        self.cuts = 0
        self.flipped = 0
        self._total = _Bucket(self.total)
        self._closing = threading.Event()
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._first: float | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closing.is_set():
            try:
                a, _ = self.listener.accept()
            except TimeoutError:
                self._outage()
                continue
            except OSError:
                return
            n = self.accepted
            self.accepted += 1
            if self._first is None:
                self._first = time.monotonic()
            try:
                b = socket.create_connection(self.target, timeout=5)
            except OSError:
                a.close()
                continue
            # Blocking from here on (see above): the connect's timeout would cut a paused path.
            a.settimeout(None)
            b.settimeout(None)
            with self._lock:
                self._open += [a, b]
            threading.Thread(target=self._pipe, args=(n, a, b, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(n, b, a, False), daemon=True).start()

    def _outage(self) -> None:
        if self.cut_all_at is not None and self._first is not None and time.monotonic() - self._first > self.cut_all_at:
            self.cut_all_at = None
            with self._lock:
                for s in self._open:
                    _shut(s)
                self.cuts += 1

    def _pipe(self, n: int, src: socket.socket, dst: socket.socket, forward: bool) -> None:
        bucket = _Bucket(self.per_connection) if forward else None
        done = 0
        try:
            while not self._closing.is_set():
                self._outage()
                if not select.select([src], [], [], 0.2)[0]:
                    continue
                data = src.recv(64 << 10)
                if not data:
                    break
                if forward:
                    if n in self.cut and done + len(data) >= self.cut[n]:
                        del self.cut[n]
                        self.cuts += 1
                        break
                    if n in self.flip and done <= self.flip[n] < done + len(data):
                        at = self.flip.pop(n) - done
                        data = data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]
                        self.flipped += 1
                    assert bucket is not None
                    bucket.take(len(data))
                    self._total.take(len(data))
                done += len(data)
                dst.sendall(data)
        except (OSError, ValueError):  # ValueError: select on a socket close() has closed
            pass
        finally:
            _shut(src)
            _shut(dst)

    def close(self) -> None:
        self._closing.set()
        self.listener.close()
        with self._lock:
            for s in self._open:
                _shut(s)
                s.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
