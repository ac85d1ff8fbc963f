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


def canvas(height: float, rows: int = 1, cols: int = 1, width: float = WIDTH,
           **kw: Any) -> tuple[Figure, Any]:
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


def draw_marks(ax: Any, by_strategy: dict[str, list[Mark]],
               to_x: Callable[[str, Mark], float | None] | None = None) -> dict[str, list[float]]:
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
            ax.axvline(x, color=FAULT if fault else EVENT, ls="--" if fault else ":",
                       lw=1.1 if fault else 0.9, zorder=1)
            if any(abs(x - y) < near for y in labelled):
                continue
            labelled.append(x)
            text = m.label if fault else m.kind + (f" x{m.count}" if m.count > 1 else "")
            ax.text(x, 0.98, " " + (f"{name}: " if several else "") + text, transform=tr, rotation=90,
                    ha="right", va="top", fontsize=7, color=FAULT if fault else EVENT, clip_on=True)
        drawn[name].sort()
    return drawn


def draw_gaps(ax: Any, by_strategy: dict[str, list[dict[str, float]]]) -> None:
    """Shade the spans without controller statistics."""
    tr = ax.get_xaxis_transform()
    several = sum(1 for v in by_strategy.values() if v) > 1
    for name, gaps in by_strategy.items():
        for g in gaps:
            ax.axvspan(g["t0"], g["t1"], color="#999", alpha=0.25, lw=0, zorder=0)
            ax.text((g["t0"] + g["t1"]) / 2, 0.5, f"{name + ': ' if several else ''}no statistics\n"
                    f"{g['seconds']:.1f} s", transform=tr, ha="center", va="center", fontsize=7, color="#444")


def _legend(ax: Any, **kw: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, **kw)


# -- figures ------------------------------------------------------------------------------------------
def iteration_figure(series: dict[str, dict[str, list[Any]]], color: dict[str, str],
                     marks: dict[str, list[Mark]], to_step: Callable[[str, Mark], float | None]
                     ) -> tuple[Figure, dict[str, list[float]]]:
    """Iteration time per step, one line per strategy, faults placed at the step they hit."""
    fig, ax = canvas(3.6)
    ax = ax[0][0]
    for k, (name, d) in enumerate(series.items()):
        ax.plot(d["steps"], d["seconds"], marker=MARKERS[k % len(MARKERS)], ms=8 - k, color=color[name],
                label=name)
    steps = sorted({k for d in series.values() for k in d["steps"]})
    if steps:
        every = max(1, math.ceil(len(steps) / 25))
        ax.set_xticks(steps[::every])
        ax.set_xlim(steps[0] - 0.6, steps[-1] + 0.6)  # a mark early in the first step stays in view
    ax.set_ylim(bottom=0)
    drawn = draw_marks(ax, marks, to_step)
    ax.set_xlabel("training step")
    ax.set_ylabel("iteration time (s)")
    ax.set_title("Iteration time per step (slowest worker's step: what the step cost the job)")
    _legend(ax, loc="upper right")
    return fig, drawn


def queue_figure(occupancy: dict[str, dict[str, Any]], buffer_pkts: int, xlim: tuple[float, float],
                 color: dict[str, str], marks: dict[str, list[Mark]]) -> Figure:
    """The PS port's backlog over time, one row per PS-family strategy, with the configured buffer."""
    n = len(occupancy)
    fig, axes = canvas(1.2 + 2.0 * n, n, 1, sharex=True, sharey=True)
    for ax, (name, d) in zip([a[0] for a in axes], occupancy.items(), strict=True):
        ax.plot(d["t"], d["backlog_packets"], color=color[name], lw=0.9, label=f"{name}: backlog")
        ax.axhline(buffer_pkts, color="k", ls="--", lw=0.9, label=f"buffer: {buffer_pkts} packets")
        ax.set_xlim(*xlim)
        ax.set_ylim(0, max(buffer_pkts, d["max"] or 0) * 1.15)
        draw_marks(ax, {name: marks.get(name, [])})
        ax.set_ylabel("backlog (packets)")
        ax.set_title(f"{name}: PS port {d['port']} queue occupancy (qdisc backlog, sampled every 10 ms)",
                     fontsize=10)
        _legend(ax, loc="upper right")
        if not d["t"]:
            note(ax, "no queue samples")
    axes[-1][0].set_xlabel(TIME_LABEL)
    return fig


