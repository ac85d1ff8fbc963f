"""summary.json from a run folder: the one place every figure of a run is computed.

Computed only from the files in the folder (worker logs, controller samples, host counters, pcaps)
through the run model's readers, so `incastlab report` can rebuild it from a saved run with the same
code. What each figure means is defined once, in runmodel/summary.py.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from analysis.spans import overlap_s
from runmodel.config import ExperimentConfig, StrategySpec
from runmodel.fabric import Plan
from runmodel.folder import RunFolder, StrategyFolder
from runmodel.records import ControllerSeries, QueueSample, StepRecord, write_json
from runmodel.strategy import PIPELINE
from runmodel.summary import CaptureTotals, RunSummary, StrategySummary


def by_step(logs: dict[int, list[StepRecord]]) -> dict[int, list[StepRecord]]:
    """Step records grouped by step number."""
    out: dict[int, list[StepRecord]] = {}
    for recs in logs.values():
        for r in recs:
            out.setdefault(r.step, []).append(r)
    return dict(sorted(out.items()))


def iteration_times(logs: dict[int, list[StepRecord]]) -> dict[int, float]:
    """Per step, the slowest worker's t_end - t_start: what the step cost the job."""
    return {step: max(r.duration_s for r in recs) for step, recs in by_step(logs).items()}


def spread(values: Iterable[float]) -> tuple[float, float, float]:
    """p10, median and p90 of some step times, rounded to 0.1 ms: a median with its spread over steps.
    Percentiles interpolate linearly between the closest ranks (statistics' inclusive method, numpy's
    default); one value is its own spread."""
    data = sorted(values)
    if len(data) == 1:
        p10 = p90 = data[0]
    else:
        cuts = statistics.quantiles(data, n=10, method="inclusive")
        p10, p90 = cuts[0], cuts[-1]
    return round(p10, 4), round(statistics.median(data), 4), round(p90, 4)


def first_and_final_loss(steps: dict[int, list[StepRecord]]) -> tuple[float | None, float | None]:
    """The mean loss of the first and of the last step with a loss, over the workers that reported
    one (a job's script may print it on rank 0 only); None when no worker reported any."""
    means = [
        statistics.fmean(losses)
        for recs in steps.values()
        if (losses := [r.loss for r in recs if r.loss is not None])
    ]
    if not means:
        return None, None
    return round(means[0], 5), round(means[-1], 5)


def worker_figures(logs: dict[int, list[StepRecord]], out: StrategySummary) -> None:
    """Step timing, loss, throughput and compute share from the workers' step records."""
    steps = by_step(logs)
    out.workers = sum(1 for recs in logs.values() if recs)
    out.steps = len(steps)
    if not steps:
        return
    recs = [r for rs in steps.values() for r in rs]
    out.iter_time_p10_s, out.iter_time_s, out.iter_time_p90_s = spread(iteration_times(logs).values())
    out.comm_time_p10_s, out.comm_time_s, out.comm_time_p90_s = spread(r.comm_s for r in recs)
    out.compute_time_p10_s, out.compute_time_s, out.compute_time_p90_s = spread(r.compute_s for r in recs)
    out.wait_time_p10_s, out.wait_time_s, out.wait_time_p90_s = spread(r.wait_s for r in recs)
    out.first_loss, out.final_loss = first_and_final_loss(steps)
    t0, t1 = min(r.t_start for r in recs), max(r.t_end for r in recs)
    out.wall_time_s = round(t1 - t0, 3)
    out.throughput_samples_per_s = round(sum(r.samples for r in recs) / (t1 - t0), 2) if t1 > t0 else 0.0
    share = {}
    for rank, rs in sorted(logs.items()):
        if rs:
            span = max(r.t_end for r in rs) - min(r.t_start for r in rs)
            share[str(rank)] = round(sum(r.compute_s for r in rs) / span, 4) if span > 0 else 0.0
    out.worker_compute_share_by_rank = share
    out.worker_compute_share = round(statistics.fmean(share.values()), 4) if share else 0.0
    out.worker_bytes_sent = sum(r.bytes_sent for r in recs)
    out.worker_bytes_received = sum(r.bytes_recv for r in recs)


def counter_increase(series: dict[str, list[Any]], key: str, t0: float) -> dict[str, float]:
    """Per port: the counter at its last sample minus the counter at its last sample before t0."""
    out = {}
    for name, samples in series.items():
        first = samples[0]
        for s in samples:
            if s.t <= t0:
                first = s
        out[name] = max(0.0, float(getattr(samples[-1], key)) - float(getattr(first, key)))
    return out


