"""A fabric session: controller + Mininet fabric up, checked, and always taken down.

Every command that needs the network (fabric, dashboard, compare, straggler) and every
integration test goes through this one context manager, so start-up checks (root, OVS, ports,
leftovers of a crashed run) and teardown live in one place.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import platform
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from controller.launch import ControllerProcess
from incastlab.cleanup import MARKER, find_leftovers, kill_pids, run_pids
from runmodel.config import ControllerOptions, RunEnvironment
from runmodel.fabric import Plan
from topologies import hosttcp
from topologies.fabric import Fabric, ensure_ovs
from topologies.hosttcp import DEFAULT_RTO_MIN_MS


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


def preflight(cc: str | None = None, rto_min_ms: float | None = None) -> None:
    """Refuse before building anything: not root, no Open vSwitch, a TCP setting the kernel lacks,
    or leftovers of an earlier run."""
    if os.geteuid() != 0:
        raise SessionError("incastlab needs root to build the network (try: sudo make ...)")
    if cc is not None:
        hosttcp.check_cc(cc)
    hosttcp.check_rto_min(rto_min_ms)
    ensure_ovs()
    left = find_leftovers()
    if not left.empty():
        raise SessionError(f"leftovers of an earlier run: {left.describe()}; "
                           f"remove them with `sudo incastlab clean` (make clean-net)")


class Session:
    """The running parts of one session: the fabric and its controller."""

    def __init__(self, fabric: Fabric, controller: ControllerProcess,
                 tcp: tuple[str, float | None] | None = None) -> None:
        self.fabric = fabric
        self.controller = controller
        self.tcp = tcp  # the session's TCP settings (congestion control, minimum RTO or None)

    @property
    def plan(self) -> Plan:
        """The wiring plan."""
        return self.fabric.plan

    def set_tcp(self, cc: str, rto_min_ms: float | None = None, hosts: list[str] | None = None) -> None:
        """Congestion control (and minimum RTO) in every host's namespace, or in `hosts`."""
        for name in hosts or self.plan.host_names:
            host = self.plan.host(name)
            hosttcp.apply(self.fabric.host(name).shell.pid, host.nic, host.ip, cc, rto_min_ms)

    def host_tcp(self) -> dict[str, Any]:
        """Every host's congestion control and minimum RTO as its kernel reports them now."""
        return {name: dataclasses.asdict(hosttcp.read(self.fabric.host(name).shell.pid))
                for name in self.plan.host_names}

    def restore_tcp(self, rto_changed: bool) -> None:
        """Back to the session's own TCP settings (after a variant that ran with its own)."""
        cc, rto = self.tcp or ("cubic", None)
        if rto is None and rto_changed:
            rto = DEFAULT_RTO_MIN_MS
        self.set_tcp(cc, rto)

    def environment(self) -> RunEnvironment:
        """What the machine gave this session: datapath, kernel, cores, the hosts' TCP."""
        tcp = hosttcp.read(self.fabric.host(self.plan.host_names[0]).shell.pid)
        return RunEnvironment(
            datapath=self.fabric.datapath, kernel=platform.release(), cores=os.cpu_count() or 1,
            cc=tcp.cc, rto_min_ms=tcp.rto_min_ms if tcp.rto_min_ms is not None else 200.0,
            virtualisation=detect_virtualisation(), python=platform.python_version(),
            torch=_version("torch"))


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def detect_virtualisation() -> str:
    """tcg (QEMU's software emulator), kvm or another hypervisor's name, or none."""
    try:
        out = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True,
                             timeout=5).stdout.strip()
    except (FileNotFoundError, subprocess.TimeoutExpired):
        out = ""
    if out and out != "none":
        return out
    try:
        cpu = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    if " hypervisor" not in cpu:
        return "none"
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("model name")), "")
    return "tcg" if "QEMU" in model else "vm"


@contextmanager
def fabric_session(plan: Plan, options: ControllerOptions, workdir: Path, record: Path | None = None,
                   progress: Callable[[str], None] | None = None, ping: bool = True,
                   tcp: tuple[str, float | None] | None = None) -> Iterator[Session]:
    """Start the controller, then the fabric; check reachability; tear both down on any exit.

    tcp: (congestion control, minimum RTO in ms or None) to set in every host before the ping.
    """
    say = progress or (lambda _msg: None)
    mark_run()
    preflight(*(tcp or (None, None)))
    fabric = Fabric(plan, controller_port=options.of_port, controller_host=options.of_host)
    controller = ControllerProcess(plan, options, workdir, record=record)
    controller.check_ports()
    try:
        say(f"starting controller (OpenFlow {options.of_host}:{options.of_port}, API {controller.base})")
        controller.start()
        spec = plan.spec
        say(f"building fabric: {spec.spines} spines x {spec.leaves} leaves x {spec.hosts_per_leaf} hosts, "
            f"{spec.host_mbit:g} Mbit/s host links, {spec.uplink_mbit:g} Mbit/s uplinks, "
            f"{spec.buffer_pkts}-packet port buffers")
        t0 = time.monotonic()
        fabric.start()
        fabric.wait_connected()
        say(f"fabric up in {time.monotonic() - t0:.1f} s ({fabric.datapath} datapath)")
        sess = Session(fabric, controller, tcp)
        if tcp is not None:
            sess.set_tcp(*tcp)
        if ping:
            say("all-pairs ping: starting")
            loss = fabric.net.pingAll(timeout=1)
            if loss > 0:
                loss = fabric.net.pingAll(timeout=1)  # first packets may race the flow install
            if loss > 0:
                raise SessionError(f"all-pairs ping lost {loss:.0f} % of packets: forwarding is broken")
            say("all-pairs ping: no loss")
        yield sess
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
