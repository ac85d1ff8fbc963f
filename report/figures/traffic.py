"""What the links carried: goodput over time, per receiver and per flow into the PS (time heatmaps),
link utilisation per link direction, and bytes per link direction."""

from __future__ import annotations

from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from report.figures.base import DPI, TIME_LABEL, WIDTH, binned_rate, canvas, draw_marks, legend, wrap_name
from report.series import Mark


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
        binned_rate(
            ax, d["t"], d["goodput_mbit_s"], color[name], f"{name}: {d['bytes_total'] / 1e6:.1f} MB delivered"
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
    legend(ax, loc="upper right", ncols=2 if len(goodput) > 3 else 1)
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