def drops_retx_figure(drops: dict[str, dict[str, Any]], retx: dict[str, dict[str, Any]] | None,
                      ps_family: list[str], xlim: tuple[float, float], color: dict[str, str],
                      marks: dict[str, list[Mark]], gaps: dict[str, list[dict[str, float]]]) -> Figure:
    """Queue drops per second (whole fabric; the PS port for the PS family) and, with host captures,
    TCP retransmissions per second."""
    rows = 2 if retx is not None else 1
    fig, axes = canvas(1.4 + 2.3 * rows, rows, 1, sharex=True)
    ax = axes[0][0]
    for name, d in drops.items():
        ax.step(d["fabric"]["t"], d["fabric"]["per_s"], where="pre", color=color[name], lw=1.3,
                label=f"{name}: all switch ports")
        if name in ps_family:
            ax.step(d["ps_port"]["t"], d["ps_port"]["per_s"], where="pre", color=color[name], lw=1.0,
                    ls=(0, (4, 2)), alpha=0.85, label=f"{name}: PS port")
    ax.set_xlim(*xlim)
    ax.set_ylim(bottom=0)
    draw_marks(ax, marks)
    draw_gaps(ax, gaps)
    ax.set_ylabel("queue drops / s")
    ax.set_title("Switch queue drops per second (controller's queue statistics, per poll)", fontsize=10)
    _legend(ax, loc="upper right")
    if retx is not None:
        ax = axes[1][0]
        for name, d in retx.items():
            ax.step(d["t"], d["retransmits_per_s"], where="post", color=color[name], lw=1.1, label=name)
        ax.set_ylim(bottom=0)
        draw_marks(ax, marks)
        ax.set_ylabel("retransmissions / s")
        ax.set_title(f"TCP retransmissions per second (host captures, {int(_bin(retx) * 1000)} ms bins)",
                     fontsize=10)
        _legend(ax, loc="upper right")
    axes[-1][0].set_xlabel(TIME_LABEL)
    return fig


def _bin(series: dict[str, dict[str, Any]]) -> float:
    return next((d["bin_s"] for d in series.values()), 0.1)


def goodput_figure(goodput: dict[str, dict[str, Any]], host_mbit: float, xlim: tuple[float, float],
                   color: dict[str, str], marks: dict[str, list[Mark]]) -> Figure:
    """Payload delivered to the hosts per second, summed over the hosts, against one host link's rate."""
    fig, ax = canvas(3.6)
    ax = ax[0][0]
    for name, d in goodput.items():
        ax.step(d["t"], d["goodput_mbit_s"], where="post", color=color[name], lw=1.1, label=name)
    ax.axhline(host_mbit, color="k", ls="--", lw=0.9, label=f"one host link: {host_mbit:g} Mbit/s")
    ax.set_xlim(*xlim)
    ax.set_ylim(bottom=0)
    draw_marks(ax, marks)
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel("goodput (Mbit/s)")
    ax.set_title("Delivered goodput, all hosts together (payload first arrivals, "
                 f"{int(_bin(goodput) * 1000)} ms bins)", fontsize=10)
    _legend(ax, loc="upper right")
    return fig


