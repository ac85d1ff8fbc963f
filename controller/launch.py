"""Starts and stops the controller as its own process, and reads its API.

A separate process (not a thread of the runner) so that it can be killed and restarted during an
experiment, and so that os-ken's eventlet monkey-patching stays out of the runner.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from controller.main import options_argv, port_free
from runmodel.config import ControllerOptions
from runmodel.fabric import Plan
from runmodel.folder import RunFolder
from runmodel.records import write_json
from topologies.processes import STOP_GRACE_S, stop_processes


class ControllerError(RuntimeError):
    """The controller could not start or answer; the message is one line."""


def api_get(base: str, path: str, timeout: float = 5.0) -> Any:
    """GET a JSON document of the controller's API."""
    with urllib.request.urlopen(base + path, timeout=timeout) as resp:  # noqa: S310 - loopback only
        return json.loads(resp.read())


class ControllerProcess:
    """The controller process of one run: plan in, OpenFlow on of_host:of_port, API on api_host:api_port.

    Both listen on loopback by default: the switches (OVS in the root namespace) connect to
    127.0.0.1, and neither the OpenFlow port nor the API has any authentication.
    """

    def __init__(
        self, plan: Plan, options: ControllerOptions, workdir: Path, record: Path | None = None
    ) -> None:
        self.plan = plan
        self.options = options
        self.workdir = workdir
        self.of_host = options.of_host
        self.of_port = options.of_port
        self.api_port = options.api_port
        self.api_host = options.api_host
        self.record = record
        folder = RunFolder(workdir)
        self.plan_file = folder.plan_file
        self.phase_file = folder.phase_file
        self.log_file = folder.controller_log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        """Base URL of the API."""
        return self.options.base_url

    def check_ports(self) -> None:
        """Refuse early when the OpenFlow or API port is taken."""
        if not port_free(self.of_host, self.of_port):
            raise ControllerError(
                f"OpenFlow port {self.of_host}:{self.of_port} is already in use "
                f"(another controller? try `incastlab clean` or --of-port)"
            )
        if not port_free(self.api_host, self.api_port):
            raise ControllerError(
                f"API port {self.api_host}:{self.api_port} is already in use (try --api-port)"
            )

    def start(self, timeout: float = 30.0) -> None:
        """Start the process and wait until its API answers."""
        self.check_ports()
        self.workdir.mkdir(parents=True, exist_ok=True)
        write_json(self.plan_file, self.plan.to_dict())
        argv = [sys.executable, "-m", "controller.main", "--plan", str(self.plan_file)]
        argv += options_argv(self.options) + ["--phase-file", str(self.phase_file)]
        if self.record is not None:
            argv += ["--record", str(self.record)]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log_file, "ab") as log:
            # its own session: a terminal's Ctrl-C reaches the runner only, which stops it in turn
            self.proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(Path(__file__).resolve().parent.parent),
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ControllerError(f"controller exited ({self.proc.returncode}): {self.last_log_line()}")
            try:
                api_get(self.base, "/api/topology", timeout=1.0)
                return
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(0.2)
        self.stop()
        raise ControllerError(f"controller API did not answer on {self.base} within {timeout:.0f} s")

    def last_log_line(self) -> str:
        """The controller log's last line (its error, when it dies)."""
        try:
            lines = self.log_file.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1] if lines else ""

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def get(self, path: str, timeout: float = 5.0) -> Any:
        """GET an API document."""
        return api_get(self.base, path, timeout)

    def set_phase(self, **phase: Any) -> None:
        """Tell the dashboard what the experiment is doing (the API itself stays read-only). Only the
        dashboard reads it: a results disk that is full loses the phase, not the run's end."""
        try:
            write_json(self.phase_file, dict(phase, t=time.time()))
        except OSError:
            pass

    def kill(self) -> None:
        """SIGKILL, as a crash would (fault injection)."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds; safe to call twice."""
        if self.proc is None:
            return
        stop_processes([self.proc], grace)
        self.proc = None
