"""The fidelity checks drawn: the CDF of departure gaps at the bottleneck against the ideal, and each
core's and the software switch's CPU over time."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from report.figures.base import TIME_LABEL, canvas, legend


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
    legend(ax, loc="lower right")
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
