"""The fabric over several machines, with Mininet's Cluster Edition (mininet.examples.cluster).

Placement is by leaf: the leaves are split in order into as many blocks as there are servers, and a
leaf's hosts live on its server; spine k goes to server k (round robin). So what crosses servers is
only leaf-spine links. Each of those is a VXLAN tunnel (VxlanLink, Cluster Edition's RemoteLink with
a VXLAN device on each end where RemoteGRELink makes gretap; this machine's kernel has no GRE), one
VNI per link, UDP 4789 between the two servers' addresses. Every fabric interface, tunnel or veth, has
MTU 1500 set explicitly, and the underlay must carry 1550 (topologies.servers checks it), so a tunnel
never splits or shrinks a frame: a packet-counted buffer counts the same packets as on one machine.

Nodes are Cluster Edition's RemoteHost and RemoteOVSSwitch reached as root over ssh in BatchMode
(topologies.servers.ssh_argv: no sudo, the run's marker in every remote shell's environment, so a
remote `incastlab clean` finds what the run started). Teardown kills the local ssh ends of the node
shells and runs `incastlab clean` on every server; the servers in use are noted in build/cluster/
in-use.json until then, so a local `incastlab clean` after a crash cleans them too.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import shlex
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from mininet.examples.cluster import MininetCluster, RemoteHost, RemoteLink, RemoteOVSSwitch
from mininet.link import Link
from mininet.node import Node

from runmodel.config import ControllerOptions
from runmodel.fabric import Plan
from topologies.containers import MARKER, HostRuntime
from topologies.fabric import CONNECTED_CMD, MININET_OPTIONS, Fabric, FabricError, end_node_shells
from topologies.hygiene import sweep_fabric
from topologies.servers import FABRIC_MTU, LOCAL, ROOT, listen_address, preflight_servers, run_on, ssh_argv
from topologies.topo import FabricController, LeafSpineTopo

IN_USE = ROOT / "build" / "cluster" / "in-use.json"
VXLAN_PORT = 4789


def placement(plan: Plan, servers: list[str]) -> dict[str, str]:
    """node -> server: leaves in order split into len(servers) blocks, each host with its leaf,
    spine k on server k modulo the number of servers."""
    leaves = [s.name for s in plan.switches if s.name.startswith("lf")]
    spines = [s.name for s in plan.switches if s.name.startswith("sp")]
    n = len(servers)
    where = {leaf: servers[i * n // len(leaves)] for i, leaf in enumerate(leaves)}
    where.update({sp: servers[i % n] for i, sp in enumerate(spines)})
    where.update({h.name: where[h.leaf] for h in plan.hosts})
    return where


class _Remote:
    """Cluster Edition's remote node, reached as root without sudo, the run's marker passed on."""

    def _popen(self, cmd: Any, sudo: bool = True, tt: bool = True, **params: Any) -> Any:  # noqa: ARG002
        if isinstance(cmd, str):
            cmd = cmd.split()
        if self.isRemote:  # type: ignore[attr-defined]
            marker = os.environ.get(MARKER, "")
            # ssh joins its arguments into one line for the remote shell: quote each one
            line = shlex.join(["env", f"{MARKER}={marker}", *map(str, cmd)])
            cmd = ssh_argv(self.serverIP, line, tty=tt)  # type: ignore[attr-defined]
        params.update(preexec_fn=os.setpgrp)
        return Node._popen(self, cmd, **params)  # type: ignore[arg-type]


class ClusterHost(_Remote, RemoteHost):
    """A host (a network namespace) on its leaf's server."""


class ClusterSwitch(_Remote, RemoteOVSSwitch):
    """An Open vSwitch bridge on its server (userspace or kernel datapath, as the servers have)."""


