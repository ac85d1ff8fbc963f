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

from runmodel.config import ROUTINGS
from runmodel.fabric import Plan


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options of the controller process."""
    p = argparse.ArgumentParser(prog="incastlab-controller", description=__doc__)
    p.add_argument("--plan", required=True, type=Path, help="wiring plan JSON written by the fabric")
    p.add_argument(
        "--of-host",
        default="127.0.0.1",
        help="OpenFlow listen address (default loopback: the switches run on this machine)",
    )
    p.add_argument("--of-port", type=int, default=6653, help="OpenFlow listen port (default 6653)")
    p.add_argument("--api-host", default="127.0.0.1", help="HTTP API address (default loopback)")
    p.add_argument("--api-port", type=int, default=8080, help="HTTP API port (default 8080)")
    p.add_argument("--interval", type=float, default=1.0, help="statistics poll interval, s")
    p.add_argument(
        "--routing", default="ecmp", choices=ROUTINGS, help="routing policy (see runmodel.config.ROUTINGS)"
    )
    p.add_argument("--record", type=Path, help="append every sample to this JSON-lines file")
    p.add_argument("--phase-file", type=Path, help="JSON file the experiment runner writes its phase to")
    return p.parse_args(argv)


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
    if not 0 < args.interval <= 60:
        print(f"controller: --interval must be in (0, 60] s, got {args.interval}", file=sys.stderr)
        return 2
    try:
        plan = Plan.from_dict(json.loads(args.plan.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"controller: cannot read plan {args.plan}: {exc}", file=sys.stderr)
        return 2
    for what, host, port in (("OpenFlow", args.of_host, args.of_port), ("API", args.api_host, args.api_port)):
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
        api_socket = eventlet.listen((args.api_host, args.api_port))
    except OSError as exc:
        print(f"controller: cannot listen on {args.api_host}:{args.api_port}: {exc}", file=sys.stderr)
        return 2
    import os
    import signal

    # SIGTERM ends the process at once: eventlet would otherwise ignore it until killed. The
    # record file is line-buffered, so nothing written is lost.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    app.CONFIG.update(
        plan=plan,
        interval=args.interval,
        routing=args.routing,
        record=args.record,
        phase_file=args.phase_file,
        api_socket=api_socket,
    )
    cfg.CONF(
        args=["--ofp-listen-host", args.of_host, "--ofp-tcp-listen-port", str(args.of_port)], project="os_ken"
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
