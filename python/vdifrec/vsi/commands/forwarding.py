"""What the station sends on while it receives and records (e-VLBI): ``mem2net`` (one
destination connected, started, paused, closed) and ``ipd`` (the gap between its datagrams), as
jive5ab 3.1 spells them, over the recorder's forwarding (``Recorder.add_forward``).

The destination is the host ``mem2net=connect`` names at the port of ``net_port``'s first entry,
in ``net_protocol``'s framing (``udps``, ``pudp`` or ``tcp``), fixed at the connect as jive5ab
builds its chain then; only ``ipd`` changes it afterwards. The station keeps it
(``Station.mem2net``): a recorder rebuilt by ``net_port=``, ``mode=``, ... gets it again
(``reattach``), from its newest frame on.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re
import socket
import time
from typing import TYPE_CHECKING

from ... import _core
from ..common import Problem, reply
from ..protocol import Code, Command, Reply

if TYPE_CHECKING:
    from ...recorder import Recorder
    from ...reports import ForwardStats
    from ..station import Station

#: vdifrec's scheme for each net_protocol mem2net can send with.
SCHEMES = {"udps": "udps", "pudp": "udp", "tcp": "tcp"}
#: How long mem2net=connect waits for a TCP connection (jive5ab's is 3 s).
CONNECT_WAIT_S = 3.0
#: ipd's range in nanoseconds, as jive5ab's: -1 µs (auto) to INT_MAX/1000 µs.
IPD_MIN_NS, IPD_MAX_NS = -1000, (2**31 - 1) // 1000 * 1000
_IPD = re.compile(r"^([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)(u|us|n|ns)?$")


@dataclasses.dataclass
class Mem2Net:
    """The mem2net destination: ``host`` as connect named it (``host@port`` too, vdifrec's
    extension), where it resolves to, its framing, whether ``on`` (``running``) or ``off``
    (``paused``) was the last word, and the recorder's id for it."""

    host: str
    address: str
    port: int
    protocol: str
    running: bool = False
    paused: bool = False
    id: int = 0

    @property
    def scheme(self) -> str:
        return SCHEMES[self.protocol]

    def destination(self, gap_ns: int) -> str:
        """As ``Recorder.add_forward`` takes it; jive5ab paces udp and udps only."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        pacing = f"?ipd={gap_ns}ns" if gap_ns > 0 and self.scheme != "tcp" else ""
        return f"{self.scheme}://{host}:{self.port}{pacing}"

    def attach(self, rec: Recorder, gap_ns: int) -> None:
        """Forwards to it from ``rec``'s newest frame on, sending if it was ``on``."""
        self.id = rec.add_forward(self.destination(gap_ns), enabled=self.running)


def gap_ns(st: Station) -> int:
    """The gap between datagrams now: ``ipd``'s, or with ``ipd`` negative (auto) the
    theoretical one computed at the last connect."""
    return st.ipd_ns if st.ipd_ns >= 0 else st.ipd_theory_ns


def reattach(st: Station) -> None:
    """After the station rebuilt its recorder: the mem2net destination again (its counters
    start from zero, and a udps sequence starts afresh, as at a connect)."""
    m = st.mem2net
    if m is None:
        return
    if st.recorder is None:
        st.mem2net = None
        st.note(f"mem2net to {m.host} closed: the station no longer receives")
        return
    try:
        m.attach(st.recorder, gap_ns(st))
    except _core.ArgumentError as exc:
        st.mem2net = None
        st.note(f"mem2net to {m.host} closed: cannot forward there again after the restart - {exc}")


def _forward(st: Station, m: Mem2Net) -> ForwardStats | None:
    if st.recorder is None:
        return None
    return next((f for f in st.recorder.forwards() if f.id == m.id), None)


def _flags(m: Mem2Net, f: ForwardStats | None) -> str:
    """jive5ab's submode, ``<RUN,CONNECTED,>``, in its flags' order; vdifrec adds PAUSE
    after ``off`` and BROKEN while the destination is down (retried with a backoff)."""
    up = f is not None and f.state in ("sending", "paused")
    down = f is None or f.state in ("down", "refused", "closed")
    waiting = f is not None and f.state == "connecting"
    names = [n for n, on in (("WAIT", waiting), ("PAUSE", m.paused), ("RUN", m.running), ("CONNECTED", up), ("BROKEN", down)) if on]
    return "<" + "".join(f"{n}," for n in names) + ">"


