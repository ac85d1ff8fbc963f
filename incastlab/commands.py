"""Subcommands that delegate to the later stages: compare, straggler, report, analyze, inspect."""

from __future__ import annotations

import argparse
from typing import Any


def _delegate(module: str, func: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        import importlib

        return int(getattr(importlib.import_module(module), func)(args.rest))

    return run


def register(sub: Any) -> None:
    """Add the late subcommands to the `incastlab` parser."""
    for name, module, func, text in (
        ("report", "analysis.report", "report_main", "rebuild the report of a saved run folder"),
        ("analyze", "analysis.cli", "analyze_main", "count retransmissions, dup ACKs... of any pcap"),
        ("inspect", "analysis.cli", "inspect_main", "print one flow's packets with what each is"),
    ):
        p = sub.add_parser(name, help=text, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=_delegate(module, func))
