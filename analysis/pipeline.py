"""A pipeline's (pp) own figures: the bubble each stage measured, its theory, the activations in
flight per stage, and the bytes a stage boundary carries per step.

Measured bubble: over a stage's steps from the third on (STEADY_FROM: the first holds first-time
costs, torch's first passes, and in the second the later stages catch up with them), 1 -
sum(compute_s) / sum(step time); the stages' mean is the figure, each stage's beside it. With
fewer steps, every step but the first, or the only one.
Theory: (S - 1)/(M + S - 1) for both schedules (equal stage times, free communication).
"""

from __future__ import annotations

import statistics
from typing import Any

from runmodel.folder import StrategyFolder
from runmodel.records import read_jsonl
from runmodel.strategy import StrategySpec
from workloads.pipeline import stage_bytes_theory  # torch: imported only when a run has a pp strategy
from workloads.schedules import bubble_theory

STEADY_FROM = 2  # the first step whose times a pipeline's bubble counts (when there are more)


def steady(lines: list[Any]) -> list[Any]:
    """A stage's steps in the pipeline's steady state (see the module's docstring)."""
    return lines[STEADY_FROM:] or lines[1:] or lines


def pp_figures(sf: StrategyFolder, spec: StrategySpec, grad_mb: float, batch: int, out: Any) -> None:
    """Fill the pp_* fields of a StrategySummary from the stages' step lines."""
    out.pp_bubble_theory = round(bubble_theory(spec.stages, spec.micro), 4)
    out.pp_stage_bytes_theory = stage_bytes_theory(grad_mb, batch)
    bubbles: dict[str, float] = {}
    held: dict[str, int] = {}
    for rank in sf.ranks():
        lines = [d for d in read_jsonl(sf.worker_log(rank)) if "step" in d and "event" not in d]
        later = steady(lines)
        span = sum(d["t_end"] - d["t_start"] for d in later)
        if span > 0:
            bubbles[str(rank)] = round(1 - sum(d["compute_s"] for d in later) / span, 4)
        if lines:
            held[str(rank)] = max(int(d.get("in_flight", 0)) for d in lines)
    out.pp_bubble_by_stage = bubbles
    out.pp_bubble = round(statistics.fmean(bubbles.values()), 4) if bubbles else None
    out.pp_in_flight_by_stage = held
