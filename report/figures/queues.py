"""Where traffic queued and was lost: queue backlog over time at each strategy's worst port, and the
drops, retransmissions and timeouts per strategy on the shared time axis."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from report.figures.base import TIME_LABEL, binned_rate, canvas, draw_gaps, draw_marks
from report.series import Mark

RTO_COLOR, TLP_COLOR = "#c00000", "#555555"
# one style per kind of rto_events.json mark, for the marks and their legend entries alike
RTO_STYLE: dict[str, Any] = {"ls": "none", "marker": "v", "ms": 6, "color": RTO_COLOR, "alpha": 0.8}
TLP_STYLE: dict[str, Any] = {"ls": "none", "marker": "|", "ms": 8, "color": TLP_COLOR}


def queue_figure(
    panels: list[dict[str, Any]],
    buffer_pkts: int,
    xlim: tuple[float, float],
    color: dict[str, str],
    marks: dict[str, list[Mark]],
) -> Figure:
    """Queue backlog over time, one panel per (strategy, port): each strategy's own worst port, and the
    PS port for the PS family where that is another port; the configured buffer dashed. A backlog
    holds from its sample to the next (the sampler writes a port's line when its counters change)."""
    n = len(panels)
    fig, axes = canvas(0.9 + 1.6 * n, n, 1, sharex=True, sharey=True)
    for ax, p in zip([a[0] for a in axes], panels, strict=True):
        d, name = p["data"], p["strategy"]
        t, v = list(d["t"]), list(d["backlog_packets"])
        if t and t[-1] < xlim[1]:
            t, v = t + [xlim[1]], v + [v[-1]]
        ax.step(t, v, where="post", color=color[name], lw=0.9)
        ax.axhline(buffer_pkts, color="k", ls="--", lw=0.9)
        ax.set_xlim(*xlim)
        ax.set_ylim(0, max(buffer_pkts, max((x["data"]["max"] or 0) for x in panels)) * 1.15)
        draw_marks(ax, {name: marks.get(name, [])})
        ax.set_ylabel("backlog (packets)", fontsize=8)
        ax.set_title(
            f"{name}: {d['port']} ({p['role']}): at most {d['max']} packets queued, {p['drops']} drops",
            fontsize=9,
            loc="left",
        )
    axes[-1][0].set_xlabel(TIME_LABEL)
    from matplotlib.lines import Line2D

    seen = list(dict.fromkeys(p["strategy"] for p in panels))
    handles = [Line2D([], [], color=color[n], lw=1.2, label=f"{n}: backlog") for n in seen]
    handles.append(
        Line2D([], [], color="k", ls="--", lw=0.9, label=f"configured buffer: {buffer_pkts} packets")
    )
    fig.legend(handles=handles, loc="outside lower center", ncols=min(4, len(handles)), fontsize=8)
    fig.suptitle(
        "Switch queue occupancy where each strategy's traffic goes (qdisc backlog, queue_depth.jsonl)",
        fontsize=10,
    )
    return fig


def _event_marks(ax: Any, ts: list[float], height: float, style: dict[str, Any]) -> None:
    """Events as marks at `height` (a share of the panel's height) along the top of the panel."""
    if ts:
        ax.plot(ts, [height] * len(ts), transform=ax.get_xaxis_transform(), clip_on=True, **style)


def drops_retx_figure(
    drops: dict[str, dict[str, Any]],
    retx: dict[str, dict[str, Any]] | None,
    ps_family: list[str],
    xlim: tuple[float, float],
    color: dict[str, str],
    marks: dict[str, list[Mark]],
    gaps: dict[str, list[dict[str, float]]],
    rto: dict[str, list[dict[str, Any]]] | None = None,
) -> Figure:
    """One row per strategy: switch queue drops per second (all ports, and the PS port for the PS
    family), TCP retransmissions per second from the host captures, and each retransmission timeout
    (rto_events.json) as a mark at the top."""
    rto = rto or {}
    names = list(drops)
    n = len(names)
    fig, axes = canvas(0.9 + 1.9 * n, n, 1, sharex=True)
    for ax, name in zip([a[0] for a in axes], names, strict=True):
        d = drops[name]
        fab = d["fabric"]
        ax.fill_between(
            fab["t"],
            fab["per_s"],
            step="pre",
            color="#999",
            alpha=0.45,
            lw=0,
            label="queue drops / s, all switch ports",
        )
        if name in ps_family and d["ps_port"] is not None:
            ax.step(
                d["ps_port"]["t"],
                d["ps_port"]["per_s"],
                where="pre",
                color="k",
                lw=1.0,
                ls=(0, (4, 2)),
                label=f"queue drops / s at the PS port ({d['ps_port_name']})",
            )
        title = f"{name}: {fab['total']:.0f} queue drops"
        if retx is not None and name in retx:
            r = retx[name]
            label = f"retransmissions / s (captures, {int(r['bin_s'] * 1000)} ms bins)"
            binned_rate(ax, r["t"], r["retransmits_per_s"], color[name], label)
            title += f", {r['retransmits_total']} retransmissions"
        ev = rto.get(name, [])
        timeouts = [e["t"] for e in ev if e["kind"] != "tlp"]
        probes = [e["t"] for e in ev if e["kind"] == "tlp"]
        _event_marks(ax, timeouts, 0.94, RTO_STYLE)
        _event_marks(ax, probes, 0.84, TLP_STYLE)
        if name in rto:
            title += (
                f", {len(timeouts)} retransmission timeouts and {len(probes)} tail-loss probes in the "
                "captures"
            )
        ax.set_xlim(*xlim)
        lo, hi = ax.get_ylim()
        ax.set_ylim(0, max(hi, 1.0) * 1.22)
        draw_marks(ax, {name: marks.get(name, [])})
        draw_gaps(ax, {name: gaps.get(name, [])})
        ax.set_ylabel("events / s", fontsize=8)
        ax.set_title(title, fontsize=9, loc="left")
    axes[-1][0].set_xlabel(TIME_LABEL)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [Patch(color="#999", alpha=0.45, label="queue drops / s, all switch ports")]
    if any(n in ps_family for n in names):
        handles.append(Line2D([], [], color="k", ls=(0, (4, 2)), label="queue drops / s at the PS port"))
    if retx:
        handles.append(
            Line2D(
                [],
                [],
                color="#444",
                lw=1.1,
                label="TCP retransmissions / s (host captures, the strategy's colour)",
            )
        )
    if any(e["kind"] != "tlp" for v in rto.values() for e in v):
        handles.append(Line2D([], [], label="a retransmission timeout", **RTO_STYLE))
    if any(e["kind"] == "tlp" for v in rto.values() for e in v):
        handles.append(Line2D([], [], label="a tail-loss probe", **TLP_STYLE))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(handles)), fontsize=8)
    fig.suptitle(
        "Queue drops, TCP retransmissions and timeouts over time (controller queue counters per "
        "poll; host captures)",
        fontsize=10,
    )
    return fig
