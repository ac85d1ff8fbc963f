"""What every figure of the report is drawn with: matplotlib's Agg canvas (no pyplot state: safe in
tests and threads), the page's width and resolution, one colour per strategy, `to_png`, and the
pieces several figures share (fault and event marks, holes in the statistics, reference lines, a
legend only where there is something to list, long strategy names over two lines).
"""

from __future__ import annotations

import io
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


def binned_rate(ax: Any, bin_starts: list[float], per_bin: list[float], color: str, label: str) -> None:
    """A strategy's rate from its captures, one value per time bin given by the bin's start: drawn as
    steps that hold each value over its bin (unlike the controller's polls, stamped at their end)."""
    ax.step(bin_starts, per_bin, where="post", color=color, lw=1.1, label=label)


def legend(ax: Any, **kw: Any) -> None:
    """A small legend, only when the axes have something labelled."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, **kw)


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
