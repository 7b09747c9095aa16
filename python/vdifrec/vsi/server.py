"""The VSI-S control port: a TCP server that hands each command line to the station, one line at
a time over all clients (commands are serialised), and writes each reply back.

The Field System keeps one connection open for a whole session, so idle connections stay open
(``idle_timeout``, default 1 h) and half-open ones are found by TCP keepalive. What a client
sends never reaches the capture: a line over 64 KiB, binary junk or a burst of connections is
refused or answered with an error by this thread alone, and the recording goes on.
"""

from __future__ import annotations

import datetime as _dt
import socket
import sys
import threading
from collections.abc import Callable
from typing import TextIO

from .protocol import MAX_LINE, Code, Reply

#: Clients connected at once; more are told so and closed.
MAX_CLIENTS = 16
#: Seconds between TCP keepalive probes once a connection is idle (half-open clients go after
#: KEEPALIVE_IDLE + KEEPALIVE_COUNT * KEEPALIVE_INTERVAL seconds).
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 60, 10, 6


class CommandLog:
    """Each command and reply with a UTC timestamp and the client's address."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stderr
        self._lock = threading.Lock()

    def __call__(self, peer: str, text: str) -> None:
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"
        with self._lock:
            try:
                print(f"{stamp} {peer} {text}", file=self.out, flush=True)
            except (OSError, ValueError):
                pass  # a log that cannot be written never stops the control port


class ControlServer:
    """Listens on ``address`` and answers each line with ``handle(line) -> list[Reply]``."""

    def __init__(
        self,
        address: tuple[str, int],
        handle: Callable[[str], list[Reply]],
        log: CommandLog,
        idle_timeout: float = 3600.0,
    ) -> None:
        self._handle = handle
        self._log = log
        self.idle_timeout = idle_timeout
        self._lock = threading.Lock()  # one line at a time, over all clients
        self._clients: set[socket.socket] = set()
        self._clients_lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.create_server(address, reuse_port=False, backlog=64)
        self._listener.settimeout(0.2)
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self._thread = threading.Thread(target=self._accept, name="vsi-accept", daemon=True)

    def start(self) -> ControlServer:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stops accepting and closes every client connection."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._listener.close()
        with self._clients_lock:
            for c in list(self._clients):
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue
            name = f"{peer[0]}:{peer[1]}"
            with self._clients_lock:
                full = len(self._clients) >= MAX_CLIENTS
                if not full:
                    self._clients.add(conn)
            if full:
                self._refuse(conn, name)
                continue
            threading.Thread(target=self._serve, args=(conn, name), name=f"vsi-{name}", daemon=True).start()

    def _refuse(self, conn: socket.socket, name: str) -> None:
        self._log(name, f"refused: {MAX_CLIENTS} clients are connected already")
        try:
            conn.settimeout(1.0)
            conn.sendall(f"{Reply('connect', False, Code.BUSY, (f'{MAX_CLIENTS} clients are connected already; try later',))}\n".encode())
        except OSError:
            pass
        conn.close()

    def _serve(self, conn: socket.socket, name: str) -> None:
        self._log(name, "connected")
        try:
            _keepalive(conn)
            conn.settimeout(self.idle_timeout)
            pending = b""
            while not self._stop.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    self._log(name, f"idle for {self.idle_timeout:g} s: closed")
                    return
                if not data:
                    return
                pending += data
                while True:
                    cut = _line_end(pending)
                    if cut < 0 or cut > MAX_LINE:
                        break
                    line, pending = pending[:cut], pending[cut + 1 :]
                    self._answer(conn, name, line)
                if len(pending) > MAX_LINE:
                    # A line too long, whether or not it has ended: say so, then drop the client
                    # (what it sends next could be anything).
                    self._log(name, f"line longer than {MAX_LINE} bytes: closed")
                    why = f"line longer than {MAX_LINE // 1024} KiB - commands end in a semicolon and lines in a newline"
                    conn.sendall(f"{Reply('line', False, Code.SYNTAX, (why,))}\n".encode())
                    return
        except OSError as exc:
            self._log(name, f"connection lost: {exc}")
        finally:
            with self._clients_lock:
                self._clients.discard(conn)
            conn.close()
            self._log(name, "closed")

    def _answer(self, conn: socket.socket, name: str, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace").strip()
        if not line:
            return
        self._log(name, f"<< {line[:512]}")
        with self._lock:
            replies = self._handle(line)
        text = "".join(f"{r}\n" for r in replies)
        if text:
            self._log(name, ">> " + " ".join(str(r) for r in replies)[:1024])
            conn.sendall(text.encode())


def _line_end(buf: bytes) -> int:
    """Where the first line ends (a newline, or a carriage return a terminal sends), or -1."""
    ends = [i for i in (buf.find(b"\n"), buf.find(b"\r")) if i >= 0]
    return min(ends) if ends else -1


def _keepalive(conn: socket.socket) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL), ("TCP_KEEPCNT", KEEPALIVE_COUNT)):
        if hasattr(socket, opt):
            conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
