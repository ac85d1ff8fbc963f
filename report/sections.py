"""What the page says: the boxes at the top and the sections, each built by one function of the run.

A callout function takes the RunView (run.summary: the RunSummary, run.folder: the RunFolder) and
returns a Callout or None; a section function returns a Section or None (None: nothing to say for
this run, so no empty panel). CALLOUTS and SECTIONS list them in page order; a new section, or a
verdict box at the top, is one more function in one of these lists.

Every number in a table or a sentence is a field of summary.json (the RunSummary), formatted here and
nowhere computed; the figures plot the series of report/series.py.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from report import figures as F
from report import series as S
from report.doc import Bullets, Callout, Column, Figure, Paragraph, Row, Section, Table
from report.run import STRAGGLER_STRATEGIES, RunView
from runmodel.config import PS_FAMILY
from runmodel.summary import StrategySummary

DASH = "–"
MIN_LINK_SHARE = 0.005  # the link heatmap leaves out link directions below this share for every strategy
DOCS = {f.name: f.metadata.get("doc", "") for f in fields(StrategySummary)}
PCAP_FIELDS = {f.name for f in fields(StrategySummary) if f.metadata.get("source") == "pcaps"}


# -- formatting --------------------------------------------------------------------------------------
def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def fmt(v: Any, kind: str) -> str:
    """A summary value as table text ("–" when there is none)."""
    if v is None or (kind != "text" and not _num(v)):
        return DASH
    if kind == "int":
        return f"{int(v):d}"
    if kind == "s":
        return f"{v:.3f}"
    if kind == "loss":
        return f"{v:.4f}"
    if kind == "pct":
        return f"{v * 100:.1f} %"
    if kind == "f1":
        return f"{v:.1f}"
    if kind == "f2":
        return f"{v:.2f}"
    return str(v)


class Col:
    """A column of a summary table: its header, the summary field it shows (the first of `keys` that
    StrategySummary has: fields get renamed), how it is formatted."""

    def __init__(self, header: str, keys: str | tuple[str, ...], kind: str = "int",
                 text: Callable[[StrategySummary], str] | None = None, doc: str = "") -> None:
        names = (keys,) if isinstance(keys, str) else keys
        self.key = next((k for k in names if k in DOCS), "")
        self.header, self.kind, self._text = header, kind, text
        self.doc = doc or DOCS.get(self.key, "")

    def cell(self, fig: StrategySummary) -> str:
        return self._text(fig) if self._text else fmt(getattr(fig, self.key, None), self.kind)

    def column(self) -> Column:
        return Column(self.header, self.doc, numeric=self.kind != "text")


def known(cols: list[Col]) -> list[Col]:
    """The columns whose field the summary has."""
    return [c for c in cols if c.key]


def _max_port(f: StrategySummary) -> str:
    if f.max_port_drops is None:
        return DASH
    return f"{f.max_port_drops} ({f.max_drop_port})" if f.max_drop_port else f"{f.max_port_drops}"


def _busiest(f: StrategySummary) -> str:
    if f.max_link_share is None:
        return DASH
    return f"{f.busiest_link or DASH} ({f.max_link_share * 100:.1f} %)"


TIMING_COLUMNS = [
    Col("state", "state", "text"),
    Col("steps", "steps"),
    Col("iteration (s)", "iter_time_s", "s"),
    Col("comm (s)", "comm_time_s", "s"),
    Col("wait (s)", "wait_time_s", "s"),
    Col("compute (s)", "compute_time_s", "s"),
    Col("wall time (s)", "wall_time_s", "s"),
    Col("throughput (samples/s)", "throughput_samples_per_s", "f1"),
    Col("compute share", "worker_compute_share", "pct"),
    Col("first loss", "first_loss", "loss"),
    Col("final loss", "final_loss", "loss"),
]
QUEUE_COLUMNS = [
    Col("queue drops, all ports", "queue_drops_total"),
    Col("PS-port drops", "ps_port_drops"),
    Col("most drops at one port", "max_port_drops", text=_max_port,
        doc=DOCS["max_port_drops"] + "; in brackets: " + DOCS["max_drop_port"]),
    Col("lost in the fabric (pcap)", "fabric_drops_pcap"),
    Col("lost before the PS port (pcap)", "drops_on_path_to_ps_pcap"),
    Col("busiest link (share)", "max_link_share", text=_busiest,
        doc=DOCS["busiest_link"] + "; in brackets: " + DOCS["max_link_share"]),
]
TCP_COLUMNS = [
    Col("retransmissions (kernel)", "tcp_retransmits_kernel"),
    Col("retransmissions (pcap)", "tcp_retransmits_pcap"),
    Col("dup-ACK retransmissions", ("dupack_retransmits_pcap", "tcp_fast_retransmits")),
    Col("retransmissions without dup ACKs", "tcp_timeout_retransmits"),
    Col("timeouts (kernel)", "tcp_timeouts_kernel"),
    Col("timeouts (pcap)", "tcp_timeouts_pcap"),
    Col("dup ACKs", "dup_acks"),
    Col("out of order", "out_of_order"),
]
PS_COLUMNS = [
    Col("updates applied", "updates_applied"),
    Col("updates discarded", "updates_discarded"),
    Col("max staleness", "staleness_max"),
    Col("mean staleness", "staleness_mean", "f2"),
    Col("SSP max step gap", "ssp_max_gap"),
]


def summary_table(run: RunView, heading: str, cols: list[Col], names: list[str] | None = None) -> Table:
    """One row per strategy, the summary's figures in the given columns; notes say what a "–" means."""
    names = names if names is not None else list(run.strategies)
    cols = known(cols)
    rows, values = [], {}
    for name in names:
        fig = run.strategies[name].summary
        rows.append(Row(name, [c.cell(fig) for c in cols], bad=fig.state != "complete"))
        values[name] = {c.key: getattr(fig, c.key, None) for c in cols}
    return Table(heading, "strategy", [c.column() for c in cols], rows, notes=dash_notes(run, cols, names),
                 values=values)


