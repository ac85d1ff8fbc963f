"""What several sections share: one colour per strategy, the fault and event marks, the holes in the
controller's statistics, the one time axis of every timeline, and series more than one section plots
(prepared once per RunView, memoised with RunView.memo).
"""

from __future__ import annotations

from typing import Any

from report import series as S
from report.doc import Figure
from report.figures.base import colors as colors_of
from report.figures.base import to_png
from report.run import RunView


def colors(run: RunView) -> dict[str, str]:
    """One colour per strategy of the run, the same in every figure."""
    return colors_of(list(run.strategies))


def all_marks(run: RunView) -> dict[str, list[S.Mark]]:
    """Fault and event marks per strategy with a timeline."""
    return run.memo("marks", lambda: {s.name: S.marks(s) for s in run.timed})


def all_gaps(run: RunView) -> dict[str, list[dict[str, float]]]:
    """Holes in the controller's statistics per strategy."""
    iv = run.config.controller.interval
    return run.memo("gaps", lambda: {s.name: S.stats_gaps(s, iv) for s in run.timed})


def retransmits(run: RunView) -> dict[str, dict[str, Any]]:
    """Retransmissions per bin of the strategies with host captures (retransmits_timeline.json)."""

    def make() -> dict[str, dict[str, Any]]:
        return {s.name: r for s in run.timed if (r := S.retransmit_series(s)) is not None}

    return run.memo("retransmits", make)


def goodputs(run: RunView) -> dict[str, dict[str, Any]]:
    """Delivered goodput per receiver of the strategies with host captures (goodput_timeline.json)."""

    def make() -> dict[str, dict[str, Any]]:
        return {s.name: g for s in run.timed if (g := S.goodput_series(s)) is not None}

    return run.memo("goodput", make)


def time_range(run: RunView) -> tuple[float, float]:
    """The one x range of every timeline: 0 (first training step) to the longest strategy's last step,
    widened to show every fault and event mark."""
    hi = max((s.training_end or 0.0 for s in run.timed), default=1.0)
    ts = [m.t for ms in all_marks(run).values() for m in ms]
    lo, hi = min([0.0, *ts]), max([hi, *ts])
    pad = 0.02 * (hi - lo or 1.0)
    return lo - pad, hi + pad


def figure(key: str, fig: Any, title: str, caption: str, data: dict[str, Any]) -> Figure:
    """A drawn matplotlib figure as a page Figure (its PNG, and the data it plots for the tests)."""
    return Figure(key, to_png(fig), title, caption, data)


def marks_data(ms: dict[str, list[S.Mark]]) -> dict[str, list[dict[str, Any]]]:
    """The marks per strategy as plain dicts, for a figure's data."""
    return {n: [m.to_dict() for m in v] for n, v in ms.items()}


def loss_series(run: RunView) -> dict[str, dict[str, list[Any]]]:
    """Mean loss per step of every strategy with a timeline (the loss figure, the time to target)."""
    return run.memo("loss", lambda: {s.name: S.loss_series(s.steps, s.t0 or 0.0) for s in run.timed})
