"""Measures what the emulated fabric really carries: each host link alone, then all at once.

Userspace OVS on a small machine forwards well under a gigabit in total and every hop costs CPU,
so configured rates are a promise the testbed checks instead of trusting: the calibration table
shows each link's measured rate as a share of its configured rate, and the headroom of the whole
fabric (what all hosts reach together against what they were promised).
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import Any

from topologies.fabric import Fabric

IPERF_PORT = 5201
# iperf3 reports TCP goodput; the link's rate counts whole frames (HTB counts the L2 header too):
# a 1448-byte segment (timestamps on) rides a 1514-byte frame.
FRAME_OVER_MSS = 1514 / 1448


@dataclass
class LinkRate:
    """One host's measured sending rate: alone towards a partner on another leaf, then together
    with every host sending, towards a partner on its own leaf."""

    host: str
    peer: str
    configured_mbit: float
    peer_together: str = ""
    alone_mbit: float = 0.0
    together_mbit: float = 0.0

    @property
    def alone_share(self) -> float:
        """Link rate reached alone (goodput in frames) / configured."""
        return self.alone_mbit * FRAME_OVER_MSS / self.configured_mbit if self.configured_mbit else 0.0

    @property
    def together_share(self) -> float:
        """Link rate reached with every host sending / configured."""
        return self.together_mbit * FRAME_OVER_MSS / self.configured_mbit if self.configured_mbit else 0.0


@dataclass
class Calibration:
    """Result of a calibration: per host link, per uplink utilisation, fabric headroom."""

    links: list[LinkRate]
    uplinks: dict[str, float]
    seconds: float

    @property
    def headroom(self) -> float:
        """Sum of rates reached together / sum configured (1.0 = the machine holds every link)."""
        conf = sum(lk.configured_mbit for lk in self.links)
        return sum(lk.together_mbit for lk in self.links) * FRAME_OVER_MSS / conf if conf else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready result."""
        return {
            "links": [
                dict(
                    asdict(lk),
                    alone_share=round(lk.alone_share, 3),
                    together_share=round(lk.together_share, 3),
                )
                for lk in self.links
            ],
            "uplinks_mbit": self.uplinks,
            "headroom": round(self.headroom, 3),
            "seconds": self.seconds,
        }

    def table(self) -> str:
        """The calibration table a person reads."""
        rows = [
            "goodput per host link (iperf3); share = the link rate it reached (goodput in whole frames)"
            " / configured",
            f"{'link':<10}{'configured':>11} {'alone (to)':>16}{'share':>7} "
            f"{'together (to)':>17}{'share':>7}",
        ]
        for lk in self.links:
            rows.append(
                f"{lk.host + '-eth0':<10}{lk.configured_mbit:>9.1f}M "
                f"{lk.alone_mbit:>8.1f}M ({lk.peer:>4}){lk.alone_share:>7.0%} "
                f"{lk.together_mbit:>9.1f}M ({lk.peer_together:>4}){lk.together_share:>7.0%}"
            )
        if self.uplinks:
            used = [v for v in self.uplinks.values() if v > 0.5]
            rows.append(f"uplinks (alone runs, ECMP): {len(used)} of {len(self.uplinks)} carried traffic")
        rows.append(f"fabric headroom, all host links at once / configured: {self.headroom:.0%}")
        return "\n".join(rows)


def partners(fabric: Fabric, across: bool) -> list[tuple[str, str]]:
    """Each host paired with a partner: on the next leaf (`across`, traffic crosses the spines), or
    its neighbour on the same leaf (every host link full in both directions, no uplink shared, so
    the fabric's own forwarding capacity is what limits)."""
    hosts = fabric.plan.host_names
    per_leaf = fabric.spec.hosts_per_leaf
    if len(hosts) < 2:
        return []
    if across and fabric.spec.leaves > 1 or per_leaf == 1:
        step = per_leaf if fabric.spec.leaves > 1 else 1
        return [(h, hosts[(i + step) % len(hosts)]) for i, h in enumerate(hosts)]
    out = []
    for i, h in enumerate(hosts):
        base = i - i % per_leaf
        out.append((h, hosts[base + (i - base + 1) % per_leaf]))
    return out


def _client(fabric: Fabric, src: str, dst: str, seconds: float) -> subprocess.Popen[str]:
    ip = fabric.plan.host(dst).ip
    return fabric.host(src).popen(
        ["iperf3", "-c", ip, "-p", str(IPERF_PORT), "-t", str(seconds), "-O", "0.5", "-J"], text=True
    )


def _mbit(proc: subprocess.Popen[str], timeout: float) -> float:
    out, _ = proc.communicate(timeout=timeout)
    try:
        doc = json.loads(out)
        return float(doc["end"]["sum_received"]["bits_per_second"]) / 1e6
    except (ValueError, KeyError, TypeError):
        return 0.0


def calibrate(
    fabric: Fabric, seconds: float = 2.0, controller: Any = None, progress: Any = None
) -> Calibration:
    """Run iperf3 on every host link alone, then all together; read uplinks from the controller."""
    started = time.monotonic()
    pairs = partners(fabric, across=True)
    together_peer = dict(partners(fabric, across=False))
    servers = [
        fabric.host(h.name).popen(
            ["iperf3", "-s", "-p", str(IPERF_PORT)],
            text=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for h in fabric.plan.hosts
    ]
    links = [
        LinkRate(src, dst, fabric.plan.host(src).rate_mbit, peer_together=together_peer[src])
        for src, dst in pairs
    ]
    uplinks: dict[str, float] = {}
    try:
        time.sleep(0.5)
        t_alone = time.time()
        for k, lk in enumerate(links):
            if progress:
                progress(f"calibrating {lk.host} -> {lk.peer} alone ({k + 1}/{len(links)})")
            lk.alone_mbit = _mbit(_client(fabric, lk.host, lk.peer, seconds), seconds + 20)
        if controller is not None:
            uplinks = _uplink_rates(controller, fabric, t_alone, time.time())
        if progress:
            progress(f"calibrating all {len(links)} host links at once (partners on the same leaf)")
        clients = [_client(fabric, lk.host, lk.peer_together, seconds) for lk in links]
        for lk, proc in zip(links, clients, strict=True):
            lk.together_mbit = _mbit(proc, seconds + 30)
    finally:
        for s in servers:
            s.terminate()
            s.wait()
    return Calibration(links, uplinks, round(time.monotonic() - started, 1))


def _uplink_rates(controller: Any, fabric: Fabric, t0: float, t1: float) -> dict[str, float]:
    """Peak tx rate of every leaf uplink port over [t0, t1], from the controller's time series."""
    samples = controller.get(f"/api/timeseries?since={t0}")["samples"]
    spines = {s.name for s in fabric.plan.switches if s.role == "spine"}
    acc: dict[str, list[float]] = {}
    for s in samples:
        if s["kind"] == "port" and s["t"] <= t1 and s["peer"] in spines:
            acc.setdefault(s["name"], []).append(s["tx_bps"])
    return {name: round(max(v) / 1e6, 1) for name, v in sorted(acc.items()) if v}