def network_figures(
    series: ControllerSeries,
    plan: Plan,
    t0: float,
    out: StrategySummary,
    queue_max: dict[str, int] | None = None,
    ps_ports: list[str] | None = None,
) -> None:
    """Drops, bytes and utilisation per link from the controller's samples; the hot ports."""
    drops = counter_increase(series.queue_series(), "drops", t0)
    ports = series.port_series()
    tx = counter_increase(ports, "tx_bytes", t0)
    rx = counter_increase(ports, "rx_bytes", t0)
    by_link = dict(tx)
    rate = {p.name: p.rate_mbit for p in plan.switch_ports()}
    for host in plan.hosts:  # host -> leaf direction, seen as the leaf port's rx
        if host.leaf_port in rx:
            by_link[host.nic] = rx[host.leaf_port]
            rate[host.nic] = host.rate_mbit
    total = sum(by_link.values())
    out.queue_drops_total = int(sum(drops.values()))
    if ps_ports:  # the PS family: its hottest shard's port (the one PS's port when unsharded)
        out.ps_port = max(ps_ports, key=lambda k: (drops.get(k, 0), -ps_ports.index(k)))
        out.ps_port_drops = int(drops.get(out.ps_port, 0))
    out.max_port_drops = int(max(drops.values(), default=0))
    out.max_drop_port = max(drops, key=lambda k: drops[k]) if drops and max(drops.values()) > 0 else None
    out.drops_by_port = {k: int(v) for k, v in sorted(drops.items()) if v}
    out.bytes_by_link = {k: int(v) for k, v in sorted(by_link.items())}
    out.max_link_share = round(max(by_link.values()) / total, 4) if total else 0.0
    out.busiest_link = max(by_link, key=lambda k: by_link[k]) if total else None
    seconds = out.wall_time_s or 0.0
    if seconds > 0 and by_link:
        out.link_utilisation = {
            k: round(v * 8 / (rate[k] * 1e6 * seconds), 4) for k, v in sorted(by_link.items()) if k in rate
        }
        out.busiest_link_utilisation = max(out.link_utilisation.values(), default=None)
    if total:
        top = max(by_link.values())
        out.links_under_5pct_of_busiest = sum(1 for v in by_link.values() if v < 0.05 * top)
    spreads = []
    for leaf in (s.name for s in plan.switches if s.role == "leaf"):
        up = [tx.get(p.name, 0.0) for p in plan.switch_ports() if p.switch == leaf and p.kind == "uplink"]
        if len(up) > 1 and max(up) > 0:
            spreads.append((max(up) - min(up)) / max(up))
    out.ecmp_imbalance = round(max(spreads), 4) if spreads else None
    kind = {p.name: p.kind for p in plan.switch_ports()}
    busiest = sorted((k for k in tx if tx[k] > 0), key=lambda k: (-tx[k], k))[:5]
    dropping = sorted((k for k in drops if drops[k] > 0), key=lambda k: (-drops[k], k))[:5]
    hot = sorted(set(busiest) | set(dropping), key=lambda k: (-tx.get(k, 0.0), k))
    out.hot_ports = [
        {
            "port": k,
            "kind": kind.get(k, "?"),
            "tx_bytes": int(tx.get(k, 0)),
            "drops": int(drops.get(k, 0)),
            "utilisation": round(tx.get(k, 0) * 8 / (rate[k] * 1e6 * seconds), 4) if seconds else None,
            "max_backlog_packets": (queue_max or {}).get(k),
        }
        for k in hot
    ]
    out.worst_queue_port = dropping[0] if dropping else (busiest[0] if busiest else None)


PCAP_COUNTS = (
    "tcp_retransmits_pcap",
    "dupack_retransmits_pcap",
    "wireshark_fast_retransmits",
    "dup_acks",
    "out_of_order",
    "zero_window",
    "fabric_drops_pcap",
    "drops_on_path_to_ps_pcap",
    "tcp_timeouts_pcap",
    "tcp_loss_probes_pcap",
    "delivered_bytes",
)


