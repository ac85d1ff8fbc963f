"""summary.json from a run folder: the one place every figure of a run is computed.

Computed only from the files in the folder (worker logs, controller samples, host counters, pcaps)
through the run model's readers, so `incastlab report` can rebuild it from a saved run with the same
code. What each figure means is defined once, in runmodel/summary.py.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

import numpy as np

from runmodel.config import ExperimentConfig
from runmodel.fabric import Plan
from runmodel.folder import RunFolder, StrategyFolder
from runmodel.records import ControllerSeries, StepRecord, write_json
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


def worker_figures(logs: dict[int, list[StepRecord]], out: StrategySummary) -> None:
    """Step timing, loss, throughput and compute share from the workers' step records."""
    steps = by_step(logs)
    out.workers = sum(1 for recs in logs.values() if recs)
    out.steps = len(steps)
    if not steps:
        return
    recs = [r for rs in steps.values() for r in rs]
    out.iter_time_s = round(statistics.median(iteration_times(logs).values()), 4)
    out.comm_time_s = round(statistics.median(r.comm_s for r in recs), 4)
    out.compute_time_s = round(statistics.median(r.compute_s for r in recs), 4)
    out.wait_time_s = round(statistics.median(r.wait_s for r in recs), 4)
    out.first_loss = round(statistics.fmean(r.loss for r in steps[min(steps)]), 5)
    out.final_loss = round(statistics.fmean(r.loss for r in steps[max(steps)]), 5)
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


def network_figures(series: ControllerSeries, plan: Plan, t0: float, out: StrategySummary) -> None:
    """Drops and bytes per link from the controller's samples."""
    drops = counter_increase(series.queue_series(), "drops", t0)
    ports = series.port_series()
    tx = counter_increase(ports, "tx_bytes", t0)
    rx = counter_increase(ports, "rx_bytes", t0)
    by_link = dict(tx)
    for host in plan.hosts:  # host -> leaf direction, seen as the leaf port's rx
        if host.leaf_port in rx:
            by_link[host.nic] = rx[host.leaf_port]
    total = sum(by_link.values())
    out.ps_port = plan.ps_port.name
    out.queue_drops_total = int(sum(drops.values()))
    out.ps_port_drops = int(drops.get(plan.ps_port.name, 0))
    out.max_port_drops = int(max(drops.values(), default=0))
    out.max_drop_port = max(drops, key=lambda k: drops[k]) if drops and max(drops.values()) > 0 else None
    out.drops_by_port = {k: int(v) for k, v in sorted(drops.items()) if v}
    out.bytes_by_link = {k: int(v) for k, v in sorted(by_link.items())}
    out.max_link_share = round(max(by_link.values()) / total, 4) if total else 0.0
    out.busiest_link = max(by_link, key=lambda k: by_link[k]) if total else None


def _select(p: Any, mask: np.ndarray) -> Any:
    """The packets of a capture where mask is true (same Packets type)."""
    arrays = {f: getattr(p, f)[mask] for f in ("frame", "ts_ns", "src", "dst", "sport", "dport", "seq",
                                               "ack", "flags", "win", "plen", "caplen", "wirelen")}
    return replace(p, **arrays)


PCAP_COUNTS = ("tcp_retransmits_pcap", "tcp_fast_retransmits", "tcp_timeout_retransmits", "dup_acks",
               "out_of_order", "zero_window", "fabric_drops_pcap", "drops_on_path_to_ps_pcap")


