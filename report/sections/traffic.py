"""What the links carried: delivered goodput (all receivers, each receiver, each flow into the
parameter server), every link direction's utilisation over time, and summary.json's bytes per link.
"""

from __future__ import annotations

from typing import Any

from report import series as S
from report.doc import Bullets, Section
from report.figures.traffic import (
    flows_figure,
    goodput_figure,
    link_heatmap,
    receivers_figure,
    utilisation_figure,
)
from report.run import RunView
from report.sections.common import all_marks, colors, figure, goodputs, marks_data, time_range
from report.sections.tables import busiest_utilised

MIN_LINK_SHARE = 0.005  # the link heatmap leaves out link directions below this share for every strategy


def goodput(run: RunView) -> Section | None:
    """Payload delivered to the hosts over time (goodput_timeline.json): all receivers together, each
    receiver, and each flow into the PS host."""
    pc = goodputs(run)
    if not pc:
        return None
    marks = all_marks(run)
    rate = run.config.fabric.host_mbit
    xlim = time_range(run)
    fig = goodput_figure(pc, rate, xlim, colors(run), marks)
    data: dict[str, Any] = {
        "strategies": {
            n: {k: d[k] for k in ("t", "goodput_bytes", "goodput_mbit_s", "hosts", "bin_s", "bytes_total")}
            for n, d in pc.items()
        },
        "host_mbit": rate,
        "marks": marks_data(marks),
        "xlim": xlim,
    }
    sec = Section(
        "Goodput",
        [
            figure(
                "goodput",
                fig,
                "Delivered goodput over time",
                "Payload bytes the hosts received per second, each byte counted once at its first arrival (a "
                "retransmitted copy adds nothing), from each host's own capture "
                "(goodput_timeline.json, written by "
                f"the summary), summed over the receiving hosts. Dashed: the rate of one host link ({rate:g} "
                "Mbit/s): everything a parameter server receives comes through its one link.",
                data,
            )
        ],
    )
    shards = {n: run.shard_hosts(n) for n in pc}
    per = {
        n: {"t": d["t"], "bin_s": d["bin_s"], "receivers": d["receivers"], "bytes_total": d["bytes_total"]}
        for n, d in pc.items()
    }
    sec.add(
        figure(
            "goodput_receivers",
            receivers_figure(pc, rate, shards, xlim),
            "Delivered goodput per receiver",
            "Each receiving host's delivered goodput over time, one heatmap row per host (bright: its "
            f"link's full {rate:g} Mbit/s), labelled with the bytes it received in all: summary.json "
            "delivered_bytes_by_receiver. A parameter server's row is bright while the workers' rows "
            "stay dark: its one link carries every gradient.",
            per,
        )
    )
    flows = ps_flows(run, pc)
    if flows:
        sec.add(
            figure(
                "goodput_ps_flows",
                flows_figure(flows, xlim),
                "Flows into the parameter server",
                "Each flow into the PS host (sender:port; for a sharded parameter server, the flows "
                f"to its first shard, {run.config.fabric.ps_host}) as a heatmap row of its goodput "
                "per bin; crosses: that flow's retransmission timeouts (rto_events.json). A dark "
                "column across every flow is a time no gradient reached the PS: between the pushes "
                "(the PS sends the model back), or a synchronised stall, the senders waiting for "
                "their timers (the crosses in it).",
                flows,
            )
        )
    return sec


