"""The `incastlab` command: one subcommand per job; the Makefile targets wrap them.

Errors a user can cause (bad parameters, a port in use, leftovers, a missing binary) end with one
line on stderr and exit code 2; Ctrl-C and SIGTERM tear the fabric down before exiting.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from topologies.spec import FabricSpec, SpecError

EXIT_USAGE = 2


class UsageError(RuntimeError):
    """A one-line error for the user."""


def say(msg: str) -> None:
    """Progress on stderr, so stdout stays for tables and JSON."""
    print(f"[incastlab {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def add_fabric_args(p: argparse.ArgumentParser) -> None:
    """Options that shape the fabric, shared by every command that builds one."""
    d = FabricSpec()
    g = p.add_argument_group("fabric")
    g.add_argument("--spines", type=int, default=d.spines, help=f"spine switches (default {d.spines})")
    g.add_argument("--leaves", type=int, default=d.leaves, help=f"leaf switches (default {d.leaves})")
    g.add_argument("--hosts-per-leaf", type=int, default=d.hosts_per_leaf,
                   help=f"hosts under each leaf (default {d.hosts_per_leaf})")
    g.add_argument("--host-mbit", type=float, default=d.host_mbit,
                   help=f"host link rate, Mbit/s (default {d.host_mbit:g})")
    g.add_argument("--uplink-mbit", type=float, default=d.uplink_mbit,
                   help=f"leaf-spine link rate, Mbit/s (default {d.uplink_mbit:g})")
    g.add_argument("--buffer", type=int, default=d.buffer_pkts, dest="buffer_pkts",
                   help=f"switch port buffer, packets (default {d.buffer_pkts})")
    g.add_argument("--ps-host", default=d.ps_host, help=f"parameter-server host (default {d.ps_host})")
    g.add_argument("--delay-ms", type=float, default=0.0, help="host link delay (needs sch_netem)")
    g.add_argument("--loss-pct", type=float, default=0.0, help="host link loss %% (needs sch_netem)")
    g.add_argument("--datapath", choices=("auto", "user", "kernel"), default="auto",
                   help="OVS datapath (default: kernel if its module is there, else user)")
    c = p.add_argument_group("controller")
    c.add_argument("--api-port", type=int, default=8080, help="controller API/dashboard port (default 8080)")
    c.add_argument("--api-host", default="127.0.0.1",
                   help="API listen address (default loopback; anything else exposes it)")
    c.add_argument("--of-port", type=int, default=6653, help="OpenFlow port (default 6653)")
    c.add_argument("--interval", type=float, default=1.0, help="statistics poll interval, s (default 1)")


def spec_from_args(args: argparse.Namespace, base: dict[str, Any] | None = None) -> FabricSpec:
    """A validated FabricSpec from the command line (over a scenario's fabric, when given)."""
    data = dict(base or {})
    for key in ("spines", "leaves", "hosts_per_leaf", "host_mbit", "uplink_mbit", "buffer_pkts", "ps_host",
                "delay_ms", "loss_pct"):
        data[key] = getattr(args, key)
    return FabricSpec.from_dict(data)


def check_ports_args(args: argparse.Namespace) -> None:
    """Refuse impossible port numbers and an interval out of range before anything starts."""
    for name in ("api_port", "of_port"):
        port = getattr(args, name)
        if not 0 < port < 65536:
            raise UsageError(f"--{name.replace('_', '-')} must be a TCP port (1-65535), got {port}")
    if args.api_port == args.of_port:
        raise UsageError("--api-port and --of-port must differ")
    if not 0 < args.interval <= 60:
        raise UsageError(f"--interval must be in (0, 60] seconds, got {args.interval}")


# -- subcommands ----------------------------------------------------------------------------------
def cmd_fabric(args: argparse.Namespace) -> int:
    """Bring the fabric up, check it, calibrate it, optionally hand over to Mininet's CLI."""
    from incastlab.session import fabric_session
    from topologies.calibrate import calibrate

    spec = spec_from_args(args)
    check_ports_args(args)
    workdir = Path(args.workdir)
    with fabric_session(spec, workdir, api_port=args.api_port, of_port=args.of_port, api_host=args.api_host,
                        interval=args.interval, datapath=args.datapath, progress=say) as sess:
        say(f"dashboard and API: {sess.controller.base}/")
        if not args.no_calibrate:
            cal = calibrate(sess.fabric, seconds=args.seconds, controller=sess.controller, progress=say)
            print(cal.table(), flush=True)
            out = workdir / "calibration.json"
            out.write_text(json.dumps(cal.to_dict(), indent=1))
            say(f"calibration written to {out}")
        if args.cli:
            from mininet.cli import CLI

            CLI(sess.fabric.net)
        elif args.hold:
            say("fabric is up; Ctrl-C to take it down")
            while sess.controller.alive():
                time.sleep(0.5)
            raise UsageError(f"the controller died ({sess.controller.last_log_line() or 'no message'}); "
                             "the fabric was taken down")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Bring the fabric up and keep it up with the dashboard served, until Ctrl-C."""
    args.no_calibrate, args.cli, args.hold, args.seconds = True, False, True, 2.0
    return cmd_fabric(args)


def cmd_clean(args: argparse.Namespace) -> int:
    """Remove everything an earlier (crashed) run left behind."""
    from incastlab.cleanup import clean_all, find_leftovers

    left = clean_all()
    after = find_leftovers()
    print(f"removed: {left.describe()}")
    if not after.empty():
        print(f"incastlab clean: could not remove {after.describe()}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    p = argparse.ArgumentParser(prog="incastlab", description=(
        "Why the network is the bottleneck of distributed training: "
        "PS vs ring all-reduce on an emulated leaf-spine fabric."))
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    f = sub.add_parser("fabric", help="bring up the fabric + controller, check and calibrate it")
    add_fabric_args(f)
    f.add_argument("--cli", action="store_true", help="leave the user in Mininet's CLI")
    f.add_argument("--hold", action="store_true", help="keep the fabric up until Ctrl-C")
    f.add_argument("--no-calibrate", action="store_true", help="skip the link calibration")
    f.add_argument("--seconds", type=float, default=2.0, help="seconds per calibration flow (default 2)")
    f.add_argument("--workdir", default="results/fabric", help="where plan, logs and calibration go")
    f.set_defaults(func=cmd_fabric)

    d = sub.add_parser("dashboard", help="bring up the fabric and serve the live dashboard until Ctrl-C")
    add_fabric_args(d)
    d.add_argument("--workdir", default="results/dashboard", help="where plan and logs go")
    d.set_defaults(func=cmd_dashboard)

    c = sub.add_parser("clean", help="remove bridges, veths, processes left by a crashed run")
    c.set_defaults(func=cmd_clean)

    _add_late_commands(sub)
    return p


def _add_late_commands(sub: Any) -> None:
    """Subcommands whose modules are loaded only when used (they import torch or matplotlib)."""
    from incastlab import commands

    commands.register(sub)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `incastlab` console script."""
    from incastlab.session import INTERRUPTS

    INTERRUPTS.install()  # before anything else: no moment of a run is without the handlers
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv else "incastlab"
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print(f"incastlab {command}: interrupted; the fabric was taken down", file=sys.stderr)
        return 130


def _main(argv: list[str]) -> int:
    from controller.launch import ControllerError
    from incastlab.commands import DELEGATED
    from incastlab.session import SessionError
    from topologies.fabric import FabricError

    if argv and argv[0] in DELEGATED:  # their own parsers own every flag, --help included
        import importlib

        module, func = DELEGATED[argv[0]]
        return int(getattr(importlib.import_module(module), func)(argv[1:]))
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (SpecError, UsageError, SessionError, FabricError, ControllerError) as exc:
        print(f"incastlab {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