def pcap_figures(sf: StrategyFolder, plan: Plan, out: StrategySummary, bin_s: float = 0.1) -> None:
    """Retransmissions, dup ACKs and fabric drops from the captures of one strategy."""
    from analysis.errors import AnalysisError
    from analysis.fabric_loss import fabric_drops
    from analysis.pcapfile import read_pcap, str_to_ip
    from analysis.tcp import analyze, goodput_timeline

    cap = sf.capture()
    points = {pt.name: pt for pt in (cap.points if cap else [])}
    out.capture_complete = bool(cap and cap.complete)
    out.captures = len(points)
    if not any(name != "ps-port" for name in points):
        return  # without host captures there is nothing to count on: the counts stay None, not 0
    for key in PCAP_COUNTS:
        setattr(out, key, 0)
    ip_of = {h.name: str_to_ip(h.ip) for h in plan.hosts}
    hosts: dict[str, Any] = {}
    rtx_times: list[np.ndarray] = []
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
        out.tcp_fast_retransmits += c["fast_retransmits"]
        out.tcp_timeout_retransmits += c["timeout_retransmits"]
        out.dup_acks += c["dup_acks"]
        out.out_of_order += c["out_of_order"]
        out.zero_window += c["zero_window"]
        rtx_times.append(an.packets.ts_ns[an.retransmission_mask() & mine])
    # fabric drops: a segment a host sent that the receiving host's capture never saw
    for rname, rpk in hosts.items():
        for sname, spk in hosts.items():
            if sname == rname:
                continue
            sel_s = (spk.src == ip_of[sname]) & (spk.dst == ip_of[rname])
            sel_r = (rpk.src == ip_of[sname]) & (rpk.dst == ip_of[rname])
            if sel_s.any() and sel_r.any():
                out.fabric_drops_pcap += int(fabric_drops(_select(spk, sel_s), _select(rpk, sel_r))
                                             ["fabric_drops_pcap"])
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
                    lost = fabric_drops(_select(spk, sel_s), _select(port_pk, sel_r))
                    out.drops_on_path_to_ps_pcap += int(lost["fabric_drops_pcap"])
            if to_ps.any():
                write_json(sf.path / "goodput_timeline.json",
                           goodput_timeline(analyze(_select(port_pk, to_ps)), bin_s=bin_s))
        except AnalysisError:
            pass
    if rtx_times:
        times = np.concatenate(rtx_times)
        starts = [int(pk.ts_ns.min()) for pk in hosts.values() if pk.ts_ns.size]
        t0 = min(starts) if starts else 0
        bins = ((times - t0) // int(bin_s * 1e9)).astype(np.int64) if times.size else np.zeros(0, np.int64)
        ends = [int(pk.ts_ns.max()) for pk in hosts.values() if pk.ts_ns.size]
        n = int((max(ends) - t0) // int(bin_s * 1e9)) + 1 if ends else 0
        counts = np.bincount(bins, minlength=n).tolist() if n else []
        write_json(sf.path / "retransmits_timeline.json", {"bin_s": bin_s, "t0": t0 / 1e9, "counts": counts})


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


def summarize_strategy(sf: StrategyFolder, cfg: ExperimentConfig, plan: Plan) -> StrategySummary:
    """Every figure of one strategy."""
    out = StrategySummary(grad_bytes=cfg.grad_bytes)
    if not sf.exists:
        return out
    status = sf.status()
    out.state = status.state if status else "incomplete"
    out.error = status.error if status else "status.json missing"
    if out.state == "running":  # a run killed before it could say how the strategy ended
        out.state = "incomplete"
    logs = {r: wl.steps for r, wl in sf.worker_logs().items()}
    worker_figures(logs, out)
    network_figures(sf.controller_series(), plan, float(status.t_start or 0.0) if status else 0.0, out)
    hosts = sf.hosts()
    if hosts is not None:
        out.tcp_retransmits_kernel = sum(h.tcp_retransmits for h in hosts.values())
    try:
        pcap_figures(sf, plan, out)
    except Exception as exc:  # noqa: BLE001 - a broken capture must not lose the other figures
        out.pcap_error = f"{type(exc).__name__}: {exc}"
        out.capture_complete = False
    ps_figures(sf, out)
    return out


def summarize(run_dir: Any) -> RunSummary:
    """Compute and write summary.json for a run folder; returns it."""
    folder = RunFolder(run_dir) if not isinstance(run_dir, RunFolder) else run_dir
    cfg = folder.config()
    plan = folder.plan()
    strategies: dict[str, StrategySummary] = {}
    totals = CaptureTotals(enabled=cfg.capture != "none", complete=cfg.capture != "none")
    for name in cfg.strategies:
        sf = folder.strategy(name)
        fig = summarize_strategy(sf, cfg, plan)
        strategies[name] = fig
        cap = sf.capture()
        for pt in cap.points if cap else []:
            totals.packets_captured += int(pt.packets_captured or 0)
            totals.packets_dropped_kernel += int(pt.packets_dropped_kernel or 0)
            if not pt.complete:
                totals.incomplete_points.append(f"{name}/{pt.name}")
        if sf.exists:
            totals.complete &= fig.capture_complete or cfg.capture == "none"
    summary = RunSummary(config=folder.config_doc() or cfg.to_dict(), strategies=strategies, capture=totals,
                         complete=all(s.state == "complete" for s in strategies.values()))
    write_json(folder.summary_file, summary.to_dict())
    return summary


def comparison_table(summary: RunSummary) -> str:
    """The side-by-side table printed at the end of `compare` (nccl-tests style columns)."""
    cols = [("iter_time_s", "iter s", "{:.3f}"), ("comm_time_s", "comm s", "{:.3f}"),
            ("final_loss", "loss", "{:.4f}"), ("ps_port_drops", "PS-port drops", "{:d}"),
            ("queue_drops_total", "fabric drops", "{:d}"),
            ("tcp_retransmits_kernel", "retx (kernel)", "{:d}"),
            ("tcp_retransmits_pcap", "retx (pcap)", "{:d}"),
            ("tcp_timeout_retransmits", "retx timeout", "{:d}"),
            ("max_link_share", "max link share", "{:.1%}")]
    head = f"{'strategy':<10}" + "".join(f"{c[1]:>15}" for c in cols)
    rows = [head, "-" * len(head)]
    for name, fig in summary.strategies.items():
        cells = []
        for key, _, fmt in cols:
            v = getattr(fig, key)
            cells.append(f"{fmt.format(v):>15}" if isinstance(v, int | float) else f"{'-':>15}")
        note = "" if fig.state == "complete" else f"  ({fig.state})"
        rows.append(f"{name:<10}" + "".join(cells) + note)
    return "\n".join(rows)
