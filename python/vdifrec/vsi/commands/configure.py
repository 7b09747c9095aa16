"""What the station receives and where it writes: ``mode``, ``net_protocol``, ``net_port``,
``mtu``, ``datastream`` and ``set_disks``. Each query shows the setting; each command is
refused while a scan records or is being copied, and takes effect by restarting the recorder
(``Station.reconfigure``), which leaves everything as it was when the engine refuses it.
``net_protocol`` and ``net_port`` also say how ``mem2net`` sends (``commands.forwarding``): a
``net_protocol=`` that changes only that (``tcp``, which vdifrec does not receive) is taken
while recording too."""

from __future__ import annotations

import fnmatch
import os
from typing import TYPE_CHECKING

from ..common import Mode, Problem, reply, vsi_size
from ..protocol import Code, Command, Reply

if TYPE_CHECKING:
    from ..station import Station

#: jive5ab's port for data when `net_port=0` resets it.
DEFAULT_DATA_PORT = 2630
#: Chunk (vbs) size jive5ab shows in `net_protocol?` before any is set.
DEFAULT_WORKBUF = 256 << 20


def mode(st: Station, c: Command) -> Reply:
    if c.query:
        m = st.mode
        if m is None:
            return reply(c, "", "<unknown>", 0, "0.000")
        return reply(c, m.text, m.format_name, m.tracks, f"{m.track_rate:.3f}", m.payload)
    st.idle_only(c)
    text = c.param(0)
    if not text:
        raise Problem(Code.ERROR, "Not a mode - give VDIF_<payload bytes>-<Mbps>-<channels>-<bits>, e.g. VDIF_8192-8192-4-2")
    st.reconfigure(mode=Mode.parse(text))
    return reply(c)


#: The protocols net_protocol= takes, as net_protocol? shows them (jive5ab turns udp into udps).
PROTOCOLS = {"udp": "udps", "udps": "udps", "pudp": "pudp", "udpsnor": "udpsnor", "tcp": "tcp"}
#: Those vdifrec receives; tcp is for sending (mem2net) only.
RECEIVED = ("udps", "pudp", "udpsnor")
#: jive5ab's other protocols, which vdifrec does not speak.
NOT_SUPPORTED = ("rtcp", "itcp", "udt", "vtp", "unix")


def net_protocol(st: Station, c: Command) -> Reply:
    if c.query:
        return reply(c, st.protocol, st.sockbuf, st.workbuf or DEFAULT_WORKBUF, st.nbuf)
    proto = c.param(0, st.protocol)
    if proto in NOT_SUPPORTED:
        raise Problem(
            Code.BAD_PARAMETER,
            f"the protocol '{proto}' is not supported by vdifrec - it receives udps (or udp), pudp or udpsnor and sends (mem2net) with udps, pudp or tcp",
        )
    if proto not in PROTOCOLS:
        raise Problem(
            Code.BAD_PARAMETER,
            f"the protocol '{proto}' is not recognized as a valid protocol - give udps (or udp: an 8-byte sequence number before each frame), pudp (plain frames), udpsnor (several senders, each with sequence numbers) or tcp (mem2net only)",
        )
    sockbuf = vsi_size("socket buffer", c.param(1)) if c.param(1) else st.sockbuf
    if not 0 < sockbuf <= 2**31 - 1:
        raise Problem(Code.BAD_PARAMETER, f"socket buffer {sockbuf} out of range - give 1 to 2G")
    workbuf = vsi_size("work buffer", c.param(2)) if c.param(2) else st.workbuf
    if workbuf is not None and not 0 < workbuf <= 1 << 30:
        raise Problem(Code.BAD_PARAMETER, f"work buffer {workbuf} out of range - give 1 to 1G (the vbs chunk or mk6 block size)")
    nbuf = st.nbuf
    if c.param(3):
        try:
            nbuf = int(c.param(3), 0)
        except ValueError:
            raise Problem(Code.BAD_PARAMETER, f"number of buffers '{c.param(3)}' is not a number") from None
        if not 0 < nbuf <= 1024:
            raise Problem(Code.BAD_PARAMETER, f"number of buffers {nbuf} out of range - give 1 to 1024")
    shown = PROTOCOLS[proto]
    # tcp leaves the UDP framing received as it was.
    received = shown if shown in RECEIVED else st.receive_protocol
    if (received, sockbuf, workbuf) == (st.receive_protocol, st.sockbuf, st.workbuf) and (st.protocol_set or shown not in RECEIVED):
        # Only what mem2net sends with changes (from its next connect): allowed while recording.
        st.protocol, st.nbuf = shown, nbuf
        return reply(c)
    st.idle_only(c)
    protocol_set = st.protocol_set or shown in RECEIVED
    st.reconfigure(protocol=shown, receive_protocol=received, protocol_set=protocol_set, sockbuf=sockbuf, workbuf=workbuf, nbuf=nbuf)
    return reply(c)


