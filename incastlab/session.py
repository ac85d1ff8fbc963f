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
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from controller.launch import ControllerProcess
from incastlab.cleanup import MARKER, find_leftovers, kill_pids, run_pids
from incastlab.follow import ExperimentError
from incastlab.hostwatch import RunWatch, disk_short, restart_vswitchd, vswitchd_pid
from runmodel.config import ControllerOptions, ExperimentConfig, RunEnvironment, Straggler
from runmodel.fabric import Plan
from runmodel.params import ParamError
from runmodel.strategy import JOB
from topologies import hosttcp
from topologies.containers import (
    ContainerError,
    HostRuntime,
    Limits,
    check_image,
    choose_runtime,
    cpus_for_share,
)
from topologies.fabric import Fabric, ensure_ovs
from topologies.hosttcp import DEFAULT_RTO_MIN_MS, HostTcp
from topologies.image import WORKER_IMAGE


class SessionError(RuntimeError):
    """The session cannot start; the message is one line and says what to do."""


class HostFault(ExperimentError, SessionError):
    """The machine took away what the run needs (hostwatch.RunWatch): ovs-vswitchd died, the results
    disk filled. An ExperimentError, so a run ends like a failed strategy (exit 1, its records kept);
    a SessionError, so a command without strategies (fabric --hold) ends in one line too."""


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
    FAULT_SIGNAL = signal.SIGUSR1  # a watcher thread's way to stop the main thread (fail())

    def __init__(self) -> None:
        self.shield_depth = 0
        self.pending: int | None = None
        self.fault: BaseException | None = None  # what fail() asked to raise, until raised
        self.installed = False

    def install(self) -> None:
        """Route the three signals, and the fault signal, to this object (main thread only)."""
        for sig in self.SIGNALS:
            signal.signal(sig, self._on_signal)
        signal.signal(self.FAULT_SIGNAL, self._on_fault)
        self.installed = True

    def fail(self, exc: BaseException) -> bool:
        """From a watcher thread: raise `exc` in the main thread where it is, as a signal would (a
        blocking call there is interrupted). False when the handler is not installed: the caller
        then only records the fault. A fault arriving in teardown is dropped (teardown goes on)."""
        if not self.installed or self.fault is not None:
            return False
        self.fault = exc
        main = threading.main_thread().ident
        assert main is not None
        signal.pthread_kill(main, self.FAULT_SIGNAL)
        return True

    def _on_fault(self, _signum: int, _frame: FrameType | None) -> None:
        exc, self.fault = self.fault, None
        if exc is not None and not self.shield_depth:
            raise exc

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


def preflight(cc: str | None = None, rto_min_ms: float | None = None, workdir: Path | None = None) -> None:
    """Refuse before building anything: not root, no Open vSwitch, a TCP setting the kernel lacks,
    a results disk (`workdir`'s) without room for a run's records, or leftovers of an earlier run."""
    if os.geteuid() != 0:
        raise SessionError("incastlab needs root to build the network (try: sudo make ...)")
    if cc is not None:
        hosttcp.check_cc(cc)
    hosttcp.check_rto_min(rto_min_ms)
    ensure_ovs()
    if vswitchd_pid() is None:  # ovsdb answers, but the switch daemon died (e.g. in a run)
        if not restart_vswitchd():
            raise SessionError("ovs-vswitchd is not running and `ovs-ctl start` did not start it")
    if workdir is not None and (short := disk_short(workdir)):
        raise SessionError(short)
    refuse_leftovers()


def refuse_leftovers() -> None:
    """Refuse to start beside leftovers of an earlier run (bridges, namespaces, containers, processes),
    naming them and `incastlab clean`."""
    left = find_leftovers()
    if not left.empty():
        raise SessionError(
            f"leftovers of an earlier run: {left.describe()}; "
            f"remove them with `sudo incastlab clean` (make clean-net)"
        )


