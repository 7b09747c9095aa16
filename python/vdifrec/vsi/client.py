"""A VSI-S client: what the Field System does, from Python or the ``vdifrec vsi`` command."""

from __future__ import annotations

import socket

from .protocol import Reply, parse_reply, split_line


class VSIError(ConnectionError):
    """The control port could not be reached, or it closed or did not answer."""


def host_and_port(where: str | tuple[str, int], default_port: int = 2620) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` (this host) or `HOST` alone (the default port) as (host, port)."""
    if isinstance(where, tuple):
        return where
    host, sep, port = where.rpartition(":")
    if not sep:
        return where, default_port
    try:
        return host or "127.0.0.1", int(port)
    except ValueError:
        raise ValueError(f"address: {where!r} is not HOST[:PORT] (e.g. localhost:2620)") from None


class VSIClient:
    """A connection to a VSI-S control port (``vdifrec serve``, or jive5ab).

    >>> with VSIClient("localhost:2620") as c:   # doctest: +SKIP
    ...     r = c.send("record?")
    ...     r.code, r.fields
    (0, ('off',))
    """

    def __init__(self, address: str | tuple[str, int] = "127.0.0.1:2620", timeout: float = 30.0) -> None:
        self.address = host_and_port(address)
        self.timeout = timeout
        where = f"{self.address[0]}:{self.address[1]}"
        try:
            self._sock = socket.create_connection(self.address, timeout=timeout)
        except OSError as exc:
            raise VSIError(f"cannot connect to {where}: {exc.strerror or exc} (is `vdifrec serve` running there, with --control {where}?)") from None
        self._buf = b""
        self._where = where

    def send(self, command: str) -> Reply:
        """Sends one command (the ``;`` may be left out) and returns its reply."""
        commands = split_line(command)
        if len(commands) != 1:
            raise ValueError(f"command: give one command, not {len(commands)} (send_line sends several)")
        return self.send_line(commands[0])[0]

    def send_line(self, line: str) -> list[Reply]:
        """Sends a line of commands (``"record=on:s1;record?"``) and returns one reply each."""
        commands = split_line(line)
        if not commands:
            return []
        try:
            self._sock.sendall(("".join(c + ";" for c in commands) + "\n").encode())
        except OSError as exc:
            raise VSIError(f"{self._where}: cannot send: {exc.strerror or exc}") from None
        try:
            return [parse_reply(self._read_reply()) for _ in commands]
        except ValueError:
            self._buf = b""  # what follows a broken reply cannot be matched to its command
            raise

    def _read_reply(self) -> str:
        """The next reply: up to its ';' (vdifrec writes one per line; jive5ab puts all the
        replies to a line of commands on one line)."""
        while b";" not in self._buf:
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                raise VSIError(f"{self._where}: no reply within {self.timeout:g} s") from None
            except OSError as exc:
                raise VSIError(f"{self._where}: connection lost: {exc.strerror or exc}") from None
            if not data:
                raise VSIError(f"{self._where}: the recorder closed the connection")
            self._buf += data
        reply, _, self._buf = self._buf.partition(b";")
        return reply.decode("utf-8", errors="replace").strip() + " ;"

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> VSIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
