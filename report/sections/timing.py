"""Iteration time against the bounds: the iteration-time figure (faults at the step they hit), the
split of communication time into bound, timeouts and the rest, the bounds table, and for each
parameter-server strategy how much of its gap to the ring is the bound and how much the timeouts.
"""

from __future__ import annotations

from typing import Any

from report import series as S
from report.doc import Bullets, Section
from report.figures.timing import comm_split_figure, iteration_figure
from report.run import RunView, StrategyView, parse_spec
from report.sections.common import all_marks, colors, figure
from report.sections.tables import BOUND_COLUMNS, DASH, summary_table
from runmodel.strategy import COLLECTIVES
from runmodel.summary import StrategySummary


def iteration_time(run: RunView) -> Section | None:
    """Iteration time per step against each strategy's bound, faults placed at the step they hit; the
    communication time split into bound, timeouts and the rest."""
    if not run.timed:
        return None
    data = {s.name: S.iteration_series(s.steps) for s in run.timed}
    marks = all_marks(run)

    def at_step(name: str, m: S.Mark) -> float | None:
        pos = S.step_position(run.strategies[name].steps, m.abs_t)
        return None if pos is None else pos - 0.5  # step k's point stands for [k - 0.5, k + 0.5]

    bounds = {
        s.name: {
            "bound_s": s.summary.bound_s,
            "push_then_pull_s": s.summary.push_then_pull_s if s.ps_family else None,
        }
        for s in run.timed
        if s.summary.bound_s is not None
    }
    fig, drawn = iteration_figure(data, colors(run), marks, at_step, bounds)
    data_out: dict[str, Any] = dict(data)
    data_out["fault_steps"] = drawn
    data_out["bounds"] = bounds
    sec = Section(
        "Iteration time and bounds",
        [
            figure(
                "iter_time",
                fig,
                "Iteration time per step against the bounds",
                "Per step, the slowest worker's step time (t_end - t_start), per strategy; the "
                "median of these is "
                "the table's iteration time. Dashed, in the strategy's colour: its communication lower bound "
                "(summary.json bound_s: ps (N + 1) S / B, sharded over K hosts divided by K, ring 2 "
                "(N - 1) S / (N "
                "B)); dotted: push-then-pull 2 N S / (K B), a parameter server's step when no push "
                "overlaps a pull "
                "(push_then_pull_s). Red dashed verticals: faults; grey dotted: controller events, "
                "at the step "
                "running when they happened.",
                data_out,
            )
        ],
    )
    splits = {s.name: s.summary.comm_split for s in run.timed if s.summary.comm_split}
    if splits:
        comm = {n: run.strategies[n].summary.comm_time_s for n in splits}
        sec.add(
            figure(
                "comm_split",
                comm_split_figure(splits, comm, colors(run)),
                "Communication time split into bound, timeouts and the rest",
                "Each strategy's median communication time per step (comm_time_s, black tick) as "
                "summary.json comm_split: the bound (bound_s), the timeouts (timeout_idle_s / steps: "
                "seconds its bottleneck host's link sat idle while a flow waited for its "
                "retransmission timer) and the rest (queueing, slow start, software; never below 0).",
                {"splits": splits, "comm_time_s": comm},
            )
        )
    no_ptp = [s.name for s in run.timed if s.summary.push_then_pull_s is None]
    why = {
        "push_then_pull_s": f"{DASH} in push-then-pull (s) ({', '.join(no_ptp)}): only a parameter server "
        "on hosts of its own has one (none for collectives and colocated shards)."
    }
    sec.add(
        summary_table(
            run,
            "Bounds and the split of communication time",
            BOUND_COLUMNS,
            [s.name for s in run.timed],
            by_design=why if no_ptp else None,
        )
    )
    gaps = gap_sentences(run)
    if gaps:
        sec.add(Bullets(gaps))
    return sec


def reference_collective(run: RunView) -> StrategyView | None:
    """The first collective (ring, allreduce) with timings: what the PS family is held against."""
    return next(
        (
            s
            for s in run.timed
            if (sp := parse_spec(s.name))
            and sp.kind in COLLECTIVES
            and s.summary.comm_time_s is not None
            and s.summary.comm_split
        ),
        None,
    )


def split_adds_up(f: StrategySummary, tol: float = 0.002) -> bool:
    """comm_split's parts add up to comm_time_s (they do not when the bound and the timeouts exceed
    the measured time: the rest is then counted as 0)."""
    parts = sum(float(f.comm_split.get(k) or 0.0) for k in ("bound_s", "timeouts_s", "rest_s"))
    return f.comm_time_s is not None and abs(parts - f.comm_time_s) <= tol


def gap_sentences(run: RunView) -> list[str]:
    """For each PS-family strategy, how much of its gap to the ring is the bound and how much the
    timeouts (differences of summary.json's comm_split parts)."""
    ref = reference_collective(run)
    if ref is None:
        return []
    r = ref.summary
    out = []
    for s in run.timed:
        f = s.summary
        if not s.ps_family or not f.comm_split or f.comm_time_s is None or f.iter_time_s is None:
            continue
        gap = f.comm_time_s - r.comm_time_s
        d = {
            k: float(f.comm_split.get(k) or 0.0) - float(r.comm_split.get(k) or 0.0)
            for k in ("bound_s", "timeouts_s", "rest_s")
        }
        text = (
            f"{s.name}: a step took {f.iter_time_s:.3f} s against {ref.name}'s {r.iter_time_s:.3f} s, "
            f"its communication {f.comm_time_s:.3f} s against {r.comm_time_s:.3f} s. "
        )
        if gap > 0:
            pct = {k: v / gap * 100 for k, v in d.items()}
            text += (
                f"Of that {gap:.3f} s gap, {d['bound_s']:.3f} s ({pct['bound_s']:.0f} %) is the bound "
                f"({f.bound_s:.3f} s against {r.bound_s:.3f} s), {d['timeouts_s']:.3f} s "
                f"({pct['timeouts_s']:.0f} %) timeouts and {d['rest_s']:.3f} s ({pct['rest_s']:.0f} %) "
                "the rest."
            )
        else:
            text += f"It communicated {-gap:.3f} s less than {ref.name} per step."
        for x in (s, ref):
            if not split_adds_up(x.summary):
                parts = sum(
                    float(x.summary.comm_split.get(k) or 0.0) for k in ("bound_s", "timeouts_s", "rest_s")
                )
                text += (
                    f" {x.name}'s split does not add up: bound + timeouts + rest = {parts:.3f} s, its "
                    f"comm time {x.summary.comm_time_s:.3f} s (the rest is never below 0)."
                )
        out.append(text)
    return out
