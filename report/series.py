"""The data the figures plot: time series binned from the run model's typed records.

Nothing here is a figure of summary.json: those are rendered from the summary (report/sections/).
What is here is their course over time (or per step), which the summary does not hold: iteration
time per step, each port's backlog, drops and retransmissions per second, RTO events, delivered
goodput per receiver and per flow, link utilisation per poll, CPU per second, the dequeue-gap CDF,
loss per step, fault and event marks, holes in the controller's statistics. Where a series has a
total in the summary it adds up to it (same records, same window), which the tests check.

The pcaps are read once, by analysis.summary, which writes the per-strategy files these series
come from (goodput_timeline.json, retransmits_timeline.json, rto_events.json, dequeue.json).

Times are seconds since the strategy's t0 (its first training step), so strategies that ran one
after the other share one axis. Every function returns plain lists and dicts (JSON-ready), so the
tests can compare a figure's data with the files.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from analysis.summary import iteration_times
from report.run import RunView, StrategyView
from runmodel.records import ControllerEvent, FaultRecord, QueueStatSample, StepRecord

EVENT_CLUSTER_S = 0.5  # controller events of one kind closer than this are one mark
GAP_POLLS = 3  # controller statistics missing for more than this many poll intervals: a gap
CONTROLLER_EVENTS = ("port_down", "port_up", "reroute", "switch_connected", "switch_disconnected")


# -- per step ----------------------------------------------------------------------------------------
def iteration_series(steps: dict[int, list[StepRecord]]) -> dict[str, list[Any]]:
    """Per step, the slowest worker's t_end - t_start (analysis.summary.iteration_times: the median
    of these is the summary's iter_time_s)."""
    it = iteration_times(steps)
    return {"steps": list(it), "seconds": list(it.values())}


def loss_series(steps: dict[int, list[StepRecord]], t0: float) -> dict[str, list[Any]]:
    """Per step: the mean loss over workers and when its last worker ended it (s since t0)."""
    by: dict[int, list[StepRecord]] = {}
    for recs in steps.values():
        for r in recs:
            by.setdefault(r.step, []).append(r)
    ks = sorted(k for k in by if any(r.loss is not None for r in by[k]))  # steps some worker reported
    return {
        "steps": ks,
        "loss": [statistics.fmean(r.loss for r in by[k] if r.loss is not None) for k in ks],
        "t": [max(r.t_end for r in by[k]) - t0 for k in ks],
    }


def step_position(steps: dict[int, list[StepRecord]], t_abs: float) -> float | None:
    """The fractional step running at wall-clock t_abs (step k starts at its first worker's t_start);
    None outside the training."""
    starts: dict[int, float] = {}
    end = -math.inf
    for recs in steps.values():
        for r in recs:
            starts[r.step] = min(starts.get(r.step, math.inf), r.t_start)
            end = max(end, r.t_end)
    ks = sorted(starts)
    if not ks or t_abs < starts[ks[0]] or t_abs > end:
        return None
    pts = [(starts[k], float(k)) for k in ks] + [(end, ks[-1] + 1.0)]
    for (ta, ka), (tb, kb) in zip(pts, pts[1:], strict=False):
        if ta <= t_abs <= tb:
            return ka + (kb - ka) * ((t_abs - ta) / (tb - ta) if tb > ta else 0.0)
    return None


def time_to_target(loss: dict[str, list[Any]], target: float) -> float | None:
    """Seconds from t0 until the mean loss first reached the target (None if it never did)."""
    return next((t for t, v in zip(loss["t"], loss["loss"], strict=True) if v <= target), None)


