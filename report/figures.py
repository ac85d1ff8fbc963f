"""The report's figures, drawn with matplotlib's Agg canvas (no pyplot state: safe in tests and threads).

Each function takes the prepared data (report/series.py, or figures of summary.json) and returns a
matplotlib Figure whose axes say what they show: a title, axis labels with units and a legend, so a
figure can be read without the text around it. `to_png` turns one into bytes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from report.series import Mark

DPI = 100
WIDTH = 11.0  # inches: 1100 px, the width of the page's text
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]  # lines that coincide (same seeds, same loss) stay visible
FAULT, EVENT = "#c00000", "#555555"
TIME_LABEL = "time since the strategy's first training step (s)"


def colors(names: list[str]) -> dict[str, str]:
    """One colour per strategy, the same in every figure."""
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def canvas(
    height: float, rows: int = 1, cols: int = 1, width: float = WIDTH, **kw: Any
) -> tuple[Figure, Any]:
    """A Figure on an Agg canvas and its axes as a rows x cols array."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False, **kw)


def to_png(fig: Figure) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def note(ax: Any, text: str) -> None:
    """Say on the axes why there is nothing to see, rather than leaving them silently empty."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=10, color="#666")


def draw_marks(
    ax: Any, by_strategy: dict[str, list[Mark]], to_x: Callable[[str, Mark], float | None] | None = None
) -> dict[str, list[float]]:
    """Faults (red dashed) and controller events (grey dotted) as vertical lines with short labels;
    returns the x of every line drawn, per strategy."""
    several = sum(1 for v in by_strategy.values() if v) > 1
    tr = ax.get_xaxis_transform()
    lo, hi = ax.get_xlim()
    near = 0.015 * (hi - lo)
    labelled: list[float] = []
    drawn: dict[str, list[float]] = {}
    for name, ms in by_strategy.items():
        drawn[name] = []
        for m in sorted(ms, key=lambda m: m.source != "fault"):  # a fault's label wins over its echo
            x = to_x(name, m) if to_x else m.t
            if x is None:
                continue
            drawn[name].append(x)
            fault = m.source == "fault"
            ax.axvline(
                x,
                color=FAULT if fault else EVENT,
                ls="--" if fault else ":",
                lw=1.1 if fault else 0.9,
                zorder=1,
            )
            if any(abs(x - y) < near for y in labelled):
                continue
            labelled.append(x)
            text = m.label if fault else m.kind + (f" x{m.count}" if m.count > 1 else "")
            ax.text(
                x,
                0.98,
                " " + (f"{name}: " if several else "") + text,
                transform=tr,
                rotation=90,
                ha="right",
                va="top",
                fontsize=7,
                color=FAULT if fault else EVENT,
                clip_on=True,
            )
        drawn[name].sort()
    return drawn


def draw_gaps(ax: Any, by_strategy: dict[str, list[dict[str, float]]]) -> None:
    """Shade the spans without controller statistics."""
    tr = ax.get_xaxis_transform()
    several = sum(1 for v in by_strategy.values() if v) > 1
    for name, gaps in by_strategy.items():
        for g in gaps:
            ax.axvspan(g["t0"], g["t1"], color="#999", alpha=0.25, lw=0, zorder=0)
            ax.text(
                (g["t0"] + g["t1"]) / 2,
                0.5,
                f"{name + ': ' if several else ''}no statistics\n{g['seconds']:.1f} s",
                transform=tr,
                ha="center",
                va="center",
                fontsize=7,
                color="#444",
            )


def _legend(ax: Any, **kw: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, **kw)


# -- figures ------------------------------------------------------------------------------------------
def wrap_name(name: str, width: int = 16) -> str:
    """A long strategy name over two lines at a ':' (ps:shards=2:placement=colocated)."""
    if len(name) <= width or ":" not in name:
        return name
    cut = name.rfind(":", 0, width + 1)
    cut = cut if cut > 0 else name.find(":")
    return name[: cut + 1] + "\n" + name[cut + 1 :]


def ref_lines(ax: Any, refs: list[tuple[str, float, str, str]]) -> None:
    """Horizontal reference lines (label, y, colour, "dashed" or "dotted"); lines at the same height
    interleave their dashes so that every colour stays visible."""
    groups: dict[tuple[float, str], list[tuple[str, str]]] = {}
    for label, y, color, style in refs:
        groups.setdefault((round(y, 3), style), []).append((label, color))
    for (y, style), items in groups.items():
        on, off = (7.0, 3.0) if style == "dashed" else (1.5, 2.5)
        n = len(items)
        for i, (label, color) in enumerate(items):
            ax.axhline(
                y,
                color=color,
                lw=1.4 if style == "dashed" else 1.6,
                zorder=1.5,
                label=label,
                ls=(i * (on + off), (on, off + (n - 1) * (on + off))),
            )


def iteration_figure(
    series: dict[str, dict[str, list[Any]]],
    color: dict[str, str],
    marks: dict[str, list[Mark]],
    to_step: Callable[[str, Mark], float | None],
    bounds: dict[str, dict[str, float | None]] | None = None,
) -> tuple[Figure, dict[str, list[float]]]:
    """Iteration time per step, one line per strategy, faults placed at the step they hit; each
    strategy's communication bound dashed (and a PS's push-then-pull time dotted) in its colour."""
    bounds = bounds or {}
    fig, ax = canvas(4.4 + 0.22 * math.ceil(len(series) * 2.6 / 3))
    ax = ax[0][0]
    for k, (name, d) in enumerate(series.items()):
        ax.plot(
            d["steps"],
            d["seconds"],
            marker=MARKERS[k % len(MARKERS)],
            ms=8 - k % 6,
            color=color[name],
            label=f"{name}: iteration time",
            zorder=3,
        )
    refs = []
    for name, b in bounds.items():
        if b.get("bound_s") is not None:
            refs.append((f"{name}: bound {b['bound_s']:.3f} s", float(b["bound_s"]), color[name], "dashed"))
        if b.get("push_then_pull_s") is not None:
            refs.append(
                (
                    f"{name}: push-then-pull {b['push_then_pull_s']:.3f} s",
                    float(b["push_then_pull_s"]),
                    color[name],
                    "dotted",
                )
            )
    ref_lines(ax, refs)
    steps = sorted({k for d in series.values() for k in d["steps"]})
    if steps:
        every = max(1, math.ceil(len(steps) / 25))
        ax.set_xticks(steps[::every])
        ax.set_xlim(steps[0] - 0.6, steps[-1] + 0.6)  # a mark early in the first step stays in view
    top = max([v for d in series.values() for v in d["seconds"]] + [y for _, y, _, _ in refs] + [0.1])
    ax.set_ylim(0, top * 1.1)
    drawn = draw_marks(ax, marks, to_step)
    ax.set_xlabel("training step")
    ax.set_ylabel("iteration time (s)")
    ax.set_title(
        "Iteration time per step (slowest worker's step) against each strategy's communication bound",
        fontsize=10,
    )
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=8)
    return fig, drawn


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


RTO_COLOR, TLP_COLOR = "#c00000", "#555555"


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
            ax.step(
                r["t"],
                r["retransmits_per_s"],
                where="post",
                color=color[name],
                lw=1.1,
                label=f"retransmissions / s (captures, {int(r['bin_s'] * 1000)} ms bins)",
            )
            title += f", {r['retransmits_total']} retransmissions"
        ev = rto.get(name, [])
        tr = ax.get_xaxis_transform()
        timeouts = [e["t"] for e in ev if e["kind"] != "tlp"]
        probes = [e["t"] for e in ev if e["kind"] == "tlp"]
        if timeouts:
            ax.plot(
                timeouts,
                [0.94] * len(timeouts),
                transform=tr,
                ls="none",
                marker="v",
                ms=6,
                clip_on=True,
                color=RTO_COLOR,
                alpha=0.8,
            )
        if probes:
            ax.plot(
                probes,
                [0.84] * len(probes),
                transform=tr,
                ls="none",
                marker="|",
                ms=8,
                color=TLP_COLOR,
                clip_on=True,
            )
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
        handles.append(
            Line2D([], [], ls="none", marker="v", color=RTO_COLOR, label="a retransmission timeout")
        )
    if any(e["kind"] == "tlp" for v in rto.values() for e in v):
        handles.append(
            Line2D([], [], ls="none", marker="|", ms=8, color=TLP_COLOR, label="a tail-loss probe")
        )
    fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(handles)), fontsize=8)
    fig.suptitle(
        "Queue drops, TCP retransmissions and timeouts over time (controller queue counters per "
        "poll; host captures)",
        fontsize=10,
    )
    return fig


def _bin(series: dict[str, dict[str, Any]]) -> float:
    return next((d["bin_s"] for d in series.values()), 0.1)


def goodput_figure(
    goodput: dict[str, dict[str, Any]],
    host_mbit: float,
    xlim: tuple[float, float],
    color: dict[str, str],
    marks: dict[str, list[Mark]],
) -> Figure:
    """Payload delivered to the hosts per second, summed over the receivers, against one host link."""
    fig, ax = canvas(3.6)
    ax = ax[0][0]
    for name, d in goodput.items():
        ax.step(
            d["t"],
            d["goodput_mbit_s"],
            where="post",
            color=color[name],
            lw=1.1,
            label=f"{name}: {d['bytes_total'] / 1e6:.1f} MB delivered",
        )
    ax.axhline(host_mbit, color="k", ls="--", lw=0.9, label=f"one host link: {host_mbit:g} Mbit/s")
    ax.set_xlim(*xlim)
    ax.set_ylim(bottom=0)
    draw_marks(ax, marks)
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel("goodput (Mbit/s)")
    ax.set_title(
        "Delivered goodput, all receiving hosts together (payload first arrivals, "
        f"{int(_bin(goodput) * 1000)} ms bins)",
        fontsize=10,
    )
    _legend(ax, loc="upper right", ncols=2 if len(goodput) > 3 else 1)
    return fig


def _time_heatmaps(
    rows: list[dict[str, Any]],
    xlim: tuple[float, float],
    vmax: float,
    cbar: str,
    suptitle: str,
    cmap: str = "magma",
) -> Figure:
    """Stacked heatmaps over one time axis, one per entry of rows: {title, labels, t (bin starts),
    bin_s, values (one list per label), marks: [(x, row index)]}."""
    heights = [max(1.0, len(r["labels"])) for r in rows]
    total = sum(0.16 * h + 0.55 for h in heights)
    fig = Figure(figsize=(WIDTH, 0.8 + total), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(rows), 1, sharex=True, squeeze=False, height_ratios=[h + 2.5 for h in heights])
    mesh = None
    for ax, r in zip([a[0] for a in axes], rows, strict=True):
        n = len(r["labels"])
        width = max((len(v) for v in r["values"]), default=0)
        edges = [r["t"][0] + i * r["bin_s"] for i in range(width + 1)] if r["t"] else [0.0, 1.0]
        grid = [[(v[i] if i < len(v) else 0.0) for i in range(width)] for v in r["values"]] or [[0.0]]
        mesh = ax.pcolormesh(
            edges if width else [0.0, 1.0],
            range(n + 1) if n else [0, 1],
            grid,
            cmap=cmap,
            vmin=0.0,
            vmax=vmax,
            shading="flat",
            rasterized=True,
        )
        ax.set_yticks([i + 0.5 for i in range(n)], r["labels"], fontsize=7)
        ax.set_ylim(n, 0)
        for x, row in r.get("marks", []):
            ax.plot([x], [row + 0.5], ls="none", marker="x", ms=4.5, mew=1.2, color="#3ad1ff")
        ax.set_title(r["title"], fontsize=9, loc="left")
        ax.set_xlim(*xlim)
    axes[-1][0].set_xlabel(TIME_LABEL)
    if mesh is not None:
        fig.colorbar(
            mesh,
            ax=[a[0] for a in axes],
            label=cbar,
            shrink=min(1.0, 8.0 / max(1.0, total)),
            aspect=25 if total > 3 else 12,
        )
    fig.suptitle(suptitle, fontsize=10)
    return fig


def receivers_figure(
    goodput: dict[str, dict[str, Any]],
    host_mbit: float,
    ps_hosts: dict[str, list[str]],
    xlim: tuple[float, float],
) -> Figure:
    """Per strategy, each receiving host's delivered goodput over time as a heatmap row (scale: one
    host link's rate), labelled with its total."""
    rows = []
    for name, d in goodput.items():
        hosts = list(d["receivers"])
        shards = ps_hosts.get(name, [])
        labels = [
            f"{h}{' (PS)' if h in shards else ''}: {d['receivers'][h]['bytes'] / 1e6:.2f} MB" for h in hosts
        ]
        rows.append(
            {
                "title": f"{name}: delivered goodput per receiving host, total "
                f"{d['bytes_total'] / 1e6:.2f} MB",
                "labels": labels,
                "t": d["t"],
                "bin_s": d["bin_s"],
                "values": [d["receivers"][h]["mbit_s"] for h in hosts],
            }
        )
    return _time_heatmaps(
        rows,
        xlim,
        host_mbit,
        "goodput (Mbit/s)",
        "Delivered goodput per receiver (each "
        f"byte once, at its first arrival; {int(_bin(goodput) * 1000)} ms bins; top of the "
        f"scale: one host link, {host_mbit:g} Mbit/s)",
    )


