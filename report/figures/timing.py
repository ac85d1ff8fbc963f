"""Iteration time and its parts: the step time per step against the bounds (faults at the step they
hit), and the communication time split into bound, timeouts and the rest."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from matplotlib.figure import Figure

from report.figures.base import MARKERS, canvas, draw_marks, ref_lines, wrap_name
from report.series import Mark


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