def ps_flows(run: RunView, pc: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per PS-family strategy: its flows into the PS host (goodput_timeline.json flows_to_ps) and the
    timeouts of those flows (rto_events.json) as (t, row) marks."""
    host_of = {h.ip: h.name for h in run.plan.hosts}
    ps_ip = run.plan.host(run.config.fabric.ps_host).ip
    out = {}
    for name, d in pc.items():
        s = run.strategies[name]
        if not s.ps_family or not d["flows_to_ps"]:
            continue
        labels = list(d["flows_to_ps"])
        row = {k: i for i, k in enumerate(labels)}
        mk = []
        for e in S.rto_series(s):
            if e["kind"] == "tlp" or "-" not in e["flow"]:
                continue
            dst = e["flow"].split("-", 1)[1].rpartition(":")[0]
            k = S.flow_label(e["flow"], host_of)
            if dst == ps_ip and k in row:
                mk.append((e["t"], row[k]))
        out[name] = {
            "t": d["t"],
            "bin_s": d["bin_s"],
            "flows": d["flows_to_ps"],
            "marks": mk,
            "timeouts": len(mk),
            "ps_host": run.config.fabric.ps_host,
        }
    return out


def utilisation(run: RunView) -> Section | None:
    """Every link direction's utilisation over time as a share of its configured rate."""
    iv = run.config.controller.interval
    util = {s.name: u for s in run.timed if (u := S.utilisation_series(run, s, iv)) is not None}
    if not util:
        return None
    fig = utilisation_figure(util, colors(run))
    items = []
    for n in util:
        f = run.strategies[n].summary
        link = busiest_utilised(f)
        if link is None or f.busiest_link_utilisation is None:
            continue
        util_pct = f.busiest_link_utilisation * 100
        text = f"{n}: the busiest link direction, {link}, ran at {util_pct:.1f} % of its rate"
        if f.links_under_5pct_of_busiest is not None:
            text += (
                f"; {f.links_under_5pct_of_busiest} of {len(f.bytes_by_link)} link directions carried "
                "less than 5 % of its bytes"
            )
        if f.ecmp_imbalance is not None:
            text += f"; ECMP imbalance {f.ecmp_imbalance:.2f}" + (
                " (a spine got none of some leaf's uplink traffic)"
                if f.ecmp_imbalance >= 0.99
                else " (the leaves' uplinks evenly loaded)"
                if f.ecmp_imbalance <= 0.1
                else ""
            )
        items.append(text + ".")
    return Section(
        "Link utilisation",
        [
            figure(
                "link_utilisation",
                fig,
                "Link utilisation against capacity",
                "Each link direction's utilisation per poll interval of the controller over the "
                "strategy's training: "
                "the port counter's increase x 8 / (the link's configured rate x the interval), the "
                "controller's "
                "tx_bps as a share of the rate. Host links: up = what host hX sent (its leaf port's "
                "rx), down = what "
                "its leaf port sent it (tx); uplinks: leaf to spine and spine to leaf (the white "
                "line separates "
                "them). The mean over a row is the summary's link_utilisation of that link direction.",
                {
                    n: {k: d[k] for k in ("links", "labels", "kinds", "edges", "util", "mean", "end")}
                    for n, d in util.items()
                },
            ),
            Bullets(items) if items else None,
        ],
    )


def bytes_per_link(run: RunView) -> Section | None:
    """summary.json's bytes_by_link of every strategy, as shares of its total."""
    names = [s.name for s in run.present if s.summary.bytes_by_link]
    if not names:
        return None
    per = {n: run.strategies[n].summary.bytes_by_link for n in names}
    totals = {n: float(sum(per[n].values())) for n in names}
    links = sorted(
        {k for n, v in per.items() for k, b in v.items() if totals[n] and b >= MIN_LINK_SHARE * totals[n]},
        key=S.natural,
    )
    if not links:  # every link at zero bytes (a run killed before its first exchange): no figure
        return None
    nbytes = {n: [float(per[n].get(lk, 0)) for lk in links] for n in names}
    share = {n: [b / totals[n] if totals[n] else 0.0 for b in nbytes[n]] for n in names}
    fig = link_heatmap(links, names, share, nbytes, run.ps_port)
    left = len({k for v in per.values() for k in v}) - len(links)
    return Section(
        "Bytes per link",
        [
            figure(
                "link_bytes",
                fig,
                "Bytes per link direction",
                "Each strategy's bytes on each link direction (summary.json bytes_by_link: a switch "
                "port's tx "
                "bytes, hX-eth0 for what host hX sent), as a share of all its link bytes; the "
                "largest share is the "
                "table's busiest link."
                + (
                    f" Left out: {left} link directions that carried less than "
                    f"{MIN_LINK_SHARE * 100:g} % of every strategy's bytes."
                    if left
                    else ""
                ),
                {"links": links, "strategies": names, "bytes": nbytes, "share": share},
            )
        ],
    )
