"""Did the emulator keep its promise? (after Handigol et al., CoNEXT 2012: check an emulator's
fidelity before trusting its figures.)

Three checks per strategy, each against an independent count:
- unexplained loss: segments the captures saw lost that no switch queue counted (a CPU-starved
  userspace switch loses packets outside any queue);
- the bottleneck's pace: while a port's queue is backlogged, packets must leave it one
  serialization time apart at the configured rate;
- the CPU: seconds in which every core was busy, and the software switch's share;
and, for a run over several servers, the tunnels' own drops and each server's CPU (cluster_reasons).
"""

from __future__ import annotations

from typing import Any

from runmodel.records import CpuSample

MAX_UNEXPLAINED_LOSS = 0.05
GAP_RATIO_RANGE = (0.85, 1.15)
SATURATED = 0.95
MAX_SATURATED_SHARE = 0.25


def samples_within(samples: list[CpuSample], t0: float, t1: float) -> list[CpuSample]:
    """The CPU samples of a run's window; a sample is stamped at the end of its second, so the one
    just after t1 still covers the run's last moments."""
    return [c for c in samples if t0 <= c.t <= t1 + 1.0 and c.cores]


def cpu_figures(samples: list[CpuSample], t0: float, t1: float) -> dict[str, float | None]:
    """cpu_busy_max, cpu_saturated_share and switch_cpu_max over [t0, t1]."""
    inside = samples_within(samples, t0, t1)
    if not inside:
        return {"cpu_busy_max": None, "cpu_saturated_share": None, "switch_cpu_max": None}
    means = [sum(c.cores) / len(c.cores) for c in inside]
    saturated = sum(1 for c in inside if min(c.cores) >= SATURATED)
    switch = [c.switch for c in inside if c.switch is not None]
    return {
        "cpu_busy_max": round(max(means), 3),
        "cpu_saturated_share": round(saturated / len(inside), 3),
        "switch_cpu_max": round(max(switch), 3) if switch else None,
    }


def unexplained_loss_share(fabric_drops_pcap: int | None, queue_drops: int | None) -> float | None:
    """Share of the losses the captures saw that no switch queue counted (None without captures)."""
    if fabric_drops_pcap is None or queue_drops is None:
        return None
    if fabric_drops_pcap <= 0:
        return 0.0
    return round(max(0, fabric_drops_pcap - queue_drops) / fabric_drops_pcap, 4)


def verdict(checks: dict[str, Any]) -> dict[str, Any]:
    """`checks` plus verdict and reasons (one sentence each, with the figure)."""
    reasons = []
    loss = checks.get("unexplained_loss_share")
    if loss is not None and loss > MAX_UNEXPLAINED_LOSS:
        reasons.append(
            f"{loss:.0%} of the losses the captures saw were counted by no switch queue "
            f"(the emulator's own; limit {MAX_UNEXPLAINED_LOSS:.0%}): drop and retransmission "
            "counts include losses a real switch would not have"
        )
    gap = checks.get("dequeue_gap_median_over_ideal")
    lo, hi = GAP_RATIO_RANGE
    if gap is not None and not lo <= gap <= hi:
        reasons.append(
            f"{checks.get('dequeue_port')} sent packets {gap:.2f} x their serialization time "
            f"apart while backlogged (expected {lo}-{hi}): the link did not run at its configured "
            "rate, so times and rates are off"
        )
    sat = checks.get("cpu_saturated_share")
    if sat is not None and sat > MAX_SATURATED_SHARE:
        reasons.append(
            f"every core was >= {SATURATED:.0%} busy in {sat:.0%} of the seconds: workers, switch "
            "and captures competed for the CPU, so times include waiting for it"
        )
    return {**checks, "verdict": "degraded" if reasons else "trustworthy", "reasons": reasons}


def cluster_reasons(cluster: dict[str, Any] | None) -> list[str]:
    """A run over several servers (its cluster.json): the tunnels' own drops and errors, at either
    end, over the whole run, are losses between servers that no switch queue counted; and a server
    whose cores were all saturated too often in a strategy's window (its cpu_figures, as the CPU
    check judges this machine) is named with that strategy."""
    counters = (cluster or {}).get("tunnel_counters") or {}
    lost = sum(
        c.get(f"{d}_{k}", 0) for c in counters.values() for d in ("rx", "tx") for k in ("dropped", "errors")
    )
    reasons = []
    if lost:
        sent = sum(c.get("tx_packets", 0) for c in counters.values())
        reasons.append(
            f"the VXLAN tunnels between servers dropped {lost} of {sent} packets: losses no switch "
            "queue counted, so drop and retransmission counts include the tunnels'"
        )
    for name, servers in ((cluster or {}).get("server_cpu") or {}).items():
        for server, fig in servers.items():
            sat = fig.get("cpu_saturated_share")
            if sat is not None and sat > MAX_SATURATED_SHARE:
                reasons.append(
                    f"{name}: server {server}: every core was >= {SATURATED:.0%} busy in {sat:.0%} of "
                    "the seconds: its switch and processes competed for the CPU, so times include "
                    "waiting for it"
                )
    return reasons


def run_verdict(
    per_strategy: dict[str, dict[str, Any]], run_reasons: list[str] | None = None
) -> dict[str, Any]:
    """The run's verdict: degraded if any strategy's is, with its reasons prefixed by the strategy,
    or for a reason of the whole run (`run_reasons`: a cluster's tunnel drops)."""
    reasons = [f"{name}: {r}" for name, f in per_strategy.items() for r in f.get("reasons", [])]
    reasons += run_reasons or []
    judged = [name for name, f in per_strategy.items() if f.get("verdict")]
    state = "degraded" if reasons else ("trustworthy" if judged else "unknown")
    return {"verdict": state, "reasons": reasons}