def mtu(st: Station, c: Command) -> Reply:
    if c.query:
        return reply(c, st.mtu)
    st.idle_only(c)
    if not c.param(0):
        raise Problem(Code.BAD_PARAMETER, "Missing argument to command - give the MTU, 64 to 9000")
    try:
        value = int(c.param(0), 0)
    except ValueError:
        value = -1
    if not 64 <= value <= 9000:
        raise Problem(Code.BAD_PARAMETER, f"invalid value for the MTU '{c.param(0)}' - give 64 to 9000")
    st.mtu = value
    return reply(c)


def net_port(st: Station, c: Command) -> Reply:
    if c.query:
        if not st.ports:
            return reply(c, "none")
        return reply(c, *(f"{h}@{p}" if h else str(p) for h, p in st.ports))
    st.idle_only(c)
    items = [p for p in c.params if p]
    if not items:
        raise Problem(Code.BAD_PARAMETER, "Missing argument to command - give [<host>@]<port>, several separated by colons")
    ports: list[tuple[str | None, int]] = []
    for item in items:
        host, at, port_s = item.rpartition("@")
        if at and not host:
            raise Problem(Code.BAD_PARAMETER, f"'{item}' - write <host>@<port> or <port>")
        try:
            port = int(port_s, 0)
        except ValueError:
            port = -1
        if not 0 <= port <= 65535:
            raise Problem(Code.BAD_PARAMETER, f"port '{port_s}' not a number/out of range (range: 0-65535)")
        ports.append((host or None, port or DEFAULT_DATA_PORT))
    if len(set(p for _, p in ports)) != len(ports):
        raise Problem(Code.BAD_PARAMETER, "a port is given twice - each stream needs a port of its own")
    st.reconfigure(ports=ports)
    return reply(c)


def datastream(st: Station, c: Command) -> Reply:
    if c.query:
        if c.param(0):
            if c.param(0) not in st.datastreams:
                raise Problem(Code.BAD_PARAMETER, f"The stream '{c.param(0)}' is not defined")
            return reply(c, c.param(0), *st.datastreams[c.param(0)])
        return reply(c, len(st.datastreams), *st.datastreams)
    st.idle_only(c)
    sub = c.param(0)
    if sub in ("clear", "reset"):
        st.reconfigure(datastreams={}, split=None)
        return reply(c)
    if sub == "remove":
        if c.param(1) not in st.datastreams:
            raise Problem(Code.ERROR, f"The data stream '{c.param(1)}' was not defined so cannot remove it")
        st.reconfigure(datastreams={}, split=None)
        return reply(c)
    if sub != "add":
        raise Problem(Code.BAD_PARAMETER, f"subcommand '{sub}' - choose add, remove or clear")
    name, specs = c.param(1), [s for s in c.params[2:] if s]
    if not name:
        raise Problem(Code.BAD_PARAMETER, "Missing data stream name")
    if not specs:
        raise Problem(Code.BAD_PARAMETER, "Missing data stream match specification(s)")
    if name in st.datastreams:
        raise Problem(Code.ERROR, f"The data stream '{name}' already has a definition")
    split = {"{thread}": "thread", "{station}": "station", "{sender}": "sender"}.get(name)
    if split is None or specs != ["*"] or st.datastreams:
        raise Problem(
            Code.BAD_PARAMETER,
            f"datastream '{name}' matching {' '.join(specs)} - vdifrec splits a scan by thread, station or sender, "
            "so add {thread}, {station} or {sender} matching * (scans <scan>_ds<thread number, station code or sender index>)",
        )
    st.reconfigure(datastreams={name: specs}, split=split)
    return reply(c)


def set_disks(st: Station, c: Command) -> Reply:
    if c.query:
        return reply(c, len(st.disks), *st.disks)
    st.idle_only(c)
    patterns = [p for p in c.params if p]
    if not patterns:
        raise Problem(Code.BAD_PARAMETER, "give the disks - paths or globs among " + ", ".join(st.all_disks))
    chosen = sorted(
        {d for d in st.all_disks for p in patterns if fnmatch.fnmatchcase(d.rstrip("/"), p.rstrip("/")) or _same_dir(d, p)}
    )
    if not chosen:
        raise Problem(
            Code.BAD_PARAMETER,
            f"no mountpoints matched your selection criteria (vdifrec serves {', '.join(st.all_disks)}, its --disk)",
            0,
        )
    st.reconfigure(disks=chosen)
    return reply(c, len(chosen))


def _same_dir(disk: str, given: str) -> bool:
    """Whether ``given`` names ``disk`` (``/mnt/disk0/``, ``/mnt/./disk0``, relative to where
    serve runs): compared as text, so that a path that is no disk is never looked at."""
    return os.path.normpath(os.path.abspath(given)) == os.path.normpath(os.path.abspath(disk))