# -- controller samples ----------------------------------------------------------------------------
def counter_rate(
    series: dict[str, list[QueueStatSample]], key: str, t_start: float | None, t0: float, interval: float
) -> dict[str, Any]:
    """A cumulative counter of several ports as increments per poll round, summed over the ports.

    Each port counts from its last sample at or before t_start (as the summary's counter deltas do),
    so the increments add up to the summary's total over the same ports. Samples of one poll round
    (all switches, polled within a fraction of the interval) are one point at their mean time; its
    rate is the round's increment over the time since the ports' previous samples (dt: the interval,
    or longer after a hole in the statistics)."""
    rounds: dict[int, list[tuple[float, float, float]]] = {}
    first = min((s[0].t for s in series.values() if s), default=0.0)
    for samples in series.values():
        base = 0
        for i, s in enumerate(samples):
            if t_start is not None and s.t <= t_start:
                base = i
        for prev, s in zip(samples[base:], samples[base + 1 :], strict=False):
            inc = max(0.0, float(getattr(s, key)) - float(getattr(prev, key)))
            rounds.setdefault(round((s.t - first) / interval), []).append((s.t, inc, s.t - prev.t))
    ks = sorted(rounds)
    count = [sum(v for _, v, _ in rounds[k]) for k in ks]
    dt = [max(statistics.fmean(d for _, _, d in rounds[k]), 1e-6) for k in ks]
    return {
        "t": [statistics.fmean(t for t, _, _ in rounds[k]) - t0 for k in ks],
        "count": count,
        "dt": dt,
        "per_s": [c / d for c, d in zip(count, dt, strict=True)],
        "total": sum(count),
    }


def drops_series(s: StrategyView, interval: float) -> dict[str, Any]:
    """Queue drops per second over the whole fabric and, for the PS family, at the strategy's own
    (hottest) PS port (controller queue samples)."""
    t0 = s.t0 or 0.0
    t_start = s.status.t_start if s.status else None
    queues = s.controller.queue_series()
    fabric = counter_rate(queues, "drops", t_start, t0, interval)
    port = s.summary.ps_port
    ps = counter_rate({port: queues.get(port, [])}, "drops", t_start, t0, interval) if port else None
    return {"fabric": fabric, "ps_port": ps, "ps_port_name": port}


def queue_occupancy(s: StrategyView, port: str, ps_port: str | None = None) -> dict[str, Any]:
    """The port's qdisc backlog (packets) over time, from queue_depth.jsonl: the lines of that port
    (lines without a port, of runs that sampled the PS port only, are the PS port's). The sampler
    writes a port's line only when its counters changed, so a backlog holds until the next line."""
    t0 = s.t0 or 0.0
    ps_port = port if ps_port is None else ps_port
    pts = [q for q in s.queue if q.port == port or (not q.port and port == ps_port)]
    vals = [q.backlog_packets for q in pts]
    return {
        "port": port,
        "t": [q.t - t0 for q in pts],
        "backlog_packets": vals,
        "max": max(vals, default=None),
        "samples": len(pts),
    }


# -- the per-strategy files the summary wrote (the pcaps are read once, by analysis.summary) ----------
def retransmit_series(s: StrategyView) -> dict[str, Any] | None:
    """Retransmissions per bin from retransmits_timeline.json: every host capture's retransmitted
    segments that host sent (analysis.summary counts the same segments as tcp_retransmits_pcap).
    None without the file (no host captures)."""
    doc, t0 = s.retransmits_timeline, s.t0
    if not doc or t0 is None or not doc.get("bin_s") or s.summary.tcp_retransmits_pcap is None:
        return None  # (a file the summary did not write this time, e.g. the captures are gone, is stale)
    bin_s, counts = float(doc["bin_s"]), [int(c) for c in doc.get("counts") or []]
    start = float(doc.get("t0") or 0.0) - t0
    return {
        "bin_s": bin_s,
        "t": [start + i * bin_s for i in range(len(counts))],
        "retransmits": counts,
        "retransmits_per_s": [c / bin_s for c in counts],
        "retransmits_total": sum(counts),
    }


