"""Every option of every subcommand, given a bad value (out of range, wrong type, wrong unit,
empty, negative, huge): exit status 2, one line on stderr that names the option and what is
allowed, no traceback, and nothing started ('listening on' never printed).

The options come from the real parser, so a new option without a bad value here fails
`test_every_option_has_a_bad_value`. Options are checked before any file is opened or socket
bound: a bad option is named even when the input or the output is bad too.

`record`, `monitor`, `send` and `demo` run as subprocesses (they bind sockets and start
threads), started together in a small pool so that the file stays fast on two cores; the other
subcommands run in this process through `vdifrec.cli.main`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import re
import socket
import subprocess
import sys
import traceback
from pathlib import Path
from collections.abc import Iterator

import pytest
from conftest import free_udp_port

import vdifrec
from vdifrec import cli

#: Subcommands that bind sockets or start threads: always a subprocess.
SUBPROCESS = {"record", "monitor", "send", "demo", "serve", "receive", "observe"}
TIMEOUT = 30.0

@dataclasses.dataclass(frozen=True)
class Case:
    """One bad value: `argv` (placeholders {tmp}, {sample}, {udp}, {tcp}, {busy_udp},
    {busy_tcp}) without the valid arguments, which `argv_of` adds for every other option."""

    command: str
    option: str
    """The option as the parser lists it: its first flag, or a positional's metavar or dest."""
    bad: tuple[str, ...]
    allowed: str
    """What the one line must say is allowed (a regular expression, case ignored)."""
    names: str | None = None
    """Text that names the option in the line, where it is not the option itself."""
    without: tuple[str, ...] = ()
    """Valid arguments of other options to leave out (e.g. --no-write for --out)."""
    extra: tuple[str, ...] = ()
    """Further valid arguments this case needs (e.g. --dir for --prefix)."""
    subprocess: bool = False
    """Run in a subprocess even though the subcommand need not (it may crash the process)."""

    @property
    def id(self) -> str:
        bad = " ".join(a if len(a) <= 40 else f"{a[:20]}...({len(a)} chars)" for a in self.bad)
        return f"{self.command} {bad or repr('')}"


#: The valid arguments of each subcommand, by option; every case takes all but its own.
VALID: dict[str, dict[str, tuple[str, ...]]] = {
    "generate": {"out": ("{tmp}/g.vdif",), "--seconds": ("--seconds=0.001",), "--fps": ("--fps=1000",)},
    "check": {"file": ("{sample}",)},
    "info": {"file": ("{sample}",)},
    "scans": {"--disk": ("--disk={tmp}",)},
    # No scan s on {tmp}: only a bad option's own error can come first.
    "gather": {"scan": ("s",), "--disk": ("--disk={tmp}",), "-o": ("-o", "{tmp}/gathered.vdif")},
    # The sample: one thread of 4 channels x 2 bits, 8192-byte payloads.
    "convert": {"IN": ("{sample}",), "OUT": ("{tmp}/converted.vdif",)},
    # --duration stops whatever would wrongly start; nothing waits for traffic.
    "record": {"--port": ("--port=0",), "--no-write": ("--no-write",), "--duration": ("--duration=1",), "--ring": ("--ring=32MiB",)},
    "monitor": {"port": ("0",), "--duration": ("--duration=1",), "--ring": ("--ring=32MiB",)},
    # Sends, if at all, 10 frames to a port on 127.0.0.1 that nobody listens on.
    "send": {"--to": ("--to=127.0.0.1:{udp}",), "--fps": ("--fps=1000",), "--frames": ("--frames=10",)},
    "spectrum": {"file": ("{sample}",), "--nfft": ("--nfft=64",)},
    "bstate": {"file": ("{sample}",)},
    "fringe": {"FILE": ("{sample}",), "--nfft": ("--nfft=64",)},
    "fringe-test": {"FILE": ("{sample}", "{sample}"), "--nfft": ("--nfft=64",)},
    # Nobody listens on {tcp}.
    "watch": {"address": ("127.0.0.1:{tcp}",), "--count": ("--count=1",)},
    "doctor": {"--quick": ("--quick",), "--path": ("--path={tmp}",)},
    # A serve that wrongly started would run until killed: every case must stop it first.
    "serve": {"--disk": ("--disk={tmp}",), "--control": ("--control=127.0.0.1:0",), "--ring": ("--ring=32MiB",)},
    # The schedule's scans are all past: an observe that wrongly started would end at once.
    "observe": {"schedule": ("{vex}",), "--station": ("--station=Ky",), "--port": ("--port=0",), "--disk": ("--disk={tmp}",),
                "--ring": ("--ring=32MiB",)},
    "plan": {"schedule": ("{vex}",), "--station": ("--station=Ky",)},
    # Nobody listens on {tcp}.
    "vsi": {"address": ("127.0.0.1:{tcp}",), "commands": ("status?",), "--timeout": ("--timeout=2",)},
    "demo": {"--seconds": ("--seconds=0.2",), "--fps": ("--fps=1000",), "--ring": ("--ring=16MiB",)},
    # Nobody listens on {tcp}: a push that wrongly started fails to connect, at once as it does
    # not ask again (a refused connection is otherwise asked again for --retry-seconds).
    "push": {"SOURCE": ("{sample}",), "--to": ("--to=127.0.0.1:{tcp}",), "--token-file": ("--token-file={token}",),
             "--retry-seconds": ("--retry-seconds=0",)},
    # A receive that wrongly started would serve until killed.
    "receive": {"--listen": ("--listen=127.0.0.1:0",), "--dir": ("--dir={tmp}/incoming",),
                "--token-file": ("--token-file={token}",)},
}