def union_seconds(spans: list[tuple[float, float]]) -> float:
    """Length of the union of [a, b] intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


IDLE_GAP_S = 0.002  # a host link with no data packet for longer than this is idle


def idle_spans(ts_ns: np.ndarray, gap_s: float = IDLE_GAP_S) -> list[tuple[float, float]]:
    """Spans between consecutive packets (capture times, ns) longer than gap_s, in seconds."""
    t = np.sort(ts_ns) / 1e9
    if t.size < 2:
        return []
    gaps = np.flatnonzero(np.diff(t) > gap_s)
    return [(float(t[i]), float(t[i + 1])) for i in gaps]


def pcap_figures(
    sf: StrategyFolder,
    plan: Plan,
    out: StrategySummary,
    bin_s: float = 0.1,
    rto_min_s: float = 0.2,
    t0: float | None = None,
    bottleneck: str | None = None,
) -> None:
    """Retransmissions, timeouts, dup ACKs, fabric drops and delivered bytes from the captures."""
    from analysis.errors import AnalysisError
    from analysis.fabric_loss import fabric_drops
    from analysis.goodput import delivered_bytes
    from analysis.packets import ip_to_str, str_to_ip
    from analysis.pcapfile import read_pcap
    from analysis.rto import rto_events
    from analysis.tcp import analyze
    from analysis.tcpopts import read_options

    cap = sf.capture()
    points = {pt.name: pt for pt in (cap.points if cap else [])}
    out.capture_complete = bool(cap and cap.complete)
    out.captures = len(points)
    for stale in (sf.goodput_file, sf.rto_events_file, sf.retransmits_file):
        stale.unlink(missing_ok=True)  # what an earlier summary wrote must not outlive its data
    if not any(name != "ps-port" for name in points):
        return  # without host captures there is nothing to count on: the counts stay None, not 0
    for key in PCAP_COUNTS:
        setattr(out, key, 0)
    ip_of = {h.name: str_to_ip(h.ip) for h in plan.hosts}
    host_of = {h.ip: h.name for h in plan.hosts}
    hosts: dict[str, Any] = {}
    rtx_times: list[np.ndarray] = []
    stalls: list[tuple[float, float]] = []
    rto_rows: list[dict[str, Any]] = []
    goodput: dict[str, Any] = {"bin_s": bin_s, "t0": t0, "by_receiver": {}, "flows_to_ps": {}}
    for name, pt in points.items():
        if name == "ps-port":
            continue
        try:
            pk = read_pcap(str(sf.path / pt.file), allow_truncated=True, require_tcp=False)
        except AnalysisError:
            continue
        hosts[name] = pk
        mine = pk.src == ip_of.get(name, -1)
        if not mine.any():
            continue
        an = analyze(pk)  # both directions: the dup ACKs that explain a fast retransmit come back in
        c = an.counts(mine)
        out.tcp_retransmits_pcap += c["retransmits"]
        out.dupack_retransmits_pcap += c["retransmits_with_dup_acks"]
        out.wireshark_fast_retransmits += c["wireshark_fast_retransmits"]
        out.dup_acks += c["dup_acks"]
        out.out_of_order += c["out_of_order"]
        out.zero_window += c["zero_window"]
        rtx_times.append(an.packets.ts_ns[an.retransmission_mask() & mine])
        rto = rto_events(pk, tsval=read_options(pk).tsval, rto_min_s=rto_min_s)
        for flow in rto.flows:
            if flow.src != ip_to_str(ip_of[name]):
                continue  # the timeouts of the flows this host sent (its own ACK view)
            out.tcp_timeouts_pcap += flow.timeouts
            if flow.timeouts:
                to = host_of.get(flow.dst, flow.dst)
                out.tcp_timeouts_by_receiver[to] = out.tcp_timeouts_by_receiver.get(to, 0) + flow.timeouts
            out.tcp_loss_probes_pcap += flow.loss_probes
            for ev in flow.events:
                rto_rows.append(
                    {"t": ev.t, "host": name, "flow": flow.flow, "kind": ev.kind, "idle_s": ev.idle_s}
                )
                if ev.kind != "tlp":
                    stalls.append((ev.t - ev.idle_s, ev.t))
        got = delivered_bytes(pk, bin_s=bin_s, t0=t0, receiver=ip_of[name])
        for f in got.flows:  # the traffic matrix, each cell counted where its bytes arrived
            cell = f"{host_of.get(f.src, f.src)}->{name}"
            out.traffic_matrix_pcap[cell] = out.traffic_matrix_pcap.get(cell, 0) + f.bytes
        mine_in: dict[str, Any] | None = got.by_receiver.get(ip_to_str(ip_of[name]))
        if mine_in is not None:
            out.delivered_bytes_by_receiver[name] = int(mine_in["bytes"])
            goodput["by_receiver"][name] = {
                "bytes": int(mine_in["bytes"]),
                "mbit_s": got.mbit_s(list(mine_in["series"])),
            }
            goodput["t0"] = got.t0
            if name == plan.ps_host:
                for f in got.flows:
                    goodput["flows_to_ps"][f"{host_of.get(f.src, f.src)}:{f.sport}"] = got.mbit_s(f.series)
    # fabric drops: a segment a host sent that the receiving host's capture never saw
    for rname, rpk in hosts.items():
        for sname, spk in hosts.items():
            if sname == rname:
                continue
            sel_s = (spk.src == ip_of[sname]) & (spk.dst == ip_of[rname])
            sel_r = (rpk.src == ip_of[sname]) & (rpk.dst == ip_of[rname])
            if sel_s.any() and sel_r.any():
                out.fabric_drops_pcap += int(
                    fabric_drops(spk.select(sel_s), rpk.select(sel_r))["fabric_drops_pcap"]
                )
    ps_host = plan.ps_host
    if "ps-port" in points:
        try:
            port_file = str(sf.path / points["ps-port"].file)
            port_pk = read_pcap(port_file, allow_truncated=True, require_tcp=False)
            to_ps = port_pk.dst == ip_of[ps_host]
            for sname, spk in hosts.items():
                if sname == ps_host:
                    continue
                sel_s = (spk.src == ip_of[sname]) & (spk.dst == ip_of[ps_host])
                sel_r = to_ps & (port_pk.src == ip_of[sname])
                if sel_s.any() and sel_r.any():
                    lost = fabric_drops(spk.select(sel_s), port_pk.select(sel_r))
                    out.drops_on_path_to_ps_pcap += int(lost["fabric_drops_pcap"])
        except AnalysisError:
            pass
    out.delivered_bytes = sum(out.delivered_bytes_by_receiver.values())
    out.timeout_stall_s = round(union_seconds(stalls), 3)
    if bottleneck in hosts:
        pk = hosts[bottleneck]
        out.timeout_idle_s = round(overlap_s(idle_spans(pk.ts_ns[pk.plen > 0]), stalls), 3)
    write_json(sf.goodput_file, goodput)
    write_json(sf.rto_events_file, {"events": sorted(rto_rows, key=lambda r: r["t"])})
    if rtx_times:
        times = np.concatenate(rtx_times)
        starts = [int(pk.ts_ns.min()) for pk in hosts.values() if pk.ts_ns.size]
        t0 = min(starts) if starts else 0
        bins = ((times - t0) // int(bin_s * 1e9)).astype(np.int64) if times.size else np.zeros(0, np.int64)
        ends = [int(pk.ts_ns.max()) for pk in hosts.values() if pk.ts_ns.size]
        n = int((max(ends) - t0) // int(bin_s * 1e9)) + 1 if ends else 0
        counts = np.bincount(bins, minlength=n).tolist() if n else []
        write_json(sf.retransmits_file, {"bin_s": bin_s, "t0": t0 / 1e9, "counts": counts})


def ps_figures(sf: StrategyFolder, out: StrategySummary) -> None:
    """Staleness and discarded updates from the parameter server's log (PS family)."""
    from runmodel.records import PsRelease, PsStep, PsUpdate

    events = sf.ps_events()
    updates = [e for e in events if isinstance(e, PsUpdate)]
    if not updates:
        return
    applied = [e for e in updates if e.applied]
    stale = [e.staleness for e in applied]
    hist: dict[str, int] = {}
    for s in stale:
        hist[str(s)] = hist.get(str(s), 0) + 1
    gaps = [e.gap for e in events if isinstance(e, PsRelease)]
    out.ssp_max_gap = max(gaps) if gaps else None
    out.updates_applied = len(applied)
    out.updates_discarded = len(updates) - len(applied)
    out.staleness_max = max(stale, default=0)
    out.staleness_mean = round(statistics.fmean(stale), 3) if stale else 0.0
    out.staleness_histogram = hist
    out.discarded_per_step = [len(e.discarded) for e in events if isinstance(e, PsStep)]


