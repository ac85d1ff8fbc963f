"""Every TCP/UDP flow as the switches see it: bytes, rate and the spine it takes.

The ingress leaf holds each flow's exact entry (controller.routing.flow_entry); its counters are the
flow's bytes, plus the packets that reached the controller before the entry existed (each of them
was forwarded by the hash and counted only by the new-flow rule, so their frame lengths are added
here: none is counted twice or missed). Every spine holds the same exact entry, so the spine whose
counter moved is the flow's path. Plain data in, plain rows out: no os-ken, testable alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller.routing import FlowKey
from runmodel.fabric import Plan

ACTIVE_S = 3.0  # a flow whose counters moved within this long is active (it loads its path)


@dataclass
class FlowState:
    """One flow's counters and where it runs."""

    key: FlowKey
    src: str  # host names ("" for an address outside the plan)
    dst: str
    leaf: str  # ingress leaf
    dst_leaf: str
    t_start: float
    t_last: float  # last time its bytes grew
    entry_bytes: int = 0  # the ingress leaf's exact entry
    entry_packets: int = 0
    early_bytes: int = 0  # frames sent to the controller before the entry existed
    early_packets: int = 0
    rate_bps: float = 0.0
    spine_bytes: dict[str, int] = field(default_factory=dict)
    path: str | None = None  # spine it took last (None: same leaf, or not seen on a spine yet)
    pinned: str | None = None  # spine the controller pinned it to (None: the hash places it)
    installed: bool = False
    measured: bool = False  # its rate was measured over at least one poll interval
    _prev: tuple[float, int] | None = None  # (entry duration, entry bytes) of the previous poll

    @property
    def bytes(self) -> int:
        """Every byte of the flow that entered the fabric (Ethernet frames, as a capture counts)."""
        return self.entry_bytes + self.early_bytes

    @property
    def packets(self) -> int:
        """Every frame of the flow that entered the fabric."""
        return self.entry_packets + self.early_packets

    def active(self, now: float) -> bool:
        """Moved bytes lately (or just started)."""
        return now - self.t_last <= ACTIVE_S

    def row(self, now: float) -> dict[str, Any]:
        """The flow as controller.jsonl (kind "flow"), /api/flows and timeseries.jsonl hold it."""
        k = self.key
        return {
            "t": round(now, 4),
            "kind": "flow",
            "flow": k.name,
            "proto": k.proto,
            "src_ip": k.src_ip,
            "sport": k.sport,
            "dst_ip": k.dst_ip,
            "dport": k.dport,
            "src": self.src,
            "dst": self.dst,
            "leaf": self.leaf,
            "dst_leaf": self.dst_leaf,
            "spine": self.path,
            "pinned": self.pinned,
            "bytes": self.bytes,
            "packets": self.packets,
            "rate_bps": round(self.rate_bps, 1),
            "t_start": round(self.t_start, 4),
            "age_s": round(now - self.t_start, 3),
        }


class FlowBook:
    """All flows of a run, keyed by their 5-tuple."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.host_of_ip = {h.ip: h for h in plan.hosts}
        self.flows: dict[FlowKey, FlowState] = {}

    def _new(self, key: FlowKey, leaf: str, t: float) -> FlowState:
        src, dst = self.host_of_ip.get(key.src_ip), self.host_of_ip.get(key.dst_ip)
        state = FlowState(
            key,
            src.name if src else "",
            dst.name if dst else "",
            leaf,
            dst.leaf if dst else "",
            t_start=t,
            t_last=t,
        )
        self.flows[key] = state
        return state

    def packet_in(self, key: FlowKey, leaf: str, frame_len: int, t: float) -> tuple[FlowState, bool]:
        """A frame of the flow reached the controller from its ingress leaf; True if the flow is new."""
        state = self.flows.get(key)
        new = state is None
        if state is None:
            state = self._new(key, leaf, t)
        state.early_bytes += frame_len
        state.early_packets += 1
        state.t_last = t
        return state, new

    def leaf_counts(
        self, key: FlowKey, leaf: str, n_bytes: int, n_packets: int, duration: float, t: float
    ) -> FlowState:
        """The ingress leaf's entry counters (a flow the controller has not seen is adopted: a
        restarted controller finds its predecessor's entries)."""
        state = self.flows.get(key) or self._new(key, leaf, t - duration)
        state.installed = True
        if state._prev is not None and duration > state._prev[0]:
            state.rate_bps = max(0, n_bytes - state._prev[1]) * 8 / (duration - state._prev[0])
            state.measured = True
        if n_bytes > state.entry_bytes:
            state.t_last = t
        elif state._prev is not None and duration > state._prev[0]:
            state.rate_bps = 0.0
        state._prev = (duration, n_bytes)
        state.entry_bytes, state.entry_packets = n_bytes, n_packets
        return state

    def removed(self, key: FlowKey, n_bytes: int, n_packets: int) -> None:
        """The ingress entry expired with these final counters: they join the flow's earlier bytes,
        and a later entry for the same 5-tuple counts on from zero."""
        state = self.flows.get(key)
        if state is None:
            return
        state.early_bytes += max(n_bytes, state.entry_bytes)
        state.early_packets += max(n_packets, state.entry_packets)
        state.entry_bytes = state.entry_packets = 0
        state.rate_bps, state._prev, state.installed = 0.0, None, False

    def spine_counts(self, key: FlowKey, spine: str, n_bytes: int) -> FlowState | None:
        """A spine's entry counters: the spine whose count grew is the flow's path. A spine's first
        count (a new entry, or every entry after a controller restart) is not growth: the spine that
        counted most so far is the path, not the one that a flow's first hashed packets crossed."""
        state = self.flows.get(key)
        if state is None:
            return None
        prev = state.spine_bytes.get(spine)
        state.spine_bytes[spine] = n_bytes
        if prev is None:
            best = state.spine_bytes.get(state.path, 0) if state.path else 0
            if n_bytes > best:
                state.path = spine
        elif n_bytes > prev:
            state.path = spine
        return state

    def top(self, now: float, n: int = 20) -> list[dict[str, Any]]:
        """The `n` flows with the highest rate (then most bytes), as rows."""
        ranked = sorted(self.flows.values(), key=lambda s: (-s.rate_bps, -s.bytes, s.key.name))
        return [s.row(now) for s in ranked[:n]]
