"""The leaf-spine fabric as plain data: its parameters (FabricSpec) and the wiring plan (Plan).

Nothing here touches the network. The plan (switch names, dpids, port numbers, host addresses,
per-host rates and CPU shares) is derived once, here, from the spec and handed to Mininet
(topologies/), to the controller (as plan.json) and to the analysis, so all of them name every port
the same way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from runmodel.params import ParamError, number, param, refuse_unknown, whole

SPINE_DPID_BASE = 0x100
LEAF_DPID_BASE = 0x200
DATAPATHS = ("auto", "user", "kernel")
RUNTIMES = ("auto", "docker", "netns")  # what a host is: a container, a namespace, or docker where it can be


@dataclass(frozen=True)
class FabricSpec:
    """Parameters of a leaf-spine fabric (rates in Mbit/s, buffers in packets)."""

    spines: int = param(2, "spine switches")
    leaves: int = param(4, "leaf switches")
    hosts_per_leaf: int = param(2, "hosts under each leaf")
    host_mbit: float = param(20.0, "host link rate, Mbit/s")
    uplink_mbit: float = param(20.0, "leaf-spine link rate, Mbit/s")
    buffer_pkts: int = param(
        20, "switch port buffer, packets (txqueuelen and the port's HTB queue)", aliases=("--buffer",)
    )
    ps_host: str = param("h1", "parameter-server host")
    host_buffer_pkts: int = param(1000, "host NIC queue, packets (deep, so drops happen in the switches)")
    delay_ms: float = param(0.0, "host link one-way delay, ms (needs the sch_netem qdisc)")
    loss_pct: float = param(0.0, "host link random loss, % (needs the sch_netem qdisc)")
    datapath: str = param(
        "auto", "OVS datapath: kernel if its module is there (auto), else user", choices=DATAPATHS
    )
    runtime: str = param(
        "auto",
        "what each host is: a Docker container (docker), a network namespace "
        "(netns), or docker when dockerd answers and the worker image is built (auto)",
        choices=RUNTIMES,
    )

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse a fabric that cannot exist, before anything is built."""
        whole("spines", self.spines, 1, 16)
        whole("leaves", self.leaves, 1, 64)
        whole("hosts_per_leaf", self.hosts_per_leaf, 1, 64)
        if self.n_hosts > 250:
            raise ParamError(f"fabric too large: {self.n_hosts} hosts, at most 250")
        for name in ("host_mbit", "uplink_mbit"):
            value = getattr(self, name)
            number(name, value, 0, 10000, lo_open=True)
        whole("buffer_pkts", self.buffer_pkts, 1)
        whole("host_buffer_pkts", self.host_buffer_pkts, 1)
        number("delay_ms", self.delay_ms, 0)
        number("loss_pct", self.loss_pct, 0)
        if self.loss_pct >= 100:
            raise ParamError(f"loss_pct must be in [0, 100), got {self.loss_pct:g}")
        if self.datapath not in DATAPATHS:
            raise ParamError(f"datapath must be one of {', '.join(DATAPATHS)}, got {self.datapath!r}")
        if self.runtime not in RUNTIMES:
            raise ParamError(f"runtime must be one of {', '.join(RUNTIMES)}, got {self.runtime!r}")
        self.check_host("ps_host", self.ps_host)

    def check_host(self, what: str, host: str) -> None:
        """Refuse a host name that is not in this fabric, naming `what` it was given for."""
        if host not in self.host_names:
            raise ParamError(f"{what}: host {host!r} does not exist (hosts are h1..h{self.n_hosts})")

    @property
    def n_hosts(self) -> int:
        """Number of hosts in the fabric."""
        return self.leaves * self.hosts_per_leaf

    @property
    def host_names(self) -> list[str]:
        """Hosts h1..hN, numbered leaf by leaf."""
        return [f"h{i}" for i in range(1, self.n_hosts + 1)]

    def leaf_of(self, host: str) -> str:
        """The leaf a host hangs under (lf1 for h1..h<hosts_per_leaf>), as build_plan wires it."""
        self.check_host("host", host)
        return f"lf{(int(host[1:]) - 1) // self.hosts_per_leaf + 1}"

    @property
    def oversubscription(self) -> float:
        """Host bandwidth into a leaf over its uplink bandwidth (1.0 = non-blocking)."""
        return (self.hosts_per_leaf * self.host_mbit) / (self.spines * self.uplink_mbit)

    def to_dict(self) -> dict[str, Any]:
        """The parameters as JSON-ready data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FabricSpec:
        """Parameters from JSON data; unknown keys are refused by name."""
        refuse_unknown(data, cls, "fabric")
        return cls(**data)


def host_ip(index: int) -> str:
    """IPv4 address of host h<index>."""
    return f"10.0.{index // 256}.{index % 256}"


def host_mac(index: int) -> str:
    """MAC address of host h<index>, as Mininet's autoSetMacs would give it."""
    return ":".join(f"{(index >> (8 * k)) & 0xFF:02x}" for k in range(5, -1, -1))


def iface(node: str, port: int) -> str:
    """Mininet's interface name of a node's port: lf1-eth3, h2-eth0."""
    return f"{node}-eth{port}"


@dataclass(frozen=True)
class SwitchPlan:
    """One switch: name, OpenFlow datapath id, spine or leaf."""

    name: str
    dpid: int
    role: str