class Session:
    """The running parts of one session: the fabric and its controller."""

    def __init__(
        self,
        fabric: Fabric,
        controller: ControllerProcess,
        tcp: tuple[str, float | None] | None = None,
        workdir: Path | None = None,
    ) -> None:
        self.fabric = fabric
        self.controller = controller
        self.tcp = tcp  # the session's TCP settings (congestion control, minimum RTO or None)
        self.workdir = workdir  # the results folder whose disk the watch checks

    def host_cause(self, exc: ExperimentError) -> HostFault | None:
        """What the machine did to a process that says only that it died (a full results disk, the
        OOM killer), as a HostFault naming it; None when it was the process's own failure."""
        if isinstance(exc, HostFault):
            return exc
        oom = self.fabric.containers.oom_killed() if self.fabric.containers else None
        why = (disk_short(self.workdir) if self.workdir is not None else None) or oom
        return HostFault(f"{why} (first seen as: {exc})") if why else None

    @property
    def plan(self) -> Plan:
        """The wiring plan."""
        return self.fabric.plan

    def set_tcp(
        self,
        cc: str,
        rto_min_ms: float | None = None,
        hosts: list[str] | None = None,
        quickack: Collection[str] = (),
        check: list[str] | None = None,
    ) -> dict[str, HostTcp]:
        """Congestion control, minimum RTO (None: left as it is) and, in the `quickack` hosts, delayed
        ACKs off, in every host's namespace or in `hosts`; each other host's route has delayed ACKs on.

        Then read back from the `check` hosts (default: every host set): HostTcpError if a kernel
        reports other than was asked. Returns what the kernels reported, host -> HostTcp.
        """
        names = hosts or self.plan.host_names
        for name in names:
            host = self.plan.host(name)
            self.fabric.host_call(
                name, hosttcp.apply, host.nic, host.ip, cc, rto_min_ms, quickack=name in quickack
            )
        asked_us = None if rto_min_ms is None else round(rto_min_ms * 1000)  # the sysctl is in µs
        read = {h: self.fabric.host_call(h, hosttcp.read) for h in (names if check is None else check)}
        for h, got in read.items():
            got_us = None if got.rto_min_ms is None else round(got.rto_min_ms * 1000)
            if (
                got.cc != cc
                or (asked_us is not None and got_us != asked_us)
                or got.quickack != (h in quickack)
            ):
                raise hosttcp.HostTcpError(
                    f"{h}: the kernel reports {dataclasses.asdict(got)}, asked cc {cc}, "
                    f"rto_min_ms {rto_min_ms}, quickack {h in quickack}"
                )
        return read

    def host_tcp(self) -> dict[str, Any]:
        """Every host's congestion control and minimum RTO as its kernel reports them now."""
        return {
            name: dataclasses.asdict(self.fabric.host_call(name, hosttcp.read))
            for name in self.plan.host_names
        }

    def restore_tcp(self, rto_changed: bool) -> None:
        """Back to the session's own TCP settings (after a variant that ran with its own)."""
        cc, rto = self.tcp or ("cubic", None)
        if rto is None and rto_changed:
            rto = DEFAULT_RTO_MIN_MS
        self.set_tcp(cc, rto)

    def environment(self) -> RunEnvironment:
        """What the machine gave this session: datapath, kernel, cores, the hosts' TCP and runtime."""
        tcp = self.fabric.host_call(self.plan.host_names[0], hosttcp.read)
        rt = self.fabric.hosts_runtime
        return RunEnvironment(
            datapath=self.fabric.datapath,
            kernel=platform.release(),
            cores=os.cpu_count() or 1,
            cc=tcp.cc,
            rto_min_ms=tcp.rto_min_ms if tcp.rto_min_ms is not None else 200.0,
            virtualisation=detect_virtualisation(),
            python=platform.python_version(),
            torch=_version("torch"),
            runtime=self.fabric.runtime,
            runtime_why=rt.why,
            image=",".join(sorted(set(rt.images.values()))) if self.fabric.runtime == "docker" else "",
        )


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def detect_virtualisation() -> str:
    """tcg (QEMU's software emulator), kvm or another hypervisor's name, or none."""
    try:
        out = subprocess.run(
            ["systemd-detect-virt"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (FileNotFoundError, subprocess.TimeoutExpired):
        out = ""
    if out == "qemu":  # systemd says kvm when KVM accelerates QEMU: plain qemu is the software emulator
        return "tcg"
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


def host_runtime(
    plan: Plan,
    workdir: Path,
    stragglers: tuple[Straggler, ...] = (),
    say: Callable[[str], None] | None = None,
    images: dict[str, str] | None = None,
    keepalive: tuple[str, ...] | None = None,
) -> HostRuntime:
    """What the fabric's hosts will be (the plan's `runtime`, `auto` resolved), said in one line.

    docker: every host a container of the worker image (or `images`: host -> image, the other hosts
    namespaces), the run folder mounted at its own path, a straggler's CPU share, cores and memory the
    container's limits. Knobs only a container has are refused for netns, before anything is built."""
    runtime, why = choose_runtime(plan.spec.runtime)
    if images is not None and runtime == "netns":
        runtime, why = "docker", "a job runs in containers"
    if say is not None:
        say(f"runtime: {runtime} ({why})")
    if runtime == "netns":
        for st in stragglers:
            if st.docker_only:
                raise ParamError(
                    f"stragglers: {st.host}: {', '.join(st.docker_only)} need --runtime docker "
                    f"(the hosts are namespaces here: {why})"
                )
        return HostRuntime("netns", why)
    cores = os.cpu_count() or 1
    limits: dict[str, Limits] = {}
    for host in plan.hosts:
        st = next((s for s in stragglers if s.host == host.name), None)
        cpuset = st.cpuset if st else None
        if cpuset is not None and max(int(c) for c in cpuset.split("-")) >= cores:
            raise ParamError(
                f"stragglers: {host.name}: cpuset {cpuset} names a core this machine lacks "
                f"(cores 0-{cores - 1})"
            )
        lim = Limits(
            cpus=cpus_for_share(host.cpu) if host.cpu is not None else None,
            cpuset=cpuset,
            memory_mb=st.mem_mb if st else None,
        )
        if lim != Limits():
            limits[host.name] = lim
    chosen = images if images is not None else {h: WORKER_IMAGE for h in plan.host_names}
    return HostRuntime(
        "docker",
        why,
        images=chosen,
        limits=limits,
        mounts=(str(Path(workdir).resolve()),),
        keepalive=keepalive or HostRuntime().keepalive,
    )


def runtime_for(cfg: ExperimentConfig, workdir: Path, say: Callable[[str], None]) -> HostRuntime:
    """An experiment's hosts (host_runtime), and what the chosen runtime cannot do refused up front:
    a job where the hosts cannot be containers, a job image that is not here, a cpu fault on a namespace
    host that has no CPU limit to change; and, before a run folder is made, a controller port another
    process holds (ControllerError; leftovers of an earlier run are named before that) or a results
    disk without room (SessionError)."""
    plan = cfg.plan()
    refuse_leftovers()  # first: a killed run's controller is what holds the ports, and clean removes it
    ControllerProcess(plan, cfg.controller, workdir).check_ports()
    if short := disk_short(workdir):
        raise SessionError(short)
    if cfg.controller.servers:  # every server checked, and what a cluster run cannot do yet refused
        from topologies.servers import refuse_for_cluster

        return refuse_for_cluster(cfg, workdir, say)
    hosts = host_runtime(plan, workdir, cfg.stragglers, say=say)
    if any(spec.kind == JOB for spec in cfg.strategy_specs):
        if hosts.runtime != "docker":
            raise ContainerError(
                f"job: its containers join the hosts' containers, and the hosts cannot be "
                f"containers here: {hosts.why}"
            )
        check_image(cfg.job_image)
    if hosts.runtime == "netns":
        for f in cfg.parsed_faults():
            if f.kind == "cpu" and plan.host(f.host).cpu is None:
                raise ParamError(
                    f"fault cpu:{f.target}: {f.host} is a namespace without a CPU limit here "
                    f"({hosts.why}); give it a cpu straggler or use --runtime docker"
                )
    return hosts


class RunConfig(Protocol):
    """What a run's config gives its session (ExperimentConfig, IncastConfig)."""

    controller: ControllerOptions

    def plan(self) -> Plan: ...


class RunPlace(Protocol):
    """What a run's folder gives its session (RunFolder, IncastFolder)."""

    path: Path
    controller_record: Path


def run_session(
    cfg: RunConfig,
    folder: RunPlace,
    say: Callable[[str], None],
    tcp: tuple[str, float | None],
    hosts: HostRuntime | None = None,
    cluster: bool = False,
) -> AbstractContextManager[Session]:
    """fabric_session for a run: the config's plan and controller, the folder's controller record."""
    return fabric_session(
        cfg.plan(),
        cfg.controller,
        folder.path,
        record=folder.controller_record,
        progress=say,
        tcp=tcp,
        hosts=hosts,
        cluster=cluster,
    )


@contextmanager
def fabric_session(
    plan: Plan,
    options: ControllerOptions,
    workdir: Path,
    record: Path | None = None,
    progress: Callable[[str], None] | None = None,
    ping: bool = True,
    tcp: tuple[str, float | None] | None = None,
    hosts: HostRuntime | None = None,
    cluster: bool = False,
) -> Iterator[Session]:
    """Start the controller, then the fabric; check reachability; tear both down on any exit.

    cluster: the caller works with a fabric over the controller options' servers (ClusterFabric),
    whose hosts' shells are not on this machine; any other caller is refused one.

    tcp: (congestion control, minimum RTO in ms or None) to set in every host before the ping.
    hosts: what the hosts are (host_runtime); None: the plan's runtime, resolved here.

    While the fabric is up, hostwatch.RunWatch watches ovs-vswitchd and the results disk: a fault
    there raises HostFault in the main thread at once. A strategy that failed because the OOM killer
    or a full disk killed one of its processes is re-raised as HostFault naming that cause.
    """
    say = progress or (lambda _msg: None)
    mark_run()
    preflight(*(tcp or (None, None)), workdir=workdir)
    fabric: Fabric
    if options.servers:  # over several machines: topologies.cluster (servers checked there)
        from topologies.cluster import cluster_fabric
        from topologies.servers import FABRIC_ONLY

        if not cluster:
            raise SessionError(FABRIC_ONLY)

        fabric, options = cluster_fabric(plan, options, say, workdir)
    else:
        if hosts is None:
            hosts = host_runtime(plan, workdir, say=say)
        fabric = Fabric(plan, controller_port=options.of_port, controller_host=options.of_host, hosts=hosts)
    controller = ControllerProcess(plan, options, workdir, record=record)
    controller.check_ports()

    def on_fault(why: str) -> None:
        say(f"stopping: {why}")  # at once: unwinding and teardown take seconds before the error line
        INTERRUPTS.fail(HostFault(why))

    watch = RunWatch(workdir, on_fault)
    if not INTERRUPTS.installed and threading.current_thread() is threading.main_thread():
        INTERRUPTS.install()
    try:
        say(f"starting controller (OpenFlow {options.of_host}:{options.of_port}, API {controller.base})")
        controller.start()
        spec = plan.spec
        say(
            f"building fabric: {spec.spines} spines x {spec.leaves} leaves x {spec.hosts_per_leaf} hosts, "
            f"{spec.host_mbit:g} Mbit/s host links, {spec.uplink_mbit:g} Mbit/s uplinks, "
            f"{spec.buffer_pkts}-packet port buffers"
        )
        t0 = time.monotonic()
        fabric.start()
        watch.start()
        fabric.wait_connected()
        hosts_kind = (
            f"hosts in {len(fabric.containers.containers)} containers"
            if fabric.containers
            else "hosts in namespaces"
        )
        say(f"fabric up in {time.monotonic() - t0:.1f} s ({fabric.datapath} datapath, {hosts_kind})")
        sess = Session(fabric, controller, tcp, workdir)
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
        try:
            yield sess
        except ExperimentError as exc:
            # a process that died of a full disk or of the OOM killer says only that it died: name why
            if (fault := sess.host_cause(exc)) is not exc and fault is not None:
                raise fault from exc
            raise
    finally:
        with INTERRUPTS.shielded():
            watch.stop()
            if vswitchd_pid() is None:
                # without it every OVS change waits for a daemon that never answers
                say("ovs-vswitchd is not running: restarting Open vSwitch to take the fabric down")
            teardown(fabric, controller)


def teardown(fabric: Fabric, controller: ControllerProcess) -> None:
    """Fabric, then controller, then anything this run started that still runs (bounded time).

    An ovs-vswitchd that died is started again first (restart_vswitchd): the fabric's bridges are
    removed through it, and the host is left with Open vSwitch running, as the run found it."""
    try:
        if vswitchd_pid() is None:
            restart_vswitchd()  # if it fails, the sweep's OVS commands time out; veths and processes go
        fabric.stop()
    finally:
        controller.stop()
        kill_pids(run_pids(os.environ.get(MARKER, "")))
