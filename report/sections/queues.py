"""Where the traffic queued and was lost: each strategy's queue at its own worst port (and the PS port
for the parameter-server strategies), its hot ports as tables, and the drops, retransmissions and
retransmission timeouts over time.
"""

from __future__ import annotations

from typing import Any

from report import series as S
from report.doc import Column, Group, Row, Section, Table
from report.figures.queues import drops_retx_figure, queue_figure
from report.run import RunView
from report.sections.common import all_gaps, all_marks, colors, figure, marks_data, retransmits, time_range
from report.sections.tables import DASH, fmt, is_num


def queue_panels(run: RunView) -> list[dict[str, Any]]:
    """The queue panels: per strategy its own worst port (summary worst_queue_port), and for the PS
    family the PS port where that is another port; only ports with samples in queue_depth.jsonl."""

    def make() -> list[dict[str, Any]]:
        out = []
        for s in run.timed:
            f = s.summary
            ports: list[tuple[str, str]] = []
            worst = f.worst_queue_port
            if worst:
                role = "its worst port" + (", the PS port" if worst == run.ps_port and s.ps_family else "")
                if s.ps_family and worst != run.ps_port and worst in run.shard_ports(s.name):
                    role += ", a PS shard's port"
                ports.append((worst, role))
            if s.ps_family and worst != run.ps_port and run.ps_port in run.shard_ports(s.name):
                ports.append((run.ps_port, "the PS port"))
            for port, role in ports:
                d = S.queue_occupancy(s, port, run.ps_port)
                out.append(
                    {
                        "strategy": s.name,
                        "port": port,
                        "role": role,
                        "data": d,
                        "drops": int(f.drops_by_port.get(port, 0)),
                    }
                )
        return out

    return run.memo("queue_panels", make)


def ps_queue(run: RunView) -> Section | None:
    """Each strategy's queue where its traffic goes: its own worst port, and the PS port for the PS
    family; the hot ports of each strategy as tables."""
    panels = queue_panels(run)
    shown = [p for p in panels if p["data"]["samples"]]
    if not shown:
        return None
    buf = run.config.fabric.buffer_pkts
    marks = all_marks(run)
    fig = queue_figure(shown, buf, time_range(run), colors(run), marks)
    data = {
        "port": run.ps_port,
        "buffer_pkts": buf,
        "panels": [{k: p[k] for k in ("strategy", "port", "role", "drops", "data")} for p in shown],
        "strategies": {p["strategy"]: p["data"] for p in shown if p["port"] == run.ps_port},
        "marks": marks_data({n: marks.get(n, []) for n in {p["strategy"] for p in shown}}),
        "xlim": time_range(run),
    }
    missing = [f"{p['strategy']} ({p['port']})" for p in panels if not p["data"]["samples"]]
    cap = (
        f"Backlog of each strategy's own worst port (summary.json worst_queue_port: its most-dropping "
        f"port, else its busiest) over time from queue_depth.jsonl, and for the parameter-server "
        f"strategies the PS port {run.ps_port} too where that is another port; dashed: the configured "
        f"buffer, {buf} packets (config fabric.buffer_pkts)."
    )
    if missing:
        cap += (
            " No samples in queue_depth.jsonl for " + ", ".join(missing) + " (a run that sampled the PS "
            "port only)."
        )
    return Section(
        "Switch queues where the traffic goes",
        [
            figure("queue_occupancy", fig, "Queue occupancy at each strategy's worst port", cap, data),
            hot_port_tables(run),
        ],
    )


def hot_port_tables(run: RunView) -> Group | None:
    """One table per strategy of summary.json hot_ports: its busiest and most-dropping switch ports."""
    cols = [
        Column("kind", "uplink (leaf-spine) or host (a leaf's port toward its host)", numeric=False),
        Column("tx (MB)", "bytes the port sent over the strategy, MB"),
        Column("drops", "queue drops at the port over the strategy"),
        Column("utilisation", "tx bytes x 8 / (the port's configured rate x the training time)"),
        Column("max backlog (packets)", "the most packets its queue held (queue_depth.jsonl)"),
    ]
    tables = []
    for s in run.present:
        hot = s.summary.hot_ports
        if not hot:
            continue
        shards = set(run.shard_ports(s.name))
        rows, values = [], {}
        # busiest first; ties by name (analysis.summary takes them from a set: their order varies by run)
        for h in sorted(
            hot, key=lambda h: (-(h.get("tx_bytes") or 0), -(h.get("drops") or 0), str(h.get("port")))
        ):
            port = str(h.get("port"))
            tag = (
                " (PS port)"
                if port == run.ps_port and s.ps_family
                else (" (PS shard)" if port in shards else "")
            )
            worst = " *" if port == s.summary.worst_queue_port else ""
            label = port + tag + worst
            rows.append(
                Row(
                    label,
                    [
                        str(h.get("kind", DASH)),
                        fmt(h["tx_bytes"] / 1e6 if is_num(h.get("tx_bytes")) else None, "f2"),
                        fmt(h.get("drops"), "int"),
                        fmt(h.get("utilisation"), "pct"),
                        fmt(h.get("max_backlog_packets"), "int"),
                    ],
                )
            )
            values[label] = dict(h)
        tables.append(
            Table(
                f"Hot ports: {s.name}",
                "port",
                cols,
                rows,
                values=values,
                notes=["*: the port the queue figure shows (worst_queue_port)."],
            )
        )
    return Group(tables) if tables else None


def drops_over_time(run: RunView) -> Section | None:
    """Per strategy: drops per second (fabric, PS port), retransmissions per second and the
    retransmission timeouts, on the shared time axis."""
    if not run.timed:
        return None
    iv = run.config.controller.interval
    drops = {s.name: S.drops_series(s, iv) for s in run.timed}
    pc = retransmits(run)
    retx = pc if pc else None
    rto = {s.name: S.rto_series(s) for s in run.timed if s.summary.tcp_timeouts_pcap is not None}
    psf = [s.name for s in run.ps_family if run.ps_port in run.shard_ports(s.name)]
    marks, gaps = all_marks(run), all_gaps(run)
    fig = drops_retx_figure(drops, retx, psf, time_range(run), colors(run), marks, gaps, rto)
    data = {
        "drops": drops,
        "retransmits": {
            n: {k: d[k] for k in ("t", "retransmits", "retransmits_per_s", "retransmits_total", "bin_s")}
            for n, d in pc.items()
        },
        "rto_events": rto,
        "marks": marks_data(marks),
        "gaps": gaps,
        "xlim": time_range(run),
    }
    cap = (
        "TCP retransmissions per second from the hosts' own captures (the segments each host sent, "
        "retransmits_timeline.json), counted as the TCP table's retransmissions (pcap); red triangles: "
        "each retransmission timeout the senders' captures show (rto_events.json, counted as timeouts "
        "(pcap)), grey ticks: tail-loss probes."
        if retx
        else f"No retransmission line: it needs host captures (this run: capture={run.config.capture})."
    )
    return Section(
        "Drops, retransmissions and timeouts over time",
        [
            figure(
                "drops_retransmits",
                fig,
                "Queue drops, TCP retransmissions and timeouts over time",
                f"One row per strategy. Grey: switch queue drops per second, from the controller's "
                f"queue counters "
                f"at every poll ({iv:g} s), summed over all ports; black dashed: at the PS port "
                f"(parameter-server "
                f"strategies); their sums are the drop columns of the tables. {cap} Shaded: no controller "
                "statistics; red dashed: faults; grey dotted: controller events.",
                data,
            )
        ],
    )