@dataclass(frozen=True)
class HostPlan:
    """One host: where it hangs (leaf and leaf port), its addresses, link rate and CPU share."""

    name: str
    index: int
    ip: str
    mac: str
    leaf: str
    port: int
    ps: bool
    rate_mbit: float
    cpu: float | None = None  # share of one CPU for a CPU-limited host (a straggler), else None

    @property
    def leaf_port(self) -> str:
        """The leaf's interface toward this host (its switch port)."""
        return iface(self.leaf, self.port)

    @property
    def nic(self) -> str:
        """The host's own interface."""
        return iface(self.name, 0)


@dataclass(frozen=True)
class LinkPlan:
    """One link: a (a leaf) port a_port to b (a spine, or a host on port 0)."""

    a: str
    a_port: int
    b: str
    b_port: int
    kind: str  # "uplink" (leaf-spine) or "host"
    rate_mbit: float


@dataclass(frozen=True)
class PortRef:
    """A switch port by name: switch, port number and interface name."""

    switch: str
    port: int
    name: str


@dataclass(frozen=True)
class SwitchPort(PortRef):
    """A switch port of the plan and what is on its other end."""

    peer: str
    kind: str  # "uplink" (toward a spine or a leaf) or "host" (a leaf's port toward a host)
    rate_mbit: float


@dataclass(frozen=True)
class Plan:
    """The wiring plan: every switch, host and link with names, dpids and port numbers.

    Leaf ports 1..S go to spines 1..S; leaf ports S+1.. to its hosts; spine port j to leaf j.
    """

    spec: FabricSpec
    switches: tuple[SwitchPlan, ...]
    hosts: tuple[HostPlan, ...]
    links: tuple[LinkPlan, ...]
    ps_host: str
    ps_port: PortRef
    _by_name: dict[str, HostPlan] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({h.name: h for h in self.hosts})

    def host(self, name: str) -> HostPlan:
        """A host by name (KeyError if it is not in the plan)."""
        return self._by_name[name]

    @property
    def host_names(self) -> list[str]:
        """Host names in plan order."""
        return [h.name for h in self.hosts]

    def switch_ports(self) -> list[SwitchPort]:
        """Every switch port (both ends of each uplink, the leaf end of each host link)."""
        out = []
        for ln in self.links:
            out.append(SwitchPort(ln.a, ln.a_port, iface(ln.a, ln.a_port), ln.b, ln.kind, ln.rate_mbit))
            if ln.kind == "uplink":
                out.append(SwitchPort(ln.b, ln.b_port, iface(ln.b, ln.b_port), ln.a, "uplink", ln.rate_mbit))
        return out

    def port_names(self) -> set[str]:
        """Interface names of every switch port."""
        return {p.name for p in self.switch_ports()}

    def uplink_of_port(self, switch: str, port: int) -> tuple[str, str] | None:
        """(leaf, spine) of the leaf-spine link on a switch port, or None for a host port."""
        for ln in self.links:
            ends = ((ln.a, ln.a_port), (ln.b, ln.b_port))
            if ln.kind == "uplink" and (switch, port) in ends:
                return ln.a, ln.b
        return None

    def to_dict(self) -> dict[str, Any]:
        """plan.json (and the bulk of /api/topology)."""
        return {
            "spec": self.spec.to_dict(),
            "switches": [asdict(s) for s in self.switches],
            "hosts": [asdict(h) for h in self.hosts],
            "links": [asdict(ln) for ln in self.links],
            "ps_host": self.ps_host,
            "ps_port": asdict(self.ps_port),
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Plan:
        """The plan from plan.json."""
        return cls(
            spec=FabricSpec.from_dict(doc["spec"]),
            switches=tuple(SwitchPlan(**s) for s in doc["switches"]),
            hosts=tuple(HostPlan(**h) for h in doc["hosts"]),
            links=tuple(LinkPlan(**ln) for ln in doc["links"]),
            ps_host=doc["ps_host"],
            ps_port=PortRef(**doc["ps_port"]),
        )


def build_plan(
    spec: FabricSpec, host_mbit: dict[str, float] | None = None, host_cpu: dict[str, float] | None = None
) -> Plan:
    """The wiring plan of a spec; `host_mbit`/`host_cpu` slow single hosts (stragglers)."""
    host_mbit, host_cpu = host_mbit or {}, host_cpu or {}
    for what, table in (("link_mbit", host_mbit), ("cpu", host_cpu)):
        for host in table:
            spec.check_host(what, host)
    switches = [SwitchPlan(f"sp{s}", SPINE_DPID_BASE + s, "spine") for s in range(1, spec.spines + 1)]
    links: list[LinkPlan] = []
    hosts: list[HostPlan] = []
    for leaf in range(1, spec.leaves + 1):
        lname = f"lf{leaf}"
        switches.append(SwitchPlan(lname, LEAF_DPID_BASE + leaf, "leaf"))
        for s in range(1, spec.spines + 1):
            links.append(LinkPlan(lname, s, f"sp{s}", leaf, "uplink", float(spec.uplink_mbit)))
        for k in range(spec.hosts_per_leaf):
            index = (leaf - 1) * spec.hosts_per_leaf + k + 1
            name = f"h{index}"
            rate = float(host_mbit.get(name, spec.host_mbit))
            port = spec.spines + k + 1
            hosts.append(
                HostPlan(
                    name,
                    index,
                    host_ip(index),
                    host_mac(index),
                    lname,
                    port,
                    name == spec.ps_host,
                    rate,
                    host_cpu.get(name),
                )
            )
            links.append(LinkPlan(lname, port, name, 0, "host", rate))
    ps = next(h for h in hosts if h.ps)
    return Plan(
        spec,
        tuple(switches),
        tuple(hosts),
        tuple(links),
        spec.ps_host,
        PortRef(ps.leaf, ps.port, ps.leaf_port),
    )