KERNEL_COUNTERS = {
    "tcp_timeouts_kernel": "TcpExtTCPTimeouts",
    "tcp_loss_probes_kernel": "TcpExtTCPLossProbes",
    "tcp_fast_retrans_kernel": "TcpExtTCPFastRetrans",
    "tcp_spurious_rtos_kernel": "TcpExtTCPSpuriousRTOs",
}


def dequeue_check(
    sf: StrategyFolder, plan: Plan, out: StrategySummary, queue: list[QueueSample]
) -> dict[str, Any]:
    """Pace of the strategy's worst host port while backlogged, from the capture closest to it."""
    from analysis.dequeue import QueueSamples, dequeue_gaps
    from analysis.errors import AnalysisError
    from analysis.pcapfile import read_pcap

    ports = {p.name: p for p in plan.switch_ports() if p.kind == "host"}
    candidates = [
        h["port"]
        for h in sorted(out.hot_ports, key=lambda h: (-h["drops"], -h["tx_bytes"]))
        if h["port"] in ports
    ]
    cap = sf.capture()
    sf.dequeue_file.unlink(missing_ok=True)
    for name in candidates:
        host = ports[name].peer
        # the port's own egress capture where there is one (the PS port); else the receiver's, which
        # adds its receive-side jitter to the tails but not to the median
        own = cap.point("ps-port") if cap and name == plan.ps_port.name else None
        point = own or (cap.point(host) if cap else None)
        qs = QueueSamples.of_port(queue, name, default_port=plan.ps_port.name)
        if point is None or not qs.t.size:
            continue
        try:
            pk = read_pcap(str(sf.path / point.file), allow_truncated=True, require_tcp=False)
        except AnalysisError:
            continue
        gaps = dequeue_gaps(pk, qs, plan.host(host).rate_mbit * 1e6, receiver=plan.host(host).ip)
        if gaps.gaps:
            write_json(sf.dequeue_file, {"port": name, **gaps.to_dict()})
            return {
                "dequeue_port": name,
                "dequeue_gap_median_over_ideal": gaps.median_ratio,
                "dequeue_gaps": gaps.gaps,
            }
    return {"dequeue_port": None, "dequeue_gap_median_over_ideal": None, "dequeue_gaps": 0}