def dash_notes(run: RunView, cols: list[Col], names: list[str]) -> list[str]:
    """Why cells are "–", per reason."""
    pcap_cols = [c.header for c in cols if c.key in PCAP_FIELDS]
    missing = [n for n in names if not run.strategies[n].present]
    out = []
    if missing:
        out.append(f"{DASH} for {', '.join(missing)}: the strategy did not run (no folder).")
    if pcap_cols and not run.host_captures:
        out.append(f"{DASH} in {', '.join(pcap_cols)}: these count what the hosts' own captures saw, and "
                   f"this run captured capture={run.config.capture} (no host captures).")
    for n in names:
        err = run.strategies[n].summary.pcap_error
        if pcap_cols and err:
            out.append(f"{DASH} in the pcap columns of {n}: the captures could not be read ({err}).")
    shown = [n for n in names if n not in missing]
    empty: dict[str, list[str]] = {}
    for c in cols:
        if c.key in PCAP_FIELDS and (not run.host_captures or any(run.strategies[n].summary.pcap_error
                                                                  for n in shown)):
            continue
        who = [n for n in shown if c.cell(run.strategies[n].summary) == DASH]
        if who:
            empty.setdefault(", ".join(who), []).append(c.header)
    for who, heads in empty.items():
        out.append(f"{DASH} in {', '.join(heads)} ({who}): summary.json holds no value (a field of a newer "
                   "summary, or nothing was recorded to compute it from).")
    return out


# -- shared series ----------------------------------------------------------------------------------
def colors(run: RunView) -> dict[str, str]:
    return F.colors(list(run.strategies))


def all_marks(run: RunView) -> dict[str, list[S.Mark]]:
    """Fault and event marks per strategy with a timeline."""
    return run.memo("marks", lambda: {s.name: S.marks(s) for s in run.timed})