def link_heatmap(links: list[str], names: list[str], share: dict[str, list[float]],
                 nbytes: dict[str, list[float]], ps_port: str) -> Figure:
    """Each strategy's bytes per link direction as a share of its total (rows: links)."""
    fig, ax = canvas(max(2.8, 1.3 + 0.27 * len(links)), width=min(WIDTH, 3.8 + 1.7 * len(names)))
    ax = ax[0][0]
    matrix = [[share[n][i] for n in names] for i in range(len(links))]
    vmax = max((max(r) for r in matrix), default=1.0) or 1.0
    im = ax.imshow(matrix, aspect="auto", cmap="viridis", vmin=0.0, vmax=vmax)
    ax.set_xticks(range(len(names)), names)
    ax.set_yticks(range(len(links)), [f"{lk} (PS port)" if lk == ps_port else lk for lk in links], fontsize=8)
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            ax.text(j, i, f"{v * 100:.1f} %  {nbytes[names[j]][i] / 1e6:.2f} MB", ha="center", va="center",
                    fontsize=7, color="w" if v < 0.6 * vmax else "k")
    fig.colorbar(im, ax=ax, label="share of the strategy's link bytes",
                 format=lambda x, _: f"{x * 100:.0f} %")
    ax.set_xlabel("strategy")
    ax.set_ylabel("link direction (switch port tx; hX-eth0: host sending)")
    ax.set_title("Bytes per link direction", fontsize=10)
    return fig


def compute_share_figure(shares: dict[str, dict[int, float]], stragglers: dict[int, str],
                         color: dict[str, str]) -> Figure:
    """Each worker's compute share of its own active time, per strategy; the stragglers hatched."""
    fig, ax = canvas(3.6)
    ax = ax[0][0]
    width = 0.8 / max(1, len(shares))
    for j, (name, ranks) in enumerate(shares.items()):
        xs = [r - 0.4 + (j + 0.5) * width for r in ranks]
        ax.bar(xs, [v * 100 for v in ranks.values()], width=width, color=color[name], label=name,
               hatch=["//" if r in stragglers else "" for r in ranks],
               edgecolor=["k" if r in stragglers else color[name] for r in ranks], linewidth=0.6)
    ranks_all = sorted({r for v in shares.values() for r in v})
    ax.set_xticks(ranks_all, [f"{r} ({stragglers[r]}, straggler)" if r in stragglers else str(r)
                              for r in ranks_all])
    top = max((v for d in shares.values() for v in d.values()), default=0.0) * 100
    ax.set_ylim(0, max(5.0, top * 1.25))
    ax.set_xlabel("worker rank")
    ax.set_ylabel("compute share (% of own active time)")
    ax.set_title("Worker compute share: compute time / the worker's first-step-to-last-step span",
                 fontsize=10)
    _legend(ax, loc="upper right", ncols=min(5, max(1, len(shares))))
    return fig


def staleness_figure(hists: dict[str, dict[int, int]], color: dict[str, str]) -> Figure:
    """Applied parameter-server updates per staleness, per strategy."""
    fig, ax = canvas(3.4)
    ax = ax[0][0]
    top = max((max(h, default=0) for h in hists.values()), default=0)
    width = 0.8 / max(1, len(hists))
    for j, (name, h) in enumerate(hists.items()):
        ax.bar([k - 0.4 + (j + 0.5) * width for k in range(top + 1)], [h.get(k, 0) for k in range(top + 1)],
               width=width, color=color[name], label=name)
    ax.set_xticks(range(0, top + 1, max(1, math.ceil((top + 1) / 30))))
    ax.set_xlabel("staleness (model versions between the one a gradient was computed on and the one it "
                  "updated)")
    ax.set_ylabel("applied updates")
    ax.set_title("Staleness of the updates the parameter server applied", fontsize=10)
    _legend(ax, loc="upper right")
    return fig


def loss_figure(loss: dict[str, dict[str, list[Any]]], target: float | None, xlim: tuple[float, float],
                color: dict[str, str]) -> Figure:
    """Mean loss per step, against the step and against time."""
    fig, axes = canvas(3.6, 1, 2)
    ax_s, ax_t = axes[0]
    for k, (name, d) in enumerate(loss.items()):
        style = {"marker": MARKERS[k % len(MARKERS)], "ms": 8 - k, "mfc": "none" if k == 0 else color[name],
                 "ls": "-" if k == 0 else "--", "color": color[name], "label": name}
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