def flows_figure(flows: dict[str, dict[str, Any]], xlim: tuple[float, float]) -> Figure:
    """Per PS-family strategy, each flow into the PS host as a heatmap row (goodput per bin), its
    retransmission timeouts marked with crosses: a column dark in every row is a stall of them all."""
    rows = []
    vmax = 0.0
    for name, d in flows.items():
        labels = list(d["flows"])
        rows.append(
            {
                "title": f"{name}: the {len(labels)} flows into the PS host {d['ps_host']} "
                f"(x: a retransmission timeout of the flow, {d['timeouts']} in all)",
                "labels": labels,
                "t": d["t"],
                "bin_s": d["bin_s"],
                "values": [d["flows"][k] for k in labels],
                "marks": d["marks"],
            }
        )
        vals = sorted(v for k in labels for v in d["flows"][k] if v > 0)
        if vals:
            vmax = max(vmax, vals[int(0.98 * (len(vals) - 1))])
    return _time_heatmaps(
        rows,
        xlim,
        vmax or 1.0,
        "goodput (Mbit/s)",
        "Flows into the parameter server: goodput per flow, its retransmission timeouts crossed",
        cmap="viridis",
    )


def utilisation_figure(util: dict[str, dict[str, Any]], color: dict[str, str]) -> Figure:
    """Link x time heatmaps of utilisation (share of each link's configured rate), one column per
    strategy, the same link rows in every column (host links, then uplinks)."""
    names = list(util)
    ref = max(util.values(), key=lambda d: len(d["links"]))
    links, labels, kinds = ref["links"], ref["labels"], ref["kinds"]
    n = len(links)
    fig = Figure(figsize=(WIDTH, 1.5 + 0.135 * n), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(names), squeeze=False, sharey=True)[0]
    mesh = None
    split = next((i for i, k in enumerate(kinds) if k == "uplink"), n)
    for j, (ax, name) in enumerate(zip(axes, names, strict=True)):
        d = util[name]
        idx = {lk: i for i, lk in enumerate(d["links"])}
        grid = [d["util"][idx[lk]] if lk in idx else [0.0] * (len(d["edges"]) - 1) for lk in links]
        mesh = ax.pcolormesh(
            d["edges"],
            range(n + 1),
            grid,
            cmap="viridis",
            vmin=0.0,
            vmax=1.0,
            shading="flat",
            rasterized=True,
        )
        ax.axhline(split, color="w", lw=1.5)
        ax.set_ylim(n, 0)
        ax.set_xlim(d["edges"][0], d["edges"][-1])
        mean = d["mean"]
        top = max(mean, key=lambda k: mean[k]) if mean else None
        head = wrap_name(name, 18)
        ax.set_title(
            head + (f"\nbusiest {top} {mean[top] * 100:.0f} %" if top else ""),
            fontsize=8,
            color=color.get(name, "k"),
        )
        ax.tick_params(axis="x", labelsize=7)
        if j == 0:
            ax.set_yticks([i + 0.5 for i in range(n)], labels, fontsize=6.5)
            ax.set_ylabel("link direction (host links, then uplinks)")
    fig.supxlabel(TIME_LABEL + "; one column per poll interval", fontsize=9)
    if mesh is not None:
        fig.colorbar(
            mesh,
            ax=list(axes),
            label="utilisation: share of the link's configured rate",
            format=lambda x, _: f"{x * 100:.0f} %",
            aspect=40,
        )
    fig.suptitle(
        "Link utilisation against capacity over time (controller port counters: tx bytes per poll "
        "x 8 / configured rate)",
        fontsize=10,
    )
    return fig


