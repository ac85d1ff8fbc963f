"""Build the comparison report (report.html, report.md, figures/*.png) of a run folder.

Every number shown is computed from the run folder (summary.json first, the raw logs and
samples where the summary lacks a figure), and the returned dict carries the plotted data so
tests can check the figures against the files. An incomplete run still gets a report, with a
visible warning, because a run that died is exactly the one somebody wants to look at.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import math
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis.errors import AnalysisError
from analysis.runread import STRAGGLER_STRATEGIES, Run, RunFolderError, StrategyRun, load_run

# (summary key, column header, formatter kind) of the comparison table, in reading order.
TABLE_COLUMNS: list[tuple[str, str, str]] = [
    ("iter_time_s", "iter time (s)", "s"),
    ("comm_time_s", "comm time (s)", "s"),
    ("final_loss", "final loss", "loss"),
    ("queue_drops_total", "queue drops", "int"),
    ("ps_port_drops", "PS-port drops", "int"),
    ("max_port_drops", "max port drops", "int"),
    ("tcp_retransmits_kernel", "retx (kernel)", "int"),
    ("tcp_retransmits_pcap", "retx (pcap)", "int"),
    ("tcp_fast_retransmits", "fast retx", "int"),
    ("tcp_timeout_retransmits", "timeout retx", "int"),
    ("dup_acks", "dup ACKs", "int"),
    ("fabric_drops_pcap", "fabric drops (pcap)", "int"),
    ("max_link_share", "max link share", "pct"),
    ("throughput", "throughput (samples/s)", "f2"),
]
BUFFER_KEYS = ("buffer_packets", "queue_packets", "max_queue_size", "queue_len", "buffer")
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]
DPI = 90
LOSS_TOL = 1e-4  # time to target: a loss within this (relative) of the target has reached it


# ----------------------------------------------------------------------------- data helpers


def _num(value: Any) -> bool:
    """True for a real number (bools are not figures)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def natural_key(name: str) -> list[Any]:
    """Sort lf2-eth10 after lf2-eth9."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def iteration_times(strat: StrategyRun) -> tuple[list[int], list[float]]:
    """Per step, the slowest worker's t_end - t_start: the time the step cost the job."""
    by_step: dict[int, float] = {}
    for recs in strat.workers.values():
        for r in recs:
            if _num(r.get("t_start")) and _num(r.get("t_end")) and isinstance(r.get("step"), int):
                d = float(r["t_end"]) - float(r["t_start"])
                by_step[r["step"]] = max(by_step.get(r["step"], d), d)
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def step_losses(strat: StrategyRun, t0: float) -> tuple[list[int], list[float], list[float]]:
    """Per step: mean loss over workers and the wall-clock (s after t0) when the last worker ended it."""
    loss: dict[int, list[float]] = {}
    t_end: dict[int, float] = {}
    for recs in strat.workers.values():
        for r in recs:
            if _num(r.get("loss")) and _num(r.get("t_end")) and isinstance(r.get("step"), int):
                loss.setdefault(r["step"], []).append(float(r["loss"]))
                t_end[r["step"]] = max(t_end.get(r["step"], -math.inf), float(r["t_end"]) - t0)
    steps = sorted(loss)
    return steps, [statistics.fmean(loss[s]) for s in steps], [t_end[s] for s in steps]


def queue_samples(strat: StrategyRun) -> dict[str, list[dict[str, Any]]]:
    """Controller queue samples grouped by port name, in time order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for s in strat.timeseries:
        if s.get("kind") == "queue" and s.get("name") and _num(s.get("t")):
            out.setdefault(str(s["name"]), []).append(s)
    return out


def port_samples(strat: StrategyRun) -> dict[str, list[dict[str, Any]]]:
    """Controller port samples grouped by port name, in time order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for s in strat.timeseries:
        if s.get("kind") == "port" and s.get("name") and _num(s.get("t")):
            out.setdefault(str(s["name"]), []).append(s)
    return out


def counter_delta(samples: list[dict[str, Any]], key: str) -> float | None:
    """Last minus first value of a cumulative counter over a strategy's samples."""
    vals = [float(s[key]) for s in samples if _num(s.get(key))]
    return vals[-1] - vals[0] if vals else None


def bytes_by_link(run: Run, strat: StrategyRun) -> tuple[dict[str, float], str]:
    """Bytes sent per switch port: summary's bytes_by_link, else the port samples' tx_bytes deltas."""
    summ = run.strategy_summary(strat.name).get("bytes_by_link")
    if isinstance(summ, dict) and summ:
        return {str(k): float(v) for k, v in summ.items() if _num(v)}, "summary.json bytes_by_link"
    out: dict[str, float] = {}
    for name, samples in port_samples(strat).items():
        d = counter_delta(samples, "tx_bytes")
        if d is not None:
            out[name] = d
    return out, "timeseries.jsonl tx_bytes deltas"


def host_retransmits(hosts: dict[str, Any] | None) -> float | None:
    """Sum of hosts.json tcp_retransmits, flat ({h: {..}}) or before/after ({h: {before, after}})."""
    if not hosts:
        return None
    total, seen = 0.0, False
    for entry in hosts.values():
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("after"), dict):
            a = entry["after"].get("tcp_retransmits")
            b = (entry.get("before") or {}).get("tcp_retransmits", 0)
            if _num(a) and _num(b):
                total, seen = total + a - b, True
        elif _num(entry.get("tcp_retransmits")):
            total, seen = total + entry["tcp_retransmits"], True
    return total if seen else None


def derived_figures(run: Run, strat: StrategyRun, ps_port: str | None) -> dict[str, float]:
    """Table figures computed from the raw files, used where summary.json lacks them."""
    out: dict[str, float] = {}
    _, iters = iteration_times(strat)
    if iters:
        out["iter_time_s"] = statistics.median(iters)
    comm: dict[int, float] = {}
    for recs in strat.workers.values():
        for r in recs:
            if _num(r.get("comm_s")) and isinstance(r.get("step"), int):
                comm[r["step"]] = max(comm.get(r["step"], 0.0), float(r["comm_s"]))
    if comm:
        out["comm_time_s"] = statistics.median(comm.values())
    last = [recs[-1]["loss"] for recs in strat.workers.values() if recs and _num(recs[-1].get("loss"))]
    if last:
        out["final_loss"] = statistics.fmean(last)
    qs = queue_samples(strat)
    drops = {n: d for n, s in qs.items() if (d := counter_delta(s, "drops")) is not None}
    if drops:
        out["queue_drops_total"] = sum(drops.values())
        out["max_port_drops"] = max(drops.values())
    qd = counter_delta(strat.queue_depth, "drops")
    if qd is not None:
        out["ps_port_drops"] = qd
    elif ps_port in drops:
        out["ps_port_drops"] = drops[ps_port]
    kr = host_retransmits(strat.hosts)
    if kr is not None:
        out["tcp_retransmits_kernel"] = kr
    if strat.retransmits_timeline:
        out["tcp_retransmits_pcap"] = float(sum(strat.retransmits_timeline["counts"]))
    links, _ = bytes_by_link(run, strat)
    if links and sum(links.values()) > 0:
        out["max_link_share"] = max(links.values()) / sum(links.values())
    recs = [r for rs in strat.workers.values() for r in rs]
    if recs:
        wall = max(r.get("t_end", 0) for r in recs) - min(r.get("t_start", 0) for r in recs)
        samples = sum(r.get("samples", 0) for r in recs if _num(r.get("samples")))
        if wall > 0 and samples:
            out["throughput"] = samples / wall
    return out


def buffer_limit(config: dict[str, Any]) -> float | None:
    """The configured queue buffer in packets (top level or one level down, e.g. config.fabric)."""
    for key in BUFFER_KEYS:
        if _num(config.get(key)):
            return float(config[key])
    for sub in config.values():
        if isinstance(sub, dict):
            for key in BUFFER_KEYS:
                if _num(sub.get(key)):
                    return float(sub[key])
    return None