class VxlanLink(RemoteLink):
    """A link that is a veth pair within a server and a VXLAN tunnel between two (mirrors
    RemoteGRELink); MTU FABRIC_MTU on both ends either way."""

    vni = 0

    def stop(self) -> None:
        """Delete both ends (a tunnel end is a device of its own on each server)."""
        if self.tunnel:
            self.intf1.delete()
            self.intf2.delete()
        else:
            Link.stop(self)
        self.tunnel = None

    def makeIntfPair(  # noqa: N802 - Mininet's name
        self,
        intfname1: str,
        intfname2: str,
        addr1: str | None = None,
        addr2: str | None = None,
        node1: Any = None,
        node2: Any = None,
        deleteIntfs: bool = True,  # noqa: N803
    ) -> Any:
        node1 = self.node1 if node1 is None else node1
        node2 = self.node2 if node2 is None else node2
        if node1.server == node2.server:
            Link.makeIntfPair(intfname1, intfname2, addr1, addr2, node1, node2, deleteIntfs=deleteIntfs)
            node1.cmd(f"ip link set dev {intfname1} mtu {FABRIC_MTU}")
            node2.cmd(f"ip link set dev {intfname2} mtu {FABRIC_MTU}")
            return None
        type(self).vni += 1
        for node, name, addr, peer in (
            (node1, intfname1, addr1, node2),
            (node2, intfname2, addr2, node1),
        ):
            cmd = (
                f"ip link del {name} 2>/dev/null; ip link add {name} type vxlan id {self.vni} "
                f"local {node.serverIP} remote {peer.serverIP} dstport {VXLAN_PORT} ttl 64 && "
                f"ip link set dev {name} mtu {FABRIC_MTU}"
                + (f" address {addr}" if addr else "")
                + f" && ip link set dev {name} up && ip link set {name} netns {node.pid}"
            )
            proc = run_on(node.serverIP, cmd)
            if proc.returncode != 0:
                raise FabricError(f"VXLAN {name} on {node.server}: {proc.stderr.strip()[-200:]}")
        self.tunnel = 1
        return None


