"""A fabric session: controller + Mininet fabric up, checked, and always taken down.

Every command that needs the network (fabric, dashboard, compare, straggler) and every
integration test goes through this one context manager, so start-up checks (root, OVS, ports,
leftovers of a crashed run) and teardown live in one place.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from controller.launch import ControllerProcess
from incastlab.cleanup import MARKER, find_leftovers, kill_pids, run_pids
from topologies.fabric import Fabric, ensure_ovs
from topologies.spec import FabricSpec, build_plan


class SessionError(RuntimeError):
    """The session cannot start; the message is one line and says what to do."""


def mark_run() -> None:
    """Mark this process so that everything it starts can be found by `incastlab clean`."""
    os.environ.setdefault(MARKER, str(os.getpid()))


class Interrupts:
    """SIGINT, SIGTERM and SIGHUP unwind like Ctrl-C, except while the fabric is taken down.

    A signal that lands inside `shielded()` (teardown) is remembered instead of raised, so a second
    Ctrl-C cannot cut the teardown short and leave half a fabric; it is raised when the shield
    ends. Installed first thing in the command, so no moment of a run is without it.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.shield_depth = 0
        self.pending: int | None = None

    def install(self) -> None:
        """Route the three signals to this object (main thread only, as Python requires)."""
        for sig in self.SIGNALS:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.shield_depth:
            self.pending = signum
            return
        raise KeyboardInterrupt(f"signal {signum}")

    @contextmanager
    def shielded(self) -> Iterator[None]:
        """Defer the signals until the block ends (then raise one that came, if none is unwinding)."""
        self.shield_depth += 1
        try:
            yield
        finally:
            self.shield_depth -= 1
        if not self.shield_depth and self.pending is not None:
            signum, self.pending = self.pending, None
            raise KeyboardInterrupt(f"signal {signum}")


INTERRUPTS = Interrupts()


def terminate_as_interrupt() -> None:
    """SIGINT, SIGTERM and SIGHUP unwind like Ctrl-C, so `finally` blocks tear the fabric down."""
    INTERRUPTS.install()


def preflight(spec: FabricSpec) -> None:
    """Refuse before building anything: not root, no Open vSwitch, or leftovers of an earlier run."""
    if os.geteuid() != 0:
        raise SessionError("incastlab needs root to build the network (try: sudo make ...)")
    ensure_ovs()
    left = find_leftovers()
    if not left.empty():
        raise SessionError(f"leftovers of an earlier run: {left.describe()}; "
                           f"remove them with `sudo incastlab clean` (make clean-net)")


class Session:
    """The running parts of one session."""

    def __init__(self, fabric: Fabric, controller: ControllerProcess) -> None:
        self.fabric = fabric
        self.controller = controller

    @property
    def plan(self) -> dict[str, Any]:
        """The wiring plan."""
        return self.fabric.plan

    @property
    def spec(self) -> FabricSpec:
        """The fabric's parameters."""
        return self.fabric.spec


@contextmanager
def fabric_session(spec: FabricSpec, workdir: Path, api_port: int = 8080, of_port: int = 6653,
                   api_host: str = "127.0.0.1", interval: float = 1.0, record: Path | None = None,
                   datapath: str = "auto", progress: Callable[[str], None] | None = None,
                   ping: bool = True) -> Iterator[Session]:
    """Start the controller, then the fabric; check reachability; tear both down on any exit."""
    say = progress or (lambda _msg: None)
    mark_run()
    preflight(spec)
    fabric = Fabric(spec, controller_port=of_port, datapath=datapath)
    controller = ControllerProcess(build_plan(spec), workdir, of_port=of_port, api_port=api_port,
                                   api_host=api_host, interval=interval, record=record)
    controller.check_ports()
    try:
        say(f"starting controller (OpenFlow :{of_port}, API {controller.base})")
        controller.start()
        say(f"building fabric: {spec.spines} spines x {spec.leaves} leaves x {spec.hosts_per_leaf} hosts, "
            f"{spec.host_mbit:g} Mbit/s host links, {spec.uplink_mbit:g} Mbit/s uplinks, "
            f"{spec.buffer_pkts}-packet port buffers")
        t0 = time.monotonic()
        fabric.start()
        fabric.wait_connected()
        say(f"fabric up in {time.monotonic() - t0:.1f} s ({fabric.datapath} datapath)")
        if ping:
            say("all-pairs ping: starting")
            loss = fabric.net.pingAll(timeout=1)
            if loss > 0:
                loss = fabric.net.pingAll(timeout=1)  # first packets may race the flow install
            if loss > 0:
                raise SessionError(f"all-pairs ping lost {loss:.0f} % of packets: forwarding is broken")
            say("all-pairs ping: no loss")
        yield Session(fabric, controller)
    finally:
        with INTERRUPTS.shielded():
            teardown(fabric, controller)


def teardown(fabric: Fabric, controller: ControllerProcess) -> None:
    """Fabric, then controller, then anything this run started that still runs (bounded time)."""
    try:
        fabric.stop()
    finally:
        controller.stop()
        kill_pids(run_pids(os.environ.get(MARKER, "")))
