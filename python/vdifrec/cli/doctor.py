"""`vdifrec doctor`: the host's tuning, checked, with the commands that fix what is not."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from .. import _core
from ..doctor import run_checks
from .args import DEFAULTS, UsageError, default, path, size

MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "skip": "--"}


def add_doctor(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check this host's tuning for loss-free recording (each finding with its fix)")
    p.add_argument("--interface", default=None, help="the network interface the stream arrives on")
    p.add_argument("--path", type=path, default=".", help="where recordings go (free space, write test; default .)")
    p.add_argument("--ring", type=size, help=f"the ring size you record with (default {default('recorder', 'ring')})")
    p.add_argument("--quick", action="store_true", help="a shorter write test (the whole run under 5 s)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON, keyed by check")
    p.set_defaults(func=run_doctor)


def run_doctor(a: argparse.Namespace) -> int:
    # What the checks are about must exist: a typo is a usage error, not a finding.
    if a.interface is not None and os.path.isdir("/sys/class/net"):
        if not a.interface or "/" in a.interface or not os.path.exists(f"/sys/class/net/{a.interface}"):
            raise UsageError(f"--interface: no network interface named {a.interface!r} here (`ip link` lists them)")
    if not os.path.isdir(a.path):
        raise UsageError(f"--path: {a.path} is not a folder: give the folder recordings go to")
    if a.ring is not None:
        from ..recorder import Recorder

        Recorder(ring=a.ring)  # the engine checks the ring as `record` would, and starts nothing
    ring = _core.parse_size_arg("ring", str(a.ring if a.ring is not None else DEFAULTS["recorder"]["ring"]))
    findings = run_checks(a.interface, a.path, a.quick, ring)
    if a.json:
        print(json.dumps({f.name: f.to_dict() for f in findings}, indent=1))
    else:
        width = max(len(f.name) for f in findings)
        for f in findings:
            print(f"{f.name:<{width}}  {MARK[f.status]:<4}  {f.message}")
            if f.fix and f.status in ("warn", "fail"):
                print(f"{'':<{width}}        fix: {f.fix}")
    return 1 if any(f.status == "fail" for f in findings) else 0


if __name__ == "__main__":
    sys.exit(run_doctor(argparse.Namespace(interface=None, path=".", ring=None, quick=True, json=False)))