def all_gaps(run: RunView) -> dict[str, list[dict[str, float]]]:
    """Holes in the controller's statistics per strategy."""
    iv = run.config.controller.interval
    return run.memo("gaps", lambda: {s.name: S.stats_gaps(s, iv) for s in run.timed})


def pcaps(run: RunView) -> dict[str, dict[str, Any]]:
    """The pcap series of the strategies that have host captures."""
    def make() -> dict[str, dict[str, Any]]:
        out = {}
        for s in run.timed:
            p = S.pcap_series(run, s)
            if p is not None:
                out[s.name] = p
        return out
    return run.memo("pcaps", make)


def time_range(run: RunView) -> tuple[float, float]:
    """The one x range of every timeline: 0 (first training step) to the longest strategy's last step,
    widened to show every fault and event mark."""
    hi = max((s.training_end or 0.0 for s in run.timed), default=1.0)
    ts = [m.t for ms in all_marks(run).values() for m in ms]
    lo, hi = min([0.0, *ts]), max([hi, *ts])
    pad = 0.02 * (hi - lo or 1.0)
    return lo - pad, hi + pad


def figure(key: str, fig: Any, title: str, caption: str, data: dict[str, Any]) -> Figure:
    return Figure(key, F.to_png(fig), title, caption, data)


def _marks_data(ms: dict[str, list[S.Mark]]) -> dict[str, list[dict[str, Any]]]:
    return {n: [m.to_dict() for m in v] for n, v in ms.items()}


# -- callouts ------------------------------------------------------------------------------------------
def incomplete_run(run: RunView) -> Callout | None:
    """The run did not finish: which strategy ended how."""
    if run.summary.complete:
        return None
    items = []
    for name, s in run.strategies.items():
        st = s.summary.state
        if st != "complete":
            why = s.summary.error or ("no strategy folder" if st == "missing" else "")
            items.append(f"{name}: {st}" + (f" ({why})" if why else ""))
    items.append("The figures show what was recorded before it ended.")
    return Callout("Run incomplete", items, "warning")


def capture_problems(run: RunView) -> Callout | None:
    """Captures that lost packets or could not be read: the pcap counts undercount."""
    cap = run.summary.capture
    items = []
    if cap.enabled and not cap.complete:
        pts = ", ".join(cap.incomplete_points) or "see capture.json"
        items.append(f"Packet capture incomplete ({pts}; {cap.packets_dropped_kernel} packets dropped by the "
                     "kernel): the pcap columns undercount.")
    for name, s in run.strategies.items():
        if s.summary.pcap_error:
            items.append(f"{name}: the captures could not be read ({s.summary.pcap_error}).")
    return Callout("Captures", items, "warning") if items else None


def damaged_files(run: RunView) -> Callout | None:
    """Files the readers had to skip parts of."""
    return Callout("Damaged or unreadable files", run.problems, "warning") if run.problems else None


def summary_rebuilt(run: RunView) -> Callout | None:
    """summary.json was recomputed from the folder by the code that writes it after a run."""
    if not run.rebuilt:
        return None
    return Callout("summary.json rebuilt", [f"{run.rebuilt}; it was recomputed from the run folder by "
                                            "analysis.summary (the code that writes it after a run) and "
                                            "saved."], "info")


CALLOUTS: list[Callable[[RunView], Callout | None]] = [incomplete_run, capture_problems, damaged_files,
                                                       summary_rebuilt]


# -- findings ----------------------------------------------------------------------------------------------
def findings(run: RunView) -> Section | None:
    """Which strategy lost what where, in sentences made of summary.json's figures."""
    names = [s.name for s in run.present]
    if not names:
        return Section("Findings", [Paragraph("No strategy of this run left a folder: nothing was "
                                              "measured.")])
    figs = {n: run.strategies[n].summary for n in names}
    ref = max(names, key=lambda n: (figs[n].ps_port_drops or 0, figs[n].queue_drops_total or 0))
    items = [_strategy_sentence(run, n, ref) for n in [ref, *(x for x in names if x != ref)]]
    items += _fault_sentences(run)
    if run.config.target_loss is not None:
        items.append(_target_sentence(run))
    return Section("Findings", [Bullets(items)])


