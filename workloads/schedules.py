"""Pipeline-parallel schedules as pure functions: what one stage does, in order, in one step.

A model cut into S stages runs on S processes; a step's batch is cut into M micro-batches. Stage s
receives micro-batch i's activations from stage s - 1, runs its forward, and sends its output to
stage s + 1; backwards go the other way with the activations' gradients. Two orders of the
forwards and backwards:

* GPipe: every forward, then every backward. A stage holds all M micro-batches' activations.
* 1F1B (PipeDream-flush): stage s runs min(S - s - 1, M) forwards to fill the pipe, then one
  forward and one backward in turn, then the remaining backwards. It never holds more than
  min(S - s, M) micro-batches' activations; its bubble is GPipe's.

With forwards and backwards of the same length on every stage and free communication, both idle
(S - 1)/(M + S - 1) of a step (the "bubble"). Sends are non-blocking and receives block, in the
order given here; the worker (workloads.pipeline) and its tests keep to exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass

from runmodel.strategy import SCHEDULES

FWD, BWD = "fwd", "bwd"
SEND_ACT, RECV_ACT = "send_act", "recv_act"  # stage s -> s + 1: a micro-batch's output
SEND_GRAD, RECV_GRAD = "send_grad", "recv_grad"  # stage s + 1 -> s: the gradient of that output


@dataclass(frozen=True)
class Action:
    """One thing a stage does: `op` (FWD, BWD, SEND_*, RECV_*) on micro-batch `mb`."""

    op: str
    mb: int

    def __str__(self) -> str:
        return f"{self.op} {self.mb}"


def _check(stage: int, stages: int, micro: int, schedule: str) -> None:
    """Refuse a stage outside the pipeline, no micro-batch or an unknown schedule (ValueError)."""
    if stages < 1 or not 0 <= stage < stages:
        raise ValueError(f"stage {stage} outside a pipeline of {stages} stages")
    if micro < 1:
        raise ValueError(f"micro-batches must be >= 1, got {micro}")
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r} (known: {', '.join(SCHEDULES)})")


def compute_order(stage: int, stages: int, micro: int, schedule: str) -> list[Action]:
    """The stage's forwards and backwards only, in the order it runs them."""
    _check(stage, stages, micro, schedule)
    if schedule == "gpipe":
        return [Action(FWD, i) for i in range(micro)] + [Action(BWD, i) for i in range(micro)]
    warmup = min(stages - stage - 1, micro)
    order = [Action(FWD, i) for i in range(warmup)]
    for k in range(micro - warmup):
        order += [Action(FWD, warmup + k), Action(BWD, k)]
    order += [Action(BWD, i) for i in range(micro - warmup, micro)]
    return order


def stage_actions(stage: int, stages: int, micro: int, schedule: str) -> list[Action]:
    """The stage's whole step: each forward after its activations' receive (not on the first
    stage) and before its output's send (not on the last), each backward after its gradient's
    receive (not on the last stage) and before its input gradient's send (not on the first)."""
    first, last = stage == 0, stage == stages - 1
    out: list[Action] = []
    for a in compute_order(stage, stages, micro, schedule):
        if a.op == FWD:
            out += (
                ([] if first else [Action(RECV_ACT, a.mb)]) + [a] + ([] if last else [Action(SEND_ACT, a.mb)])
            )
        else:
            out += (
                ([] if last else [Action(RECV_GRAD, a.mb)])
                + [a]
                + ([] if first else [Action(SEND_GRAD, a.mb)])
            )
    return out


def max_in_flight(actions: list[Action]) -> int:
    """The most micro-batches whose forward has run and whose backward has not, at any point:
    the activations the stage must keep."""
    held = peak = 0
    for a in actions:
        held += {FWD: 1, BWD: -1}.get(a.op, 0)
        peak = max(peak, held)
    return peak


def in_flight_theory(stage: int, stages: int, micro: int, schedule: str) -> int:
    """Activations held at most: M for GPipe, min(S - s, M) for 1F1B."""
    _check(stage, stages, micro, schedule)
    return micro if schedule == "gpipe" else min(stages - stage, micro)


def bubble_theory(stages: int, micro: int) -> float:
    """The idle share of a step, (S - 1)/(M + S - 1), of both schedules with equal stage times."""
    if stages < 1 or micro < 1:
        raise ValueError("stages and micro-batches must be >= 1")
    return (stages - 1) / (micro + stages - 1)