def _cases() -> list[Case]:
    out: list[Case] = []

    def c(command: str, option: str, *bad: str, allowed: str, **kw: object) -> None:
        out.append(Case(command, option, tuple(bad), allowed, **kw))  # type: ignore[arg-type]

    def flag(command: str, option: str, values: dict[str, str], **kw: object) -> None:
        for value, allowed in values.items():
            c(command, option, f"{option}={value}", allowed=allowed, **kw)

    WHOLE, NUMBER, ABOVE_0 = "whole number", "a number", "above 0"
    FPS = "1 to 16777216"
    SIZE_UNITS = r"KiB, MiB, GiB"
    EMPTY = "empty path"
    nodir = "{tmp}/nodir"

    # -- generate: the signal's settings, checked by the engine before the file is made
    c("generate", "out", "", allowed=EMPTY)
    c("generate", "out", f"{nodir}/x.vdif", allowed="No such file or directory", names=f"{nodir}/x.vdif")
    flag("generate", "--seconds", {"0": "positive", "-1": "positive", "abc": NUMBER, "1e400": "finite", "10min": NUMBER,
                                   "1e300": "at most 86400"})
    flag("generate", "--fps", {"0": FPS, "1.5": WHOLE, "": WHOLE})
    flag("generate", "--fps", {"-1": FPS, "99999999999": FPS})
    flag("generate", "--frame-size", {"8220": "multiple of 8", "0": "multiple of 8", "16": "24 to", "8KiB": WHOLE})
    flag("generate", "--frame-size", {"-8": "multiple of 8"})
    flag("generate", "--nchan", {"3": "power of two", "0": "power of two", "131072": "1 to 65536"})
    flag("generate", "--nchan", {"-1": "power of two"})
    flag("generate", "--bits", {"3": "1, 2, 4 or 8", "0": "1, 2, 4 or 8", "16": "1, 2, 4 or 8"})
    flag("generate", "--bits", {"-1": "1, 2, 4 or 8"})
    flag("generate", "--threads", {"0": "1 to 1024", "1025": "1 to 1024"})
    flag("generate", "--threads", {"-1": "1 to 1024"})
    flag("generate", "--tone-mhz", {"600": "inside the band", "-1": "inside the band", "200MHz": NUMBER, "nan": "finite"})
    flag("generate", "--tone-amplitude", {"-1": "0 to 100", "1e300": "0 to 100", "abc": NUMBER})
    flag("generate", "--edv", {"2": "0, 1 or 3", "256": "0, 1 or 3"})
    flag("generate", "--edv", {"-1": "0, 1 or 3"})
    flag("generate", "--station", {"abc": WHOLE})
    flag("generate", "--station", {"70000": "65535", "-1": "65535"})
    flag("generate", "--ref-epoch", {"abc": WHOLE})
    flag("generate", "--ref-epoch", {"64": "63"})
    flag("generate", "--ref-epoch", {"-1": "63"})
    flag("generate", "--start-second", {"abc": WHOLE})
    flag("generate", "--start-second", {"1073741824": "1073741823"})
    flag("generate", "--start-second", {"-1": "1073741823"})
    flag("generate", "--seed", {"abc": WHOLE})
    flag("generate", "--seed", {"-1": "18446744073709551615"})
    flag("generate", "--seed", {"18446744073709551616": "9223372036854775807"})
    flag("generate", "--sky-seed", {"abc": WHOLE})
    flag("generate", "--sky-seed", {"-1": "18446744073709551615"})
    flag("generate", "--correlation", {"1.5": "0 to 1", "-0.1": "0 to 1", "nan": "finite"})
    flag("generate", "--delay", {"abc": WHOLE})
    flag("generate", "--delay", {"-1": "give"})
    flag("generate", "--delay", {"99999999999": "give"}, subprocess=True)

    # -- check: options first, even when the file is missing too
    c("check", "file", "", allowed=EMPTY)
    c("check", "file", "{tmp}/nope.vdif", allowed="No such file", names="{tmp}/nope.vdif")
    flag("check", "--fps", {"0": FPS, "-1": FPS, "99999999999": FPS, "abc": WHOLE})
    flag("check", "--fps", {"99999999999999999999999": "9223372036854775807"})
    c("check", "--fps", "{tmp}/nope.vdif", "--fps=0", allowed=FPS, without=("{sample}",))
    flag("check", "--frame-size", {"0": "multiple of 8", "7": "multiple of 8", "-8": "multiple of 8", "8220": "multiple of 8", "abc": WHOLE})
    c("check", "--frame-size", "{tmp}/nope.vdif", "--frame-size=0", allowed="multiple of 8", without=("{sample}",))
    # -- scans on several disks: --disk is a directory or a glob; a glob matching nothing is named
    nothing = "{tmp}/nothing*"
    c("check", "--disk", f"--disk={nothing}", allowed="matches no directory")
    c("check", "--disk", "--disk=", allowed=EMPTY)
    flag("check", "--format", {"vdif": "choose from", "vbs": "applies to a scan"})
    c("scans", "--disk", f"--disk={nothing}", allowed="matches no directory")
    c("scans", "--disk", f"--disk={nodir}", allowed="not a directory")
    c("scans", "--disk", "--disk=", allowed=EMPTY)
    flag("scans", "--format", {"vdif": "choose from"})
    c("scans", "--name", "--disk={tmp}", "--name=r41[", allowed="shell-style pattern")
    c("scans", "--repair", "--repair=", allowed=EMPTY)
    c("scans", "--repair", "--repair=nosuchscan", allowed="check the name", names="no scan nosuchscan")
    c("gather", "scan", "", allowed=EMPTY)
    c("gather", "scan", "nosuchscan", allowed="check the name", names="no scan nosuchscan")
    c("gather", "--disk", f"--disk={nothing}", allowed="matches no directory")
    c("gather", "--disk", f"--disk={nodir}", allowed="not a directory")
    flag("gather", "--format", {"vdif": "choose from"})
    c("gather", "-o", "-o", f"{nodir}/x.vdif", allowed="not a folder")
    c("gather", "-o", "-o", "", allowed=EMPTY)
    # -- convert: every option checked against the stream before anything is written. IN comes
    # before OUT, so its cases give both.
    into = {"without": ("{tmp}/converted.vdif",)}
    c("convert", "IN", "", "{tmp}/converted.vdif", allowed=EMPTY, **into)
    c("convert", "IN", "{tmp}/nope.vdif", "{tmp}/converted.vdif", allowed="No such file", names="{tmp}/nope.vdif", **into)
    c("convert", "IN", "nosuchscan", "{tmp}/converted.vdif", "--disk={tmp}", allowed="check the name",
      names="no scan nosuchscan", **into)
    c("convert", "OUT", "", allowed=EMPTY)
    c("convert", "OUT", f"{nodir}/x.vdif", allowed="not a folder")
    c("convert", "OUT", "{tmp}", allowed="is a folder")
    c("convert", "OUT", "{tmp}/exists.vdif", allowed="--force", names="{tmp}/exists.vdif")
    c("convert", "OUT", "{sample}", "--force", allowed="is the input")
    flag("convert", "--threads", {"1": "its threads are 0", "1024": "0 to 1023", "abc": "such as 0-3,7",
                                  "": "such as 0-3,7", "3-1": "runs upwards", "0,0": "listed twice"})
    flag("convert", "--channels", {"4": "the stream has 4 channels", "0-99": "numbered 0 to 3", "-1": "such as 0-3,7",
                                   "x": "such as 0-3,7"})
    flag("convert", "--payload", {"1000": "such as 256, 512, 1024, 2048", "12": "whole 8-byte units",
                                  "16384": "more than the 8192 bytes", "0": "positive multiple of 8",
                                  "-8": "positive multiple of 8", "1KiB": WHOLE})
    c("convert", "--payload", "--channels=0", "--payload=4096", allowed="divides 2048")
    c("convert", "--disk", f"--disk={nothing}", allowed="matches no directory")
    c("convert", "--disk", f"--disk={nodir}", allowed="not a directory")
    flag("convert", "--format", {"vdif": "choose from", "vbs": "applies to a scan"})

    # -- info
    c("info", "file", "", allowed=EMPTY)
    c("info", "file", "{tmp}/nope.vdif", allowed="No such file", names="{tmp}/nope.vdif")
    flag("info", "--sample-rate", {"0": ABOVE_0, "-1": ABOVE_0, "abc": ABOVE_0, "1MHz": ABOVE_0, "inf": ABOVE_0, "nan": ABOVE_0})

    # -- record: the engine checks every option before the ring is allocated or the port bound
    flag("record", "--port", {"99999": "0..65535", "-1": "0..65535", "abc": WHOLE, "46227,x": "not a port",
                              "46227@nowhere": "IP address", "5,5": "given twice"})
    c("record", "--port", "--port={busy_udp}", allowed="in use")
    flag("record", "--bind", {"not-an-address": "IP address", "": "IP address", "999.1.1.1": "IP address"})
    flag("record", "--bind", {"192.0.2.1": "address of this host"})
    flag("record", "--multicast", {"1.2.3.4": "multicast group", "nonsense": "IP address", "": "IP address"})
    write = {"without": ("--no-write",)}
    flag("record", "--out", {"": EMPTY}, **write)
    flag("record", "--out", {f"{nodir}/x.vdif": "does not exist", "{tmp}/exists.vdif": "never overwrites"}, **write)
    flag("record", "--dir", {"": EMPTY}, **write)
    flag("record", "--dir", {nodir: "does not exist"}, **write)
    flag("record", "--dir", {"{tmp}/exists.vdif": "not a folder|not a directory"}, **write)
    in_dir = {"without": ("--no-write",), "extra": ("--dir={tmp}",)}
    flag("record", "--prefix", {"": "plain file-name prefix", "a/b": "plain file-name prefix"}, **in_dir)
    flag("record", "--prefix", {"x" * 300: "too long"}, **in_dir)
    flag("record", "--duration", {"0": ABOVE_0, "abc": ABOVE_0, "10min": ABOVE_0})
    flag("record", "--frames", {"-1": r"1\.\.", "abc": WHOLE})
    flag("record", "--frames", {"99999999999999999999999": "9223372036854775807"})
    flag("record", "--ring", {"100TiB": "smaller ring", "1": "too small: give at least",
                              "1XB": SIZE_UNITS, "-1": SIZE_UNITS, "": SIZE_UNITS, "1GHz": SIZE_UNITS})
    flag("record", "--ring", {"99999999999999999999999": "64 bits"})
    # The output is bad too: the ring is named, and nothing is created.
    c("record", "--ring", "--out={tmp}/nodir/x.vdif", "--ring=100TiB", allowed="smaller ring", without=("--no-write",))
    flag("record", "--frame-size", {"8220": "multiple of 8", "0": "multiple of 8", "99999999999": "65504"})
    flag("record", "--offset", {"-1": r"0\.\.64", "100000": r"0\.\.64"})
    flag("record", "--fps", {"0": FPS, "99999999999": FPS})
    flag("record", "--file-size", {"0": "at least", "1": "at least", "1XB": SIZE_UNITS, "-1": SIZE_UNITS}, **in_dir)
    for cpu in ("--capture-cpu", "--writer-cpu"):
        flag("record", cpu, {"-1": r"0\.\.4095", "99999": r"0\.\.4095", "abc": WHOLE})
    flag("record", "--rcvbuf", {"0": "2GiB", "1QB": SIZE_UNITS, "-1": SIZE_UNITS})
    flag("record", "--backend", {"nonsense": "udp, afpacket or pfring", "": "udp, afpacket or pfring"})
    raw_port = ("--port={udp}",)
    flag("record", "--interface", {"": "ip link"}, extra=("--backend=afpacket", *raw_port))
    flag("record", "--pfring-library", {"": EMPTY}, extra=("--backend=pfring", "--interface=lo", *raw_port))
    flag("record", "--summary-json", {"": EMPTY, f"{nodir}/s.json": "existing folder", "{tmp}": "file name"})
    flag("record", "--status-listen", {"nonsense": "HOST:PORT", "99999": "HOST:PORT", "127.0.0.1:99999": "HOST:PORT",
                                       "": "HOST:PORT", "127.0.0.1:{busy_tcp}": "another address or port"})
    flag("record", "--status-listen", {"192.0.2.1:8089": "another address"})
    share = r"share of a second: give a number in \(0, 1\]"
    flag("record", "--live-fraction", {"0": share, "1.5": share, "-0.1": share, "abc": "expected a number", "nan": "finite number"})
    flag("record", "--live-nfft", {"8": r"16\.\.65536", "100000": r"16\.\.65536", "abc": WHOLE})
    # Without --status-listen the monitor does not run: its settings would be silently unused.
    c("record", "--live-fraction", "--live-fraction=0.5", allowed="the live monitor is off")
    c("record", "--live-nfft", "--live-nfft=256", allowed="the live monitor is off")
    # Scans: the disks and the name are checked before the ring is allocated; the name, start
    # and stop when the scan starts (the recorder then stops at once, having written nothing).
    scan = {"without": ("--no-write",), "extra": ("--disk={tmp}", "--scan=s")}
    flag("record", "--disk", {"": EMPTY, nodir: "does not exist", "{tmp}/none*": "matches no directory"},
         without=("--no-write",), extra=("--scan=s",))
    flag("record", "--scan", {"a.b": "letters, digits", "x" * 65: "at most 64", "": "name the scan"},
         without=("--no-write",), extra=("--disk={tmp}",))
    flag("record", "--start", {"yesterday": "UTC time", "2026-13-01T00:00:00": "UTC time"}, **scan)
    flag("record", "--stop", {"yesterday": "UTC time"}, **scan)
    c("record", "--stop", "--start=2026-11-30T22:00:00", "--stop=2026-11-30T21:00:00", allowed="after it starts", **scan)
    flag("record", "--format", {"mk5": "file, vbs or mk6"}, **scan)
    flag("record", "--chunk-size", {"0": "at least", "1XB": SIZE_UNITS}, **scan)
    flag("record", "--writers", {"0": r"1\.\.64", "abc": WHOLE}, **scan)
    flag("record", "--split", {"port": "thread, station or sender", "": "thread, station or sender"}, **scan)
    flag("record", "--disk-fault", {"nonsense": "DIR=full@SIZE", "{tmp}=melt@1MiB": "full or error",
                                    "/elsewhere=full@1MiB": "not one of the disks"}, **scan)
    # Forwarding: every destination is read and its host resolved before anything binds.
    bad_destinations = {"udp://nowhere": "not HOST:PORT", "udp://127.0.0.1:70000": "1 to 65535",
                        "http://127.0.0.1:80": "udp.*udps.*tcp", "127.0.0.1:46227": "no scheme",
                        "udp://127.0.0.1:46227?colour=red": "threads, channels, payload, rate or ipd",
                        "udp://127.0.0.1:46227?rate=fast": "bits per second"}
    flag("record", "--forward", bad_destinations)

    # -- serve and observe: the capture and scan options as record's (checked by the engine
    # before the control port, any data port or the schedule's first scan), and their own
    for sv in ("serve", "observe"):
        flag(sv, "--port", {"99999": "0..65535", "abc": WHOLE, "46227,x": "not a port"})
        flag(sv, "--bind", {"not-an-address": "IP address", "192.0.2.1": "address of this host"})
        flag(sv, "--multicast", {"1.2.3.4": "multicast group"})
        flag(sv, "--ring", {"100TiB": "smaller ring", "1XB": SIZE_UNITS})
        flag(sv, "--frame-size", {"8220": "multiple of 8"})
        flag(sv, "--offset", {"-1": r"0\.\.64"})
        flag(sv, "--fps", {"0": FPS})
        for cpu in ("--capture-cpu", "--writer-cpu"):
            flag(sv, cpu, {"-1": r"0\.\.4095", "abc": WHOLE})
        flag(sv, "--rcvbuf", {"0": "2GiB", "1QB": SIZE_UNITS})
        flag(sv, "--backend", {"nonsense": "udp, afpacket or pfring"})
        flag(sv, "--interface", {"": "ip link"}, extra=("--backend=afpacket", *raw_port))
        flag(sv, "--pfring-library", {"": EMPTY}, extra=("--backend=pfring", "--interface=lo", *raw_port))
        flag(sv, "--status-listen", {"nonsense": "HOST:PORT", "127.0.0.1:99999": "HOST:PORT"})
        flag(sv, "--live-fraction", {"0": share, "2": share})
        flag(sv, "--live-nfft", {"8": r"16\.\.65536"})
        flag(sv, "--disk", {"": EMPTY, nodir: "does not exist", "{tmp}/none*": "matches no directory"})
        flag(sv, "--format", {"mk5": "file, vbs or mk6"})
        flag(sv, "--chunk-size", {"0": "at least", "1XB": SIZE_UNITS})
        flag(sv, "--writers", {"0": r"1\.\.64", "abc": WHOLE})
        flag(sv, "--split", {"port": "thread, station or sender"})
        flag(sv, "--disk-fault", {"nonsense": "DIR=full@SIZE", "/elsewhere=full@1MiB": "not one of the disks"})
        flag(sv, "--forward", {"udp://nowhere": "not HOST:PORT", "tcp://127.0.0.1:0": "1 to 65535",
                               "http://127.0.0.1:80": "udp.*udps.*tcp"})
    sv = "serve"
    control = r"\[HOST:\]PORT"
    flag(sv, "--control", {"nonsense": control, "99999": control, ":2620": control, "": control})
    c(sv, "--control", "--control=127.0.0.1:{busy_tcp}", allowed="in use")
    c(sv, "--port", "--port={busy_udp}", allowed="in use")
    flag(sv, "--gather-dir", {"": EMPTY, nodir: "not a directory", "{tmp}/exists.vdif": "not a directory"})
    flag(sv, "--log", {"": EMPTY, f"{nodir}/log.txt": "cannot write", "{tmp}": "cannot write"})
    flag(sv, "--idle-timeout", {"0": ABOVE_0, "abc": ABOVE_0, "-5": ABOVE_0})
    ob = "observe"
    c(ob, "schedule", "{tmp}/none.vex", allowed="No such file", names="{tmp}/none.vex")
    c(ob, "schedule", "{tmp}/junk.txt", allowed=r"junk\.txt:1:1: not a VEX file.*VEX_rev", names="{tmp}/junk.txt")
    flag(ob, "--station", {"Xx": "Ky, Kt, Wb"}, names="Xx")
    c(ob, "--from", "--from=No9999", allowed="its scans: No0001", names="No9999")
    ship = ("--ship-to=127.0.0.1:{tcp}", "--token-file={token}")
    flag(ob, "--ship-to", {"nonsense": "HOST:PORT", "127.0.0.1:0": "HOST:PORT"}, extra=("--token-file={token}",))
    c(ob, "--ship-to", "--ship-to=127.0.0.1:{tcp}", allowed="needs --token-file")
    flag(ob, "--token-file", {"{tmp}/none": "cannot read", "{tmp}/short_token": "at least 16"}, extra=ship[:1])
    flag(ob, "--token-file", {"": EMPTY})
    c(ob, "--token-file", "--token-file={token}", allowed="go with --ship-to")
    flag(ob, "--ship-rate", {"fast": "bits per second", "4": "bits per second"}, extra=ship)
    flag(ob, "--summary-json", {"": EMPTY, f"{nodir}/s.json": "folder does not exist"})
    flag(ob, "--clock-limit", {"0": ABOVE_0, "abc": ABOVE_0, "-1": ABOVE_0})

    # -- plan: the schedule, the station, where it would be recorded
    c("plan", "schedule", "{tmp}/none.vex", allowed="No such file|cannot read", names="{tmp}/none.vex")
    c("plan", "schedule", "{tmp}/junk.txt", allowed=r"junk\.txt:1:1: not a VEX file.*VEX_rev", names="{tmp}/junk.txt")
    flag("plan", "--station", {"Xx": "Ky, Kt, Wb"}, names="Xx")
    flag("plan", "--disk", {"": EMPTY, "{tmp}/none*": "matches no"})
    flag("plan", "--now", {"yesterday": "ISO 8601"})

    # -- vsi: the address's form and the commands are checked before connecting
    for address in ("127.0.0.1:abc", "127.0.0.1:99999", "host:"):
        c("vsi", "address", address, "status?", allowed=r"HOST\[:PORT\]", without=("status?",))
    c("vsi", "commands", "", allowed="at least one command")
    c("vsi", "commands", ";;", allowed="at least one command")
    flag("vsi", "--timeout", {"0": ABOVE_0, "abc": ABOVE_0})

    # -- send: the engine checks every option before the first datagram
    flag("send", "--to", {"nonsense": "HOST:PORT", "": "HOST:PORT", "127.0.0.1": "HOST:PORT",
                          "127.0.0.1:99999": "1 to 65535", "127.0.0.1:0": "1 to 65535"})
    flag("send", "--duration", {"-1": "positive", "abc": NUMBER, "nan": "finite"})
    flag("send", "--frames", {"0": r"1\.\.", "abc": WHOLE})
    flag("send", "--fps", {"0": FPS, "1.5": WHOLE})
    flag("send", "--fps", {"-1": FPS})
    flag("send", "--frame-size", {"8220": "multiple of 8"})
    flag("send", "--nchan", {"3": "power of two"})
    flag("send", "--bits", {"3": "1, 2, 4 or 8"})
    flag("send", "--threads", {"0": "1 to 1024"})
    flag("send", "--tone-mhz", {"600": "inside the band", "200MHz": NUMBER})
    flag("send", "--tone-amplitude", {"-1": "0 to 100"})
    flag("send", "--edv", {"2": "0, 1 or 3"})
    flag("send", "--station", {"abc": WHOLE})
    flag("send", "--station", {"70000": "65535"})
    flag("send", "--ref-epoch", {"abc": WHOLE})
    flag("send", "--ref-epoch", {"64": "63"})
    flag("send", "--start-second", {"abc": WHOLE})
    flag("send", "--start-second", {"1073741824": "1073741823"})
    flag("send", "--seed", {"abc": WHOLE})
    flag("send", "--sky-seed", {"abc": WHOLE})
    flag("send", "--drop", {"bogus": "S:A-B", "3:9-1": "A <= B", "every:0": "positive N"})
    flag("send", "--drop", {"": "S:A-B"})
    flag("send", "--reorder", {"0": r"1\.\.", "abc": WHOLE})
    flag("send", "--garbage", {"-1": r"0\.\."})
    flag("send", "--garbage", {"99999999999999999999999": "9223372036854775807"})
    flag("send", "--file", {"": EMPTY})
    flag("send", "--file", {"{tmp}/nope.vdif": "No such file", "{tmp}/junk.txt": "frame"})
    flag("send", "--to", {"http://127.0.0.1:9": "udp://.*udps://.*tcp://", "tcp://127.0.0.1:{tcp}": "nobody accepts"})
    c("send", "--to", "--to=tcp://127.0.0.1:{tcp}", "--psn", allowed="udps://", names="--psn")
    flag("send", "--scan", {"": EMPTY})
    c("send", "--scan", "--scan=s", allowed="none given", names="--disk")  # no --disk
    c("send", "--scan", "--scan=nope", "--disk={tmp}", allowed="no scan", names="nope")
    c("send", "--scan", "--scan=s", "--disk={tmp}", "--file={sample}", allowed="not both")  # with --file
    flag("send", "--disk", {"": EMPTY, "{tmp}/nodir*": "matches no"})
    c("send", "--disk", "--disk={tmp}", allowed="give scan")  # no --scan
    flag("send", "--format", {"tape": "invalid choice"})
    flag("send", "--rate", {"4": "bits per second", "fast": "bits per second", "0Gbps": "bits per second"})
    c("send", "--rate", "--rate=4Gbps", allowed="paces a replay")  # nothing replayed
    flag("send", "--record-sent", {"": EMPTY})
    flag("send", "--record-sent", {f"{nodir}/x.vdif": "No such file"})
    flag("send", "--cpu", {"-1": r"0\.\.4095", "99999": r"0\.\.4095", "abc": WHOLE})

    # -- monitor
    for port, allowed in {"99999": "0..65535", "-1": "0..65535", "abc": WHOLE, "": WHOLE}.items():
        c("monitor", "port", port, allowed=re.escape(allowed))
    c("monitor", "port", "{busy_udp}", allowed="in use")
    flag("monitor", "--bind", {"nonsense": "IP address", "": "IP address"})
    flag("monitor", "--offset", {"-1": r"0\.\.64", "100000": r"0\.\.64"})
    flag("monitor", "--thread", {"1024": "0-1023", "-1": "0-1023", "abc": WHOLE})
    flag("monitor", "--cpu", {"-1": r"0\.\.4095", "99999": r"0\.\.4095"})
    flag("monitor", "--fps", {"0": FPS})
    flag("monitor", "--ring", {"100TiB": "smaller ring", "0": "too small: give at least", "1XB": SIZE_UNITS})
    flag("monitor", "--duration", {"-1": ABOVE_0, "abc": ABOVE_0})

    # -- spectrum, bstate, fringe
    for command in ("spectrum", "bstate"):
        c(command, "file", "", allowed=EMPTY)
        c(command, "file", "{tmp}/nope.vdif", allowed="No such file", names="{tmp}/nope.vdif")
        flag(command, "--sample-rate", {"0": ABOVE_0, "-1": ABOVE_0, "1MHz": ABOVE_0})
    flag("spectrum", "--nfft", {"0": ABOVE_0, "-1": ABOVE_0, "1.5": ABOVE_0, "abc": ABOVE_0,
                                "1000000": "smaller nfft", "99999999999999999999999": "smaller nfft"})
    c("spectrum", "--nfft", "{tmp}/nope.vdif", "--nfft=0", allowed=ABOVE_0, without=("{sample}",))
    flag("spectrum", "--nint", {"0": ABOVE_0, "-1": ABOVE_0, "1.5": ABOVE_0})
    flag("spectrum", "--threshold", {"0": ABOVE_0, "-1": ABOVE_0, "abc": ABOVE_0, "inf": ABOVE_0})
    flag("spectrum", "--plot", {"": EMPTY, f"{nodir}/x.png": "existing folder", "{tmp}/x.xyz": r"\.png", "{tmp}": "file name"})
    flag("spectrum", "--m5spec", {"": EMPTY, f"{nodir}/x.txt": "existing folder"})
    c("fringe", "FILE", "", allowed=EMPTY)
    c("fringe", "FILE", "{tmp}/nope.vdif", allowed="No such file", names="{tmp}/nope.vdif")
    c("fringe", "FILE", "{sample}", "{sample}", "{sample}", allowed="two files")
    flag("fringe", "--pair", {"abc": "'I,J'", "0": "'I,J'", "0,1,2": "'I,J'", "": "'I,J'",
                              "0,99": r"0\.\.3", "-1,0": r"0\.\.3", "0,0": "two different inputs"})
    flag("fringe", "--nfft", {"0": ABOVE_0, "-1": ABOVE_0, "1": ">= 2", "1000000": "smaller nfft", "99999999999": "smaller nfft"})
    flag("fringe", "--nint", {"0": ABOVE_0, "-1": ABOVE_0})
    flag("fringe", "--plot", {"": EMPTY, f"{nodir}/x.png": "existing folder", "{tmp}/x.xyz": r"\.png"})
    flag("fringe", "--sample-rate", {"0": ABOVE_0, "1MHz": ABOVE_0})
    flag("fringe", "--max-delay", {"-1": ">= 0", "abc": WHOLE, "1.5": WHOLE})
    flag("fringe", "--snr-threshold", {"0": ABOVE_0, "-3": ABOVE_0, "abc": ABOVE_0})
    c("fringe-test", "FILE", "", "{sample}", allowed=EMPTY)
    c("fringe-test", "FILE", "{tmp}/nope.vdif", "{sample}", allowed="No such file", names="{tmp}/nope.vdif")
    c("fringe-test", "FILE", "{sample}", allowed="two or more")
    flag("fringe-test", "--names", {"A": "different names", "A,A": "different names", "A,": "different names"})
    flag("fringe-test", "--seconds", {"0": ABOVE_0, "-1": ABOVE_0})
    flag("fringe-test", "--nfft", {"0": ABOVE_0, "1": ">= 2"})
    flag("fringe-test", "--channels", {"abc": "'I,J", "9": r"0\.\.3"})
    flag("fringe-test", "--clock-offset", {"Ku": "STATION=SECONDS", "Ku=abc": "STATION=SECONDS", "Kq=1": "not one of the stations"})
    flag("fringe-test", "--stretches", {"0": ABOVE_0})
    # (Nobody listening costs distributed's 10 s connect timeout: a bad scheme fails at once.)
    flag("fringe-test", "--scheduler", {"nonsense://127.0.0.1:{tcp}": "no Dask scheduler answers"})
    flag("fringe-test", "--sample-rate", {"0": ABOVE_0})
    flag("fringe-test", "--plot", {"": EMPTY, "{tmp}/x.xyz": r"\.png"})
    flag("fringe-test", "--max-delay", {"-1": ">= 0"})
    flag("fringe-test", "--snr-threshold", {"0": ABOVE_0})

    # -- watch: the address's form is checked; whether anyone answers is what watch reports
    for address in ("", "nonsense", "127.0.0.1:99999", "127.0.0.1:abc", "127.0.0.1:-1", "127.0.0.1:0"):
        c("watch", "address", address, allowed="HOST:PORT")
    c("watch", "address", "https://127.0.0.1:1", allowed="plain http")
    c("watch", "address", "127.0.0.1:{tcp}", "http://127.0.0.1:{tcp}/", allowed="give each once")
    flag("watch", "--every", {"0": ABOVE_0, "-1": ABOVE_0, "abc": ABOVE_0, "3s": ABOVE_0})
    flag("watch", "--count", {"0": ABOVE_0, "-1": ABOVE_0, "1.5": ABOVE_0})
    flag("watch", "--stalled-after", {"0": ABOVE_0, "-1": ABOVE_0, "abc": ABOVE_0})

    # -- push and receive: checked before anything is read, bound or connected
    c("push", "SOURCE", "", allowed=EMPTY)
    c("push", "SOURCE", "{tmp}/nope.vdif", allowed="No such file", names="{tmp}/nope.vdif")
    c("push", "SOURCE", "{tmp}", allowed="not a file")
    c("push", "SOURCE", "{tmp}/bad name.vdif", allowed="would refuse its name")
    for to in ("nonsense", "127.0.0.1:0", "127.0.0.1:99999", ":2630"):
        flag("push", "--to", {to: "HOST:PORT"})
    for command in ("push", "receive"):
        flag(command, "--token-file", {"": EMPTY, "{tmp}/none": "cannot read", "{tmp}/junk.txt": "chmod 600",
                                       "{tmp}/short_token": "at least 16"})
    flag("push", "--disk", {"": EMPTY, "{tmp}/nodir*": "matches no"})
    c("push", "--disk", "--disk={tmp}", allowed="not found|no scan", names="s1", extra=("s1",), without=("{sample}",))
    flag("push", "--as", {"tape": "invalid choice"})
    c("push", "--as", "--as=vbs", allowed="name the disks", names="--as")
    flag("push", "--streams", {"0": r"1\.\.256", "1000": r"1\.\.256", "many": "number of streams or auto"})
    flag("push", "--max-streams", {"0": r"1\.\.256", "abc": WHOLE})
    flag("push", "--block-size", {"1000": "multiple of 4KiB", "2GiB": "64KiB to 1GiB", "1XB": SIZE_UNITS})
    flag("push", "--rate", {"4": "bits per second", "fast": "bits per second", "0Gbps": "bits per second"})
    flag("push", "--retry-seconds", {"-1": ">= 0", "abc": NUMBER})
    flag("receive", "--listen", {"nonsense": "HOST:PORT", "127.0.0.1:99999": "HOST:PORT",
                                 "127.0.0.1:{busy_tcp}": "cannot listen"})
    flag("receive", "--dir", {"": EMPTY, "{tmp}/exists.vdif": "not a directory"})
    flag("receive", "--max-connections", {"1": r"2\.\.4096", "abc": WHOLE})
    flag("receive", "--max-memory", {"1KiB": "at least 64KiB", "1XB": SIZE_UNITS})

    # -- doctor: what the checks are about must exist
    flag("doctor", "--interface", {"": "ip link", "no-such-if0": "ip link"})
    flag("doctor", "--path", {"": EMPTY, nodir: "not a folder", "{tmp}/exists.vdif": "not a folder"})
    flag("doctor", "--ring", {"100TiB": "smaller ring", "0": "too small: give at least", "1XB": SIZE_UNITS, "-1": SIZE_UNITS, "": SIZE_UNITS})

    # -- demo
    flag("demo", "--seconds", {"0": ABOVE_0, "abc": ABOVE_0})
    flag("demo", "--fps", {"0": FPS, "99999999999": FPS})
    flag("demo", "--ring", {"100TiB": "smaller ring", "0": "too small: give at least", "1XB": SIZE_UNITS})
    flag("demo", "--keep", {"": EMPTY, "{tmp}/exists.vdif": "not a folder", "{tmp}/exists.vdif/sub": "cannot make the folder"})
    return out