def _strategy_sentence(run: RunView, name: str, ref: str) -> str:
    f, r = run.strategies[name].summary, run.strategies[ref].summary
    parts = []
    total = f.queue_drops_total
    if name in PS_FAMILY and f.ps_port_drops is not None:
        d = f"{f.ps_port_drops} packets dropped at {f.ps_port or run.ps_port} (the PS port)"
        if total is not None and total > f.ps_port_drops:
            d += f" and {total - f.ps_port_drops} elsewhere in the fabric"
        parts.append(d)
    elif total is not None:
        d = f"{total} packets dropped in the fabric"
        if total and f.max_drop_port:
            d += f", most at {f.max_drop_port} ({f.max_port_drops})"
        parts.append(d)
    timeouts = getattr(f, "tcp_timeouts_pcap", None)
    if f.tcp_retransmits_pcap is not None:
        rtx = f"{f.tcp_retransmits_pcap} TCP retransmissions"
        if timeouts is not None:
            rtx += f" and {timeouts} retransmission timeout{'s' if timeouts != 1 else ''}"
        elif getattr(f, "tcp_timeout_retransmits", None) is not None:
            rtx += f" ({f.tcp_timeout_retransmits} without dup-ACK evidence)"
        parts.append(rtx + " in the captures")
    elif f.tcp_retransmits_kernel is not None:
        parts.append(f"{f.tcp_retransmits_kernel} TCP retransmissions (kernel count)")
    if f.max_link_share is not None and f.busiest_link:
        parts.append(f"the busiest link direction {f.busiest_link} carried {f.max_link_share * 100:.0f} % of "
                     "the link bytes")
    if f.iter_time_s is not None:
        it = f"median iteration {f.iter_time_s:.3f} s"
        if name != ref and r.iter_time_s and f.iter_time_s > 0:
            ratio = r.iter_time_s / f.iter_time_s
            it += (f", {ratio:.2f}x faster than {ref}" if ratio >= 1 else
                   f", {1 / ratio:.2f}x slower than {ref}")
        parts.append(it)
    tail = "" if f.state == "complete" else f" [{f.state}]"
    return f"{name}: " + ("; ".join(parts) if parts else "no figures") + tail + "."


def _fault_sentences(run: RunView) -> list[str]:
    out = []
    gaps = all_gaps(run)
    for name, ms in all_marks(run).items():
        faults = [m for m in ms if m.source == "fault"]
        events = [m for m in ms if m.source == "controller"]
        parts = []
        if faults:
            parts.append(f"{len(faults)} fault action{'s' if len(faults) != 1 else ''} ("
                         + ", ".join(f"{m.label} at {m.t:.2f} s" for m in faults) + ")")
        if events:
            n = sum(m.count for m in events)
            parts.append(f"{n} controller event{'s' if n != 1 else ''} ("
                         + ", ".join(f"{m.kind} at {m.t:.2f} s" for m in events) + ")")
        parts += [f"controller statistics missing for {g['seconds']:.1f} s ({g['t0']:.2f}-{g['t1']:.2f} s)"
                  for g in gaps.get(name, [])]
        if parts:
            out.append(f"{name} faults and events: " + "; ".join(parts) + ".")
    return out


def loss_series(run: RunView) -> dict[str, dict[str, list[Any]]]:
    return run.memo("loss", lambda: {s.name: S.loss_series(s.steps, s.t0 or 0.0) for s in run.timed})


def _target_sentence(run: RunView) -> str:
    target = float(run.config.target_loss or 0.0)
    tt = {n: S.time_to_target(d, target) for n, d in loss_series(run).items()}
    text = ", ".join(f"{n} {v:.2f} s" if v is not None else f"{n} not reached" for n, v in tt.items())
    return f"Time to loss <= {target:g} (config target_loss), from the first training step: {text}."