def mem2net(st: Station, c: Command) -> Reply:
    if c.query:
        m = st.mem2net
        if m is None:
            return reply(c, "inactive")
        return reply(c, m.host, _flags(m, _forward(st, m)))
    sub = c.param(0)
    if not sub:
        raise Problem(Code.NOT_NOW, "command w/o actual commands and/or arguments... - give connect (then the host), on, off or disconnect")
    if sub == "connect":
        return _connect(st, c)
    if sub == "disconnect":
        m = _connected(st, "Not doing mem2net")
        st.mem2net = None
        if st.recorder is not None:
            st.recorder.remove_forward(m.id)
        return reply(c)
    if sub in ("on", "off", "stop"):
        # stop, as jive5ab's: sending ends and the connection stays (disconnect closes it);
        # off is vdifrec's pause, shown as such.
        m = _connected(st, "Not doing mem2net" if sub == "stop" else "mem2net not connected")
        assert st.recorder is not None
        st.recorder.set_forward(m.id, sub == "on")
        m.running, m.paused = sub == "on", sub == "off"
        return reply(c)
    raise Problem(Code.NOT_NOW, f"{sub} does not apply to mem2net - give connect (then the host), on, off, disconnect or stop")


def _connected(st: Station, why: str) -> Mem2Net:
    if st.mem2net is None:
        raise Problem(Code.CONFLICT, why)
    return st.mem2net


def _connect(st: Station, c: Command) -> Reply:
    if st.mem2net is not None:
        raise Problem(Code.CONFLICT, "Already doing mem2net")
    if st.recorder is None:
        raise Problem(Code.CONFLICT, "no data port, so nothing to send - set net_port=<port> (or serve --port) first")
    given = _host_field(c.params[1:]) or st.mem2net_host
    if not given:
        raise Problem(Code.ERROR, "no host to connect to - give it after connect")
    host, port = _host_port(st, given)
    if st.protocol not in SCHEMES:
        raise Problem(
            Code.CONFLICT,
            f"mem2net does not send with net_protocol {st.protocol} - set net_protocol=udps, pudp or tcp first",
        )
    address = _resolve(host, port)
    m = Mem2Net(given, address, port, st.protocol)
    _refuse_loop(st, m)
    st.ipd_theory_ns = _theory_ns(st)
    try:
        m.attach(st.recorder, gap_ns(st))
    except _core.ArgumentError as exc:
        raise Problem(Code.ERROR, f"cannot send to {given} - {exc}") from None
    f = _until_connected(st, m)
    if f is None or f.state not in ("sending", "paused"):
        st.recorder.remove_forward(m.id)
        why = (f.error if f is not None else None) or f"no connection within {CONNECT_WAIT_S:g} s"
        raise Problem(Code.ERROR, f"{m.scheme} to {host} port {port} - {why}")
    st.mem2net, st.mem2net_host = m, given
    return reply(c)


def _host_field(fields: tuple[str, ...]) -> str:
    """The host of ``mem2net=connect:<host>``: the next field, or, where an IPv6 address's
    colons split it into several, those fields joined again (``[::1]@46227``, ``fd00::5``)."""
    if not fields:
        return ""
    joined = ":".join(fields).strip()
    if joined.startswith("["):
        return joined
    try:
        ipaddress.IPv6Address(joined.rpartition("@")[0] if "@" in joined else joined)
    except ValueError:
        return fields[0].strip()
    return joined


def _host_port(st: Station, given: str) -> tuple[str, int]:
    """``host`` (at net_port's first port, as jive5ab) or vdifrec's ``host@port``."""
    host, at, port_s = given.rpartition("@")
    if not at:
        # net_port's port; a station told to take any free port (0) has the one it took.
        port = st.ports[0][1]
        if port == 0 and st.recorder is not None and st.recorder.address is not None:
            port = st.recorder.address[1]
        return _unbracketed(given), port
    try:
        port = int(port_s, 0)
    except ValueError:
        port = -1
    if not host or not 1 <= port <= 65535:
        raise Problem(Code.BAD_PARAMETER, f"'{given}' - write <host>, or <host>@<port> with a port 1 to 65535")
    return _unbracketed(host), port


