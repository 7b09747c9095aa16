"""The ``vdifrec`` command line: one module per family of commands, the options they share in
:mod:`vdifrec.cli.args`, what they print in :mod:`vdifrec.cli.printing`. No command module
imports another. ``python -m vdifrec.cli`` runs it as the ``vdifrec`` command does."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from .. import _core
from . import analysis, convert, doctor, files, fringe_test, monitor, observe, plan, record, scans, serve, transfer, watch
from .args import USAGE, OptionError, Parser, UsageError, argument_error

__all__ = ["build_parser", "main"]

#: Every command, in the order `vdifrec --help` lists them.
_COMMANDS: list[Callable[[Any], None]] = [
    files.add_generate,
    files.add_check,
    files.add_info,
    scans.add_scans,
    convert.add_convert,
    plan.add_plan,
    observe.add_observe,
    record.add_record,
    record.add_send,
    serve.add_serve,
    serve.add_vsi,
    monitor.add_monitor,
    analysis.add_analysis,
    fringe_test.add_fringe_test,
    watch.add_watch,
    transfer.add_push,
    transfer.add_receive,
    doctor.add_doctor,
    record.add_demo,
]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="vdifrec",
        description="Record 10 GbE VDIF streams without losing a byte; check what was recorded.",
    )
    p.add_argument("--version", action="version", version=f"vdifrec {_core.__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for add in _COMMANDS:
        add(sub)
    return p


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[command]
            return sub
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except (_core.ArgumentError, OptionError) as exc:
        # The engine (or the Python API) names the parameter; the operator typed a flag.
        parser.exit(USAGE, f"vdifrec {args.command}: error: {argument_error(_subparser(parser, args.command), exc)}\n")
    except UsageError as exc:
        parser.exit(USAGE, f"vdifrec {args.command}: error: {exc}\n")
    except KeyboardInterrupt:
        return 130
    return code