# -- sections ------------------------------------------------------------------------------------------------
def comparison(run: RunView) -> Section:
    """The summary's figures side by side, in two headed tables."""
    src = "recomputed from the run folder" if run.rebuilt else "as written after the run"
    return Section("Comparison", [
        summary_table(run, "Timing and loss", TIMING_COLUMNS),
        summary_table(run, "Switch queues and links", QUEUE_COLUMNS),
        summary_table(run, "TCP", TCP_COLUMNS),
        Paragraph(f"Every value is a field of summary.json ({src}); \"What the columns mean\" gives each "
                  "field's definition.", note=True),
    ])


def iteration_time(run: RunView) -> Section | None:
    """Iteration time per step, faults placed at the step they hit."""
    if not run.timed:
        return None
    data = {s.name: S.iteration_series(s.steps) for s in run.timed}
    marks = all_marks(run)

    def at_step(name: str, m: S.Mark) -> float | None:
        pos = S.step_position(run.strategies[name].steps, m.abs_t)
        return None if pos is None else pos - 0.5  # step k's point stands for [k - 0.5, k + 0.5]

    fig, drawn = F.iteration_figure(data, colors(run), marks, at_step)
    data_out: dict[str, Any] = dict(data)
    data_out["fault_steps"] = drawn
    return Section("Iteration time", [figure(
        "iter_time", fig, "Iteration time per step",
        "Per step, the slowest worker's step time (t_end - t_start), per strategy; the median of these is "
        "the table's iteration time. Red dashed: faults; grey dotted: controller events, at the step "
        "running when they happened.", data_out)])


def ps_queue(run: RunView) -> Section | None:
    """The PS port's backlog, for the PS-family strategies only (no other strategy sends to the PS)."""
    strategies = [s for s in run.ps_family if s.records]
    if not strategies:
        return None
    occ = {s.name: S.queue_occupancy(s, run.ps_port) for s in strategies}
    buf = run.config.fabric.buffer_pkts
    marks = all_marks(run)
    fig = F.queue_figure(occ, buf, time_range(run), colors(run), marks)
    data = {"port": run.ps_port, "buffer_pkts": buf, "strategies": occ,
            "marks": _marks_data({n: marks.get(n, []) for n in occ}), "xlim": time_range(run)}
    fills = [f"{n}: at most {d['max']} packets queued" for n, d in occ.items() if d["max"] is not None]
    return Section("PS-port queue", [figure(
        "queue_occupancy", fig, "PS-port queue occupancy",
        f"Backlog of the PS port {run.ps_port}'s queue over time (queue_depth.jsonl), per parameter-server "
        f"strategy; dashed: the configured buffer, {buf} packets (config fabric.buffer_pkts). "
        + ("; ".join(fills) + "." if fills else ""), data)])


def drops_over_time(run: RunView) -> Section | None:
    """Drops per second (fabric, PS port) and retransmissions per second, on the shared time axis."""
    if not run.timed:
        return None
    iv = run.config.controller.interval
    drops = {s.name: S.drops_series(s, run.ps_port, iv) for s in run.timed}
    pc = pcaps(run)
    retx = pc if pc else None
    psf = [s.name for s in run.ps_family]
    marks, gaps = all_marks(run), all_gaps(run)
    fig = F.drops_retx_figure(drops, retx, psf, time_range(run), colors(run), marks, gaps)
    data = {"drops": drops, "retransmits": {n: {k: d[k] for k in ("t", "retransmits", "retransmits_per_s",
                                                                  "retransmits_total", "bin_s")}
                                            for n, d in pc.items()},
            "marks": _marks_data(marks), "gaps": gaps, "xlim": time_range(run)}
    cap = ("TCP retransmissions per second from the hosts' own captures (the segments each host sent), "
           "counted as the table's retx (pcap)." if retx else
           f"No retransmission panel: it needs host captures (this run: capture={run.config.capture}).")
    return Section("Drops and retransmissions over time", [figure(
        "drops_retransmits", fig, "Queue drops and TCP retransmissions over time",
        f"Top: switch queue drops per second, from the controller's queue counters at every poll "
        f"({iv:g} s), summed over all ports (solid) and at the PS port (dashed, parameter-server "
        f"strategies); their sums are the table's drop columns. Bottom: {cap} Shaded: no controller "
        "statistics; red dashed: faults; grey dotted: controller events.", data)])


