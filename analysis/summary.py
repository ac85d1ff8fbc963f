"""summary.json from a run folder: the figures scripts rely on, one block per strategy.

Computed only from the files in the folder (worker logs, controller samples, host counters,
pcaps), so `incastlab report` can rebuild it from a saved run. Keys are documented in
docs/DESIGN.md and are part of the interface.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from incastlab.runfolder import read_jsonl, read_steps, write_json


def _load(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def worker_figures(sdir: Path) -> dict[str, Any]:
    """Step timing, loss and throughput from the workers' JSON-lines logs."""
    logs = sorted(sdir.glob("worker-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
    per_step: dict[int, list[dict[str, Any]]] = {}
    workers = 0
    for log in logs:
        rows = read_steps(log)
        if rows:
            workers += 1
        for r in rows:
            per_step.setdefault(int(r["step"]), []).append(r)
    if not per_step:
        return {"workers": len(logs), "steps": 0}
    iter_times = [max(r["t_end"] - r["t_start"] for r in rows) for _, rows in sorted(per_step.items())]
    comm = [r["comm_s"] for rows in per_step.values() for r in rows]
    compute = [r["compute_s"] for rows in per_step.values() for r in rows]
    wait = [r.get("wait_s", 0.0) for rows in per_step.values() for r in rows]
    last = per_step[max(per_step)]
    t0 = min(r["t_start"] for rows in per_step.values() for r in rows)
    t1 = max(r["t_end"] for rows in per_step.values() for r in rows)
    samples = sum(r.get("samples", 0) for rows in per_step.values() for r in rows)
    # busy share of each worker's own time: an async worker that finishes early is not idle after
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for rows in per_step.values():
        for r in rows:
            by_rank.setdefault(int(r["rank"]), []).append(r)
    util = {}
    for rank, rows in sorted(by_rank.items()):
        span = max(r["t_end"] for r in rows) - min(r["t_start"] for r in rows)
        util[str(rank)] = round(sum(r["compute_s"] for r in rows) / span, 4) if span > 0 else 0.0
    return {
        "workers": workers,
        "steps": len(per_step),
        "iter_time_s": round(statistics.median(iter_times), 4),
        "comm_time_s": round(statistics.median(comm), 4),
        "compute_time_s": round(statistics.median(compute), 4),
        "wait_time_s": round(statistics.median(wait), 4),
        "final_loss": round(statistics.fmean(r["loss"] for r in last), 5),
        "first_loss": round(statistics.fmean(r["loss"] for r in per_step[min(per_step)]), 5),
        "wall_time_s": round(t1 - t0, 3),
        "throughput": round(samples / (t1 - t0), 2) if t1 > t0 else 0.0,
        "utilisation": round(statistics.fmean(util.values()), 4) if util else 0.0,
        "utilisation_by_worker": util,
        "bytes_sent": sum(r.get("bytes_sent", 0) for rows in per_step.values() for r in rows),
    }


def _counter_deltas(samples: list[dict[str, Any]], kind: str, key: str, t0: float) -> dict[str, float]:
    """Per port: counter at the last sample minus the counter at the last sample before t0."""
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for s in sorted((s for s in samples if s.get("kind") == kind), key=lambda s: s["t"]):
        name = s["name"]
        if s["t"] <= t0 or name not in first:
            first[name] = s[key]
        last[name] = s[key]
    return {n: max(0.0, last[n] - first[n]) for n in last}


def network_figures(sdir: Path, plan: dict[str, Any], t0: float) -> dict[str, Any]:
    """Drops and bytes per link from the controller samples; kernel retransmissions per host."""
    samples = read_jsonl(sdir / "timeseries.jsonl")
    ps_port = plan["ps_port"]["name"]
    drops = _counter_deltas(samples, "queue", "drops", t0)
    tx = _counter_deltas(samples, "port", "tx_bytes", t0)
    rx = _counter_deltas(samples, "port", "rx_bytes", t0)
    host_port = {f"{ln['a']}-eth{ln['a_port']}": ln["b"] for ln in plan["links"] if ln["kind"] == "host"}
    by_link = dict(tx)
    for port, host in host_port.items():  # host -> leaf direction, seen as the leaf port's rx
        if port in rx:
            by_link[f"{host}-eth0"] = rx[port]
    total = sum(by_link.values())
    hosts = _load(sdir / "hosts.json", {}) or {}
    return {
        "queue_drops_total": int(sum(drops.values())),
        "ps_port": ps_port,
        "ps_port_drops": int(drops.get(ps_port, 0)),
        "max_port_drops": int(max(drops.values(), default=0)),
        "max_drop_port": max(drops, key=lambda k: drops[k]) if drops and max(drops.values()) > 0 else None,
        "drops_by_port": {k: int(v) for k, v in sorted(drops.items()) if v},
        "tcp_retransmits_kernel": int(sum(h.get("tcp_retransmits", 0) for h in hosts.values())),
        "bytes_by_link": {k: int(v) for k, v in sorted(by_link.items())},
        "max_link_share": round(max(by_link.values()) / total, 4) if total else 0.0,
        "busiest_link": max(by_link, key=lambda k: by_link[k]) if total else None,
    }


def _select(p: Any, mask: np.ndarray) -> Any:
    """The packets of a capture where mask is true (same Packets type)."""
    arrays = {f: getattr(p, f)[mask] for f in ("frame", "ts_ns", "src", "dst", "sport", "dport", "seq",
                                               "ack", "flags", "win", "plen", "caplen", "wirelen")}
    return replace(p, **arrays)


def pcap_figures(sdir: Path, plan: dict[str, Any], bin_s: float = 0.1) -> dict[str, Any]:
    """Retransmissions, dup ACKs and fabric drops from the captures of one strategy."""
    from analysis.errors import AnalysisError
    from analysis.fabric_loss import fabric_drops
    from analysis.pcapfile import read_pcap, str_to_ip
    from analysis.tcp import analyze, goodput_timeline

    cap = _load(sdir / "capture.json", {}) or {}
    points = {pt["name"]: pt for pt in cap.get("points", [])}
    ip_of = {h["name"]: str_to_ip(h["ip"]) for h in plan["hosts"]}
    out: dict[str, Any] = {"tcp_retransmits_pcap": 0, "tcp_fast_retransmits": 0, "tcp_timeout_retransmits": 0,
                           "dup_acks": 0, "out_of_order": 0, "zero_window": 0, "fabric_drops_pcap": 0,
                           "drops_on_path_to_ps_pcap": 0,
                           "capture_complete": bool(cap.get("complete", False)),
                           "captures": len(points)}
    if not any(name != "ps-port" for name in points):
        # without host captures there is nothing to count retransmissions on: say so, not 0
        for key in ("tcp_retransmits_pcap", "tcp_fast_retransmits", "tcp_timeout_retransmits", "dup_acks",
                    "out_of_order", "zero_window", "fabric_drops_pcap", "drops_on_path_to_ps_pcap"):
            out[key] = None
        out["capture_complete"] = bool(points) and out["capture_complete"]
        return out
    hosts: dict[str, Any] = {}
    rtx_times: list[np.ndarray] = []
    for name, pt in points.items():
        if name == "ps-port":
            continue
        try:
            pk = read_pcap(str(sdir / pt["file"]), allow_truncated=True, require_tcp=False)
        except AnalysisError:
            continue
        hosts[name] = pk
        mine = pk.src == ip_of.get(name, -1)
        if not mine.any():
            continue
        an = analyze(pk)  # both directions: the dup ACKs that explain a fast retransmit come back in
        c = an.counts(mine)
        out["tcp_retransmits_pcap"] += c["retransmits"]
        out["tcp_fast_retransmits"] += c["fast_retransmits"]
        out["tcp_timeout_retransmits"] += c["timeout_retransmits"]
        out["dup_acks"] += c["dup_acks"]
        out["out_of_order"] += c["out_of_order"]
        out["zero_window"] += c["zero_window"]
        rtx_times.append(an.packets.ts_ns[an.retransmission_mask() & mine])
    # fabric drops: a segment a host sent that the receiving host's capture never saw
    for rname, rpk in hosts.items():
        for sname, spk in hosts.items():
            if sname == rname:
                continue
            sel_s = (spk.src == ip_of[sname]) & (spk.dst == ip_of[rname])
            sel_r = (rpk.src == ip_of[sname]) & (rpk.dst == ip_of[rname])
            if sel_s.any() and sel_r.any():
                out["fabric_drops_pcap"] += int(fabric_drops(_select(spk, sel_s), _select(rpk, sel_r))
                                                ["fabric_drops_pcap"])
    # segments lost on the way but counted in no switch queue: the emulator's own losses (CPU)
    ps_host = plan["ps_host"]
    if "ps-port" in points:
        try:
            port_file = str(sdir / points["ps-port"]["file"])
            port_pk = read_pcap(port_file, allow_truncated=True, require_tcp=False)
            to_ps = port_pk.dst == ip_of[ps_host]
            for sname, spk in hosts.items():
                if sname == ps_host:
                    continue
                sel_s = (spk.src == ip_of[sname]) & (spk.dst == ip_of[ps_host])
                sel_r = to_ps & (port_pk.src == ip_of[sname])
                if sel_s.any() and sel_r.any():
                    lost = fabric_drops(_select(spk, sel_s), _select(port_pk, sel_r))
                    out["drops_on_path_to_ps_pcap"] += int(lost["fabric_drops_pcap"])
            an_port = analyze(_select(port_pk, to_ps)) if to_ps.any() else None
            if an_port is not None:
                write_json(sdir / "goodput_timeline.json", goodput_timeline(an_port, bin_s=bin_s))
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
        write_json(sdir / "retransmits_timeline.json", {"bin_s": bin_s, "t0": t0 / 1e9, "counts": counts})
    return out


def ps_figures(sdir: Path) -> dict[str, Any]:
    """Staleness and discarded updates from the parameter server's log (PS family)."""
    rows = read_jsonl(sdir / "ps.jsonl")
    updates = [r for r in rows if r.get("event") == "update"]
    if not updates:
        return {}
    applied = [r for r in updates if r.get("applied")]
    stale = [int(r.get("staleness", 0)) for r in applied]
    hist: dict[str, int] = {}
    for s in stale:
        hist[str(s)] = hist.get(str(s), 0) + 1
    steps = [r for r in rows if r.get("event") == "step"]
    gaps = [int(r["gap"]) for r in rows if r.get("event") == "release" and "gap" in r]
    return {
        "ssp_max_gap": max(gaps) if gaps else None,
        "updates_applied": len(applied),
        "updates_discarded": len(updates) - len(applied),
        "staleness_max": max(stale, default=0),
        "staleness_mean": round(statistics.fmean(stale), 3) if stale else 0.0,
        "staleness_histogram": hist,
        "discarded_per_step": [len(r.get("discarded", [])) for r in steps],
    }


def summarize(run_dir: Path) -> dict[str, Any]:
    """Compute and write summary.json for a run folder; returns it."""
    config = _load(run_dir / "config.json", {}) or {}
    topology = _load(run_dir / "topology.json") or _load(run_dir / "plan.json")
    if topology is None:
        from topologies.spec import FabricSpec, build_plan

        topology = build_plan(FabricSpec.from_dict(config["fabric"]))
    strategies: dict[str, Any] = {}
    all_complete = True
    capture_complete = True
    counts = {"packets_captured": 0, "packets_dropped_kernel": 0, "incomplete_points": []}
    for name in config.get("strategies", []):
        sdir = run_dir / name
        if not sdir.is_dir():
            all_complete = False
            continue
        status = _load(sdir / "status.json", {}) or {}
        fig: dict[str, Any] = {"state": status.get("state", "incomplete"), "error": status.get("error")}
        fig.update(worker_figures(sdir))
        fig["grad_bytes"] = int(round(config.get("grad_mb", 0) * 2**20 / 4)) * 4
        fig.update(network_figures(sdir, topology, float(status.get("t_start", 0.0))))
        try:
            fig.update(pcap_figures(sdir, topology))
        except Exception as exc:  # noqa: BLE001 - a broken capture must not lose the other figures
            fig["pcap_error"] = f"{type(exc).__name__}: {exc}"
            fig["capture_complete"] = False
        fig.update(ps_figures(sdir))
        for pt in (_load(sdir / "capture.json", {}) or {}).get("points", []):
            counts["packets_captured"] += int(pt.get("packets_captured") or 0)
            counts["packets_dropped_kernel"] += int(pt.get("packets_dropped_kernel") or 0)
            if not pt.get("complete"):
                counts["incomplete_points"].append(f"{name}/{pt.get('name')}")
        capture_complete &= bool(fig.get("capture_complete")) or config.get("capture") == "none"
        all_complete &= fig["state"] == "complete"
        strategies[name] = fig
    summary = {"config": config, "strategies": strategies,
               "capture": {"complete": capture_complete and config.get("capture") != "none",
                           "enabled": config.get("capture") != "none", **counts},
               "complete": all_complete}
    write_json(run_dir / "summary.json", summary)
    return summary


def comparison_table(summary: dict[str, Any]) -> str:
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
    for name, fig in summary["strategies"].items():
        cells = []
        for key, _, fmt in cols:
            v = fig.get(key)
            cells.append(f"{fmt.format(v):>15}" if isinstance(v, int | float) else f"{'-':>15}")
        note = "" if fig.get("state") == "complete" else f"  ({fig.get('state')})"
        rows.append(f"{name:<10}" + "".join(cells) + note)
    return "\n".join(rows)