CASES = _cases()


def argv_of(case: Case, env: dict[str, str]) -> list[str]:
    """The command line of a case: the bad value, with valid values for every other option."""
    valid = [a for option, args in VALID[case.command].items() if option != case.option for a in args]
    valid = [a for a in valid if a not in case.without]
    return [a.format(**env) for a in (case.command, *valid, *case.extra, *case.bad)]


# -- running them ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Outcome:
    returncode: int | None
    stdout: str
    stderr: str


def run_subprocess(argv: list[str], environ: dict[str, str] | None = None) -> Outcome:
    """conftest's run_cli, with the environment given explicitly: these run in threads while
    the tests (monkeypatch.setenv) change this process's environment, and a child that execs
    with the live `environ` of a vfork'ed parent can find it reallocated (EFAULT)."""
    cmd = [sys.executable, "-m", "vdifrec.cli", *argv]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                           env=dict(os.environ) if environ is None else environ)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return Outcome(None, out, err + f"\n(still running after {TIMEOUT:g} s: killed)")
    return Outcome(r.returncode, r.stdout, r.stderr)


def run_in_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Outcome:
    capsys.readouterr()
    code: int | None
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            code = 1
        else:
            code = exc.code or 0
    except Exception:
        out, err = capsys.readouterr()
        return Outcome(1, out, err + traceback.format_exc())
    out, err = capsys.readouterr()
    return Outcome(code, out, err)