def goodput_series(s: StrategyView) -> dict[str, Any] | None:
    """Delivered goodput from goodput_timeline.json: per receiving host, the unique payload bytes that
    reached it per bin (each byte once, at its first arrival), their total per bin, and the PS host's
    incoming flows. `bytes` per receiver is the file's total (the summary's
    delivered_bytes_by_receiver); the series are Mbit/s per bin. None without the file."""
    doc, t0 = s.goodput_timeline, s.t0
    if (
        not doc
        or t0 is None
        or not doc.get("bin_s")
        or not doc.get("by_receiver")
        or s.summary.delivered_bytes is None
    ):
        return None
    bin_s = float(doc["bin_s"])
    start = float(doc.get("t0") or t0) - t0
    receivers = {
        h: {"bytes": int(r.get("bytes") or 0), "mbit_s": [float(x) for x in r.get("mbit_s") or []]}
        for h, r in sorted(doc["by_receiver"].items(), key=lambda kv: natural(kv[0]))
    }
    n = max((len(r["mbit_s"]) for r in receivers.values()), default=0)
    total = [sum(r["mbit_s"][i] for r in receivers.values() if i < len(r["mbit_s"])) for i in range(n)]
    flows = {
        k: [float(x) for x in v]
        for k, v in sorted((doc.get("flows_to_ps") or {}).items(), key=lambda kv: natural(kv[0]))
    }
    return {
        "bin_s": bin_s,
        "t": [start + i * bin_s for i in range(n)],
        "receivers": receivers,
        "hosts": list(receivers),
        "goodput_mbit_s": total,
        "goodput_bytes": [x * 1e6 * bin_s / 8 for x in total],
        "bytes_total": sum(r["bytes"] for r in receivers.values()),
        "flows_to_ps": flows,
    }


def rto_series(s: StrategyView) -> list[dict[str, Any]]:
    """rto_events.json's events (retransmission timeouts "rto", SYN timeouts "syn", tail-loss probes
    "tlp"), t in seconds since the strategy's t0, each with its sending host, flow and idle time."""
    t0 = s.t0
    if t0 is None or s.summary.tcp_timeouts_pcap is None:
        return []
    return [
        {
            "t": float(e["t"]) - t0,
            "host": str(e.get("host", "")),
            "flow": str(e.get("flow", "")),
            "kind": str(e.get("kind", "rto")),
            "idle_s": float(e.get("idle_s") or 0.0),
        }
        for e in s.rto_events
    ]


def flow_label(flow: str, host_of: dict[str, str]) -> str:
    """ "10.0.0.2:35026-10.0.0.1:29600" -> "h2:35026" (the sender and its port: goodput_timeline.json's
    key of a flow to the PS)."""
    src = flow.split("-", 1)[0]
    ip, _, port = src.rpartition(":")
    return f"{host_of.get(ip, ip)}:{port}"


def dequeue_cdf(s: StrategyView) -> dict[str, Any] | None:
    """dequeue.json: the CDF of the gaps between packets leaving the strategy's worst host port while
    its queue was backlogged, over the serialization time at the port's rate (1 = the configured
    rate exactly)."""
    d = s.dequeue
    measured = s.summary.fidelity.get("dequeue_port")
    if not d or not d.get("cdf_x") or not d.get("cdf_y") or d.get("port") != measured:
        return None  # none, or not the one the summary's check measured
    return {
        "port": d.get("port"),
        "x": [float(v) for v in d["cdf_x"]],
        "y": [float(v) for v in d["cdf_y"]],
        "median": d.get("median_ratio"),
        "gaps": d.get("gaps"),
        "percentiles": d.get("percentiles") or {},
        "rate_bps": d.get("rate_bps"),
    }


def cpu_series(s: StrategyView) -> dict[str, Any] | None:
    """cpu.jsonl inside the strategy's window (as analysis.fidelity reads it: [t_start, t_end + 1 s]):
    each core's busy share, their mean, and ovs-vswitchd's share of one core, per second."""
    t0, window = s.t0, s.window
    if t0 is None or window is None:
        return None
    inside = [c for c in s.cpu if window[0] <= c.t <= window[1] + 1.0 and c.cores]
    if not inside:
        return None
    ncores = max(len(c.cores) for c in inside)
    cores = [[c.cores[k] if k < len(c.cores) else None for c in inside] for k in range(ncores)]
    return {
        "t": [c.t - t0 for c in inside],
        "cores": cores,
        "mean": [sum(c.cores) / len(c.cores) for c in inside],
        "switch": [c.switch for c in inside],
        "start": window[0] - t0,
    }


