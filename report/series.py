"""The data the figures plot: time series binned from the run model's typed records.

Nothing here is a figure of summary.json: those are rendered from the summary (report/sections.py).
What is here is their course over time (or per step), which the summary does not hold: iteration
time per step, the PS port's backlog, drops and retransmissions per second, delivered goodput, loss
per step, fault and event marks, holes in the controller's statistics. Where a series has a total in
the summary it adds up to it (same records, same window), which the tests check.

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

PCAP_BIN_S = 0.1  # bin of the pcap series (retransmissions, goodput)
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
    ks = sorted(by)
    return {"steps": ks, "loss": [statistics.fmean(r.loss for r in by[k]) for k in ks],
            "t": [max(r.t_end for r in by[k]) - t0 for k in ks]}


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
def counter_rate(series: dict[str, list[QueueStatSample]], key: str, t_start: float | None, t0: float,
                 interval: float) -> dict[str, Any]:
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
        for prev, s in zip(samples[base:], samples[base + 1:], strict=False):
            inc = max(0.0, float(getattr(s, key)) - float(getattr(prev, key)))
            rounds.setdefault(round((s.t - first) / interval), []).append((s.t, inc, s.t - prev.t))
    ks = sorted(rounds)
    count = [sum(v for _, v, _ in rounds[k]) for k in ks]
    dt = [max(statistics.fmean(d for _, _, d in rounds[k]), 1e-6) for k in ks]
    return {"t": [statistics.fmean(t for t, _, _ in rounds[k]) - t0 for k in ks], "count": count, "dt": dt,
            "per_s": [c / d for c, d in zip(count, dt, strict=True)], "total": sum(count)}


def drops_series(s: StrategyView, ps_port: str, interval: float) -> dict[str, Any]:
    """Queue drops per second over the whole fabric and at the PS port (controller queue samples)."""
    t0 = s.t0 or 0.0
    t_start = s.status.t_start if s.status else None
    queues = s.controller.queue_series()
    fabric = counter_rate(queues, "drops", t_start, t0, interval)
    port = counter_rate({ps_port: queues.get(ps_port, [])}, "drops", t_start, t0, interval)
    return {"fabric": fabric, "ps_port": port}


def queue_occupancy(s: StrategyView, port: str) -> dict[str, Any]:
    """The port's qdisc backlog (packets) over time, from queue_depth.jsonl."""
    t0 = s.t0 or 0.0
    pts = [q for q in s.queue if q.port in ("", port)]
    vals = [q.backlog_packets for q in pts]
    return {"port": port, "t": [q.t - t0 for q in pts], "backlog_packets": vals,
            "max": max(vals, default=None)}


# -- pcaps --------------------------------------------------------------------------------------------
def pcap_series(run: RunView, s: StrategyView, bin_s: float = PCAP_BIN_S) -> dict[str, Any] | None:
    """Retransmissions and delivered goodput per bin from the host captures (None without any).

    Retransmissions: each host's capture, the segments that host sent, as the summary counts
    tcp_retransmits_pcap (analysis.tcp). Goodput: the payload bytes each host received, each byte
    once at its first arrival (analysis.goodput), summed over the hosts. Bins run from the strategy's
    start (status t_start) to its end."""
    from analysis.errors import AnalysisError
    from analysis.goodput import delivered_bytes
    from analysis.pcapfile import read_pcap, str_to_ip
    from analysis.tcp import analyze

    window = s.window
    if s.capture is None or window is None or s.t0 is None:
        return None
    start, end = window
    width = int(round(bin_s * 1e9))
    nbins = int((end - start) * 1e9 // width) + 1
    ip = {h.name: str_to_ip(h.ip) for h in run.plan.hosts}
    retx = np.zeros(nbins, dtype=np.int64)
    good = np.zeros(nbins, dtype=np.int64)
    hosts: list[str] = []
    retx_total = 0
    for pt in s.capture.points:
        if pt.name == "ps-port" or pt.name not in ip:
            continue
        try:
            pk = read_pcap(str(s.folder.path / pt.file), allow_truncated=True, require_tcp=False)
        except AnalysisError:
            continue
        hosts.append(pt.name)
        mine = pk.src == ip[pt.name]
        if mine.any():
            an = analyze(pk)
            ts = pk.ts_ns[an.retransmission_mask() & mine]
            retx_total += int(ts.size)
            k = np.clip((ts - int(start * 1e9)) // width, 0, nbins - 1)
            retx += np.bincount(k, minlength=nbins)[:nbins]
        got = delivered_bytes(pk, bin_s=bin_s, t0=start, receiver=ip[pt.name])
        for recv in got.by_receiver.values():
            series = np.asarray(recv["series"], dtype=np.int64)[:nbins]
            good[: series.size] += series
    if not hosts:
        return None
    t = [start - s.t0 + i * bin_s for i in range(nbins)]
    return {"bin_s": bin_s, "t": t, "hosts": hosts, "retransmits": retx.tolist(),
            "retransmits_per_s": (retx / bin_s).tolist(), "retransmits_total": retx_total,
            "goodput_bytes": good.tolist(), "goodput_mbit_s": (good * 8 / bin_s / 1e6).tolist()}


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
    """"link-down lf1-eth1 down"."""
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
