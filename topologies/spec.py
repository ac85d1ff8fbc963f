"""The leaf-spine fabric as plain data: validated parameters and the wiring plan derived from them.

Nothing here touches the network. The plan (switch names, dpids, port numbers, host addresses) is
what the controller needs to install forwarding proactively, so it is computed once, here, and
handed to both Mininet (topologies/fabric.py) and the controller as JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SPINE_DPID_BASE = 0x100
LEAF_DPID_BASE = 0x200


class SpecError(ValueError):
    """A fabric that cannot exist; the message is one line naming the field."""


@dataclass(frozen=True)
class FabricSpec:
    """Parameters of a leaf-spine fabric.

    Rates are Mbit/s; `buffer_pkts` is each switch port's queue (txqueuelen + one linux-htb queue).
    `ps_host` names the parameter-server host ("h1" ... ). `cpu` maps host names to a CPU share
    (0 < share <= 1) for CPU-limited hosts (stragglers).
    """

    spines: int = 2
    leaves: int = 4
    hosts_per_leaf: int = 2
    host_mbit: float = 20.0
    uplink_mbit: float = 20.0
    buffer_pkts: int = 20
    ps_host: str = "h1"
    host_buffer_pkts: int = 1000
    delay_ms: float = 0.0
    loss_pct: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    link_mbit: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse a fabric that cannot exist, before anything is built."""
        for name in ("spines", "leaves", "hosts_per_leaf"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(f"{name} must be a whole number >= 1, got {value!r}")
        if self.spines > 16 or self.leaves > 64 or self.hosts_per_leaf > 64:
            raise SpecError("fabric too large: at most 16 spines, 64 leaves, 64 hosts per leaf")
        if self.n_hosts > 250:
            raise SpecError(f"fabric too large: {self.n_hosts} hosts, at most 250")
        for name in ("host_mbit", "uplink_mbit"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
                raise SpecError(f"{name} must be a rate > 0 Mbit/s, got {value!r}")
            if value > 10000:
                raise SpecError(f"{name} {value} Mbit/s is beyond what this emulator can hold")
        if not isinstance(self.buffer_pkts, int) or self.buffer_pkts < 1:
            raise SpecError(f"buffer_pkts must be a whole number of packets >= 1, got {self.buffer_pkts!r}")
        if not isinstance(self.host_buffer_pkts, int) or self.host_buffer_pkts < 1:
            raise SpecError(f"host_buffer_pkts must be >= 1, got {self.host_buffer_pkts!r}")
        if self.delay_ms < 0:
            raise SpecError(f"delay_ms must be >= 0, got {self.delay_ms}")
        if not 0 <= self.loss_pct < 100:
            raise SpecError(f"loss_pct must be in [0, 100), got {self.loss_pct}")
        names = set(self.host_names)
        if self.ps_host not in names:
            raise SpecError(f"ps_host {self.ps_host!r} does not exist (hosts are h1..h{self.n_hosts})")
        for host, share in self.cpu.items():
            if host not in names:
                raise SpecError(f"cpu: host {host!r} does not exist (hosts are h1..h{self.n_hosts})")
            if not 0 < share <= 1:
                raise SpecError(f"cpu: share for {host} must be in (0, 1], got {share}")
        for host, rate in self.link_mbit.items():
            if host not in names:
                raise SpecError(f"link_mbit: host {host!r} does not exist (hosts are h1..h{self.n_hosts})")
            if not rate > 0:
                raise SpecError(f"link_mbit: rate for {host} must be > 0 Mbit/s, got {rate}")

    @property
    def n_hosts(self) -> int:
        """Number of hosts in the fabric."""
        return self.leaves * self.hosts_per_leaf

    @property
    def host_names(self) -> list[str]:
        """Hosts h1..hN, numbered leaf by leaf."""
        return [f"h{i}" for i in range(1, self.n_hosts + 1)]

    @property
    def oversubscription(self) -> float:
        """Host bandwidth into a leaf over its uplink bandwidth (1.0 = non-blocking)."""
        return (self.hosts_per_leaf * self.host_mbit) / (self.spines * self.uplink_mbit)

    def host_rate(self, host: str) -> float:
        """The rate of one host's link (a degraded link overrides the default)."""
        return self.link_mbit.get(host, self.host_mbit)

    def to_dict(self) -> dict[str, Any]:
        """The parameters as JSON-ready data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FabricSpec:
        """Parameters from JSON data; unknown keys are refused by name."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"unknown fabric field {unknown[0]!r} (known: {', '.join(sorted(known))})")
        return cls(**data)


def host_ip(index: int) -> str:
    """IPv4 address of host h<index>."""
    return f"10.0.{index // 256}.{index % 256}"


def host_mac(index: int) -> str:
    """MAC address of host h<index>, as Mininet's autoSetMacs would give it."""
    return ":".join(f"{(index >> (8 * k)) & 0xFF:02x}" for k in range(5, -1, -1))


def build_plan(spec: FabricSpec) -> dict[str, Any]:
    """The wiring plan: every switch, host and link with names, dpids and port numbers.

    Leaf ports 1..S go to spines 1..S; leaf ports S+1.. go to its hosts. Spine port j goes to leaf j.
    """
    switches: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    hosts: list[dict[str, Any]] = []
    for s in range(1, spec.spines + 1):
        switches.append({"name": f"sp{s}", "dpid": SPINE_DPID_BASE + s, "role": "spine"})
    for leaf in range(1, spec.leaves + 1):
        lname = f"lf{leaf}"
        switches.append({"name": lname, "dpid": LEAF_DPID_BASE + leaf, "role": "leaf"})
        for s in range(1, spec.spines + 1):
            links.append(
                {
                    "a": lname,
                    "a_port": s,
                    "b": f"sp{s}",
                    "b_port": leaf,
                    "kind": "uplink",
                    "rate_mbit": float(spec.uplink_mbit),
                }
            )
        for k in range(spec.hosts_per_leaf):
            index = (leaf - 1) * spec.hosts_per_leaf + k + 1
            hname = f"h{index}"
            port = spec.spines + k + 1
            hosts.append(
                {
                    "name": hname,
                    "index": index,
                    "ip": host_ip(index),
                    "mac": host_mac(index),
                    "leaf": lname,
                    "port": port,
                    "ps": hname == spec.ps_host,
                }
            )
            links.append(
                {
                    "a": lname,
                    "a_port": port,
                    "b": hname,
                    "b_port": 0,
                    "kind": "host",
                    "rate_mbit": float(spec.host_rate(hname)),
                }
            )
    ps = next(h for h in hosts if h["ps"])
    return {
        "spec": spec.to_dict(),
        "switches": switches,
        "hosts": hosts,
        "links": links,
        "ps_host": spec.ps_host,
        "ps_port": {"switch": ps["leaf"], "port": ps["port"], "name": f"{ps['leaf']}-eth{ps['port']}"},
    }