SPLIT_COLORS = {"bound_s": "#8c8c8c", "timeouts_s": "#d62728", "rest_s": "#f2c14e"}
SPLIT_LABELS = {
    "bound_s": "communication bound",
    "timeouts_s": "timeouts (timeout_idle_s / steps)",
    "rest_s": "rest: queueing, slow start, software",
}


def comm_split_figure(
    splits: dict[str, dict[str, float]], comm: dict[str, float | None], color: dict[str, str]
) -> Figure:
    """Each strategy's median communication time per step as bound + timeouts + rest (stacked bars),
    the measured median comm time as a black tick."""
    names = list(splits)
    fig, ax = canvas(1.3 + 0.42 * len(names))
    ax = ax[0][0]
    ys = list(range(len(names)))
    left = [0.0] * len(names)
    for key in ("bound_s", "timeouts_s", "rest_s"):
        vals = [float(splits[n].get(key) or 0.0) for n in names]
        ax.barh(
            ys,
            vals,
            left=left,
            color=SPLIT_COLORS[key],
            height=0.62,
            label=SPLIT_LABELS[key],
            edgecolor="w",
            lw=0.5,
        )
        for y, lo, v in zip(ys, left, vals, strict=True):
            if v > 0.04 * max(1e-9, max(sum(float(x or 0) for x in splits[m].values()) for m in names)):
                ax.text(lo + v / 2, y, f"{v:.3f}", ha="center", va="center", fontsize=7)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    cx = [(y, comm[n]) for y, n in zip(ys, names, strict=True) if comm.get(n) is not None]
    if cx:
        ax.plot(
            [c for _, c in cx],
            [y for y, _ in cx],
            ls="none",
            marker="|",
            ms=18,
            mew=2.2,
            color="k",
            label="measured comm time (median, comm_time_s)",
        )
    ax.set_yticks(ys, [wrap_name(n, 22) for n in names], fontsize=8)
    for t, n in zip(ax.get_yticklabels(), names, strict=True):
        t.set_color(color.get(n, "k"))
    ax.set_ylim(len(names) - 0.5, -0.5)
    top = max(left + [c for _, c in cx] + [0.1])
    ax.set_xlim(0, top * 1.08)
    ax.set_xlabel("seconds per step")
    ax.set_title("Where a step's communication time goes (summary.json comm_split)", fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=4, fontsize=8)
    return fig


