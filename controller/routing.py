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

Two tables. Table 1 holds the forwarding above. Table 0 is the flow table: an exact 5-tuple entry
per TCP/UDP flow (priority 200, the controller installs it), below it on a leaf's host ports a rule
that sends a copy of a new flow's packets to the controller while forwarding them on to table 1,
and a default that goes to table 1. An entry either goes on to table 1 (the hash decides, `ecmp`)
or outputs to one uplink (the flow is pinned). Entries carry COOKIE_FLOW, the plan's rules
COOKIE_BASE, so a reconnecting switch gets its plan rules replaced and keeps its flows' entries.

The rules are plain data (FlowRule, GroupRule, FlowKey) so they can be tested without a switch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runmodel.fabric import HostPlan, Plan

GROUP_BASE = 100  # group toward remote leaf k is GROUP_BASE + k
PRIO_UNICAST = 100
PRIO_BROADCAST = 50
FLOW_TABLE, FORWARD_TABLE = 0, 1
PRIO_FLOW = 200  # one flow's exact entry
PRIO_NEW_FLOW = 10  # a new flow's packets: copy to the controller, forward by table 1
COOKIE_BASE, COOKIE_FLOW = 0x1, 0x2
FLOW_IDLE_S = 60  # an entry without packets for this long expires (its last counters are reported)
PROTOS = {"tcp": 6, "udp": 17}
MULTICAST_BIT = ("01:00:00:00:00:00", "01:00:00:00:00:00")


@dataclass(frozen=True)
class FlowRule:
    """One flow: match fields (OpenFlow 1.3 names) -> output ports or a group."""

    priority: int
    match: dict[str, Any]
    out_ports: tuple[int, ...] = ()
    group: int | None = None
    table: int = FORWARD_TABLE
    goto: int | None = None  # go on to this table after the actions
    to_controller: bool = False  # also send (the head of) the packet to the controller
    cookie: int = COOKIE_BASE
    idle_timeout: int = 0


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
    flows: list[FlowRule] = field(default_factory=list)  # table 1: forwarding
    groups: list[GroupRule] = field(default_factory=list)
    front: list[FlowRule] = field(default_factory=list)  # table 0: what leads to the flow entries
    uplinks: dict[str, int] = field(default_factory=dict)  # leaf: spine name -> its uplink port


@dataclass(frozen=True)
class FlowKey:
    """A TCP or UDP flow's 5-tuple, one direction."""

    proto: str  # "tcp" | "udp"
    src_ip: str
    dst_ip: str
    sport: int
    dport: int

    @property
    def name(self) -> str:
        """'tcp 10.0.0.2:40112>10.0.0.5:29500': the flow's id in records, the API and events."""
        return f"{self.proto} {self.src_ip}:{self.sport}>{self.dst_ip}:{self.dport}"

    def match(self) -> dict[str, Any]:
        """The exact OpenFlow 1.3 match of this flow."""
        return {
            "eth_type": 0x0800,
            "ip_proto": PROTOS[self.proto],
            "ipv4_src": self.src_ip,
            "ipv4_dst": self.dst_ip,
            f"{self.proto}_src": self.sport,
            f"{self.proto}_dst": self.dport,
        }

    @classmethod
    def from_match(cls, match: dict[str, Any]) -> FlowKey | None:
        """The key of an exact entry read back from a switch (None for anything else)."""
        proto = {v: k for k, v in PROTOS.items()}.get(match.get("ip_proto", -1))
        if proto is None or "ipv4_src" not in match or f"{proto}_src" not in match:
            return None
        return cls(
            proto,
            match["ipv4_src"],
            match["ipv4_dst"],
            int(match[f"{proto}_src"]),
            int(match[f"{proto}_dst"]),
        )


def flow_entry(key: FlowKey, out_port: int | None = None) -> FlowRule:
    """A flow's exact entry in table 0: on to the forwarding table (hashed), or pinned to `out_port`."""
    if out_port is None:
        return FlowRule(
            PRIO_FLOW,
            key.match(),
            table=FLOW_TABLE,
            goto=FORWARD_TABLE,
            cookie=COOKIE_FLOW,
            idle_timeout=FLOW_IDLE_S,
        )
    return FlowRule(
        PRIO_FLOW,
        key.match(),
        out_ports=(out_port,),
        table=FLOW_TABLE,
        cookie=COOKIE_FLOW,
        idle_timeout=FLOW_IDLE_S,
    )


def front_rules(host_ports: tuple[int, ...]) -> list[FlowRule]:
    """Table 0 of a switch: TCP/UDP from a host port is copied to the controller (a flow it has no
    entry for yet); everything else, and everything on a spine, goes on to table 1."""
    rules = [FlowRule(0, {}, table=FLOW_TABLE, goto=FORWARD_TABLE)]
    for port in host_ports:
        for number in PROTOS.values():
            rules.append(
                FlowRule(
                    PRIO_NEW_FLOW,
                    {"in_port": port, "eth_type": 0x0800, "ip_proto": number},
                    table=FLOW_TABLE,
                    goto=FORWARD_TABLE,
                    to_controller=True,
                )
            )
    return rules


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
        sr.front = front_rules(host_ports)
        sr.uplinks = {sp.name: uplink_of[(name, sp.name)] for sp in spines}
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
        sr.front = front_rules(())
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