def goodput(run: RunView) -> Section | None:
    """Payload delivered to the hosts over time (host captures only)."""
    pc = pcaps(run)
    if not pc:
        return None
    marks = all_marks(run)
    rate = run.config.fabric.host_mbit
    fig = F.goodput_figure(pc, rate, time_range(run), colors(run), marks)
    data: dict[str, Any] = {"strategies": {n: {k: d[k] for k in ("t", "goodput_bytes", "goodput_mbit_s",
                                                                  "hosts", "bin_s")}
                                           for n, d in pc.items()},
                            "host_mbit": rate, "marks": _marks_data(marks), "xlim": time_range(run)}
    return Section("Goodput", [figure(
        "goodput", fig, "Delivered goodput over time",
        "Payload bytes the hosts received per second, each byte counted once at its first arrival (a "
        "retransmitted copy adds nothing), from each host's own capture, summed over the hosts of the "
        f"strategy. Dashed: the rate of one host link ({rate:g} Mbit/s): everything a parameter server "
        "receives comes through its one link.", data)])


def bytes_per_link(run: RunView) -> Section | None:
    """summary.json's bytes_by_link of every strategy, as shares of its total."""
    names = [s.name for s in run.present if s.summary.bytes_by_link]
    if not names:
        return None
    per = {n: run.strategies[n].summary.bytes_by_link for n in names}
    totals = {n: float(sum(per[n].values())) for n in names}
    links = sorted({k for n, v in per.items() for k, b in v.items()
                    if totals[n] and b >= MIN_LINK_SHARE * totals[n]}, key=_natural)
    nbytes = {n: [float(per[n].get(lk, 0)) for lk in links] for n in names}
    share = {n: [b / totals[n] if totals[n] else 0.0 for b in nbytes[n]] for n in names}
    fig = F.link_heatmap(links, names, share, nbytes, run.ps_port)
    left = len({k for v in per.values() for k in v}) - len(links)
    return Section("Bytes per link", [figure(
        "link_bytes", fig, "Bytes per link direction",
        "Each strategy's bytes on each link direction (summary.json bytes_by_link: a switch port's tx "
        "bytes, hX-eth0 for what host hX sent), as a share of all its link bytes; the largest share is the "
        "table's busiest link." + (f" Left out: {left} link directions that carried less than "
                                  f"{MIN_LINK_SHARE * 100:g} % of every strategy's bytes." if left else ""),
        {"links": links, "strategies": names, "bytes": nbytes, "share": share})])


def _natural(name: str) -> list[Any]:
    import re

    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def faults_and_events(run: RunView) -> Section | None:
    """Every fault, controller event and hole in the statistics, with its time."""
    marks, gaps = all_marks(run), all_gaps(run)
    rows = [Row(n, [f"{m.t:.2f}", "faults.jsonl" if m.source == "fault" else "controller",
                    m.label + (f" (x{m.count})" if m.count > 1 else "")])
            for n, ms in marks.items() for m in ms]
    gap_items = [f"{n}: controller statistics missing for {g['seconds']:.1f} s ({g['t0']:.2f} s to "
                 f"{g['t1']:.2f} s; poll interval {run.config.controller.interval:g} s), shaded in the "
                 "timelines." for n, gs in gaps.items() for g in gs]
    if not rows and not gap_items:
        return None
    sec = Section("Faults and events", [Paragraph(
        "Times are seconds since the strategy's first training step, the origin of every timeline. Faults "
        "from faults.jsonl; controller events (port down/up, reroute, switch (dis)connected) from "
        f"timeseries.jsonl, those of one kind within {S.EVENT_CLUSTER_S:g} s merged.", note=True)])
    if gap_items:
        sec.add(Bullets(gap_items))
    if rows:
        sec.add(Table("Fault actions and controller events", "strategy",
                      [Column("t (s)"), Column("source", numeric=False), Column("what", numeric=False)],
                      rows))
    return sec