# -- link utilisation against capacity -----------------------------------------------------------------
def link_rows(run: RunView) -> list[dict[str, Any]]:
    """Every link direction of the fabric, host links first (per host: up = hX-eth0 sending, seen as
    its leaf port's rx; down = the leaf port's tx), then the uplinks (each leaf-spine link both ways).
    Each row: link (the name bytes_by_link uses), kind (host or uplink), label, the port whose counter
    it reads, the counter, the configured rate (Mbit/s)."""
    plan = run.plan
    rows = []
    for h in sorted(plan.hosts, key=lambda h: h.index):
        ps = " (PS port)" if h.leaf_port == run.ps_port else ""
        rows.append(
            {
                "link": h.nic,
                "kind": "host",
                "port": h.leaf_port,
                "counter": "rx_bytes",
                "label": f"host {h.name} up: {h.nic}",
                "rate_mbit": h.rate_mbit,
            }
        )
        rows.append(
            {
                "link": h.leaf_port,
                "kind": "host",
                "port": h.leaf_port,
                "counter": "tx_bytes",
                "label": f"host {h.name} down: {h.leaf_port}{ps}",
                "rate_mbit": h.rate_mbit,
            }
        )
    for ln in plan.links:
        if ln.kind != "uplink":
            continue
        a, b = f"{ln.a}-eth{ln.a_port}", f"{ln.b}-eth{ln.b_port}"
        rows.append(
            {
                "link": a,
                "kind": "uplink",
                "label": f"uplink {ln.a}>{ln.b}: {a}",
                "port": a,
                "counter": "tx_bytes",
                "rate_mbit": ln.rate_mbit,
            }
        )
        rows.append(
            {
                "link": b,
                "kind": "uplink",
                "label": f"uplink {ln.b}>{ln.a}: {b}",
                "port": b,
                "counter": "tx_bytes",
                "rate_mbit": ln.rate_mbit,
            }
        )
    return rows


def poll_rounds(s: StrategyView, interval: float) -> list[float]:
    """The times of the controller's poll rounds (a round polls every switch within a fraction of
    the interval; its time is the mean of its samples), seconds since the strategy's t0."""
    t0 = s.t0 or 0.0
    ts = sorted(x.t for x in s.controller.ports)
    if not ts:
        return []
    rounds: dict[int, list[float]] = {}
    for t in ts:
        rounds.setdefault(round((t - ts[0]) / interval), []).append(t)
    return [statistics.fmean(v) - t0 for _, v in sorted(rounds.items())]


def utilisation_series(run: RunView, s: StrategyView, interval: float) -> dict[str, Any] | None:
    """Each link direction's utilisation per poll interval of the controller over the strategy's
    training: the port counter's increase between two poll rounds x 8 / (configured rate x their
    distance), the controller's tx_bps (rx_bps for a host's own sending) as a share of the rate.
    The intervals run from the last round at or before the first training step to the first round
    at or after the last step's end. `mean` per link is those bytes over the training time (first
    step to last step, the summary's wall_time_s): the summary's link_utilisation, counted over the
    polls around the training instead of the whole strategy."""
    end = s.training_end
    if s.t0 is None or not end or end <= 0:
        return None
    ports = s.controller.port_series()
    rounds = poll_rounds(s, interval)
    before = [t for t in rounds if t <= 0.0]
    after = [t for t in rounds if t >= end]
    edges = (
        ([before[-1]] if before else [])
        + [t for t in rounds if 0.0 < t < end]
        + ([after[0]] if after else [])
    )
    if len(edges) < 2:
        return None
    t0 = s.t0
    e = np.array(edges)
    width = np.maximum(np.diff(e), 1e-9)
    rows, util, mean = [], [], {}
    for row in link_rows(run):
        samples = ports.get(row["port"], [])
        if len(samples) < 2:
            continue
        ts = np.array([x.t - t0 for x in samples])
        cum = np.array([float(getattr(x, row["counter"])) for x in samples])
        at = np.interp(e, ts, cum)
        cap = row["rate_mbit"] * 1e6
        rows.append(row)
        util.append([round(float(v), 5) for v in np.diff(at) * 8 / (cap * width)])
        mean[row["link"]] = float((at[-1] - at[0]) * 8 / (cap * end))
    if not rows:
        return None
    return {
        "links": [r["link"] for r in rows],
        "labels": [r["label"] for r in rows],
        "kinds": [r["kind"] for r in rows],
        "rate_mbit": [r["rate_mbit"] for r in rows],
        "edges": [float(x) for x in edges],
        "util": util,
        "mean": mean,
        "interval": interval,
        "end": end,
    }