def dequeue_cdf_figure(
    cdfs: dict[str, dict[str, Any]], accepted: tuple[float, float], color: dict[str, str], xmax: float = 2.5
) -> Figure:
    """CDF of the gaps between packets leaving each strategy's worst host port while backlogged, over
    the serialization time at its rate: a link that keeps its configured rate has them all near 1."""
    fig, ax = canvas(3.6)
    ax = ax[0][0]
    ax.axvspan(
        *accepted,
        color="#2ca02c",
        alpha=0.12,
        lw=0,
        label=f"median accepted as the configured rate ({accepted[0]:g}-{accepted[1]:g})",
    )
    ax.axvline(1.0, color="k", ls="--", lw=1.0, label="ideal: one serialization time (gap / ideal = 1)")
    for k, (name, d) in enumerate(cdfs.items()):
        med = d.get("median")
        ax.plot(
            d["x"],
            d["y"],
            color=color[name],
            lw=1.4,
            ls="-" if k % 2 == 0 else (0, (5, 1.5)),
            label=f"{name} at {d['port']}: median {med:.3f}, {d.get('gaps')} gaps"
            if med is not None
            else f"{name} at {d['port']}",
        )
    ax.set_xlim(0, xmax)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel(f"gap between departures / serialization time at the port's rate (axis cut at {xmax:g})")
    ax.set_ylabel("share of the gaps (CDF)")
    ax.set_title(
        "Does the bottleneck keep its rate? Departure gaps of each strategy's worst host port while "
        "its queue was backlogged (dequeue.json)",
        fontsize=10,
    )
    _legend(ax, loc="lower right")
    return fig


