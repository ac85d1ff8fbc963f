"""Entry point of the controller process: `python -m controller.main --plan plan.json ...`.

Checks its ports before os-ken starts, so a port in use is one clear line, not a traceback from
deep inside eventlet. os-ken (the maintained fork of Ryu) is used because Ryu 4.34 does not import
on Python >= 3.10.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path

from runmodel.config import ControllerOptions
from runmodel.fabric import Plan
from runmodel.params import Flag, ParamError, flags

# ControllerOptions' fields that are the runner's business, not the controller process's
RUNNER_ONLY = ("servers",)


def option_flags() -> list[Flag]:
    """The controller process's flags of ControllerOptions: declared once, in the run model."""
    return [fl for fl in flags(ControllerOptions) if fl.name not in RUNNER_ONLY]


def options_argv(options: ControllerOptions) -> list[str]:
    """The command-line flags that give the process `options` (the launcher's side of parse_args)."""
    return [arg for fl in option_flags() for arg in (fl.flag, str(getattr(options, fl.name)))]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options of the controller process: ControllerOptions' flags, with its defaults,
    and the files it reads and writes."""
    p = argparse.ArgumentParser(prog="incastlab-controller", description=__doc__)
    p.add_argument("--plan", required=True, type=Path, help="wiring plan JSON written by the fabric")
    for fl in option_flags():
        p.add_argument(
            fl.flag, dest=fl.name, type=fl.parse, default=fl.default, choices=fl.choices, help=fl.help
        )
    p.add_argument("--record", type=Path, help="append every sample to this JSON-lines file")
    p.add_argument("--phase-file", type=Path, help="JSON file the experiment runner writes its phase to")
    return p.parse_args(argv)


def options_of(args: argparse.Namespace) -> ControllerOptions:
    """The ControllerOptions the flags gave, validated (ParamError: one line naming the flag)."""
    options = ControllerOptions(**{fl.name: getattr(args, fl.name) for fl in option_flags()})
    options.validate()
    return options


def port_free(host: str, port: int) -> bool:
    """True if a TCP listener could bind host:port now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the controller until killed."""
    args = parse_args(argv)
    try:
        options = options_of(args)
    except ParamError as exc:
        print(f"controller: {exc}", file=sys.stderr)
        return 2
    try:
        plan = Plan.from_dict(json.loads(args.plan.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"controller: cannot read plan {args.plan}: {exc}", file=sys.stderr)
        return 2
    for what, host, port in (
        ("OpenFlow", options.of_host, options.of_port),
        ("API", options.api_host, options.api_port),
    ):
        if not port_free(host, port):
            print(f"controller: {what} port {host}:{port} is already in use", file=sys.stderr)
            return 2

    from os_ken.lib import hub

    hub.patch(thread=True)
    import eventlet
    from os_ken import cfg
    from os_ken.base.app_manager import AppManager

    import controller.app as app

    try:
        api_socket = eventlet.listen((options.api_host, options.api_port))
    except OSError as exc:
        print(f"controller: cannot listen on {options.api_host}:{options.api_port}: {exc}", file=sys.stderr)
        return 2
    import os
    import signal

    # SIGTERM ends the process at once: eventlet would otherwise ignore it until killed. The
    # record file is line-buffered, so nothing written is lost.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    app.CONFIG = app.AppConfig(plan, options, api_socket, record=args.record, phase_file=args.phase_file)
    cfg.CONF(
        args=["--ofp-listen-host", options.of_host, "--ofp-tcp-listen-port", str(options.of_port)],
        project="os_ken",
    )
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("os_ken").setLevel(logging.WARNING)
    try:
        AppManager.run_apps(["controller.app"])
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