def binned_sum(
    series: dict[str, list[tuple[float, float]]], dt: float, t0: float
) -> tuple[list[float], list[float]]:
    """Sum over ports of their per-bin mean, bins centred on t0 + k*dt (one poll's samples share a bin)."""
    bins: dict[int, dict[str, list[float]]] = {}
    for name, pts in series.items():
        for t, v in pts:
            bins.setdefault(round((t - t0) / dt), {}).setdefault(name, []).append(v)
    ks = sorted(bins)
    return [t0 + k * dt for k in ks], [sum(statistics.fmean(v) for v in bins[k].values()) for k in ks]


def median_interval(ts: list[float]) -> float:
    """Median spacing of distinct sample times (1 s if there are too few)."""
    u = sorted(set(ts))
    gaps = [b - a for a, b in zip(u, u[1:], strict=False) if b - a > 1e-9]
    return statistics.median(gaps) if gaps else 1.0


HOST_CAPTURE_KEYS = ("tcp_retransmits_pcap", "tcp_fast_retransmits", "tcp_timeout_retransmits", "dup_acks",
                     "fabric_drops_pcap")
CONTROLLER_EVENTS = ("port_down", "port_up", "reroute", "switch_connected", "switch_disconnected")
EVENT_CLUSTER_S = 0.5  # controller events of one kind closer than this become one marker


def _fault_label(f: dict[str, Any]) -> str:
    """Short label of one faults.jsonl row, e.g. "link-down lf2-eth1 down"."""
    bits = [str(f.get("kind") or f.get("event") or "fault")]
    if f.get("target"):
        bits.append(str(f["target"]))
    if f.get("state"):
        bits.append(str(f["state"]))
    elif f.get("event") and f.get("event") != "fired":
        bits.append(str(f["event"]))
    return " ".join(bits)


def _event_what(e: dict[str, Any]) -> str:
    """What one controller event row names: a port, a switch or a link."""
    if e.get("event") == "reroute":
        return f"{e.get('link', '?')} {e.get('state', '')}".strip()
    if e.get("port") is not None and e.get("switch"):
        return f"{e['switch']}-eth{e['port']}"
    return str(e.get("switch") or "")


def strategy_window(strat: StrategyRun) -> tuple[float | None, float | None]:
    """The strategy's [start, end]: status.json's times, else the first/last worker step."""
    recs = [r for rs in strat.workers.values() for r in rs]
    a = strat.t_start if strat.t_start is not None else min(
        (float(r["t_start"]) for r in recs if _num(r.get("t_start"))), default=None)
    b = strat.t_end if strat.t_end is not None else max(
        (float(r["t_end"]) for r in recs if _num(r.get("t_end"))), default=None)
    return a, b


def fault_marks(strat: StrategyRun, t0: float) -> list[dict[str, Any]]:
    """Faults (faults.jsonl) and controller events (timeseries.jsonl) inside the strategy, times - t0.

    Controller events of one kind within EVENT_CLUSTER_S of each other are one mark (OVS reports
    a link going down on both of its ends)."""
    marks: list[dict[str, Any]] = []
    for f in strat.faults:
        marks.append({"t": float(f["t"]) - t0, "abs_t": float(f["t"]), "source": "faults.jsonl",
                      "kind": str(f.get("kind") or ""), "event": str(f.get("event") or ""),
                      "label": _fault_label(f), "count": 1})
    ws, we = strategy_window(strat)
    evs = [e for e in strat.timeseries if e.get("kind") == "event" and _num(e.get("t"))
           and e.get("event") in CONTROLLER_EVENTS
           and (ws is None or e["t"] >= ws) and (we is None or e["t"] <= we)]
    last: dict[str, dict[str, Any]] = {}
    for e in sorted(evs, key=lambda e: e["t"]):
        name, what = str(e["event"]), _event_what(e)
        m = last.get(name)
        if m is not None and float(e["t"]) - m["last_t"] <= EVENT_CLUSTER_S:
            m["count"] += 1
            m["last_t"] = float(e["t"])
            if what and what not in m["what"]:
                m["what"].append(what)
            continue
        m = {"t": float(e["t"]) - t0, "abs_t": float(e["t"]), "last_t": float(e["t"]), "source": "controller",
             "kind": name, "event": name, "what": [what] if what else [], "count": 1}
        last[name] = m
        marks.append(m)
    for m in marks:
        if m["source"] == "controller":
            m["label"] = m["kind"] + (" " + ", ".join(m.pop("what")) if m.get("what") else "")
            m.pop("what", None)
            m.pop("last_t", None)
    return sorted(marks, key=lambda m: m["t"])


def stats_gaps(strat: StrategyRun, interval: float, t0: float) -> list[dict[str, float]]:
    """Spans inside the strategy without controller port/queue samples for more than 3 poll intervals."""
    ts = sorted({float(s["t"]) for s in strat.timeseries
                 if s.get("kind") in ("port", "queue") and _num(s.get("t"))})
    ws, we = strategy_window(strat)
    if not ts or ws is None or we is None or we <= ws:
        return []
    inside = [t for t in ts if ws < t < we]
    before = [t for t in ts if t <= ws]
    after = [t for t in ts if t >= we]
    seq = [before[-1] if before else ws] + inside + [after[0] if after else we]
    out = []
    for a, b in zip(seq, seq[1:], strict=False):
        if b - a > 3 * interval:
            a, b = max(a, ws), min(b, we)  # only the part while the strategy ran
            if b - a > 3 * interval:
                out.append({"t0": a - t0, "t1": b - t0, "seconds": b - a})
    return out


def step_position(strat: StrategyRun, t_abs: float) -> float | None:
    """Fractional step index at wall-clock t_abs (step k starts at its first worker's t_start)."""
    starts: dict[int, float] = {}
    end = -math.inf
    for recs in strat.workers.values():
        for r in recs:
            if _num(r.get("t_start")) and isinstance(r.get("step"), int):
                starts[r["step"]] = min(starts.get(r["step"], math.inf), float(r["t_start"]))
            if _num(r.get("t_end")):
                end = max(end, float(r["t_end"]))
    ks = sorted(starts)
    if not ks or t_abs < starts[ks[0]] or t_abs > end:
        return None
    pts = [(starts[k], float(k)) for k in ks] + [(end, ks[-1] + 1.0)]
    for (ta, ka), (tb, kb) in zip(pts, pts[1:], strict=False):
        if ta <= t_abs <= tb:
            return ka + (kb - ka) * ((t_abs - ta) / (tb - ta) if tb > ta else 0.0)
    return None


def straggler_ranks(config: dict[str, Any]) -> dict[int, str]:
    """Ranks of the configured stragglers (config stragglers[].host looked up in worker_hosts)."""
    hosts = config.get("worker_hosts") or []
    out: dict[int, str] = {}
    for st in config.get("stragglers") or []:
        host = st.get("host") if isinstance(st, dict) else st
        if isinstance(host, str) and host in hosts:
            out[hosts.index(host)] = host
        elif isinstance(st, dict) and isinstance(st.get("rank"), int):
            out[st["rank"]] = str(host or f"rank {st['rank']}")
    return out