def natural(name: str) -> list[Any]:
    """A sort key that orders numbers by value: lf2-eth10 after lf2-eth9, h10 after h9."""
    import re

    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


# -- faults, events, gaps -------------------------------------------------------------------------------
@dataclass
class Mark:
    """A fault action or a controller event on a timeline (t: s since the strategy's t0)."""

    t: float
    abs_t: float
    source: str  # "fault" (faults.jsonl) or "controller" (timeseries.jsonl)
    kind: str
    label: str
    count: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fault_label(f: FaultRecord) -> str:
    """ "link-down lf1-eth1 down"."""
    bits = [f.kind or f.event or "fault"]
    if f.target:
        bits.append(f.target)
    if f.state:
        bits.append(f.state)
    elif f.event and f.event != "fired":
        bits.append(f.event)
    return " ".join(bits)


def event_what(e: ControllerEvent) -> str:
    """What a controller event names: a link, a port or a switch."""
    d = e.detail
    if e.event == "reroute":
        return f"{d.get('link', '?')} {d.get('state', '')}".strip()
    if d.get("port") is not None and d.get("switch"):
        return f"{d['switch']}-eth{d['port']}"
    return str(d.get("switch") or "")


def marks(s: StrategyView) -> list[Mark]:
    """Faults and the controller's events inside the strategy's window; controller events of one kind
    within EVENT_CLUSTER_S of each other are one mark (OVS reports a link going down at both ends)."""
    t0 = s.t0
    if t0 is None:
        return []
    out = [Mark(f.t - t0, f.t, "fault", f.kind, fault_label(f)) for f in s.faults]
    window = s.window
    last: dict[str, tuple[Mark, float]] = {}  # event kind -> its open cluster and its latest time
    names: dict[int, list[str]] = {}  # id(mark) -> what its events named
    for e in s.controller.events:
        if e.event not in CONTROLLER_EVENTS or (window and not window[0] <= e.t <= window[1]):
            continue
        what = event_what(e)
        cur = last.get(e.event)
        if cur is not None and e.t - cur[1] <= EVENT_CLUSTER_S:
            m = cur[0]
            m.count += 1
        else:
            m = Mark(e.t - t0, e.t, "controller", e.event, e.event)
            out.append(m)
            names[id(m)] = []
        last[e.event] = (m, e.t)
        if what and what not in names[id(m)]:
            names[id(m)].append(what)
    for m in out:
        if names.get(id(m)):
            m.label = f"{m.kind} {', '.join(names[id(m)])}"
    return sorted(out, key=lambda m: m.t)


def stats_gaps(s: StrategyView, interval: float) -> list[dict[str, float]]:
    """Spans of the strategy without controller port/queue samples for more than GAP_POLLS polls."""
    window, t0 = s.window, s.t0
    ts = sorted({x.t for x in s.controller.ports} | {x.t for x in s.controller.queues})
    if not ts or window is None or t0 is None:
        return []
    ws, we = window
    before = [t for t in ts if t <= ws]
    after = [t for t in ts if t >= we]
    seq = [before[-1] if before else ws] + [t for t in ts if ws < t < we] + [after[0] if after else we]
    out = []
    for a, b in zip(seq, seq[1:], strict=False):
        a, b = max(a, ws), min(b, we)
        if b - a > GAP_POLLS * interval:
            out.append({"t0": a - t0, "t1": b - t0, "seconds": b - a})
    return out