def _unbracketed(host: str) -> str:
    """``[::1]`` as ``::1``: an IPv6 address may be written in brackets, as in a URL."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") and len(host) > 2 else host


def _resolve(host: str, port: int) -> str:
    """The address ``host`` resolves to (code 4 naming it when it does not, as jive5ab)."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError) as exc:
        raise Problem(Code.ERROR, f"cannot resolve host {host} ({exc}) - give an address or a name this machine can resolve") from None
    return str(found[0][4][0])


def _refuse_loop(st: Station, m: Mem2Net) -> None:
    """UDP to this station's own data port would record the stream twice: refused by the
    recorder's own rule (an address of this host at a port it receives on), said as jive5ab
    says a conflict."""
    assert st.recorder is not None
    if st.recorder.forward_feeds_itself(m.destination(0)):
        raise Problem(
            Code.CONFLICT,
            f"{m.host} port {m.port} is this station's own data port (net_port), so the stream would come back "
            "into the recording - give the receiver's port after the host, as <host>@<port>",
        )


def _theory_ns(st: Station) -> int:
    """jive5ab's theoretical gap for ``ipd`` auto: a datagram (a whole frame here) each
    1/1.1 of its time at the mode's rate; 0 (none) without a mode."""
    m = st.mode
    if m is None:
        return 0
    return math.floor(1e9 / (1.1 * m.mbps * 1e6 / (m.frame_size * 8)))


def _until_connected(st: Station, m: Mem2Net) -> ForwardStats | None:
    """Waits (at most CONNECT_WAIT_S) until the destination is connected or has failed."""
    deadline = time.monotonic() + CONNECT_WAIT_S
    while True:
        f = _forward(st, m)
        if f is None or f.state != "connecting" or time.monotonic() >= deadline:
            return f
        time.sleep(0.005)


def ipd(st: Station, c: Command) -> Reply:
    if c.query:
        if st.ipd_ns < 0:
            return reply(c, _us(st.ipd_ns), _us(st.ipd_theory_ns))
        return reply(c, _us(st.ipd_ns))
    text = c.param(0)
    if not text:
        raise Problem(Code.BAD_PARAMETER, "Command must have argument - give microseconds (ipd=10), nanoseconds (ipd=2500n) or -1 (auto)")
    value = _ipd_ns(text)
    before = gap_ns(st)
    old, st.ipd_ns = st.ipd_ns, value
    m = st.mem2net
    if m is not None and gap_ns(st) != before:
        try:
            _repace(st, m)
        except Problem:
            st.ipd_ns = old
            raise
    return reply(c)


def _ipd_ns(text: str) -> int:
    """``ipd``'s value in nanoseconds: microseconds, or nanoseconds with ``n``/``ns``."""
    found = _IPD.match(text)
    if not found:
        raise Problem(Code.BAD_PARAMETER, f"ipd '{text}' is not a number - give microseconds (ipd=10, ipd=1.5u), nanoseconds (ipd=2500n) or -1 (auto)")
    number, unit = float(found.group(1)), found.group(2) or "u"
    ns = round(number if unit.startswith("n") else number * 1000)
    if not IPD_MIN_NS <= ns <= IPD_MAX_NS:
        raise Problem(Code.BAD_PARAMETER, f"ipd '{text}' out of range - give -1 (auto) to {IPD_MAX_NS // 1000} microseconds")
    return ns


def _repace(st: Station, m: Mem2Net) -> None:
    """A new gap while connected: applied at the next datagram, on the same connection and
    packet sequence, as jive5ab applies ``ipd`` live (tcp is not paced)."""
    assert st.recorder is not None
    if m.scheme == "tcp":
        return
    gap = gap_ns(st)
    try:
        st.recorder.pace_forward(m.id, f"ipd={gap}ns" if gap > 0 else "")
    except _core.ArgumentError as exc:
        raise Problem(Code.BAD_PARAMETER, f"ipd: {exc}") from None


def _us(ns: int) -> str:
    """Nanoseconds as jive5ab shows microseconds: whole ones as an integer, else ``%f``."""
    return str(ns // 1000) if ns % 1000 == 0 else f"{ns / 1000:f}"


def stats_fields(st: Station) -> list[str]:
    """The mem2net destination's counters for ``stats?`` (none while inactive)."""
    m = st.mem2net
    f = _forward(st, m) if m is not None else None
    if f is None:
        return []
    keys = ("state", "frames", "skipped", "bytes", "reconnects", "connect_failures", "gbps")
    return [f"mem2net_{k}={getattr(f, k)}" for k in keys] + ([f"mem2net_error={f.error}"] if f.error else [])