# -- stragglers ------------------------------------------------------------------------------------------
def straggler_ranks(run: RunView) -> dict[int, str]:
    """rank -> host of every configured straggler."""
    hosts = run.config.worker_hosts
    return {hosts.index(st.host): st.host for st in run.config.stragglers if st.host in hosts}


def stragglers(run: RunView) -> Section | None:
    """Compute share, staleness, loss against step and time: only with stragglers or the strategies
    made for them (async, ssp, backup)."""
    if not run.has_stragglers or not run.present:
        return None
    sec = Section("Stragglers and convergence")
    slow = straggler_ranks(run)
    sec.add(Bullets(_straggler_sentences(run, slow)))
    shares = {s.name: {int(k): v for k, v in sorted(s.summary.worker_compute_share_by_rank.items(),
                                                    key=lambda kv: int(kv[0]))}
              for s in run.present if s.summary.worker_compute_share_by_rank}
    if shares:
        sec.add(figure("compute_share", F.compute_share_figure(shares, slow, colors(run)),
                       "Worker compute share",
                       "Each worker's compute time over its own active span (summary.json "
                       "worker_compute_share_by_rank); hatched: the configured straggler. A fast worker that "
                       "waits for a straggler computes a small share of its time.",
                       {"shares": shares, "stragglers": slow}))
    psf = [s.name for s in run.ps_family]
    if psf:
        cols = [c for c in PS_COLUMNS if c.key != "ssp_max_gap" or "ssp" in psf]
        sec.add(summary_table(run, "Parameter-server updates", cols, psf))
    hists = {s.name: {int(k): int(v) for k, v in s.summary.staleness_histogram.items()}
             for s in run.ps_family if s.summary.staleness_histogram}
    if hists and any(n in STRAGGLER_STRATEGIES for n in hists):
        sec.add(figure("staleness", F.staleness_figure(hists, colors(run)), "Staleness of applied updates",
                       "Applied parameter-server updates per staleness (summary.json staleness_histogram); "
                       "synchronous strategies apply only fresh (staleness 0) gradients.", hists))
    loss = loss_series(run)
    target = run.config.target_loss
    if loss:
        sec.add(figure("loss", F.loss_figure(loss, target, time_range(run), colors(run)), "Loss",
                       "Mean loss over the workers per step, against the step and against time since the "
                       "first training step." + (f" Dashed: the target loss {target:g} (config target_loss)."
                                                 if target is not None else ""),
                       {"strategies": loss, "target": target, "xlim": time_range(run)}))
    if target is not None and loss:
        tt = {n: S.time_to_target(d, float(target)) for n, d in loss.items()}
        sec.add(Table(f"Time to loss <= {target:g}", "strategy", [Column("seconds from the first step")],
                      [Row(n, ["not reached" if v is None else f"{v:.2f}"]) for n, v in tt.items()],
                      values={n: {"seconds": v} for n, v in tt.items()}))
    return sec


