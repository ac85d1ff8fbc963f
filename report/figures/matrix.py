"""A strategy's traffic matrix host to host beside its theory: two heatmaps on one colour scale (MB per
training step), senders down, receivers across, every cell's value written in it."""

from __future__ import annotations

import math
from typing import Any

from matplotlib import colormaps

from report.figures.base import WIDTH, canvas, note

OFF_THEORY = "#e8590c"  # the frame of a measured cell the theory says carries nothing
FRAME_SHARE = 0.01  # framed when it carries this share of the colour scale's top or more (not every SYN)


def matrix_figure(
    name: str, hosts: list[str], measured: list[list[float]] | None, theory: list[list[float]], title: str
) -> Any:
    """Measured (None: no host captures) and theoretical MB per step, rows the sending host, columns the
    receiving host; a measured cell with bytes where the theory has none (FRAME_SHARE of the scale or
    more) is framed."""
    n = len(hosts)
    fig, axes = canvas(1.6 + 0.42 * n, 1, 2, width=min(WIDTH, 3.0 + 1.3 * n))
    grids = [("measured (captures)", measured), ("theory (the strategy's traffic_theory)", theory)]
    vmax = max((v for _, g in grids if g for row in g for v in row), default=0.0) or 1.0
    digits = max(2, 2 - math.floor(math.log10(vmax)))  # three significant digits in the largest cell
    im = None
    for ax, (head, grid) in zip(axes[0], grids, strict=True):
        ax.set_title(head, fontsize=9)
        ax.set_xticks(range(n), hosts, fontsize=8)
        ax.set_yticks(range(n), hosts, fontsize=8)
        ax.set_xlabel("receiving host")
        ax.set_ylabel("sending host")
        if grid is None:
            ax.set_xlim(-0.5, n - 0.5)
            ax.set_ylim(n - 0.5, -0.5)
            note(ax, "no host captures in this run")
            continue
        cmap = colormaps["viridis"].with_extremes(bad="#d9d9d9")  # the diagonal: a host to itself
        shown = [[float("nan") if i == j else v for j, v in enumerate(row)] for i, row in enumerate(grid)]
        im = ax.imshow(shown, cmap=cmap, vmin=0.0, vmax=vmax, aspect="equal")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if i == j:
                    continue
                ax.text(j, i, f"{v:.{digits}f}" if v else "0", ha="center", va="center", fontsize=6.5,
                        color="w" if v < 0.6 * vmax else "k")  # fmt: skip
                if grid is measured and v >= FRAME_SHARE * vmax and not theory[i][j]:
                    ax.add_patch(_frame(j, i))
    if im is not None:
        fig.colorbar(im, ax=list(axes[0]), label="MB per training step", shrink=0.9)
    fig.suptitle(title, fontsize=10)
    return fig


def _frame(x: float, y: float) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, ec=OFF_THEORY, lw=1.4)