CORE_COLORS = ["#1f77b4", "#17becf", "#9467bd", "#2ca02c", "#8c564b", "#bcbd22", "#7f7f7f", "#e377c2"]


def cpu_figure(
    cpu: dict[str, dict[str, Any]], saturated: float, xlim: tuple[float, float], facts: dict[str, str]
) -> Figure:
    """One row per strategy: each core's busy share per second and ovs-vswitchd's share of a core, over
    the seconds the fidelity check reads (from the strategy's start); before its first training step
    (setup: processes starting, TCP set, captures started) shaded."""
    names = list(cpu)
    fig, axes = canvas(1.0 + 1.55 * len(names), len(names), 1, sharex=True, sharey=True)
    top = max([1.0] + [v for d in cpu.values() for v in d["switch"] if v is not None])
    lo = min([xlim[0]] + [d["start"] for d in cpu.values()])
    for ax, name in zip([a[0] for a in axes], names, strict=True):
        d = cpu[name]
        ax.axvspan(d["start"], 0.0, color="#bbb", alpha=0.3, lw=0)
        for k, core in enumerate(d["cores"]):
            ax.step(
                d["t"],
                [None if v is None else v * 100 for v in core],
                where="post",
                lw=0.9,
                color=CORE_COLORS[k % len(CORE_COLORS)],
            )
        if any(v is not None for v in d["switch"]):
            ax.step(
                d["t"],
                [None if v is None else v * 100 for v in d["switch"]],
                where="post",
                lw=1.6,
                color="#d62728",
            )
        ax.axhline(saturated * 100, color="k", ls=":", lw=0.9)
        ax.set_xlim(lo, xlim[1])
        ax.set_ylim(0, top * 100 * 1.12)
        ax.set_ylabel("CPU (%)", fontsize=8)
        ax.set_title(f"{name}: {facts.get(name, '')}", fontsize=9, loc="left")
    axes[-1][0].set_xlabel(TIME_LABEL)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    ncores = max(len(d["cores"]) for d in cpu.values())
    handles: list[Any] = [
        Line2D([], [], color=CORE_COLORS[k % len(CORE_COLORS)], lw=0.9, label=f"core {k} busy")
        for k in range(ncores)
    ]
    handles += [
        Line2D([], [], color="#d62728", lw=1.6, label="ovs-vswitchd (% of one core)"),
        Line2D([], [], color="k", ls=":", lw=0.9, label=f"saturated: {saturated * 100:.0f} %"),
        Patch(color="#bbb", alpha=0.3, label="before the first training step (setup)"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(6, len(handles)), fontsize=8)
    fig.suptitle(
        "CPU over time: every core's busy share and the software switch (cpu.jsonl, one sample a second)",
        fontsize=10,
    )
    return fig


def link_heatmap(
    links: list[str],
    names: list[str],
    share: dict[str, list[float]],
    nbytes: dict[str, list[float]],
    ps_port: str,
) -> Figure:
    """Each strategy's bytes per link direction as a share of its total (rows: links)."""
    fig, ax = canvas(max(2.8, 1.3 + 0.27 * len(links)), width=min(WIDTH, 3.8 + 1.7 * len(names)))
    ax = ax[0][0]
    matrix = [[share[n][i] for n in names] for i in range(len(links))]
    vmax = max((max(r) for r in matrix), default=1.0) or 1.0
    im = ax.imshow(matrix, aspect="auto", cmap="viridis", vmin=0.0, vmax=vmax)
    ax.set_xticks(range(len(names)), [wrap_name(n) for n in names], fontsize=8)
    ax.set_yticks(range(len(links)), [f"{lk} (PS port)" if lk == ps_port else lk for lk in links], fontsize=8)
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            ax.text(
                j,
                i,
                f"{v * 100:.1f} %  {nbytes[names[j]][i] / 1e6:.2f} MB",
                ha="center",
                va="center",
                fontsize=7,
                color="w" if v < 0.6 * vmax else "k",
            )
    fig.colorbar(
        im, ax=ax, label="share of the strategy's link bytes", format=lambda x, _: f"{x * 100:.0f} %"
    )
    ax.set_xlabel("strategy")
    ax.set_ylabel("link direction (switch port tx; hX-eth0: host sending)")
    ax.set_title("Bytes per link direction", fontsize=10)
    return fig


def compute_share_figure(
    shares: dict[str, dict[int, float]], stragglers: dict[int, str], color: dict[str, str]
) -> Figure:
    """Each worker's compute share of its own active time, per strategy; the stragglers hatched."""
    fig, ax = canvas(3.6)
    ax = ax[0][0]
    width = 0.8 / max(1, len(shares))
    for j, (name, ranks) in enumerate(shares.items()):
        xs = [r - 0.4 + (j + 0.5) * width for r in ranks]
        ax.bar(
            xs,
            [v * 100 for v in ranks.values()],
            width=width,
            color=color[name],
            label=name,
            hatch=["//" if r in stragglers else "" for r in ranks],
            edgecolor=["k" if r in stragglers else color[name] for r in ranks],
            linewidth=0.6,
        )
    ranks_all = sorted({r for v in shares.values() for r in v})
    ax.set_xticks(
        ranks_all, [f"{r} ({stragglers[r]}, straggler)" if r in stragglers else str(r) for r in ranks_all]
    )
    top = max((v for d in shares.values() for v in d.values()), default=0.0) * 100
    ax.set_ylim(0, max(5.0, top * 1.25))
    ax.set_xlabel("worker rank")
    ax.set_ylabel("compute share (% of own active time)")
    ax.set_title(
        "Worker compute share: compute time / the worker's first-step-to-last-step span", fontsize=10
    )
    _legend(ax, loc="upper right", ncols=min(5, max(1, len(shares))))
    return fig


def staleness_figure(hists: dict[str, dict[int, int]], color: dict[str, str]) -> Figure:
    """Applied parameter-server updates per staleness, per strategy."""
    fig, ax = canvas(3.4)
    ax = ax[0][0]
    top = max((max(h, default=0) for h in hists.values()), default=0)
    width = 0.8 / max(1, len(hists))
    for j, (name, h) in enumerate(hists.items()):
        ax.bar(
            [k - 0.4 + (j + 0.5) * width for k in range(top + 1)],
            [h.get(k, 0) for k in range(top + 1)],
            width=width,
            color=color[name],
            label=name,
        )
    ax.set_xticks(range(0, top + 1, max(1, math.ceil((top + 1) / 30))))
    ax.set_xlabel(
        "staleness (model versions between the one a gradient was computed on and the one it updated)"
    )
    ax.set_ylabel("applied updates")
    ax.set_title("Staleness of the updates the parameter server applied", fontsize=10)
    _legend(ax, loc="upper right")
    return fig


def loss_figure(
    loss: dict[str, dict[str, list[Any]]],
    target: float | None,
    xlim: tuple[float, float],
    color: dict[str, str],
) -> Figure:
    """Mean loss per step, against the step and against time."""
    fig, axes = canvas(3.6, 1, 2)
    ax_s, ax_t = axes[0]
    for k, (name, d) in enumerate(loss.items()):
        style = {
            "marker": MARKERS[k % len(MARKERS)],
            "ms": 8 - k,
            "mfc": "none" if k == 0 else color[name],
            "ls": "-" if k == 0 else "--",
            "color": color[name],
            "label": name,
        }
        ax_s.plot(d["steps"], d["loss"], **style)
        ax_t.plot(d["t"], d["loss"], **style)
    if target is not None:
        for ax in (ax_s, ax_t):
            ax.axhline(target, color="k", ls="--", lw=0.9, label=f"target loss {target:g}")
    ax_t.set_xlim(*xlim)
    ax_s.set_xlabel("training step")
    ax_t.set_xlabel(TIME_LABEL)
    for ax in (ax_s, ax_t):
        ax.set_ylabel("loss (mean over workers)")
    ax_s.set_title("Loss per step", fontsize=10)
    ax_t.set_title("Loss against time (a step's point: when its last worker ended it)", fontsize=10)
    _legend(ax_s, loc="upper right")
    _legend(ax_t, loc="upper right")
    return fig