def in_subprocess(case: Case) -> bool:
    return case.command in SUBPROCESS or case.subprocess


def free_tcp_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (free at the time of asking)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Placeholders of the cases: a folder, the sample file, a UDP and a TCP port on 127.0.0.1
    that nobody listens on, and a UDP and a TCP port that are taken (held open meanwhile)."""
    tmp = tmp_path_factory.mktemp("bad_input")
    (tmp / "exists.vdif").write_bytes(b"")
    (tmp / "junk.txt").write_text("not a VDIF file\n" * 100)
    (tmp / "bad name.vdif").write_bytes(b"\0" * 8224)
    (tmp / "token").write_text("a-token-of-some-length\n")
    (tmp / "token").chmod(0o600)
    (tmp / "short_token").write_text("short\n")
    (tmp / "short_token").chmod(0o600)
    busy_udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    busy_udp.bind(("127.0.0.1", 0))
    busy_tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy_tcp.bind(("127.0.0.1", 0))
    busy_tcp.listen()
    try:
        yield {
            "tmp": str(tmp),
            "token": str(tmp / "token"),
            "vex": str(Path(__file__).parent / "data" / "vex" / "three_stations.vex"),
            "sample": str(vdifrec.SAMPLE_VDIF),
            "udp": str(free_udp_port()),
            "tcp": str(free_tcp_port()),
            "busy_udp": str(busy_udp.getsockname()[1]),
            "busy_tcp": str(busy_tcp.getsockname()[1]),
        }
    finally:
        busy_udp.close()
        busy_tcp.close()


@pytest.fixture(scope="module")
def subprocess_outcomes(request: pytest.FixtureRequest, env: dict[str, str]) -> Iterator[dict[Case, concurrent.futures.Future[Outcome]]]:
    """The subprocess cases this session selected, started together (a few at a time): each
    test waits for its own."""
    params = [getattr(getattr(item, "callspec", None), "params", {}) for item in request.session.items]
    selected = [p["case"] for p in params if isinstance(p.get("case"), Case)]
    wanted = list(dict.fromkeys(c for c in selected if in_subprocess(c)))
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, min(4, (os.cpu_count() or 2) + 1)))
    try:
        environ = dict(os.environ, ASTROPY_SKIP_CONFIG_UPDATE="1")
        yield {c: pool.submit(run_subprocess, argv_of(c, env), environ) for c in wanted}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _param(case: Case) -> object:
    # A case run in a process of its own starts Python and vdifrec (a third of a second):
    # make check leaves those to make test.
    return pytest.param(case, id=case.id, marks=[pytest.mark.slow] if in_subprocess(case) else [])


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_bad_value(case: Case, env: dict[str, str], subprocess_outcomes: dict[Case, concurrent.futures.Future[Outcome]],
                   capsys: pytest.CaptureFixture[str]) -> None:
    argv = argv_of(case, env)
    if in_subprocess(case):
        future = subprocess_outcomes.get(case)
        r = future.result() if future is not None else run_subprocess(argv)
    else:
        r = run_in_process(argv, capsys)
    shown = f"vdifrec {' '.join(argv)}\nexit status {r.returncode}\nstderr:\n{r.stderr}\nstdout:\n{r.stdout[-2000:]}"
    assert "Traceback" not in r.stderr + r.stdout, shown
    assert "listening on" not in r.stdout, shown
    assert r.returncode == 2, shown
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), shown
    names = (case.names or case.option).format(**env)
    assert names in lines[0], f"the line does not name {names}\n{shown}"
    assert re.search(case.allowed.format(**env), lines[0], re.IGNORECASE), f"the line does not say what is allowed ({case.allowed})\n{shown}"


# -- the table covers the parser -------------------------------------------------------------


def option_name(action: argparse.Action) -> str:
    return action.option_strings[0] if action.option_strings else str(action.metavar or action.dest)


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    subparsers = parser._subparsers._group_actions[0]  # type: ignore[union-attr]
    assert isinstance(subparsers, argparse._SubParsersAction)
    return dict(subparsers.choices)


def parser_options() -> set[tuple[str, str]]:
    """(subcommand, option) of every option that takes a value: flags without one (store_true,
    store_false, --help, --version) have no bad value."""
    return {
        (name, option_name(action))
        for name, sub in subcommands().items()
        for action in sub._actions
        if action.nargs != 0
    }


def test_every_option_has_a_bad_value() -> None:
    covered = {(c.command, c.option) for c in CASES}
    have = parser_options()
    assert not have - covered, f"options without a bad value here: {sorted(have - covered)}"
    assert not covered - have, f"cases for options the parser does not have: {sorted(covered - have)}"
    subs = subcommands()
    assert set(subs) == set(VALID), "every subcommand has its valid arguments in VALID"
    for command, valid in VALID.items():
        options = {option_name(a) for a in subs[command]._actions}
        assert set(valid) <= options, f"VALID[{command!r}] names options {command} does not have: {set(valid) - options}"
