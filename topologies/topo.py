"""The leaf-spine fabric as a Mininet topology, built from the wiring plan.

Like Mininet's own topolib.py: a module-level Topo class whose build() reads like the topology.
Names, dpids and port numbers are the plan's (runmodel.fabric), so the controller, the captures
and the analysis all name every port the same way.
"""

from __future__ import annotations

from typing import Any

from mininet.node import CPULimitedHost
from mininet.topo import Topo

from runmodel.fabric import Plan


class LeafSpineTopo(Topo):
    """Every leaf wired to every spine; hosts under the leaves; stragglers CPU-limited."""

    def build(self, plan: Plan) -> None:  # type: ignore[override]
        for sw in plan.switches:
            self.addSwitch(sw.name, dpid=f"{sw.dpid:016x}", protocols="OpenFlow13")
        for host in plan.hosts:
            opts: dict[str, Any] = {"ip": f"{host.ip}/8", "mac": host.mac}
            if host.cpu is not None:
                opts.update(cls=CPULimitedHost, cpu=host.cpu)
            self.addHost(host.name, **opts)
        # links in port order, so that Mininet numbers the ports as the plan does
        for link in sorted(plan.links, key=lambda ln: (ln.a, ln.a_port)):
            self.addLink(link.a, link.b, port1=link.a_port, port2=link.b_port)
