"""Did the bottleneck keep its rate? Inter-departure gaps at a switch port's egress while its
queue was backlogged, against the serialization time at the configured rate.

Input: a capture on the switch port itself (tcpdump sees an outgoing packet at dequeue) and the
port's qdisc backlog samples (queue_depth.jsonl). While the queue holds packets, a shaper that keeps
its rate releases them back to back: the gap is the time the rate needs for a packet, wire bytes * 8
/ rate (a 1514-byte frame at 20 Mbit/s: 0.6056 ms). HTB charges a packet's tokens when it sends it,
so the gap after a packet is that packet's time (the default); `ideal="next"` uses the later
packet's size instead.

A ratio near 1 means the emulated link ran at its rate; above 1 the emulator was late (CPU
starvation of a userspace switch shows as ratios of 2, 10, ...); below 1 a burst (tokens saved while
the queue was empty, or a packet after a small one). Sample figures: docs/RESULTS.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.packets import Packets, str_to_ip
from runmodel.records import QueueSample

MIN_BACKLOG = 2
PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)
CDF_POINTS = 200


@dataclass(frozen=True)
class QueueSamples:
    """Backlog samples of one qdisc: t (float s since the epoch), backlog_packets (int)."""

    t: np.ndarray
    backlog_packets: np.ndarray

    @classmethod
    def of_port(cls, samples: list[QueueSample], port: str, default_port: str = "") -> QueueSamples:
        """One port's samples out of queue_depth.jsonl's (runmodel.records.read_queue_samples): lines
        without a port (runs that sampled one port only) count as `default_port`'s."""
        mine = [q for q in samples if (q.port or default_port) == port]
        t = np.array([q.t for q in mine], dtype=np.float64)
        order = np.argsort(t, kind="stable")
        backlog = np.array([q.backlog_packets for q in mine], dtype=np.int64)
        return cls(t=t[order], backlog_packets=backlog[order])


@dataclass(frozen=True)
class DequeueGaps:
    """Gaps between consecutive departures toward the receiver while the queue was backlogged.

    ratio: every gap / its ideal (numpy array, departure order); median_ratio, mean_ratio,
    percentiles ({"p1": .., "p50": .., "p99": ..}); cdf_x / cdf_y: an empirical CDF of the ratio
    with at most CDF_POINTS points, for a figure; achieved_share: bits sent / (rate * time) over the
    counted gaps (1.0: the configured rate exactly); gaps: how many were counted; packets: packets
    toward the receiver in the capture; rate_bps: the rate compared with."""

    rate_bps: float
    packets: int
    gaps: int
    median_ratio: float | None
    mean_ratio: float | None
    achieved_share: float | None
    percentiles: dict[str, float]
    cdf_x: np.ndarray = field(repr=False)
    cdf_y: np.ndarray = field(repr=False)
    ratio: np.ndarray = field(repr=False)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready (the CDF as lists, the raw ratios left out)."""
        return {
            "rate_bps": self.rate_bps,
            "packets": self.packets,
            "gaps": self.gaps,
            "median_ratio": self.median_ratio,
            "mean_ratio": self.mean_ratio,
            "achieved_share": self.achieved_share,
            "percentiles": self.percentiles,
            "cdf_x": [round(float(x), 4) for x in self.cdf_x],
            "cdf_y": [round(float(y), 4) for y in self.cdf_y],
        }


def _range_min(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """min(values[lo[i]:hi[i] + 1]) for every i (lo <= hi, both in range): a sparse table."""
    table = [values]
    k = 1
    while 2 * k <= values.shape[0]:
        prev = table[-1]
        table.append(np.minimum(prev[:-k], prev[k:]))
        k *= 2
    length = hi - lo + 1
    level = np.floor(np.log2(np.maximum(length, 1))).astype(np.int64)
    out = np.empty(lo.shape[0], dtype=values.dtype)
    for lv in np.unique(level).tolist():
        sel = level == lv
        tab = table[lv]
        out[sel] = np.minimum(tab[lo[sel]], tab[hi[sel] - (1 << lv) + 1])
    return out


def dequeue_gaps(
    p: Packets,
    queue: QueueSamples,
    rate_bps: float,
    *,
    receiver: str | int,
    min_backlog: int = MIN_BACKLOG,
    ideal: str = "previous",
    cdf_points: int = CDF_POINTS,
) -> DequeueGaps:
    """Inter-departure gaps of the packets toward `receiver` in an egress capture, while every
    queue sample from the one before the earlier packet to the one after the later packet had at
    least min_backlog packets (default 2), divided by wire bytes * 8 / rate_bps of the earlier
    packet (ideal="previous", default) or of the later one (ideal="next")."""
    if rate_bps <= 0:
        raise ValueError("rate_bps must be > 0")
    if ideal not in ("previous", "next"):
        raise ValueError("ideal must be 'previous' or 'next'")
    dst = str_to_ip(receiver) if isinstance(receiver, str) else int(receiver)
    sel = np.flatnonzero(p.dst == dst)
    t = p.ts_ns[sel]
    wire = p.wirelen[sel]
    empty = np.zeros(0, dtype=np.float64)
    none = DequeueGaps(
        rate_bps=rate_bps,
        packets=int(sel.size),
        gaps=0,
        median_ratio=None,
        mean_ratio=None,
        achieved_share=None,
        percentiles={},
        cdf_x=empty,
        cdf_y=empty,
        ratio=empty,
    )
    qt, qb = queue.t, queue.backlog_packets
    if sel.size < 2 or qt.size == 0:
        return none
    gap_ns = np.diff(t)
    qt_ns = np.round(qt * 1e9).astype(np.int64)
    i0 = np.searchsorted(qt_ns, t[:-1], side="right") - 1
    i1 = np.searchsorted(qt_ns, t[1:], side="left")
    ok = (i0 >= 0) & (i1 < qt.size) & (gap_ns >= 0)
    idx = np.flatnonzero(ok)
    ok[idx] = _range_min(qb, i0[idx], np.maximum(i1[idx], i0[idx])) >= min_backlog
    if not ok.any():
        return none
    size = (wire[:-1] if ideal == "previous" else wire[1:])[ok]
    ideal_ns = size * 8e9 / rate_bps
    g = gap_ns[ok].astype(np.float64)
    ratio = g / ideal_ns
    pct = np.percentile(ratio, PERCENTILES)
    xs = np.sort(ratio)
    ys = np.arange(1, xs.size + 1) / xs.size
    if xs.size > cdf_points:
        pick = np.unique(np.linspace(0, xs.size - 1, cdf_points).round().astype(np.int64))
        xs, ys = xs[pick], ys[pick]
    pcts = {f"p{q}": round(float(v), 4) for q, v in zip(PERCENTILES, pct, strict=True)}
    return DequeueGaps(
        rate_bps=rate_bps,
        packets=int(sel.size),
        gaps=int(ratio.size),
        median_ratio=round(float(np.median(ratio)), 4),
        mean_ratio=round(float(ratio.mean()), 4),
        achieved_share=round(float(ideal_ns.sum() / g.sum()), 4) if g.sum() > 0 else None,
        percentiles=pcts,
        cdf_x=xs,
        cdf_y=ys,
        ratio=ratio,
    )