class ClusterFabric(Fabric):
    """The leaf-spine fabric over `servers` (server -> address; preflight_servers checked them).

    The same plan, names, ports and shaping as Fabric; only where each node lives differs."""

    ports_here = False

    def __init__(
        self,
        plan: Plan,
        addresses: dict[str, str],
        controller_port: int = 6653,
        controller_host: str = "127.0.0.1",
        hosts: HostRuntime | None = None,
    ) -> None:
        super().__init__(plan, controller_port, controller_host, hosts)
        self.addresses = dict(addresses)
        self.servers = list(addresses)
        self.where = placement(plan, self.servers)
        self.record: Path | None = None  # cluster.json: servers, placement, tunnels, their counters
        self.tunnels: list[dict[str, Any]] = []
        self._cpu0: dict[str, float] = {}
        # per strategy (or point), each server's CPU figures over its window (incastlab.record)
        self.server_cpu: dict[str, dict[str, dict[str, float | None]]] = {}

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Build the network across the servers, shape every port, as Fabric.start does."""
        from mininet.log import setLogLevel

        setLogLevel("error")
        if self.datapath == "auto":
            kernel = all(run_on(s, "test -d /sys/module/openvswitch").returncode == 0 for s in self.servers)
            self.datapath = "kernel" if kernel else "user"
        IN_USE.parent.mkdir(parents=True, exist_ok=True)
        IN_USE.write_text(
            json.dumps({"servers": self.servers, "ssh_config": os.environ.get("INCASTLAB_SSH_CONFIG")})
        )
        switch = partial(ClusterSwitch, datapath=self.datapath, protocols="OpenFlow13", failMode="secure")
        controller = partial(FabricController, ip=self.controller_host, port=self.controller_port)
        try:
            topo = LeafSpineTopo(self.plan)
            for node, server in self.where.items():
                topo.nodeInfo(node).update(server=server, serverIP=self.addresses[server], user="root")
            home = os.environ.get("HOME")
            os.environ["HOME"] = str(IN_USE.parent)  # Cluster Edition makes $HOME/.ssh/mn: not the user's
            try:
                self.net = MininetCluster(
                    topo=topo,
                    servers=self.servers,
                    serverIP=self.addresses,
                    user="root",
                    precheck=False,  # topologies.servers.preflight_servers did it, without sudo
                    host=ClusterHost,
                    switch=switch,
                    link=VxlanLink,
                    controller=controller,
                    **MININET_OPTIONS,
                )
            finally:
                if home is not None:
                    os.environ["HOME"] = home
            self.bring_up()
            self.tunnels = [
                {"a": ln.a, "b": ln.b, "a_server": self.where[ln.a], "b_server": self.where[ln.b]}
                for ln in self.plan.links
                if self.where[ln.a] != self.where[ln.b]
            ]
            self._cpu0 = self.switch_cpu()
            self.write_record()
        except BaseException:
            self.stop()
            raise

    def connected_switches(self) -> int:
        """How many bridges are connected to the controller, summed over the servers."""
        line = shlex.join(CONNECTED_CMD)
        return sum(self.connected_in(run_on(s, line).stdout) for s in self.servers)

    def stop(self) -> None:
        """End every node shell, then `incastlab clean` on every server (in parallel, bounded)."""
        net, self.net = self.net, None
        try:
            if net is not None:
                self.write_record(final=True)
                end_node_shells(net)
        finally:
            if any(s in LOCAL for s in self.servers):  # this machine: the one-machine sweep, this plan's
                sweep_fabric(self.plan)
            clean_servers([s for s in self.servers if s not in LOCAL])

    # -- what the run folder keeps of the cluster ---------------------------------------------
    def switch_cpu(self) -> dict[str, float]:
        """CPU seconds ovs-vswitchd has used so far on each server (user + system, from /proc)."""
        cmd = "cut -d' ' -f14,15 /proc/$(cat /var/run/openvswitch/ovs-vswitchd.pid)/stat; getconf CLK_TCK"
        out: dict[str, float] = {}
        for s in self.servers:
            words = run_on(s, cmd).stdout.split()
            if len(words) == 3:
                out[s] = (int(words[0]) + int(words[1])) / int(words[2])
        return out

    def tunnel_counters(self) -> dict[str, dict[str, int]]:
        """Each server's VXLAN devices' packet and drop counters and MTU (`ip -s -j link`), by device."""
        out: dict[str, dict[str, int]] = {}
        for s in self.servers:
            try:
                links = json.loads(run_on(s, "ip -s -j link show type vxlan").stdout or "[]")
            except ValueError:
                continue
            for link in links:
                st = link.get("stats64", {})
                out[link["ifname"]] = {
                    f"{d}_{k}": int(st.get(d, {}).get(k, 0))
                    for d in ("rx", "tx")
                    for k in ("packets", "dropped", "errors")
                } | {"mtu": int(link.get("mtu", 0))}
        return out

    def write_record(self, final: bool = False) -> None:
        """cluster.json in the run's folder: servers, placement, tunnel kind and MTUs, the tunnels, each
        server's CPU figures per strategy once measured; at the end also the tunnels' counters and
        each server's switch CPU over the fabric's life."""
        if self.record is None:
            return
        doc: dict[str, Any] = {
            "servers": self.addresses,
            "placement": self.where,
            "tunnel": {"kind": "vxlan", "udp_port": VXLAN_PORT, "fabric_mtu": FABRIC_MTU},
            "tunnels": self.tunnels,
            "controller": f"{self.controller_host}:{self.controller_port}",
        }
        if self.server_cpu:
            doc["server_cpu"] = self.server_cpu
        if final:
            doc["tunnel_counters"] = self.tunnel_counters()
            now = self.switch_cpu()
            doc["switch_cpu_s"] = {s: round(now[s] - self._cpu0.get(s, 0.0), 2) for s in now}
        self.record.write_text(json.dumps(doc, indent=1))

    # -- access -----------------------------------------------------------------------------
    def server_of(self, node: str) -> str:
        """The server that holds a host or switch."""
        return self.where[node]

    def namespace_popen(
        self, name: str, argv: list[str], stdout: Any, stderr: Any, env: dict[str, str] | None
    ) -> Any:
        """argv in host `name`'s namespace on its server: this checkout's code at the same path,
        the environment given, started in this process's working directory."""
        assigns = [f"{k}={v}" for k, v in {"PYTHONPATH": str(ROOT), **(env or {})}.items()]
        line = f"cd {shlex.quote(os.getcwd())} && exec env {' '.join(map(shlex.quote, assigns))} " + " ".join(
            map(shlex.quote, argv)
        )
        return self.host(name).popen(["sh", "-c", line], stdout=stdout, stderr=stderr)

    def host_call(self, name: str, func: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """func(pid, *args, **kw) run on the server of host `name` with the pid of its shell there
        (this checkout's interpreter at the same path), arguments and result through JSON; a
        dataclass result comes back as the same dataclass. Local for a host on this machine."""
        node = self.host(name)
        if not node.isRemote:
            return func(node.shell.pid, *args, **kw)
        call = json.dumps(
            {"module": func.__module__, "func": func.__qualname__, "args": [node.pid, *args], "kw": kw}
        )
        proc = run_on(
            node.serverIP,
            f"cd {ROOT} && PYTHONPATH={ROOT} {sys.executable} -m topologies.cluster call {shlex.quote(call)}",
        )
        if proc.returncode != 0:
            raise FabricError(
                f"{name}: {func.__qualname__} on {node.server} failed: {proc.stderr.strip()[-300:]}"
            )
        doc = json.loads(proc.stdout.strip().splitlines()[-1])
        if doc is None or "type" not in doc:
            return doc
        module, _, qual = doc["type"].rpartition(":")
        return getattr(importlib.import_module(module), qual)(**doc["fields"])

    def server_argv(self, server: str, line: str) -> list[str]:
        """ssh argv that runs the shell line `line` on `server`, the run's marker in its environment
        (so the server's own clean finds it if the run dies), e.g. a long-lived sampler's loop."""
        marker = f"{MARKER}={os.environ.get(MARKER, '')}"
        if server in LOCAL:
            return ["env", marker, "sh", "-c", line]
        return ssh_argv(server, f"env {shlex.quote(marker)} sh -c {shlex.quote(line)}")

    def server_python(self, server: str, args: list[str]) -> list[str]:
        """server_argv for this checkout's interpreter with `args` on `server` (the same paths there),
        e.g. a sampler of the ports it holds; its standard input is this end's."""
        line = f"cd {shlex.quote(str(ROOT))} && PYTHONPATH={shlex.quote(str(ROOT))} exec "
        return self.server_argv(server, line + shlex.join([sys.executable, *args]))

    def interrupt_capture(self, node: str, file: Path) -> None:
        """SIGINT, on the server of `node` (a host or a switch), the tcpdump writing `file` (a path
        unique to one capture point). Its local end is ssh: a signal there would end the pipe
        before tcpdump printed its closing counters (capture.pcap.CapturePoint.interrupt)."""
        pattern = f"^tcpdump .* -w {re.escape(str(file))}( |$)"
        run_on(self.where[node], f"pkill -INT -f -- {shlex.quote(pattern)}")

    # -- configuration ----------------------------------------------------------------------
    def _shape_switch_ports(self) -> None:
        """Fabric's shaping (txqueuelen = buffer, one linux-htb queue at the link rate), one ssh call
        per server for the ports of the switches it holds."""
        by_server: dict[str, list[str]] = {s: [] for s in self.servers}
        for k, port in enumerate(self.plan.switch_ports()):
            bps = int(port.rate_mbit * 1e6)
            by_server[self.where[port.switch]].append(
                f"ip link set dev {port.name} txqueuelen {self.spec.buffer_pkts} && "
                f"ovs-vsctl --timeout=20 -- set port {port.name} qos=@qos{k} -- --id=@qos{k} create qos "
                f"type=linux-htb other-config:max-rate={bps} external-ids:incastlab=1 queues:0=@q{k} -- "
                f"--id=@q{k} create queue other-config:max-rate={bps} other-config:min-rate={bps} "
                f"external-ids:incastlab=1 >/dev/null"
            )

        def shape(server: str) -> str:
            proc = run_on(server, " && ".join(by_server[server]) or "true", timeout=120)
            return "" if proc.returncode == 0 else f"{server}: {proc.stderr.strip()[-200:]}"

        with ThreadPoolExecutor(max_workers=len(self.servers)) as pool:
            failed = [msg for msg in pool.map(shape, self.servers) if msg]
        if failed:
            raise FabricError(f"shaping switch ports failed on {failed[0]}")


def clean_servers(servers: list[str], timeout: float = 60) -> dict[str, str]:
    """`incastlab clean` on every server at once (this checkout's, at the same path); returns what
    each said. The in-use note goes once every server answered."""

    def clean(server: str) -> str:
        cmd = f"cd {ROOT} && PYTHONPATH={ROOT} {sys.executable} -m topologies.cluster clean-here"
        proc = run_on(server, cmd, timeout=timeout)
        return (proc.stdout + proc.stderr).strip() or f"exit {proc.returncode}"

    if not servers:
        IN_USE.unlink(missing_ok=True)
        return {}
    with ThreadPoolExecutor(max_workers=len(servers)) as pool:
        said = dict(zip(servers, pool.map(clean, servers), strict=True))
    IN_USE.unlink(missing_ok=True)
    return said


def servers_in_use() -> list[str]:
    """The servers a cluster run noted as in use and did not clean (a crash), [] if none."""
    try:
        doc = json.loads(IN_USE.read_text())
    except (OSError, ValueError):
        return []
    if doc.get("ssh_config") and not os.environ.get("INCASTLAB_SSH_CONFIG"):
        os.environ["INCASTLAB_SSH_CONFIG"] = doc["ssh_config"]
    return [str(s) for s in doc.get("servers", [])]


def cluster_fabric(
    plan: Plan, options: ControllerOptions, say: Any, workdir: Path | None = None
) -> tuple[ClusterFabric, ControllerOptions]:
    """The fabric over options.servers, every server checked first (ServerError, one line per
    missing piece), and the controller options with OpenFlow on the address the servers reach."""
    if plan.spec.runtime == "docker":
        raise FabricError("--runtime docker: with --servers the hosts are namespaces on the servers")
    addresses = preflight_servers(options.servers, say=say)
    of_host = listen_address(options.servers, addresses, options.of_host)
    hosts = HostRuntime("netns", "hosts are namespaces on the servers")
    fabric = ClusterFabric(plan, addresses, options.of_port, of_host, hosts)
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        fabric.record = workdir / "cluster.json"
    return fabric, dataclasses.replace(options, of_host=of_host)


def clean_here() -> str:
    """What a server's own sweep removes (the leftover finder of `incastlab clean`, this machine only:
    never the other servers, whatever in-use note the mounted checkout holds)."""
    from topologies.hygiene import find_leftovers, remove

    left = find_leftovers(vm=False)
    left.servers = []
    remove(left)
    after = find_leftovers(vm=False)
    return f"removed: {left.describe()}" + ("" if after.empty() else f"; still there: {after.describe()}")


def call_here(request: str) -> str:
    """Run one host_call request (JSON) on this machine; the result as JSON (a dataclass with its type)."""
    req = json.loads(request)
    func = getattr(importlib.import_module(req["module"]), req["func"])
    out = func(*req["args"], **req["kw"])
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        cls = type(out)
        return json.dumps({"type": f"{cls.__module__}:{cls.__qualname__}", "fields": dataclasses.asdict(out)})
    return json.dumps(out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["call"] and len(sys.argv) == 3:
        print(call_here(sys.argv[2]))
    elif sys.argv[1:] == ["clean-here"]:
        print(clean_here())
    else:
        sys.exit("usage: python -m topologies.cluster clean-here | call JSON")
