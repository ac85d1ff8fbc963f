"""Brings a FabricSpec to life in Mininet + Open vSwitch, and takes it down again.

Rates and buffers are set where the controller can read them: every switch port gets
`txqueuelen = buffer` and an OVS `linux-htb` QoS with one queue at the link rate, so OpenFlow
queue statistics report the queue's drops (`tx_errors`). Host egress is shaped with tc HTB.
The datapath is detected: kernel OVS where the module is there, userspace (netdev) otherwise,
and then TX checksum/TSO/GSO are switched off on every veth, or TCP stalls through it.
Hosts are network namespaces, or Docker containers (a HostRuntime with runtime "docker": see
topologies/containers.py); either way a workload process is started with `workload_popen`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from runmodel.fabric import Plan
from runmodel.params import ParamError
from topologies.containers import MARKER, Container, ContainerSet, HostRuntime, Limits, cpus_for_share
from topologies.hygiene import sweep_fabric
from topologies.topo import FabricController, LeafSpineTopo

OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"


class FabricError(RuntimeError):
    """The fabric cannot be built or reached here; the message is one line."""


def _run(
    argv: list[str], check: bool = True, timeout: float = 30, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command without a shell; raise FabricError with its stderr on failure."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError as exc:
        raise FabricError(f"{argv[0]} is not installed: run `make deps`") from exc
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise FabricError(f"{' '.join(argv[:3])} failed: {msg[-1] if msg else proc.returncode}")
    return proc


def ensure_ovs() -> None:
    """Check Open vSwitch is installed and its daemons answer; start them if they do not."""
    if shutil.which("ovs-vsctl") is None or not Path(OVS_CTL).exists():
        raise FabricError("Open vSwitch is not installed (ovs-vsctl not found): run `make deps`")
    if _run(["ovs-vsctl", "--timeout=3", "show"], check=False).returncode == 0:
        return
    # the OVS daemons outlive the run: they must not carry the run marker that `clean` looks for
    env = {k: v for k, v in os.environ.items() if k != "INCASTLAB_RUN"}
    _run([OVS_CTL, "start", "--system-id=random"], check=False, timeout=60, env=env)
    if _run(["ovs-vsctl", "--timeout=5", "show"], check=False).returncode != 0:
        raise FabricError(f"Open vSwitch does not answer and `{OVS_CTL} start` did not help")


def detect_datapath() -> str:
    """'kernel' where the openvswitch kernel module is (or can be) loaded, else 'user'."""
    if Path("/sys/module/openvswitch").exists():
        return "kernel"
    if shutil.which("modprobe"):
        if subprocess.run(["modprobe", "-q", "openvswitch"], capture_output=True).returncode == 0:
            return "kernel"
    return "user"


def netem_available() -> bool:
    """True where the kernel has the sch_netem qdisc (delay and loss emulation)."""
    if Path("/sys/module/sch_netem").exists():
        return True
    release = os.uname().release
    return any(Path(f"/lib/modules/{release}/kernel/net/sched").glob("sch_netem.ko*"))


def kernel_config(option: str) -> str | None:
    """A kernel build option ("y", "m") from /proc/config.gz, "" if not set, None if unknown."""
    import gzip

    try:
        text = gzip.decompress(Path("/proc/config.gz").read_bytes()).decode(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(option + "="):
            return line.split("=", 1)[1].strip()
    return ""


FRAME_BYTES = 1514  # a full Ethernet frame: RED's thresholds are bytes


def red_marking_qdisc(pkts: int, mark_pkts: int, rate_mbit: float) -> list[str]:
    """tc arguments of a RED queue of `pkts` frames that ECN-marks every packet arriving above
    `mark_pkts` frames queued (DCTCP's switch: K = mark_pkts, max just above min).

    avpkt and burst set the queue weight W = 2^-wlog tc picks (tc_red_eval_ewma: the largest W with
    a <= (1 - (1 - W)^burst) / W, a = burst + 1 - min/avpkt), and the kernel refuses a wlog for which
    min << wlog overflows 32 bits (EINVAL): avpkt = one frame with K = 1 gives a = 2 = burst, wlog 27.
    avpkt 1000 and burst = ceil(min / avpkt), at least 2, put a in (1, 2) and wlog at 1 or 2 (an
    almost instantaneous queue, as DCTCP wants; checked in a Debian 6.1 kernel for K = 1, 2, 3, 8,
    250, and in tests/test_fabric_unit.py)."""
    lo = max(1, mark_pkts) * FRAME_BYTES
    return [
        "red",
        "limit",
        str(pkts * FRAME_BYTES),
        "min",
        str(lo),
        "max",
        str(lo + FRAME_BYTES),
        "avpkt",
        "1000",
        "burst",
        str(max(2, -(-lo // 1000))),
        "probability",
        "1.0",
        "bandwidth",
        f"{rate_mbit:g}mbit",
        "ecn",
    ]


def qdisc_available(kind: str) -> bool:
    """True where the kernel has the sch_<kind> qdisc (built in, loaded, or loadable)."""
    if Path(f"/sys/module/sch_{kind}").exists():
        return True
    release = os.uname().release
    base = Path(f"/lib/modules/{release}")
    if any((base / "kernel/net/sched").glob(f"sch_{kind}.ko*")):
        return True
    try:
        if f"kernel/net/sched/sch_{kind}.ko" in (base / "modules.builtin").read_text():
            return True
    except OSError:
        pass
    return kernel_config(f"CONFIG_NET_SCH_{kind.upper()}") in ("y", "m")


SHELL_EXIT_TIMEOUT = 5.0


def end_node_shells(net: Any) -> None:
    """SIGKILL every Mininet node shell and release what Mininet holds for it (ptys, cgroups).

    Mininet's own `net.stop()` talks to each shell (`ip link del` through `node.cmd`), and a shell
    whose last command was cut short by Ctrl-C never answers again: teardown then hangs. Here no
    shell is asked anything; bridges and veths are removed afterwards from the root namespace.
    """
    nodes = list(net.hosts) + list(net.switches) + list(net.controllers)
    shells = [(node, node.shell) for node in nodes if getattr(node, "shell", None) is not None]
    for _node, shell in shells:
        if shell.poll() is None:
            try:
                os.killpg(shell.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                shell.kill()
    deadline = time.monotonic() + SHELL_EXIT_TIMEOUT
    for node, shell in shells:
        try:
            shell.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        node.waitExited = False
        try:
            node.cleanup()  # closes the pty; a CPULimitedHost also deletes its cgroup
        except Exception:  # noqa: BLE001 - teardown goes on; leftovers are found and named
            pass


# what every fabric asks of Mininet (one machine or a cluster): MACs and ARP as the plan and the
# controller make them, built and connected to the controller under the fabric's own control
MININET_OPTIONS = {"autoSetMacs": False, "autoStaticArp": False, "build": False, "waitConnected": False}
CONNECTED_CMD = ["ovs-vsctl", "--timeout=5", "--bare", "--columns=is_connected", "list", "controller"]


class Fabric:
    """A running leaf-spine network: Mininet hosts, OVS switches, shaped ports.

    Use as a context manager, or call start() and stop(); stop() is safe to call twice and after
    a failed start, and removes every bridge and veth of the fabric.
    """

    ports_here = True  # the switch ports are interfaces of this machine (a cluster's are not)

    def __init__(
        self,
        plan: Plan,
        controller_port: int = 6653,
        controller_host: str = "127.0.0.1",
        hosts: HostRuntime | None = None,
    ) -> None:
        spec = plan.spec
        if (spec.delay_ms or spec.loss_pct) and not netem_available():
            raise ParamError(
                "delay_ms/loss_pct need the sch_netem qdisc, which this kernel does not have "
                "(run where it does, e.g. the Vagrant VM)"
            )
        self.spec = spec
        self.plan = plan
        self.controller_port = controller_port
        self.controller_host = controller_host
        self.datapath = spec.datapath
        self.net: Any = None
        self.hosts_runtime = hosts or HostRuntime()
        self.containers: ContainerSet | None = None

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Build the network, shape every port, wait for the switches to reach the controller."""
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import OVSSwitch

        ensure_ovs()
        if self.datapath == "auto":
            self.datapath = detect_datapath()
        setLogLevel("error")
        switch = partial(OVSSwitch, datapath=self.datapath, protocols="OpenFlow13", failMode="secure")
        controller = partial(FabricController, ip=self.controller_host, port=self.controller_port)
        try:
            if self.hosts_runtime.docker:  # the containers first: their namespaces become the hosts'
                self.containers = ContainerSet(self.hosts_runtime, os.environ.get(MARKER, ""))
                self.containers.start()
            topo = LeafSpineTopo(self.plan, containers=self.containers)
            self.net = Mininet(
                topo=topo,
                switch=switch,
                controller=controller,
                **MININET_OPTIONS,
            )
            self.bring_up()
        except BaseException:
            self.stop()
            raise

    def wait_connected(self, timeout: float = 30.0) -> None:
        """Wait until every switch reports a connection to the controller."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.connected_switches() >= len(self.plan.switches):
                return
            time.sleep(0.3)
        raise FabricError(
            f"switches did not connect to the controller at {self.controller_host}:{self.controller_port} "
            f"within {timeout:.0f} s"
        )

    def connected_switches(self) -> int:
        """How many bridges OVS says are connected to their controller, on this machine."""
        return self.connected_in(_run(CONNECTED_CMD, check=False).stdout)

    @staticmethod
    def connected_in(ovs_out: str) -> int:
        """The connected controllers in `ovs-vsctl ... list controller` output (CONNECTED_CMD's)."""
        return ovs_out.split().count("true")

    def stop(self) -> None:
        """Tear the network down in bounded time; leaves no bridge, veth, shell or cgroup behind."""
        net, self.net = self.net, None
        try:
            if net is not None:
                end_node_shells(net)
        finally:
            if self.containers is not None:
                self.containers.stop()
            sweep_fabric(self.plan)

    def __enter__(self) -> Fabric:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- access -----------------------------------------------------------------------------
    def host(self, name: str) -> Any:
        """The Mininet host object called `name`."""
        return self.net[name]

    @property
    def hosts(self) -> list[Any]:
        """Mininet host objects in plan order."""
        return [self.net[h.name] for h in self.plan.hosts]

    @property
    def runtime(self) -> str:
        """docker when the hosts are containers, else netns."""
        return "docker" if self.containers is not None and self.containers.containers else "netns"

    def container(self, name: str) -> Container | None:
        """The container that is host `name`, or None for a namespace host."""
        if self.containers is None or name not in self.containers:
            return None
        return self.containers[name]

    def workload_popen(
        self,
        name: str,
        args: list[str],
        stdout: Any,
        stderr: Any,
        env: dict[str, str] | None = None,
        python: bool = True,
    ) -> Any:
        """Start a workload process in host `name`: in its container (docker exec), or in its namespace.

        args: the interpreter's arguments (`-u -m workloads.worker ...`) when `python`, else the whole
        command line (a user's own job). Returns a Popen-like object (poll, wait, terminate, kill)."""
        box = self.container(name)
        if box is not None:
            argv = [box.python, *args] if python else list(args)
            return box.exec(argv, stdout=stdout, stderr=stderr, env=env)
        argv = [sys.executable, *args] if python else list(args)
        return self.namespace_popen(name, argv, stdout, stderr, env)

    def namespace_popen(
        self, name: str, argv: list[str], stdout: Any, stderr: Any, env: dict[str, str] | None
    ) -> Any:
        """argv in host `name`'s namespace, with this process's environment plus `env`."""
        full_env = dict(os.environ, **(env or {})) if env else None
        return self.host(name).popen(argv, stdout=stdout, stderr=stderr, env=full_env)

    def host_call(self, name: str, func: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """func(pid, *args, **kw) with the pid of host `name`'s shell: what reads or sets a host's
        namespace through /proc/<pid> (hosttcp, capture.counters). A fabric whose hosts live on
        other machines runs it there (topologies.cluster)."""
        return func(self.host(name).shell.pid, *args, **kw)

    def set_cpu(self, name: str, share: float | None) -> None:
        """Change host `name`'s CPU share at run time (the `cpu` fault): the container's limit, or a
        CPU-limited namespace host's cgroup quota. share is Mininet's: a share of the whole machine;
        None: back to the plan's (unlimited for a host that is no CPU straggler)."""
        planned = self.plan.host(name).cpu
        share = planned if share is None else share
        box = self.container(name)
        if box is not None:
            box.update(Limits(cpus=cpus_for_share(share) if share is not None else 0.0))
            return
        if share is None:
            return
        node = self.host(name)
        if not hasattr(node, "setCPUFrac"):
            raise FabricError(
                f"{name} has no CPU limit to change (give it a cpu straggler, or use --runtime docker)"
            )
        node.setCPUFrac(share, sched="cfs")

    def set_port_buffer(self, ports: list[str], pkts: int, ecn_mark_pkts: int | None = None) -> None:
        """Resize switch ports' buffers in place: txqueuelen and the queue under the port's HTB class
        (OVS's linux-htb queue 0 is class 1:1) become a pfifo of `pkts` packets, or, with
        ecn_mark_pkts, a RED queue of that size that ECN-marks above ecn_mark_pkts packets (DCTCP's
        switch; needs sch_red). Changing txqueuelen alone would not do: the class's queue took its
        limit when it was made."""
        if ecn_mark_pkts is not None and not qdisc_available("red"):
            raise FabricError("ECN marking needs the sch_red qdisc, which this kernel does not have")
        known = self.plan.port_names()
        for name in ports:
            if name not in known:
                raise FabricError(f"{name} is not a switch port of this fabric")
            _run(["ip", "link", "set", "dev", name, "txqueuelen", str(pkts)])
            if ecn_mark_pkts is None:
                leaf = ["pfifo", "limit", str(pkts)]
            else:
                rate = next(p.rate_mbit for p in self.plan.switch_ports() if p.name == name)
                leaf = red_marking_qdisc(pkts, ecn_mark_pkts, rate)
            _run(["tc", "qdisc", "replace", "dev", name, "parent", "1:1", *leaf])

    # -- configuration ----------------------------------------------------------------------
    def bring_up(self) -> None:
        """Build and start the Mininet network (one machine's or a cluster's), make its interfaces a
        fabric's, shape its ports and fill the hosts' ARP tables."""
        self.net.build()
        self.net.start()
        self._quiet_interfaces()
        self._shape_switch_ports()
        self._shape_hosts()
        self.net.staticArp()

    def _quiet_interfaces(self) -> None:
        """IPv6 off on every fabric interface: the kernel's own router solicitations and MLD reports
        (an interface's, every few seconds after it comes up) would cross the spines and count in
        the ports' packet counters that the tools and tests read as the workload's. Under the
        userspace datapath, TSO/GSO and checksum offload off too: it drops super-frames and bad sums."""
        offloads = self.datapath == "user"
        for node in self.net.hosts + self.net.switches:
            for intf in node.intfList():
                if intf.name != "lo":
                    node.cmd(
                        (
                            f"ethtool -K {intf.name} tx off tso off gso off >/dev/null 2>&1; "
                            if offloads
                            else ""
                        )
                        + f"sysctl -qw net.ipv6.conf.{intf.name}.disable_ipv6=1"
                    )

    def _shape_switch_ports(self) -> None:
        """txqueuelen = buffer, then one linux-htb QoS queue per port at the link rate."""
        args = ["ovs-vsctl", "--timeout=20"]
        for k, port in enumerate(self.plan.switch_ports()):
            _run(["ip", "link", "set", "dev", port.name, "txqueuelen", str(self.spec.buffer_pkts)])
            bps = int(port.rate_mbit * 1e6)
            args += [
                "--",
                "set",
                "port",
                port.name,
                f"qos=@qos{k}",
                "--",
                f"--id=@qos{k}",
                "create",
                "qos",
                "type=linux-htb",
                f"other-config:max-rate={bps}",
                "external-ids:incastlab=1",
                f"queues:0=@q{k}",
                "--",
                f"--id=@q{k}",
                "create",
                "queue",
                f"other-config:max-rate={bps}",
                f"other-config:min-rate={bps}",
                "external-ids:incastlab=1",
            ]
        _run(args, timeout=60)

    def _shape_hosts(self) -> None:
        """Host NIC egress: HTB at the host's link rate, a deep host-side queue, netem if asked."""
        for host in self.plan.hosts:
            node = self.net[host.name]
            intf = host.nic
            rate = host.rate_mbit
            cmds = [
                f"ip link set dev {intf} txqueuelen {self.spec.host_buffer_pkts}",
                f"tc qdisc replace dev {intf} root handle 1: htb default 1",
                f"tc class add dev {intf} parent 1: classid 1:1 htb rate {rate}mbit ceil {rate}mbit",
            ]
            if self.spec.delay_ms or self.spec.loss_pct:
                cmds.append(
                    f"tc qdisc add dev {intf} parent 1:1 handle 10: netem "
                    f"delay {self.spec.delay_ms}ms loss {self.spec.loss_pct}% "
                    f"limit {self.spec.host_buffer_pkts}"
                )
            for cmd in cmds:
                out = node.cmd(cmd + " 2>&1; echo rc=$?")
                if not out.strip().endswith("rc=0"):
                    raise FabricError(f"{host.name}: `{cmd}` failed: {out.strip().splitlines()[0]}")
