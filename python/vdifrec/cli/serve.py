"""`vdifrec serve` (a station recorder driven by VSI-S, as the Field System drives jive5ab) and
`vdifrec vsi` (send VSI-S commands to one)."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from typing import Any, TextIO

from .. import _core
from ..vsi.client import VSIClient, VSIError, host_and_port
from ..vsi.server import CommandLog, ControlServer
from ..vsi.station import Station
from .args import (
    OptionError,
    UsageError,
    add_capture_arguments,
    add_scan_arguments,
    check_bind,
    path,
    positive,
    scan_recorder_options,
    sigterm_as_interrupt,
)

#: jive5ab's control port.
CONTROL_PORT = 2620


def control_address(text: str) -> tuple[str, int]:
    """`[HOST:]PORT` for the control port (HOST defaults to 127.0.0.1: this host only)."""
    host, sep, port = text.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535 or (sep and not host):
        raise argparse.ArgumentTypeError(f"{text!r}: give [HOST:]PORT, e.g. 2620 or 0.0.0.0:2620 (PORT 0..65535)")
    return (host or "127.0.0.1"), number


def add_serve(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="a station recorder driven over VSI-S (jive5ab's FlexBuff commands) by the Field System",
        description="Receive and count all the time; write scans between record=on and record=off, "
        "as the Field System or a script commands over the VSI-S control port (jive5ab's commands "
        "and replies). Prints 'control on HOST:PORT' once the control port listens. Stops on "
        "SIGINT/SIGTERM after closing any scan cleanly.",
    )
    p.add_argument("--control", type=control_address, default=("127.0.0.1", CONTROL_PORT),
                   help=f"[HOST:]PORT of the VSI-S control port (default 127.0.0.1:{CONTROL_PORT}, jive5ab's; give an address to listen on the network)")
    add_capture_arguments(p, port_required=False)
    add_scan_arguments(p, disks_required=True)
    p.add_argument("--gather-dir", type=path, default=None, help="where disk2file= writes (relative targets; nothing outside it). Default: the current directory")
    p.add_argument("--log", type=path, default=None, help="append each command and reply, with a UTC timestamp, to this file (default: stderr)")
    p.add_argument("--idle-timeout", type=positive(), default=3600.0, help="close a connection idle this many seconds (default 3600; half-open ones are found sooner by TCP keepalive)")
    p.set_defaults(func=run_serve)


def run_serve(a: argparse.Namespace) -> int:
    # Every option is checked by the engine now, before any port is bound.
    options, disks = scan_recorder_options(a)
    gather_dir = a.gather_dir or os.getcwd()
    if not os.path.isdir(gather_dir):
        raise OptionError(f"gather_dir: {gather_dir} is not a directory")
    if a.log and not os.path.isdir(os.path.dirname(os.path.abspath(a.log))):
        raise OptionError(f"log: cannot write {a.log}: its folder does not exist")
    log_file: TextIO | None = None
    if a.log:
        try:
            log_file = open(a.log, "a")  # noqa: SIM115 - open for the whole session
        except OSError as exc:
            raise OptionError(f"log: cannot write {a.log}: {exc.strerror}") from None
    if "port" not in options:
        # Nothing binds until net_port= does: the address is checked now all the same.
        check_bind(options)
    log = CommandLog(log_file)
    station = Station(options, disks, gather_dir, note=lambda s: log("vdifrec", s))
    try:
        server = ControlServer(a.control, station.handle, log, idle_timeout=a.idle_timeout)
    except OSError as exc:
        raise OptionError(f"control: cannot listen on {a.control[0]}:{a.control[1]}: {exc.strerror or exc}") from None
    started = False
    with sigterm_as_interrupt():
        try:
            try:
                station.start()
            except (_core.PortInUseError, _core.OutputError) as exc:
                raise OptionError(str(exc)) from None
            server.start()
            started = True
            host, port = server.address
            print(f"control on {host}:{port}", flush=True)
            if station.recorder is not None:
                print(f"listening on {station.recorder.listening}", flush=True)
                if station.recorder.status_address:
                    h, p = station.recorder.status_address
                    print(f"status on http://{h}:{p}/status and /metrics", flush=True)
            elif options.get("status_listen"):
                # The status is the recorder's: there is none until a data port is given.
                print(f"status on http://{options['status_listen']}/status opens once net_port= gives the data port "
                      "(serve --port opens both at the start)", flush=True)
            while True:
                time.sleep(0.5)
                station.poll()
        except KeyboardInterrupt:
            pass
        finally:
            # A second Ctrl-C or SIGTERM must not cut the scan's tail short: closing is bounded.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            server.close()
            last = station.close()
            if last is not None:
                log("vdifrec", f"scan {last.name} closed on stop: {last.frames} frames, {last.bytes_written} bytes, {'ok' if last.ok else 'NOT OK'}")
            if started:
                log("vdifrec", "stopped")
            if log_file is not None:
                log_file.close()
    return 0


def add_vsi(sub: Any) -> None:
    p = sub.add_parser(
        "vsi",
        help="send VSI-S commands to a recorder (vdifrec serve, or jive5ab) and print the replies",
        description="Sends the commands (several separated by ';') on one connection and prints one "
        "reply per command. Exit status 0 when every reply's code is 0 (done) or 1 (started), 1 "
        "otherwise or when the recorder cannot be reached, 2 on usage errors.",
    )
    p.add_argument("address", help=f"HOST[:PORT] of the control port (PORT default {CONTROL_PORT})")
    p.add_argument("commands", nargs="+", help="commands, e.g. \"record=on:kvn_scan1;record?\"")
    p.add_argument("--timeout", type=positive(), default=30.0, help="seconds to wait for a reply (default 30)")
    p.set_defaults(func=run_vsi)


def run_vsi(a: argparse.Namespace) -> int:
    if not any(c.strip(" ;") for c in a.commands):
        raise UsageError("commands: give at least one command, e.g. \"record?\"")
    try:
        where = host_and_port(a.address)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    if not where[0] or not 1 <= where[1] <= 65535:
        raise UsageError(f"address: {a.address!r} is not HOST[:PORT] (PORT 1..65535)")
    try:
        with VSIClient(where, timeout=a.timeout) as client:
            replies = client.send_line(";".join(a.commands))
    except VSIError as exc:
        print(f"vdifrec vsi: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a reply that is not VSI-S
        print(f"vdifrec vsi: {exc}", file=sys.stderr)
        return 1
    for r in replies:
        print(r)
    return 0 if all(r.ok for r in replies) else 1
