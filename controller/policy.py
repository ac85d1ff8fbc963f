"""Routing policies' choices as pure functions: which spine a flow should take, and why.

`ecmp` makes no choice (the select group hashes). `firstfit` pins each new cross-leaf flow to the
path (leaf -> spine -> leaf) whose busier link carries the least load now, ties to the first spine.
`hedera` (Al-Fares et al., NSDI 2010) estimates the large flows' natural demands from who sends to
whom (each host's link shared max-min fairly between its flows, sender side then receiver side,
until nothing changes) and places them largest first on the first path with room for them, the
flow's current path tried first so a flow that fits is not moved. Loads are bits per second on
directed links, keyed ("lf1", "sp2") for an uplink and ("sp2", "lf3") for a downlink.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

Link = tuple[str, str]
LARGE_SHARE = 0.1  # Hedera's threshold: a flow above 10 % of its host's link rate is large
QUANTUM = 1e6  # first fit compares loads in whole Mbit/s
# a path has room when its links' load plus the demand is within a large flow's share (10 %) of
# capacity: a move must free at least that much. The ACK streams of reverse flows and gloo's small
# flows (1-1.7 Mbit/s beside a 20 Mbit/s ring flow) must not make full-rate flows swap spines for a
# few hundred kbit/s, each swap reordering both (make ecmp, 2026-12-07: six such moves in 10 s at 5 %)
ROOM = 1 + LARGE_SHARE


def path_links(src_leaf: str, dst_leaf: str, spine: str) -> tuple[Link, Link]:
    """The two directed links of a cross-leaf path."""
    return (src_leaf, spine), (spine, dst_leaf)


def link_loads(flows: Iterable[tuple[str, str, str | None, float]]) -> dict[Link, float]:
    """Load per directed link from (src_leaf, dst_leaf, spine, bps) of each flow on a known path."""
    load: dict[Link, float] = {}
    for src_leaf, dst_leaf, spine, bps in flows:
        if spine is None or src_leaf == dst_leaf:
            continue
        for link in path_links(src_leaf, dst_leaf, spine):
            load[link] = load.get(link, 0.0) + bps
    return load


def path_load(load: dict[Link, float], src_leaf: str, dst_leaf: str, spine: str) -> float:
    """A path's load: that of its busier link."""
    return max(load.get(link, 0.0) for link in path_links(src_leaf, dst_leaf, spine))


def mbit(bps: float) -> str:
    """Bits per second as an event's reason shows them."""
    return f"{bps / 1e6:.1f}"


def first_fit(
    src_leaf: str,
    dst_leaf: str,
    spines: list[str],
    load: dict[Link, float],
    flows: dict[Link, float] | None = None,
) -> tuple[str, str]:
    """The least-loaded path's spine for a new flow, and the reason. Loads count in whole Mbit/s (an
    ACK stream's trickle decides nothing); among equal ones the path whose busier link carries the
    fewest active flows (`flows`, per link) wins, then the first spine. Connections opened together
    while the fabric is idle (a ring's) thus spread over the spines instead of all taking the first."""
    if not spines:
        raise ValueError("no live spine between the leaves")
    loads = {sp: path_load(load, src_leaf, dst_leaf, sp) for sp in spines}
    counts = {sp: path_load(flows or {}, src_leaf, dst_leaf, sp) for sp in spines}
    best = min(spines, key=lambda sp: (round(loads[sp] / QUANTUM), counts[sp], spines.index(sp)))
    why = "least-loaded path (Mbit/s, flows): " + ", ".join(
        f"{sp} {mbit(loads[sp])} {counts[sp]:.0f}" for sp in spines
    )
    return best, why


def estimate_demands(pairs: list[tuple[str, str]], max_rounds: int = 100) -> list[float]:
    """Hedera's demand estimation: each flow's (src, dst) in, its natural demand as a share of a host
    link out (a flow is limited by its sender's other flows or by its receiver's, max-min fair)."""
    n = len(pairs)
    demand = [0.0] * n
    converged = [False] * n
    by_src: dict[str, list[int]] = {}
    by_dst: dict[str, list[int]] = {}
    for i, (src, dst) in enumerate(pairs):
        by_src.setdefault(src, []).append(i)
        by_dst.setdefault(dst, []).append(i)
    for _ in range(max_rounds):
        before = list(demand), list(converged)
        for flows in by_src.values():  # senders share what converged flows leave
            done = sum(demand[i] for i in flows if converged[i])
            free = [i for i in flows if not converged[i]]
            for i in free:
                demand[i] = (1.0 - done) / len(free)
        for flows in by_dst.values():  # an oversubscribed receiver limits its larger flows
            if sum(demand[i] for i in flows) <= 1.0:
                continue
            limited = set(flows)
            small = 0.0
            share = 1.0 / len(flows)
            while True:
                below = {i for i in limited if demand[i] < share}
                if not below:
                    break
                small += sum(demand[i] for i in below)
                limited -= below
                share = (1.0 - small) / len(limited)
            for i in limited:
                demand[i], converged[i] = share, True
        if (demand, converged) == before:
            break
    return demand


@dataclass(frozen=True)
class LargeFlow:
    """A large cross-leaf flow as Hedera's placement sees it."""

    name: str
    src_leaf: str
    dst_leaf: str
    path: str | None  # the spine it takes now
    demand_bps: float


def hedera_place(
    flows: list[LargeFlow], spines: list[str], capacity_bps: float, base: dict[Link, float] | None = None
) -> dict[str, tuple[str, str]]:
    """Global first fit of the large flows by estimated demand, largest first: flow name -> (new
    spine, reason) for each flow that should move. `base` is the load of every other flow."""
    load = dict(base or {})
    moves: dict[str, tuple[str, str]] = {}
    for f in sorted(flows, key=lambda f: (-f.demand_bps, f.name)):
        order = ([f.path] if f.path in spines else []) + [sp for sp in spines if sp != f.path]
        fits = [
            sp
            for sp in order
            if path_load(load, f.src_leaf, f.dst_leaf, sp) + f.demand_bps <= capacity_bps * ROOM
        ]
        chosen = fits[0] if fits else min(order, key=lambda sp: path_load(load, f.src_leaf, f.dst_leaf, sp))
        if chosen != f.path:
            was = mbit(path_load(load, f.src_leaf, f.dst_leaf, f.path)) if f.path in spines else "?"
            moves[f.name] = (
                chosen,
                f"demand {mbit(f.demand_bps)} Mbit/s: {f.path} had {was} of {mbit(capacity_bps)} placed, "
                f"{chosen} {mbit(path_load(load, f.src_leaf, f.dst_leaf, chosen))}",
            )
        for link in path_links(f.src_leaf, f.dst_leaf, chosen):
            load[link] = load.get(link, 0.0) + f.demand_bps
    return moves
