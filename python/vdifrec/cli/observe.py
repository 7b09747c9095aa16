"""`vdifrec observe`: run a station's part of an observation from its VEX schedule (see
:mod:`vdifrec.observing`): receive all the time, record each scan exactly over its window,
check the stream against the mode and the host clock, ship each scan while the next records."""

from __future__ import annotations

import argparse
import os
from typing import Any

from .. import _core
from ..observing import observe
from ..observing.checks import CLOCK_LIMIT_S
from ..schedule import ScheduleError, VexError
from .args import (
    OK,
    PROBLEMS,
    OptionError,
    UsageError,
    add_capture_arguments,
    add_scan_arguments,
    check_bind,
    scan_recorder_options,
    os_error,
    path,
    positive,
    sigterm_as_interrupt,
)

#: The engine's names for where shipping goes, as observe's flags name them.
_SHIP_OPTIONS = {"to": "ship_to", "rate": "ship_rate", "token_file": "token_file"}


def add_observe(sub: Any) -> None:
    p = sub.add_parser(
        "observe",
        help="run a station's observation from its VEX schedule: record every scan frame-exact, check the stream, ship each scan",
        description="Receive the stream all the time and record each of the station's scans of the VEX schedule "
        "(1.5 or 2.0) as a scan holding exactly the frames whose VDIF time lies in its window (start + data_good to "
        "start + data_stop), named <experiment>_<station>_<scan> as jive5ab names it; scans back to back lose no "
        "frame between them. Before each scan the stream is checked against the scan's mode (frame size, channels, "
        "bits, threads, frame rate) and its VDIF time against the host clock: a difference is flagged loudly and "
        "recorded all the same. One line per scan (frames expected and recorded, lost by cause, OK or NOT OK), then "
        "the session's summary. With --ship-to each finished scan is pushed while the next records. Restarted with "
        "the same schedule and disks, it leaves the scans on the disks alone, records the rest, and joins a scan "
        "under way from now on (under jive5ab's suffix rule). SIGINT/SIGTERM closes the scan recording cleanly. "
        "Exit status 0 when every scan was recorded whole as scheduled (and shipped verified), 1 otherwise, 2 on "
        "usage errors and schedules that cannot be read.",
    )
    p.add_argument("schedule", type=path, help="the VEX file (1.5 or 2.0)")
    p.add_argument("--station", required=True, help="the station's code as the schedule writes it (Ky; any case)")
    add_capture_arguments(p, port_required=True)
    add_scan_arguments(p, disks_required=True)
    p.add_argument("--from", dest="from_scan", metavar="SCAN", help="start at this scan of the schedule (those before it are not recorded)")
    p.add_argument("--ship-to", metavar="HOST:PORT", help="push each finished scan to this receiver (vdifrec receive) while the next records")
    p.add_argument("--token-file", type=path, metavar="FILE", help="the receiver's shared token (with --ship-to)")
    p.add_argument("--ship-rate", metavar="RATE", help="cap shipping's rate: 2Gbps (bits per second) or 250MB/s (bytes); shipping runs at low priority in any case")
    p.add_argument("--summary-json", type=path, metavar="FILE", help="also write the session summary there, as JSON")
    p.add_argument("--clock-limit", type=positive(), default=CLOCK_LIMIT_S, metavar="SECONDS",
                   help=f"flag a stream whose VDIF time stays further than this from the host clock (default {CLOCK_LIMIT_S:g})")
    p.set_defaults(func=run_observe)


def run_observe(a: argparse.Namespace) -> int:
    # Every option is checked now, before the schedule's first scan and before any port is bound.
    options, disks = scan_recorder_options(a)
    check_bind(options)
    if a.ship_to and not a.token_file:
        raise UsageError("--ship-to needs --token-file: the receiver's shared token")
    if (a.token_file or a.ship_rate) and not a.ship_to:
        raise UsageError("--token-file and --ship-rate go with --ship-to: give the receiver as --ship-to HOST:PORT")
    if a.summary_json and not os.path.isdir(os.path.dirname(os.path.abspath(a.summary_json))):
        raise OptionError(f"summary_json: cannot write {a.summary_json}: its folder does not exist")
    if a.ship_to:
        try:
            _core.check_push_destination(a.ship_to, a.token_file, a.ship_rate)
        except _core.ArgumentError as exc:
            name, sep, why = str(exc).partition(": ")
            raise OptionError(f"{_SHIP_OPTIONS.get(name, name)}{sep}{why}") from None
    try:
        with sigterm_as_interrupt():
            summary = observe(
                a.schedule,
                a.station,
                disks=disks,
                from_scan=a.from_scan,
                ship_to=a.ship_to,
                token_file=a.token_file,
                ship_rate=a.ship_rate,
                summary_json=a.summary_json,
                clock_limit_s=a.clock_limit,
                on_line=lambda line: print(line, flush=True),
                **options,
            )
    except (VexError, ScheduleError) as exc:
        raise UsageError(str(exc)) from None
    except (_core.PortInUseError, _core.OutputError) as exc:
        raise OptionError(str(exc)) from None
    except OSError as exc:
        raise UsageError(os_error(exc)) from None
    for line in summary.lines():
        print(line)
    return OK if summary.ok else PROBLEMS