def summarize_strategy(
    sf: StrategyFolder, cfg: ExperimentConfig, plan: Plan, spec: StrategySpec, rto_min_s: float = 0.2
) -> StrategySummary:
    """Every figure of one strategy."""
    from analysis.bounds import comm_bound_s, comm_split, push_then_pull_s
    from analysis.fidelity import cpu_figures, unexplained_loss_share, verdict
    from analysis.matrix import matrix_figures

    out = StrategySummary(grad_bytes=cfg.grad_bytes)
    if not sf.exists:
        return out
    status = sf.status()
    out.state = status.state if status else "incomplete"
    out.error = status.error if status else "status.json missing"
    if out.state == "running":  # a run killed before it could say how the strategy ended
        out.state = "incomplete"
    t_start = float(status.t_start or 0.0) if status else 0.0
    out.tcp = dict(next(iter((status.tcp if status else {}).values()), {}))
    if out.tcp.get("rto_min_ms"):
        rto_min_s = float(out.tcp["rto_min_ms"]) / 1000.0
    logs = {r: wl.steps for r, wl in sf.worker_logs().items()}
    worker_figures(logs, out)
    queue = sf.queue_samples()
    queue_max: dict[str, int] = {}
    for q in queue:
        name = q.port or plan.ps_port.name
        queue_max[name] = max(queue_max.get(name, 0), q.backlog_packets)
    shard_hosts = cfg.shard_hosts(spec)
    network_figures(
        sf.controller_series(), plan, t_start, out, queue_max, [plan.host(h).leaf_port for h in shard_hosts]
    )
    hosts = sf.hosts()
    if hosts is not None:
        out.tcp_retransmits_kernel = sum(h.tcp_retransmits for h in hosts.values())
        for key, counter in KERNEL_COUNTERS.items():
            setattr(out, key, sum(h.counter(counter) for h in hosts.values()))
    ports = {p.name: p for p in plan.switch_ports()}
    worst = ports.get(out.ps_port or out.worst_queue_port or "")  # the hottest PS, else the worst queue
    bottleneck = worst.peer if worst and worst.kind == "host" else None
    try:
        pcap_figures(sf, plan, out, rto_min_s=rto_min_s, t0=t_start or None, bottleneck=bottleneck)
    except Exception as exc:  # noqa: BLE001 - a broken capture must not lose the other figures
        out.pcap_error = f"{type(exc).__name__}: {exc}"
        out.capture_complete = False
    ps_figures(sf, out)
    try:
        matrix_figures(sf, spec, out, captured=bool(out.traffic_matrix_pcap) and not out.pcap_error)
    except Exception as exc:  # noqa: BLE001 - a theory that fails must not lose the other figures
        out.traffic_matrix_theory = {}
        out.traffic_theory_error = f"{type(exc).__name__}: {exc}"
    if out.steps:
        slowest = min(plan.host(h).rate_mbit for h in cfg.worker_hosts + shard_hosts)
        grad = cfg.grad_bytes
        if spec.kind == "job" and out.workers > 1 and out.worker_bytes_sent:  # a user's model: its size
            per_step = out.worker_bytes_sent / (out.workers * out.steps)  # what a worker sent a step
            grad = int(per_step * out.workers / (2 * (out.workers - 1)))  # as a ring's 2 (N - 1) S / N
        if spec.kind == PIPELINE:  # what a stage boundary carries each way per step
            from analysis.pipeline import pp_figures, stage_bytes_theory

            grad = stage_bytes_theory(cfg.grad_mb, cfg.batch)
            pp_figures(sf, spec, cfg.grad_mb, cfg.batch, out)
        out.bound_s = round(comm_bound_s(spec, out.workers, grad, slowest), 4)
        ptp = push_then_pull_s(spec, out.workers, cfg.grad_bytes, slowest)
        out.push_then_pull_s = round(ptp, 4) if ptp is not None else None
        if out.comm_time_s is not None:
            out.comm_split = comm_split(out.comm_time_s, out.bound_s, out.timeout_idle_s or 0.0, out.steps)
    checks: dict[str, Any] = {
        "unexplained_loss_share": unexplained_loss_share(out.fabric_drops_pcap, out.queue_drops_total)
    }
    try:
        checks.update(dequeue_check(sf, plan, out, queue))
    except Exception as exc:  # noqa: BLE001 - a figure missing is said, not fatal
        checks.update(
            {
                "dequeue_port": None,
                "dequeue_gap_median_over_ideal": None,
                "dequeue_error": f"{type(exc).__name__}: {exc}",
            }
        )
    steps = [r for rs in logs.values() for r in rs]
    if steps:  # while training ran: start-up (imports, rendezvous) is not the emulator's work
        window = min(r.t_start for r in steps), max(r.t_end for r in steps)
        checks.update(cpu_figures(sf.cpu_samples(), *window))
    out.fidelity = verdict(checks)
    return out


