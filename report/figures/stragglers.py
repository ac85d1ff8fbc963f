"""Stragglers and convergence: each worker's compute share, the staleness of applied updates, and the
loss against step and time."""

from __future__ import annotations

import math
from typing import Any

from matplotlib.figure import Figure

from report.figures.base import MARKERS, TIME_LABEL, canvas, legend


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
    legend(ax, loc="upper right", ncols=min(5, max(1, len(shares))))
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
    legend(ax, loc="upper right")
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
    legend(ax_s, loc="upper right")
    legend(ax_t, loc="upper right")
    return fig
