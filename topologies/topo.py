"""The leaf-spine fabric as a Mininet topology, built from the wiring plan.

Like Mininet's own topolib.py: a module-level Topo class whose build() reads like the topology.
Names, dpids and port numbers are the plan's (runmodel.fabric), so the controller, the captures
and the analysis all name every port the same way. A host that is a container (topologies.containers)
is a DockerHost: a Mininet host whose shell lives in the container's network namespace.
"""

from __future__ import annotations

import socket
from typing import Any

from mininet.log import warn
from mininet.node import CPULimitedHost, Host, RemoteController
from mininet.topo import Topo

from runmodel.fabric import Plan
from topologies.containers import Container, ContainerSet


class FabricController(RemoteController):
    """Mininet's RemoteController, but its is-anyone-listening check is a plain TCP connect.

    Mininet's own check runs `telnet` to the controller's port and reads its output as UTF-8; the
    controller answers with a binary OpenFlow HELLO whose random transaction id is now and then not
    UTF-8, which fails the fabric's start with a UnicodeDecodeError.
    """

    def isListening(self, ip: str, port: int) -> bool:  # noqa: N802 - Mininet's name
        try:
            with socket.create_connection((ip, port), timeout=5):
                return True
        except OSError:
            warn(f"Unable to contact the remote controller at {ip}:{port}\n")
            return False


class DockerHost(Host):
    """A Mininet host whose network namespace is a running container's.

    The container is started first (ContainerSet.start); the host's shell is then started in the
    container's network namespace instead of a new one (nsenter on the container's main process, in the
    root mount namespace), so Mininet moves the host's veth end into the container, and every command
    Mininet or incastlab runs "in the host" (ip, tc, ping, tcpdump, iperf3) acts on the container's
    network. Processes of the workload run in the container itself (Container.exec).
    """

    def __init__(self, name: str, container: Container | None = None, **params: Any) -> None:
        if container is None or not container.pid:
            raise ValueError(f"{name}: a DockerHost needs its started container")
        self.container = container
        self._starting_shell = False
        super().__init__(name, **params)

    def startShell(self, mnopts: str | None = None) -> None:  # noqa: N802 - Mininet's name
        self._starting_shell = True
        try:
            super().startShell(mnopts)
        finally:
            self._starting_shell = False

    def _popen(self, cmd: list[str], **params: Any) -> Any:
        if self._starting_shell and cmd[:1] == ["mnexec"]:
            # `mnexec -cdn bash ...` would make a new namespace: join the container's instead
            opts = cmd[1].replace("n", "")
            cmd = ["mnexec", opts, "nsenter", f"--net=/proc/{self.container.pid}/ns/net", "--", *cmd[2:]]
        return super()._popen(cmd, **params)


class LeafSpineTopo(Topo):
    """Every leaf wired to every spine; hosts under the leaves (containers, or namespaces with stragglers
    CPU-limited)."""

    def build(self, plan: Plan, containers: ContainerSet | None = None) -> None:  # type: ignore[override]
        for sw in plan.switches:
            self.addSwitch(sw.name, dpid=f"{sw.dpid:016x}", protocols="OpenFlow13")
        for host in plan.hosts:
            opts: dict[str, Any] = {"ip": f"{host.ip}/8", "mac": host.mac}
            if containers is not None and host.name in containers:
                opts.update(cls=DockerHost, container=containers[host.name])  # its limits are the container's
            elif host.cpu is not None:
                opts.update(cls=CPULimitedHost, cpu=host.cpu)
            self.addHost(host.name, **opts)
        # links in port order, so that Mininet numbers the ports as the plan does
        for link in sorted(plan.links, key=lambda ln: (ln.a, ln.a_port)):
            self.addLink(link.a, link.b, port1=link.a_port, port2=link.b_port)
