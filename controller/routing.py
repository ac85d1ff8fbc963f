"""Proactive forwarding for a looped leaf-spine fabric, computed from the wiring plan.

No learning and no flooding: every switch gets one flow per destination MAC. A leaf sends traffic
for a host on another leaf to an OpenFlow select group whose buckets are its spine uplinks, so OVS
spreads flows over the spines by a hash of their headers (ECMP); each bucket watches its port, so a
dead uplink drops out of the group. Broadcast and multicast follow a loop-free tree: a leaf sends a
host's broadcast to its other hosts and to spine 1 only; a spine sends it down to every other leaf;
a leaf sends what comes from a spine to its hosts only.

A leaf has one select group per remote leaf, so when a leaf-spine link dies the controller only
rewrites groups: every leaf drops that spine from the groups toward the cut-off leaf, and the
cut-off leaf drops it from all of its groups.

The rules are plain data (FlowRule, GroupRule) so they can be tested without a switch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runmodel.fabric import HostPlan, Plan

GROUP_BASE = 100  # group toward remote leaf k is GROUP_BASE + k
PRIO_UNICAST = 100
PRIO_BROADCAST = 50
MULTICAST_BIT = ("01:00:00:00:00:00", "01:00:00:00:00:00")


@dataclass(frozen=True)
class FlowRule:
    """One flow: match fields (OpenFlow 1.3 names) -> output ports or a group."""

    priority: int
    match: dict[str, Any]
    out_ports: tuple[int, ...] = ()
    group: int | None = None


@dataclass(frozen=True)
class GroupRule:
    """A select group: one bucket per output port, each watching that port."""

    group_id: int
    ports: tuple[int, ...]


@dataclass
class SwitchRules:
    """Everything one switch needs."""

    name: str
    dpid: int
    role: str
    flows: list[FlowRule] = field(default_factory=list)
    groups: list[GroupRule] = field(default_factory=list)


def group_id(leaf: str) -> int:
    """The select group (on every other leaf) that leads toward `leaf` ("lf3" -> 103)."""
    return GROUP_BASE + int(leaf[2:])


def compute_rules(plan: Plan, down: set[tuple[str, str]] | None = None) -> dict[int, SwitchRules]:
    """Rules for every switch of the plan, keyed by datapath id; `down` holds dead (leaf, spine) links."""
    down = down or set()
    spines = sorted((s for s in plan.switches if s.role == "spine"), key=lambda s: s.dpid)
    leaves = sorted((s for s in plan.switches if s.role == "leaf"), key=lambda s: s.dpid)
    uplink_of: dict[tuple[str, str], int] = {}  # (leaf, spine) -> leaf port
    downlink_of: dict[tuple[str, str], int] = {}  # (spine, leaf) -> spine port
    for link in plan.links:
        if link.kind == "uplink":
            uplink_of[(link.a, link.b)] = link.a_port
            downlink_of[(link.b, link.a)] = link.b_port
    hosts_on: dict[str, list[HostPlan]] = {leaf.name: [] for leaf in leaves}
    for host in plan.hosts:
        hosts_on[host.leaf].append(host)

    rules: dict[int, SwitchRules] = {}
    for leaf in leaves:
        name = leaf.name
        sr = SwitchRules(name, leaf.dpid, "leaf")
        up_ports = tuple(uplink_of[(name, sp.name)] for sp in spines)
        host_ports = tuple(h.port for h in hosts_on[name])
        for other in leaves:
            if other.name == name:
                continue
            alive = tuple(
                uplink_of[(name, sp.name)]
                for sp in spines
                if (name, sp.name) not in down and (other.name, sp.name) not in down
            )
            sr.groups.append(GroupRule(group_id(other.name), alive))
        for host in plan.hosts:
            match = {"eth_dst": host.mac}
            if host.leaf == name:
                sr.flows.append(FlowRule(PRIO_UNICAST, match, out_ports=(host.port,)))
            else:
                sr.flows.append(FlowRule(PRIO_UNICAST, match, group=group_id(host.leaf)))
        for port in host_ports:
            others = tuple(p for p in host_ports if p != port)
            sr.flows.append(
                FlowRule(
                    PRIO_BROADCAST,
                    {"in_port": port, "eth_dst": MULTICAST_BIT},
                    out_ports=others + (up_ports[0],),
                )
            )
        for port in up_ports:
            sr.flows.append(
                FlowRule(PRIO_BROADCAST, {"in_port": port, "eth_dst": MULTICAST_BIT}, out_ports=host_ports)
            )
        rules[leaf.dpid] = sr
    for spine in spines:
        name = spine.name
        sr = SwitchRules(name, spine.dpid, "spine")
        down_ports = tuple(downlink_of[(name, lf.name)] for lf in leaves)
        for host in plan.hosts:
            sr.flows.append(
                FlowRule(PRIO_UNICAST, {"eth_dst": host.mac}, out_ports=(downlink_of[(name, host.leaf)],))
            )
        for port in down_ports:
            sr.flows.append(
                FlowRule(
                    PRIO_BROADCAST,
                    {"in_port": port, "eth_dst": MULTICAST_BIT},
                    out_ports=tuple(p for p in down_ports if p != port),
                )
            )
        rules[spine.dpid] = sr
    return rules