def summarize(run_dir: Any) -> RunSummary:
    """Compute and write summary.json for a run folder; returns it."""
    folder = run_dir if isinstance(run_dir, RunFolder) else RunFolder(Path(run_dir))
    cfg = folder.config()
    plan = folder.plan()
    strategies: dict[str, StrategySummary] = {}
    totals = CaptureTotals(enabled=cfg.capture != "none", complete=cfg.capture != "none")
    env = (folder.config_doc() or {}).get("environment") or {}
    rto_min_s = float(env.get("rto_min_ms") or 200.0) / 1000.0
    for spec in cfg.strategy_specs:
        name = spec.name
        sf = folder.strategy(name)
        fig = summarize_strategy(sf, cfg, plan, spec, rto_min_s)
        strategies[name] = fig
        cap = sf.capture()
        for pt in cap.points if cap else []:
            totals.packets_captured += int(pt.packets_captured or 0)
            totals.packets_dropped_kernel += int(pt.packets_dropped_kernel or 0)
            if not pt.complete:
                totals.incomplete_points.append(f"{name}/{pt.name}")
        if sf.exists:
            totals.complete &= fig.capture_complete or cfg.capture == "none"
    from analysis.fidelity import cluster_reasons, run_verdict

    cluster_file = folder.path / "cluster.json"  # a run over several servers (topologies.cluster)
    cluster = json.loads(cluster_file.read_text()) if cluster_file.exists() else None

    summary = RunSummary(
        config=folder.config_doc() or cfg.to_dict(),
        strategies=strategies,
        capture=totals,
        complete=all(s.state == "complete" for s in strategies.values()),
        fidelity=run_verdict({k: v.fidelity for k, v in strategies.items()}, cluster_reasons(cluster)),
    )
    write_json(folder.summary_file, summary.to_dict())
    return summary