def _count_word(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


# ----------------------------------------------------------------------------- figures


def _canvas(width: float, height: float, rows: int = 1, cols: int = 1, **kw: Any) -> tuple[Figure, Any]:
    """A Figure drawn with Agg (no pyplot state: safe in tests and threads) and its axes."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, **kw)
    return fig, axes


def _save(fig: Figure, path: Path) -> bytes:
    """Write the PNG and return its bytes (for the inlined HTML copy)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    data = buf.getvalue()
    path.write_bytes(data)
    return data


def _note(ax: Any, text: str) -> None:
    """Say on the axes why a curve is missing, rather than leaving it silently empty."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=9, color="#666")


class ReportBuilder:
    """Computes figure data from a loaded Run, draws the PNGs and writes report.html / report.md."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.out = run.path
        self.fig_dir = run.path / "figures"
        self.ps_port = run.ps_port
        self.present = [s for s in run.strategies.values() if s.present]
        self.colors = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(run.strategies)}
        self.t0 = {s.name: s.t0 or 0.0 for s in self.present}
        self.figures: dict[str, dict[str, Any]] = {}
        self.pngs: dict[str, bytes] = {}
        self.captions: dict[str, str] = {}
        self.sections: list[tuple[str, list[str]]] = []
        self.section_text: dict[str, list[str]] = {}
        cfg_iv = run.config.get("interval")
        self.marks: dict[str, list[dict[str, Any]]] = {}
        self.gaps: dict[str, list[dict[str, float]]] = {}
        self.interval: dict[str, float] = {}
        for s in self.present:
            ts = [float(x["t"]) for x in s.timeseries
                  if x.get("kind") in ("port", "queue") and _num(x.get("t"))]
            self.interval[s.name] = float(cfg_iv) if _num(cfg_iv) and cfg_iv > 0 else median_interval(ts)
            self.marks[s.name] = fault_marks(s, self.t0[s.name])
            self.gaps[s.name] = stats_gaps(s, self.interval[s.name], self.t0[s.name])

    # --------------------------------------------------------------- table and text

    def table(self) -> dict[str, Any]:
        """Per strategy, summary.json's figures, filled from the raw files where missing."""
        rows: dict[str, dict[str, Any]] = {}
        derived: dict[str, list[str]] = {}
        unknown: dict[str, list[str]] = {}
        for name, strat in self.run.strategies.items():
            summ = self.run.strategy_summary(name)
            calc = derived_figures(self.run, strat, self.ps_port) if strat.present else {}
            row: dict[str, Any] = {}
            derived[name] = []
            no_host_cap = self.no_host_captures(name)
            for key, _, _ in TABLE_COLUMNS:
                if key in HOST_CAPTURE_KEYS and no_host_cap:
                    row[key] = None  # nothing was captured on the hosts: a 0 here is no measurement
                    unknown.setdefault(name, []).append(key)
                elif _num(summ.get(key)):
                    row[key] = summ[key]
                elif key in summ:  # summary.json says null: unknown, not to be derived as 0
                    row[key] = None
                    unknown.setdefault(name, []).append(key)
                elif key in calc:
                    row[key] = calc[key]
                    derived[name].append(key)
                else:
                    row[key] = None
            rows[name] = row
        return {"columns": [k for k, _, _ in TABLE_COLUMNS], "rows": rows, "derived": derived,
                "unknown": unknown}

    def no_host_captures(self, name: str) -> bool:
        """True when no host was captured (capture "none" or "ps-port", or summary captures 0)."""
        cfg_cap = self.run.config.get("capture")
        if cfg_cap in ("none", "ps-port", False):
            return True
        summ = self.run.strategy_summary(name)
        if _num(summ.get("captures")) and summ["captures"] == 0:
            return True
        points = (self.run.strategies[name].capture or {}).get("points")
        if isinstance(points, list) and points and "captures" in summ:
            return not any(isinstance(p, dict) and re.fullmatch(r"h\d+", str(p.get("name"))) for p in points)
        return False

    def table_notes(self, table: dict[str, Any]) -> list[str]:
        """Why cells are "–": no host captures, or summary.json null."""
        heads = {k: h for k, h, _ in TABLE_COLUMNS}
        nocap = [n for n in table["rows"] if self.run.strategies[n].present and self.no_host_captures(n)]
        out = []
        if nocap:
            cols = ", ".join(heads[k] for k in HOST_CAPTURE_KEYS)
            out.append(f"– in {cols}: no host captures ({', '.join(nocap)}; capture="
                       f"{self.run.config.get('capture', '?')}); these need captures on the hosts.")
        other = {n: [heads[k] for k in ks if k not in HOST_CAPTURE_KEYS or n not in nocap]
                 for n, ks in table.get("unknown", {}).items()}
        other = {n: v for n, v in other.items() if v}
        if other:
            out.append("– where summary.json holds null: " + "; ".join(f"{n}: {', '.join(v)}"
                                                                      for n, v in other.items()) + ".")
        return out

    def warnings(self) -> list[str]:
        """Visible warnings: incomplete run, incomplete capture, damaged files."""
        out: list[str] = []
        run = self.run
        if not run.complete:
            bits = []
            if run.summary is None:
                bits.append("no summary.json")
            elif run.summary.get("complete") is False:
                bits.append("summary.json says complete: false")
            for s in run.strategies.values():
                if not s.complete:
                    bits.append(f"{s.name}: {s.state}" + (f" ({s.error})" if s.error else ""))
            out.append("Run incomplete: " + "; ".join(bits) + ". Figures show what was recorded.")
        if run.capture_complete is False:
            out.append("Packet capture incomplete (summary capture.complete is false): pcap-derived "
                       "counts (retx pcap, fast/timeout retx, dup ACKs, fabric drops) undercount.")
        for s in self.present:
            for p in (s.capture or {}).get("points") or []:
                if isinstance(p, dict) and p.get("complete") is False:
                    out.append(f"{s.name}: capture point {p.get('name')} ({p.get('iface')}) incomplete, "
                               f"{p.get('packets_dropped_kernel', '?')} packets dropped by the kernel.")
        problems = run.problems + [p for s in run.strategies.values() for p in s.problems]
        if problems:
            out.append("Damaged or missing files: " + "; ".join(problems) + ".")
        return out

    def findings(self, table: dict[str, Any]) -> list[str]:
        """Sentences saying which strategy lost what where, computed from the table and figures."""
        rows = table["rows"]
        port = self.ps_port or "the PS port"
        names = [n for n in rows if self.run.strategies[n].present]
        if not names:
            return ["No strategy folder holds data."]
        links = self.figures.get("link_bytes", {})

        def busiest(n: str) -> tuple[str | None, float | None]:
            col = links.get("bytes", {}).get(n)
            if not col or not any(col):
                return None, rows[n].get("max_link_share")
            i = max(range(len(col)), key=lambda j: col[j])
            share = rows[n].get("max_link_share")
            return links["links"][i], share if _num(share) else col[i] / sum(col)

        def ival(n: str, key: str) -> float:
            v = rows[n].get(key)
            return float(v) if _num(v) else 0.0

        ref = max(names, key=lambda n: (ival(n, "ps_port_drops"), ival(n, "queue_drops_total")))
        out: list[str] = []
        for n in [ref] + [x for x in names if x != ref]:
            r = rows[n]
            parts: list[str] = []
            d = r.get("ps_port_drops")
            if n == ref:
                ds = f"{_fmt_int(d)} packets dropped at {port} (the PS port)" if _num(d) else \
                    f"PS-port drops unknown at {port}"
            else:
                ds = f"{_fmt_int(d)} drops at that port" if _num(d) else "PS-port drops unknown"
            total = r.get("queue_drops_total")
            if _num(total) and _num(d) and total > d:
                ds += f" and {_fmt_int(total - d)} elsewhere in the fabric"
            parts.append(ds)
            retx, src = (r.get("tcp_retransmits_pcap"), "") if _num(r.get("tcp_retransmits_pcap")) else \
                (r.get("tcp_retransmits_kernel"), " (kernel count)")
            if _num(retx):
                rs = f"{_fmt_int(retx)} retransmissions{src}"
                if _num(r.get("tcp_timeout_retransmits")) and retx:
                    rs += f" ({_fmt_int(r['tcp_timeout_retransmits'])} after timeouts)"
                parts.append(rs)
            link, share = busiest(n)
            if _num(share):
                ls = f"busiest link{' ' + link if link else ''} carried {share * 100:.0f} % of bytes"
                rlink, rshare = busiest(ref)
                if n != ref and _num(rshare):
                    ls += f" vs {rshare * 100:.0f} % for {ref}"
                parts.append(ls)
            it, rit = r.get("iter_time_s"), rows[ref].get("iter_time_s")
            if _num(it):
                its = f"median iteration {it:.3f} s"
                if n != ref and _num(rit) and it > 0:
                    ratio = rit / it
                    its += f" vs {rit:.3f} s for {ref} ({ratio:.2f}x {'faster' if ratio >= 1 else 'slower'})"
                parts.append(its)
            state = self.run.strategies[n].state
            out.append(f"{n}: " + ", ".join(parts) + ("" if state == "complete" else f" [{state}]") + ".")
        straggle = self.figures.get("time_to_target")
        if straggle:
            tt = ", ".join(f"{n} {v:.2f} s" if v is not None else f"{n} not reached"
                           for n, v in straggle["seconds"].items())
            out.append(f"Time to loss <= {straggle['target']:.4g} ({straggle['target_source']}): {tt}.")
        util = self.figures.get("utilisation")
        if util:
            us = ", ".join(f"{n} {statistics.fmean(v.values()) * 100:.0f} %"
                           for n, v in util["busy_share"].items() if v)
            out.append(f"Mean worker utilisation (compute share of each worker's active time): {us}.")
        out += self.section_text.get("Stragglers and convergence", [])
        out += self.fault_findings()
        return out

    def fault_findings(self) -> list[str]:
        """One sentence per strategy with faults, events or missing controller statistics."""
        out = []
        for s in self.present:
            faults = [m for m in self.marks.get(s.name, []) if m["source"] == "faults.jsonl"]
            events = [m for m in self.marks.get(s.name, []) if m["source"] == "controller"]
            gaps = self.gaps.get(s.name, [])
            if not (faults or events or gaps):
                continue
            parts = []
            if faults:
                parts.append(f"{_count_word(len(faults), 'fault action')} ("
                             + ", ".join(f"{m['label']} at {m['t']:.2f} s" for m in faults) + ")")
            if events:
                parts.append(f"{_count_word(sum(m['count'] for m in events), 'controller event')} ("
                             + ", ".join(f"{m['kind']} at {m['t']:.2f} s" for m in events) + ")")
            for g in gaps:
                parts.append(f"controller statistics missing for {g['seconds']:.1f} s "
                             f"({g['t0']:.2f}-{g['t1']:.2f} s)")
            out.append(f"{s.name} faults and events: " + "; ".join(parts) + ".")
        return out

    # --------------------------------------------------------------- figures

    def _draw_marks(self, ax: Any, names: list[str], to_x: Callable[[str, dict[str, Any]], float | None]
                    | None = None, gaps: bool = False) -> dict[str, list[float]]:
        """Vertical lines + short labels for the faults/events of `names`; shaded controller gaps.

        to_x maps a mark to the axis's x (default: its time since the strategy start); returns the
        x of every mark drawn, per strategy, so tests can compare them with the files."""
        drawn: dict[str, list[float]] = {}
        tr = ax.get_xaxis_transform()
        several = sum(1 for n in names if self.marks.get(n) or (gaps and self.gaps.get(n))) > 1
        lo, hi = ax.get_xlim()
        near = 0.015 * (hi - lo)  # labels closer than this would print over each other
        labelled: list[float] = []
        for n in names:
            drawn[n] = []
            pre = f"{n}: " if several else ""
            # faults first, so their labels win over the controller's echo of the same change
            for m in sorted(self.marks.get(n, []), key=lambda m: m["source"] != "faults.jsonl"):
                x = to_x(n, m) if to_x else m["t"]
                if x is None:
                    continue
                drawn[n].append(x)
                fault = m["source"] == "faults.jsonl"
                ax.axvline(x, color="#c00000" if fault else "#666", ls="--" if fault else ":",
                           lw=1.1 if fault else 0.8, zorder=1)
                if any(abs(x - y) < near for y in labelled):
                    continue
                labelled.append(x)
                short = m["label"] if fault else m["kind"] + (f" x{m['count']}" if m["count"] > 1 else "")
                ax.text(x, 0.98, " " + pre + short, transform=tr, rotation=90, ha="right", va="top",
                        fontsize=6.5, color="#c00000" if fault else "#555", clip_on=True)
            drawn[n].sort()
            if gaps:
                for g in self.gaps.get(n, []):
                    ax.axvspan(g["t0"], g["t1"], color="#999", alpha=0.25, lw=0, zorder=0)
                    ax.text((g["t0"] + g["t1"]) / 2, 0.5, f"{pre}no statistics\n{g['seconds']:.1f} s",
                            transform=tr, ha="center", va="center", fontsize=7, color="#444")
        return drawn

    def _add(self, key: str, section: str, caption: str, fig: Figure, data: dict[str, Any]) -> None:
        """Save one figure and remember its data and caption."""
        self.fig_dir.mkdir(parents=True, exist_ok=True)
        self.pngs[key] = _save(fig, self.fig_dir / f"{key}.png")
        self.figures[key] = data
        self.captions[key] = caption
        for title, keys in self.sections:
            if title == section:
                keys.append(key)
                break
        else:
            self.sections.append((section, [key]))

    def fig_iter_time(self) -> None:
        """Iteration time per step: the slowest worker's step duration."""
        fig, ax = _canvas(7, 3.4)
        ax = ax[0][0]
        data: dict[str, Any] = {}
        for s in self.present:
            steps, secs = iteration_times(s)
            data[s.name] = {"steps": steps, "seconds": secs}
            if steps:
                ax.plot(steps, secs, marker="o", label=s.name, color=self.colors[s.name])

        def at_step(n: str, m: dict[str, Any]) -> float | None:
            pos = step_position(self.run.strategies[n], m["abs_t"])
            return None if pos is None else pos - 0.5  # step k's point covers [k - 0.5, k + 0.5]

        data["fault_steps"] = self._draw_marks(ax, [s.name for s in self.present], at_step)
        ax.set_xlabel("step")
        ax.set_ylabel("iteration time (s)")
        ax.set_title("Iteration time per step (max over workers of t_end - t_start)")
        ax.set_ylim(bottom=0)
        if any(data[s.name]["steps"] for s in self.present):
            ax.legend()
        else:
            _note(ax, "no worker step logs")
        self._add("iter_time", "Iteration time", "Iteration time per step, per strategy; red dashed: "
                  "faults, grey dotted: controller events, placed at the step running at that time.",
                  fig, data)

    def fig_queue(self) -> None:
        """PS-port backlog over time with the buffer limit: shows the incast filling the queue."""
        limit = buffer_limit(self.run.config)
        n = max(1, len(self.present))
        fig, axes = _canvas(7, 1.0 + 1.8 * n, n, 1, sharey=True)
        data: dict[str, Any] = {"buffer_packets": limit, "port": self.ps_port, "strategies": {}}
        for ax, s in zip([a[0] for a in axes], self.present or [None], strict=False):
            if s is None:
                _note(ax, "no strategy data")
                continue
            pts = [(float(q["t"]) - self.t0[s.name], float(q["backlog_packets"]))
                   for q in s.queue_depth if _num(q.get("t")) and _num(q.get("backlog_packets"))]
            t = [p[0] for p in pts]
            v = [p[1] for p in pts]
            data["strategies"][s.name] = {"t": t, "backlog_packets": v, "max": max(v) if v else None}
            if pts:
                ax.plot(t, v, color=self.colors[s.name], lw=0.9, label=f"{s.name} backlog")
            else:
                _note(ax, f"{s.name}: no queue_depth.jsonl samples")
            if limit is not None:
                ax.axhline(limit, color="k", ls="--", lw=0.8, label=f"buffer {limit:g} pkts")
            data.setdefault("marks", {}).update(self._draw_marks(ax, [s.name]))
            ax.set_ylabel("packets")
            ax.set_title(f"{s.name}: {self.ps_port or 'PS port'} queue occupancy", fontsize=10)
            ax.legend(loc="upper right", fontsize=8)
        axes[-1][0].set_xlabel("time since strategy start (s)")
        self._add("queue_occupancy", "PS-port queue", "PS-port qdisc backlog (packets) per strategy; "
                  "dashed: configured buffer; red: faults; grey dotted: controller events.", fig, data)

    def fig_drops_retx(self) -> None:
        """Drops/s (PS port and whole fabric) and retransmissions/s over time."""
        fig, axes = _canvas(7, 5.2, 2, 1, sharex=True)
        ax_d, ax_r = axes[0][0], axes[1][0]
        data: dict[str, Any] = {"port": self.ps_port, "strategies": {}}
        any_d = any_r = False
        for s in self.present:
            t0 = self.t0[s.name]
            qs = queue_samples(s)
            series = {n: [(float(x["t"]), float(x["drops_per_s"])) for x in pts if _num(x.get("drops_per_s"))]
                      for n, pts in qs.items()}
            series = {n: v for n, v in series.items() if v}
            entry: dict[str, Any] = {"ps_port_t": [], "ps_port_drops_per_s": [], "fabric_t": [],
                                     "fabric_drops_per_s": [], "retx_t": None, "retx_per_s": None}
            if self.ps_port in series:
                entry["ps_port_t"] = [t - t0 for t, _ in series[self.ps_port]]
                entry["ps_port_drops_per_s"] = [v for _, v in series[self.ps_port]]
            if series:
                all_t = [t for v in series.values() for t, _ in v]
                dt = median_interval([t for t, _ in series.get(self.ps_port, [])] or all_t)
                ft, fv = binned_sum(series, dt, min(all_t))
                entry["fabric_t"] = [t - t0 for t in ft]
                entry["fabric_drops_per_s"] = fv
            c = self.colors[s.name]
            if entry["ps_port_t"]:
                ax_d.plot(entry["ps_port_t"], entry["ps_port_drops_per_s"], color=c, lw=1.6,
                          label=f"{s.name} {self.ps_port}")
            if entry["fabric_t"]:
                any_d = True
                ax_d.plot(entry["fabric_t"], entry["fabric_drops_per_s"], color=c, lw=1.0, ls=(0, (4, 3)),
                          alpha=0.8, label=f"{s.name} fabric")
            tl = s.retransmits_timeline
            if tl:
                b = float(tl["bin_s"])
                entry["retx_t"] = [float(tl["t0"]) + i * b - t0 for i in range(len(tl["counts"]))]
                entry["retx_per_s"] = [c_ / b for c_ in tl["counts"]]
                ax_r.step(entry["retx_t"], entry["retx_per_s"], where="post", color=c, label=s.name)
                any_r = True
            data["strategies"][s.name] = entry
        names = [s.name for s in self.present]
        data["marks"] = self._draw_marks(ax_d, names, gaps=True)
        self._draw_marks(ax_r, names, gaps=True)
        data["gaps"] = {n: self.gaps.get(n, []) for n in names}
        ax_d.set_ylabel("drops / s")
        ax_d.set_title("Queue drops per second (solid: PS port, dashed: whole fabric)", fontsize=10)
        ax_r.set_ylabel("retransmissions / s")
        ax_r.set_title("TCP retransmissions per second (pcap)", fontsize=10)
        ax_r.set_xlabel("time since strategy start (s)")
        if any_d:
            ax_d.legend(fontsize=8)
        else:
            _note(ax_d, "no controller queue samples")
        missing = [s.name for s in self.present if not s.retransmits_timeline]
        if any_r:
            ax_r.legend(fontsize=8)
            if missing:
                ax_r.text(0.99, 0.95, "no retransmits_timeline.json: " + ", ".join(missing),
                          transform=ax_r.transAxes, ha="right", va="top", fontsize=8, color="#666")
        else:
            _note(ax_r, "no retransmits_timeline.json in any strategy")
        data["retx_missing"] = missing
        self._add("drops_retransmits", "Drops and retransmissions",
                  "Drops per second from the controller's queue samples; retransmissions per second "
                  "from retransmits_timeline.json; shaded: no controller statistics; red: faults.", fig, data)

    def fig_link_heatmap(self) -> None:
        """Bytes per link per strategy: PS concentrates on one port, the ring spreads."""
        per: dict[str, dict[str, float]] = {}
        source: dict[str, str] = {}
        for s in self.present:
            per[s.name], source[s.name] = bytes_by_link(self.run, s)
        links = sorted({k for v in per.values() for k in v}, key=natural_key)
        names = list(per)
        matrix = [[per[n].get(link, 0.0) for n in names] for link in links]
        totals = {n: sum(per[n].values()) for n in names}
        shares = [[(row[j] / totals[n]) if totals[n] else 0.0 for j, n in enumerate(names)] for row in matrix]
        fig, ax = _canvas(max(4.0, 2.0 + 1.4 * len(names)), max(2.5, 1.2 + 0.32 * len(links)))
        ax = ax[0][0]
        if links and names:
            vmax = max(max(r) for r in shares) or 1.0
            im = ax.imshow(shares, aspect="auto", cmap="viridis", vmin=0.0, vmax=vmax)
            ax.set_xticks(range(len(names)), names)
            ax.set_yticks(range(len(links)), [f"{lk} *" if lk == self.ps_port else lk for lk in links])
            for i, row in enumerate(matrix):
                for j, v in enumerate(row):
                    ax.text(j, i, f"{shares[i][j] * 100:.0f}%\n{v / 1e6:.1f} MB", ha="center", va="center",
                            fontsize=7, color="w" if shares[i][j] < 0.6 * (im.norm.vmax or 1) else "k")
            fig.colorbar(im, ax=ax, label="share of the strategy's bytes")
        else:
            _note(ax, "no per-link byte counts")
        ax.set_title("Bytes per link (* = PS port)", fontsize=10)
        data = {"links": links, "strategies": names,
                "bytes": {n: [row[j] for row in matrix] for j, n in enumerate(names)},
                "share": {n: [row[j] for row in shares] for j, n in enumerate(names)}, "source": source}
        self._add("link_bytes", "Bytes per link", "Share of each strategy's bytes sent on each switch port "
                  "(rows: links; columns: strategies).", fig, data)

    def fig_goodput(self) -> None:
        """Goodput over time: goodput_timeline.json, else the PS port's tx_bps."""
        fig, ax = _canvas(7, 3.4)
        ax = ax[0][0]
        data: dict[str, Any] = {}
        for s in self.present:
            t0 = self.t0[s.name]
            gt = s.goodput_timeline
            if gt:
                b = float(gt["bin_s"])
                t = [float(gt["t0"]) + i * b - t0 for i in range(len(gt["bytes"]))]
                mbps = [x * 8 / b / 1e6 for x in gt["bytes"]]
                src = "goodput_timeline.json"
            else:
                pts = [x for x in port_samples(s).get(self.ps_port or "", []) if _num(x.get("tx_bps"))]
                t = [float(x["t"]) - t0 for x in pts]
                mbps = [float(x["tx_bps"]) / 1e6 for x in pts]
                src = f"tx_bps of {self.ps_port}" if pts else "none"
            data[s.name] = {"t": t, "mbit_s": mbps, "source": src}
            if t:
                ax.plot(t, mbps, color=self.colors[s.name], label=f"{s.name} ({src})",
                        ls="-" if gt else "--")
        names = [s.name for s in self.present]
        ctrl = [n for n in names if data[n]["source"].startswith("tx_bps")]
        marks = self._draw_marks(ax, names)
        self._draw_marks(ax, ctrl, to_x=lambda n, m: None, gaps=True)  # gaps only where curves are samples
        has = any(data[n]["t"] for n in names)
        data["marks"] = marks
        ax.set_xlabel("time since strategy start (s)")
        ax.set_ylabel("Mbit/s")
        ax.set_title("Goodput", fontsize=10)
        if has:
            ax.legend(fontsize=8)
        else:
            _note(ax, "no goodput_timeline.json and no PS-port samples")
        self._add("goodput", "Goodput", "Goodput per strategy (solid: pcap goodput timeline; dashed: "
                  "PS port's tx rate from the controller).", fig, data)

    def is_straggler_run(self) -> bool:
        """Straggler figures matter when async/ssp/backup ran, stragglers were injected or workers waited."""
        if any(s.name in STRAGGLER_STRATEGIES for s in self.present):
            return True
        cfg = self.run.config
        if _num(cfg.get("slow_every")) and cfg["slow_every"] > 0:
            return True
        return any(_num(r.get("wait_s")) and r["wait_s"] > 0
                   for s in self.present for recs in s.workers.values() for r in recs)

    def ssp_backup_text(self) -> list[str]:
        """ssp's largest step gap against the bound s, backup's discarded updates against b."""
        cfg = self.run.config
        out: list[str] = []
        data: dict[str, Any] = {}
        for s in self.present:
            summ = self.run.strategy_summary(s.name)
            if s.name == "ssp":
                gaps = [int(e["gap"]) for e in s.ps_events
                        if e.get("event") == "release" and _num(e.get("gap"))]
                gap, src = (summ["ssp_max_gap"], "summary.json") if _num(summ.get("ssp_max_gap")) else \
                    ((max(gaps), "ps.jsonl release events") if gaps else (None, None))
                bound = cfg.get("staleness")
                data["ssp"] = {"max_gap": gap, "source": src, "bound": bound}
                if gap is None:
                    out.append("ssp: no step gap recorded (no ssp_max_gap in summary.json, no release "
                               "events in ps.jsonl).")
                    continue
                t = (f"ssp: the fastest worker was at most {_count_word(int(gap), 'step')} ahead of the "
                     f"slowest")
                if _num(bound):
                    t += f" (bound s={bound:g})"
                    t += "" if gap <= bound else f"; this EXCEEDS the bound by {gap - bound:g}"
                out.append(t + f" [{src}].")
            if s.name == "backup":
                per = summ.get("discarded_per_step")
                src = "summary.json"
                if not (isinstance(per, list) and per and all(_num(v) for v in per)):
                    steps = [e for e in s.ps_events if e.get("event") == "step"
                             and isinstance(e.get("discarded"), list)]
                    per = [len(e["discarded"]) for e in sorted(steps, key=lambda e: e.get("step", 0))]
                    src = "ps.jsonl step events"
                total = summ.get("updates_discarded")
                if not _num(total):
                    total = sum(1 for e in s.ps_events
                                if e.get("event") == "update" and e.get("applied") is False)
                    total = total or (sum(per) if per else None)
                b = cfg.get("backup")
                data["backup"] = {"discarded_per_step": per, "updates_discarded": total, "b": b,
                                  "source": src}
                bs = f" (b={b:g})" if _num(b) else ""
                if per and min(per) == max(per):
                    t = f"backup discarded exactly {_count_word(int(per[0]), 'update')} per step{bs}"
                elif per:
                    t = (f"backup discarded {min(per)}-{max(per)} updates per step (mean "
                         f"{statistics.fmean(per):.2f}){bs}")
                else:
                    t = f"backup: no per-step discard record{bs}"
                if _num(total):
                    t += f", {_fmt_int(total)} in total" + (f" over {len(per)} steps" if per else "")
                out.append(t + f" [{src}].")
        self.figures["straggler_checks"] = data
        return out

    def fig_stragglers(self, table: dict[str, Any]) -> None:
        """Utilisation per worker, staleness histograms, loss vs step / wall-clock and time to target."""
        section = "Stragglers and convergence"
        cfg = self.run.config
        slow = straggler_ranks(cfg)
        texts: list[str] = []
        # utilisation: summary's busy share of each worker's own active time, else the worker logs
        busy: dict[str, dict[int, float]] = {}
        usrc: dict[str, str] = {}
        for s in self.present:
            ub = self.run.strategy_summary(s.name).get("utilisation_by_worker")
            if isinstance(ub, dict) and ub and all(_num(v) for v in ub.values()):
                busy[s.name] = {int(k): float(v) for k, v in sorted(ub.items(), key=lambda kv: int(kv[0]))}
                usrc[s.name] = "summary.json utilisation_by_worker"
                continue
            busy[s.name] = {}
            usrc[s.name] = "worker logs"
            for rank, recs in sorted(s.workers.items()):
                rs = [r for r in recs if _num(r.get("t_start")) and _num(r.get("t_end"))]
                wall = max((r["t_end"] for r in rs), default=0) - min((r["t_start"] for r in rs), default=0)
                comp = sum(float(r.get("compute_s", 0) or 0) for r in rs)
                if wall > 0:
                    busy[s.name][rank] = comp / wall
        fig, ax = _canvas(8, 3.4)
        ax = ax[0][0]
        width = 0.8 / max(1, len(busy))
        for j, (name, ranks) in enumerate(busy.items()):
            xs = [r - 0.4 + (j + 0.5) * width for r in ranks]
            ax.bar(xs, [v * 100 for v in ranks.values()], width=width, color=self.colors[name], label=name,
                   hatch=["//" if r in slow else "" for r in ranks],
                   edgecolor=["k" if r in slow else self.colors[name] for r in ranks], linewidth=0.6)
        for r, host in slow.items():
            top = max((v.get(r, 0.0) for v in busy.values()), default=0.0) * 100
            ax.annotate(f"straggler {host}", (r, top), xytext=(0, 3), textcoords="offset points",
                        ha="center", va="bottom", fontsize=8)
        all_ranks = sorted({r for v in busy.values() for r in v})
        ax.set_xticks(all_ranks, [f"{r}*" if r in slow else str(r) for r in all_ranks])
        ax.set_xlabel("worker rank (* = straggler, hatched)" if slow else "worker rank")
        ax.set_ylabel("busy (% of own active time)")
        ax.set_title("Worker utilisation: compute share of each worker's own active time", fontsize=10)
        ax.set_ylim(0, 118)
        ax.legend(fontsize=8, ncols=min(5, max(1, len(busy))), loc="upper right")
        self._add("utilisation", section, "Utilisation per worker per strategy (hatched: the configured "
                  "straggler).", fig, {"busy_share": busy, "source": usrc, "stragglers": slow})
        if slow:
            desc = []
            for st in cfg.get("stragglers") or []:
                if isinstance(st, dict):
                    knobs = [f"{k}={st[k]}" for k in ("cpu", "compute_factor", "slow_every", "slow_factor",
                                                      "link_mbit") if st.get(k) is not None]
                    desc.append(f"{st.get('host')}" + (f" ({', '.join(knobs)})" if knobs else ""))
            who = ", ".join(f"rank {r} ({h})" for r, h in slow.items())
            texts.append(f"Straggler: worker {who}; configured as {'; '.join(desc)}.")
            fast_mean: dict[str, float] = {}
            slow_mean: dict[str, float] = {}
            for n, v in busy.items():
                f = [u for r, u in v.items() if r not in slow]
                w = [u for r, u in v.items() if r in slow]
                if f and w:
                    fast_mean[n], slow_mean[n] = statistics.fmean(f), statistics.fmean(w)
            if fast_mean:
                waits = [n for n in fast_mean if fast_mean[n] < 0.5 * slow_mean[n]]
                free = [n for n in fast_mean if n not in waits]
                us = ", ".join(f"{n} {fast_mean[n] * 100:.0f} % (straggler {slow_mean[n] * 100:.0f} %)"
                               for n in fast_mean)
                t = f"Fast workers' mean utilisation: {us}."
                if waits:
                    t += (f" {', '.join(waits)} wait{'s' if len(waits) == 1 else ''} on the straggler: "
                          "the fast workers are busy less than half as much as it is")
                    t += f"; {', '.join(free)} do{'es' if len(free) == 1 else ''} not." if free else "."
                elif free:
                    t += f" No strategy waits on the straggler ({', '.join(free)})."
                texts.append(t)
        # staleness: summary histograms, else ps.jsonl's applied updates
        stale_hist: dict[str, dict[int, int]] = {}
        ssrc: dict[str, str] = {}
        for s in self.present:
            sh = self.run.strategy_summary(s.name).get("staleness_histogram")
            if isinstance(sh, dict) and sh and all(_num(v) for v in sh.values()):
                stale_hist[s.name] = {int(k): int(v) for k, v in sh.items()}
                ssrc[s.name] = "summary.json"
                continue
            vals = [round(float(e["staleness"])) for e in s.ps_events
                    if (e.get("event") == "update" or e.get("type") == "update") and _num(e.get("staleness"))
                    and e.get("applied") is not False]
            if vals:
                stale_hist[s.name] = {k: vals.count(k) for k in sorted(set(vals))}
                ssrc[s.name] = "ps.jsonl"
        if stale_hist:
            fig, ax = _canvas(8, 3.2)
            ax = ax[0][0]
            top = max(max(h) for h in stale_hist.values())
            hist: dict[str, dict[str, Any]] = {}
            width = 0.8 / len(stale_hist)
            for j, (name, h) in enumerate(stale_hist.items()):
                counts = [h.get(k, 0) for k in range(top + 1)]
                hist[name] = {"staleness": list(range(top + 1)), "counts": counts, "source": ssrc[name]}
                ax.bar([k - 0.4 + (j + 0.5) * width for k in range(top + 1)], counts, width=width,
                       color=self.colors[name], label=name)
            step = max(1, math.ceil((top + 1) / 30))
            ax.set_xticks(range(0, top + 1, step))
            ax.set_xlabel("staleness (updates since the worker's model version)")
            ax.set_ylabel("applied updates")
            ax.set_title("Staleness of applied parameter-server updates", fontsize=10)
            ax.legend(fontsize=8)
            self._add("staleness", section, "Histogram of update staleness per strategy (summary.json "
                      "staleness_histogram, else ps.jsonl).", fig, hist)
            for n in ("async",):
                if n in hist:
                    c = hist[n]["counts"]
                    total, nonzero = sum(c), sum(c[1:])
                    mean = sum(k * v for k, v in enumerate(c)) / total if total else 0.0
                    top_n = max((k for k, v in enumerate(c) if v), default=0)
                    u = busy.get(n)
                    us = f"mean utilisation {statistics.fmean(u.values()) * 100:.0f} %, " if u else ""
                    texts.append(f"async: {us}{nonzero} of {total} applied updates were stale "
                                 f"(staleness > 0; mean {mean:.2f}, max {top_n}).")
        texts += self.ssp_backup_text()
        self.section_text[section] = texts
        # loss and time to target
        cfg_target = self.run.config.get("target_loss")
        finals = {n: r["final_loss"] for n, r in table["rows"].items() if _num(r.get("final_loss"))}
        if _num(cfg_target):
            target, tsrc = float(cfg_target), "config target_loss"
        elif finals:
            worst = max(finals, key=lambda n: finals[n])
            target, tsrc = float(finals[worst]), f"final loss of the worst strategy, {worst}"
        else:
            target, tsrc = None, "none"
        fig, axes = _canvas(9, 3.4, 1, 2)
        ax_s, ax_t = axes[0]
        loss: dict[str, Any] = {}
        ttt: dict[str, float | None] = {}
        for s in self.present:
            steps, mean, tend = step_losses(s, self.t0[s.name])
            loss[s.name] = {"steps": steps, "loss": mean, "t": tend}
            ax_s.plot(steps, mean, marker=".", color=self.colors[s.name], label=s.name)
            ax_t.plot(tend, mean, marker=".", color=self.colors[s.name], label=s.name)
            if target is not None:
                tol = LOSS_TOL * max(1.0, abs(target))  # summary losses are rounded to 5 decimals
                hit = next((t for t, v in zip(tend, mean, strict=True) if v <= target + tol), None)
                ttt[s.name] = hit
                if hit is not None:
                    ax_t.axvline(hit, color=self.colors[s.name], ls=":", lw=0.8)
        if target is not None:
            for a in (ax_s, ax_t):
                a.axhline(target, color="k", ls="--", lw=0.8, label=f"target {target:.4g}")
        ax_s.set_xlabel("step")
        ax_t.set_xlabel("wall-clock since strategy start (s)")
        ax_s.set_ylabel("loss (mean over workers)")
        ax_s.set_title("Loss vs step", fontsize=10)
        ax_t.set_title("Loss vs wall-clock (dotted: reaches target)", fontsize=10)
        ax_s.legend(fontsize=8)
        self._add("loss", section, "Loss vs step and vs wall-clock; dashed: target loss.", fig,
                  {"strategies": loss, "target": target})
        if target is not None:
            self.figures["time_to_target"] = {"target": target, "target_source": tsrc, "seconds": ttt}

    # --------------------------------------------------------------- output

    def render_table_html(self, table: dict[str, Any]) -> str:
        """The comparison table as HTML (strategies as rows, figures as columns)."""
        head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in TABLE_COLUMNS)
        body = []
        for n, row in table["rows"].items():
            cells = "".join(
                f"<td>{html.escape(_fmt(row[k], kind))}{'*' if k in table['derived'][n] else ''}</td>"
                for k, _, kind in TABLE_COLUMNS)
            state = self.run.strategies[n].state
            cls = "" if state == "complete" else ' class="bad"'
            body.append(f"<tr><th>{html.escape(n)}</th><td{cls}>{html.escape(state)}</td>{cells}</tr>")
        return (f"<table><thead><tr><th>strategy</th><th>state</th>{head}</tr></thead>"
                f"<tbody>{''.join(body)}</tbody></table>")

    def render_table_md(self, table: dict[str, Any]) -> str:
        """The comparison table as a Markdown pipe table."""
        lines = ["| strategy | state | " + " | ".join(h for _, h, _ in TABLE_COLUMNS) + " |",
                 "|---|---|" + "---:|" * len(TABLE_COLUMNS)]
        for n, row in table["rows"].items():
            vals = [_fmt(row[k], kind) + ("*" if k in table["derived"][n] else "")
                    for k, _, kind in TABLE_COLUMNS]
            lines.append(f"| {n} | {self.run.strategies[n].state} | " + " | ".join(vals) + " |")
        return "\n".join(lines)

    def render_faults(self) -> tuple[list[str], list[str]]:
        """The "Faults and events" section (HTML, Markdown): every mark and controller gap, per strategy."""
        rows: list[tuple[str, float, str, str]] = []
        gaps: list[str] = []
        for s in self.present:
            for m in self.marks.get(s.name, []):
                what = m["label"] + (f" (x{m['count']})" if m["count"] > 1 else "")
                rows.append((s.name, m["t"], m["source"], what))
            for g in self.gaps.get(s.name, []):
                gaps.append(f"{s.name}: controller statistics missing for {g['seconds']:.1f} s "
                            f"({g['t0']:.2f} s to {g['t1']:.2f} s; poll interval "
                            f"{self.interval[s.name]:g} s), shaded as \"no statistics\" in the timelines.")
        self.figures["faults"] = {
            s.name: {"marks": self.marks.get(s.name, []), "gaps": self.gaps.get(s.name, []),
                     "interval": self.interval.get(s.name)} for s in self.present}
        if not rows and not gaps:
            return [], []
        origin = ("Times are seconds since the strategy start (its first worker step), the origin of "
                  "every timeline. Faults from faults.jsonl; controller events (port_down/port_up/"
                  f"reroute/switch_(dis)connected) from timeseries.jsonl, those within {EVENT_CLUSTER_S:g} s "
                  "of the same kind merged.")
        h = ["<h2>Faults and events</h2>", f"<p class='note'>{html.escape(origin)}</p>"]
        md = ["", "## Faults and events", "", origin, ""]
        if gaps:
            h.append("<ul>" + "".join(f"<li>{html.escape(g)}</li>" for g in gaps) + "</ul>")
            md += [f"- {g}" for g in gaps] + [""]
        if rows:
            body = "".join(f"<tr><th>{html.escape(n)}</th><td>{t:.2f}</td><td>{html.escape(src)}</td>"
                           f"<td style='text-align:left'>{html.escape(w)}</td></tr>" for n, t, src, w in rows)
            h.append("<table class='small'><thead><tr><th>strategy</th><th>t (s)</th><th>source</th>"
                     f"<th>what</th></tr></thead><tbody>{body}</tbody></table>")
            md += ["| strategy | t (s) | source | what |", "|---|---:|---|---|"]
            md += [f"| {n} | {t:.2f} | {src} | {w} |" for n, t, src, w in rows]
        return h, md

    def header_facts(self) -> list[str]:
        """One line of run parameters for the top of the report."""
        cfg = self.run.config
        keys = ("workers", "steps", "grad_mb", "batch", "buffer_packets", "slow_every", "slow_factor")
        facts = [f"{k}={cfg[k]}" for k in keys if k in cfg]
        if self.ps_port:
            facts.append(f"PS port={self.ps_port}")
        return facts

    def write(self, table: dict[str, Any], warnings: list[str], text: list[str]) -> tuple[Path, Path]:
        """Write report.html (self-contained) and report.md (relative figure links)."""
        title = f"incastlab report: {self.run.path.name}"
        status = "complete" if self.run.complete else "INCOMPLETE"
        foot = "* derived from the raw logs/samples (summary.json lacks it)."
        h: list[str] = [
            "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
            f"<h1>{html.escape(title)} <span class='status {status.lower()}'>{status}</span></h1>",
            f"<p class='facts'>{html.escape(', '.join(self.header_facts()))}</p>",
        ]
        h += [f"<div class='warning'>&#9888; {html.escape(w)}</div>" for w in warnings]
        h.append("<h2>Findings</h2><ul>" + "".join(f"<li>{html.escape(t)}</li>" for t in text) + "</ul>")
        h.append(f"<h2>Comparison</h2><div class='scroll'>{self.render_table_html(table)}</div>")
        notes = self.table_notes(table)
        h += [f"<p class='note'>{html.escape(x)}</p>" for x in [foot] + notes]
        md: list[str] = [f"# {title} ({status})", "", ", ".join(self.header_facts()), ""]
        md += [f"> **WARNING:** {w}" for w in warnings]
        md += ["", "## Findings", ""] + [f"- {t}" for t in text]
        md += ["", "## Comparison", "", self.render_table_md(table), "", foot] + [f"\n{x}" for x in notes]
        fh, fmd = self.render_faults()
        h += fh
        md += fmd
        for section, keys in self.sections:
            h.append(f"<h2>{html.escape(section)}</h2>")
            md += ["", f"## {section}", ""]
            if self.section_text.get(section):
                h.append("<ul>" + "".join(f"<li>{html.escape(t)}</li>" for t in self.section_text[section])
                         + "</ul>")
                md += [f"- {t}" for t in self.section_text[section]] + [""]
            for k in keys:
                b64 = base64.b64encode(self.pngs[k]).decode("ascii")
                cap = html.escape(self.captions[k])
                h.append(f"<figure id='fig-{k}'><img alt='{html.escape(k)}' "
                         f"src='data:image/png;base64,{b64}'><figcaption>{cap}</figcaption></figure>")
                md += [f"![{k}](figures/{k}.png)", "", f"*{self.captions[k]}*", ""]
            if section == "Stragglers and convergence" and "time_to_target" in self.figures:
                tt = self.figures["time_to_target"]
                cells = {n: "not reached" if v is None else f"{v:.3f}" for n, v in tt["seconds"].items()}
                rows = "".join(f"<tr><th>{html.escape(n)}</th><td>{c}</td></tr>" for n, c in cells.items())
                h.append(f"<table class='small'><thead><tr><th>strategy</th><th>time to loss &le; "
                         f"{tt['target']:.4g} (s)</th></tr></thead><tbody>{rows}</tbody></table>")
                md += [f"| strategy | time to loss <= {tt['target']:.4g} (s) |", "|---|---:|"]
                md += [f"| {n} | {c} |" for n, c in cells.items()]
        h.append("</body></html>")
        html_path, md_path = self.out / "report.html", self.out / "report.md"
        html_path.write_text("\n".join(h) + "\n", encoding="utf-8")
        md_path.write_text("\n".join(md) + "\n", encoding="utf-8")
        return html_path, md_path

    def build(self) -> dict[str, Any]:
        """Compute, draw, write; returns what was written and the plotted data."""
        table = self.table()
        steps: list[Callable[[], None]] = [self.fig_iter_time, self.fig_queue, self.fig_drops_retx,
                                           self.fig_link_heatmap, self.fig_goodput]
        for fn in steps:
            fn()
        straggler = self.is_straggler_run()
        if straggler:
            self.fig_stragglers(table)
        warnings = self.warnings()
        text = self.findings(table)
        html_path, md_path = self.write(table, warnings, text)
        return {
            "run_dir": self.run.path, "complete": self.run.complete, "ps_port": self.ps_port,
            "strategies": list(self.run.strategies), "straggler": straggler,
            "files": {"html": html_path, "md": md_path,
                      "figures": {k: self.fig_dir / f"{k}.png" for k in self.pngs}},
            "table": table, "warnings": warnings, "text": text, "figures": self.figures,
        }


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em auto;max-width:1100px;
color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.status{font-size:.6em;padding:.15em .5em;border-radius:.3em;vertical-align:middle}
.status.complete{background:#d4edda;color:#155724}.status.incomplete{background:#f8d7da;color:#721c24}
.warning{background:#fff3cd;border:1px solid #e0b000;padding:.5em .8em;margin:.4em 0;border-radius:.3em}
.facts,.note{color:#555;font-size:.9em}.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:.85em;font-variant-numeric:tabular-nums}
th,td{border:1px solid #ccc;padding:.3em .5em;text-align:right;white-space:nowrap}
thead th{background:#f2f2f2;text-align:center}tbody th{text-align:left}td.bad{color:#b00;font-weight:bold}
figure{margin:1em 0}figure img{max-width:100%;height:auto}figcaption{color:#555;font-size:.85em}
"""


def _fmt_int(v: Any) -> str:
    """An integer-valued count without decimals."""
    return f"{int(round(float(v)))}" if _num(v) else "–"


def _fmt(v: Any, kind: str) -> str:
    """Table cell text for one figure."""
    if not _num(v):
        return "–"
    if kind == "int":
        return _fmt_int(v)
    if kind == "s":
        return f"{v:.3f}"
    if kind == "loss":
        return f"{v:.4f}"
    if kind == "pct":
        return f"{v * 100:.1f} %"
    return f"{v:.2f}"


def build_report(run_dir: Path) -> dict[str, Any]:
    """Write report.html, report.md and figures/*.png into run_dir; returns files and plotted data."""
    return ReportBuilder(load_run(Path(run_dir))).build()


class _ArgError(Exception):
    """argparse error turned into one line instead of usage text plus exit."""


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors become _ArgError, so report_main prints one line."""

    def error(self, message: str) -> Any:
        raise _ArgError(message)


def report_main(argv: list[str]) -> int:
    """`incastlab report RUN`: build the report, print report.html's path; errors: one line, exit 2."""
    parser = _Parser(prog="incastlab report", description="Build report.html/.md of a run folder.")
    parser.add_argument("run", type=Path, help="run folder, e.g. results/latest")
    try:
        args = parser.parse_args(argv)
        result = build_report(args.run)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except _ArgError as exc:
        print(f"incastlab report: error: {exc}", file=sys.stderr)
        return 2
    except (RunFolderError, AnalysisError) as exc:
        print(f"incastlab report: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the CLI promises one line, never a traceback
        msg = " ".join(str(exc).split()) or type(exc).__name__
        print(f"incastlab report: error: {type(exc).__name__}: {msg}", file=sys.stderr)
        return 2
    print(result["files"]["html"])
    return 0


if __name__ == "__main__":
    raise SystemExit(report_main(sys.argv[1:]))