def _straggler_sentences(run: RunView, slow: dict[int, str]) -> list[str]:
    out = []
    cfg = run.config
    if slow:
        desc = []
        for st in cfg.stragglers:
            knobs = [f"{k}={getattr(st, k)}" for k in ("cpu", "link_mbit") if getattr(st, k) is not None]
            knobs += [f"{k}={getattr(st, k)}" for k, neutral in (("slow_every", 0), ("slow_factor", 1.0),
                                                                  ("compute_factor", 1.0))
                      if getattr(st, k) != neutral]
            desc.append(st.host + (f" ({', '.join(knobs)})" if knobs else ""))
        out.append("Straggler: " + ", ".join(f"worker rank {r} ({h})" for r, h in slow.items())
                   + f"; configured as {'; '.join(desc)}.")
        parts = []
        for s in run.present:
            by = s.summary.worker_compute_share_by_rank
            fast = [v for k, v in by.items() if int(k) not in slow]
            strag = [v for k, v in by.items() if int(k) in slow]
            if fast and strag:
                parts.append(f"{s.name} {statistics.fmean(fast) * 100:.1f} % (straggler "
                             f"{statistics.fmean(strag) * 100:.1f} %)")
        if parts:
            out.append("Fast workers' mean compute share: " + ", ".join(parts) + ".")
    for s in run.present:
        f = s.summary
        if s.name == "ssp":
            if f.ssp_max_gap is None:
                out.append("ssp: no step gap recorded.")
            else:
                plural = "s" if f.ssp_max_gap != 1 else ""
                t = (f"ssp: the fastest worker was at most {f.ssp_max_gap} step{plural} ahead of the slowest "
                     f"(bound s={cfg.staleness})")
                out.append(t + ("." if f.ssp_max_gap <= cfg.staleness else
                                f"; this EXCEEDS the bound by {f.ssp_max_gap - cfg.staleness}."))
        if s.name == "backup":
            per = f.discarded_per_step
            if per and min(per) == max(per):
                t = f"backup discarded {per[0]} update{'s' if per[0] != 1 else ''} per step (b={cfg.backup})"
            elif per:
                t = f"backup discarded {min(per)}-{max(per)} updates per step (b={cfg.backup})"
            else:
                t = f"backup: no per-step discard record (b={cfg.backup})"
            if f.updates_discarded is not None:
                t += f", {f.updates_discarded} in total"
            out.append(t + ".")
        if s.name == "async" and f.staleness_histogram:
            total = sum(f.staleness_histogram.values())
            stale = total - f.staleness_histogram.get("0", 0)
            mean = fmt(f.staleness_mean, "f2")
            out.append(f"async: {stale} of {total} applied updates were stale (mean staleness {mean}, max "
                       f"{f.staleness_max}).")
    return out or ["No straggler was configured; the strategies below are the ones made for stragglers."]


SECTIONS: list[Callable[[RunView], Section | None]] = [
    findings, comparison, iteration_time, ps_queue, drops_over_time, goodput, bytes_per_link,
    faults_and_events, stragglers,
]


def facts(run: RunView) -> list[str]:
    """The run's parameters in one line."""
    cfg, fab = run.config, run.config.fabric
    out = [f"strategies {', '.join(cfg.strategies)}", f"{cfg.n_workers} workers", f"{cfg.steps} steps",
           f"gradient {cfg.grad_mb:g} MiB", f"batch {cfg.batch}",
           f"fabric {fab.spines} spines x {fab.leaves} leaves x {fab.hosts_per_leaf} hosts",
           f"host links {fab.host_mbit:g} Mbit/s, uplinks {fab.uplink_mbit:g} Mbit/s",
           f"switch buffers {fab.buffer_pkts} packets", f"PS {fab.ps_host} on {run.ps_port}",
           f"capture {cfg.capture}", f"TCP {cfg.cc}"]
    if cfg.stragglers:
        out.append("stragglers " + ", ".join(st.host for st in cfg.stragglers))
    if cfg.faults:
        out.append("faults " + ", ".join(cfg.faults))
    env = (run.folder.config_doc() or {}).get("environment") or {}
    if env:
        out.append(f"{env.get('datapath', '?')} datapath, {env.get('virtualisation', '?')}, "
                   f"{env.get('cores', '?')} cores")
    return out
