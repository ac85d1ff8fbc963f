"""The pipeline schedules (workloads.schedules) against hand-worked cases and a tiny event
simulator written here: non-blocking sends, blocking receives, fixed forward/backward times."""

from __future__ import annotations

import pytest

from runmodel.strategy import SCHEDULES
from workloads.schedules import (
    BWD,
    FWD,
    RECV_ACT,
    RECV_GRAD,
    SEND_ACT,
    SEND_GRAD,
    Action,
    bubble_theory,
    compute_order,
    in_flight_theory,
    max_in_flight,
    stage_actions,
)

CASES = [(s, m, k) for s in (1, 2, 3, 4) for m in (1, 2, 3, 4, 8) for k in SCHEDULES]


def simulate(stages: int, micro: int, schedule: str, t_f: float, t_b: float) -> tuple[float, list[float]]:
    """Run every stage's actions; returns (makespan, busy time per stage). A receive waits for its
    send (by neighbour, kind and micro-batch); AssertionError when no stage can move (deadlock)."""
    plans = [stage_actions(s, stages, micro, schedule) for s in range(stages)]
    pos, clock, busy = [0] * stages, [0.0] * stages, [0.0] * stages
    sent: dict[tuple[str, int, int], float] = {}  # (kind, to, mb) -> when it left
    while any(p < len(plan) for p, plan in zip(pos, plans, strict=True)):
        moved = False
        for s in range(stages):
            while pos[s] < len(plans[s]):
                a = plans[s][pos[s]]
                if a.op in (RECV_ACT, RECV_GRAD):
                    key = ("act" if a.op == RECV_ACT else "grad", s, a.mb)
                    if key not in sent:
                        break
                    clock[s] = max(clock[s], sent.pop(key))
                elif a.op in (SEND_ACT, SEND_GRAD):
                    to = s + 1 if a.op == SEND_ACT else s - 1
                    sent[("act" if a.op == SEND_ACT else "grad", to, a.mb)] = clock[s]
                else:
                    dt = t_f if a.op == FWD else t_b
                    clock[s] += dt
                    busy[s] += dt
                pos[s] += 1
                moved = True
        assert moved, f"deadlock: {schedule} S={stages} M={micro} at {pos}"
    assert not sent, f"sent but never received: {sent}"
    return max(clock), busy


def test_gpipe_by_hand() -> None:
    """S=2, M=2, GPipe: stage 0 forwards both, then runs the backwards as gradients come back."""
    got = [str(a) for a in stage_actions(0, 2, 2, "gpipe")]
    assert got == [
        "fwd 0", "send_act 0", "fwd 1", "send_act 1",
        "recv_grad 0", "bwd 0", "recv_grad 1", "bwd 1",
    ]  # fmt: skip
    got = [str(a) for a in stage_actions(1, 2, 2, "gpipe")]
    assert got == [
        "recv_act 0",
        "fwd 0",
        "recv_act 1",
        "fwd 1",
        "bwd 0",
        "send_grad 0",
        "bwd 1",
        "send_grad 1",
    ]


def test_1f1b_by_hand() -> None:
    """S=3, M=4: stage 0 warms up with 2 forwards, stage 1 with 1, the last stage with none."""

    def short(s: int) -> str:
        return " ".join(f"{a.op[0]}{a.mb}" for a in compute_order(s, 3, 4, "1f1b"))

    assert short(0) == "f0 f1 f2 b0 f3 b1 b2 b3"
    assert short(1) == "f0 f1 b0 f2 b1 f3 b2 b3"
    assert short(2) == "f0 b0 f1 b1 f2 b2 f3 b3"


@pytest.mark.parametrize(("stages", "micro", "schedule"), CASES)
def test_every_micro_batch_once_and_in_order(stages: int, micro: int, schedule: str) -> None:
    """Each micro-batch's forward once, before its backward once; communication only to a neighbour."""
    for s in range(stages):
        acts = stage_actions(s, stages, micro, schedule)
        for op in (FWD, BWD):
            assert sorted(a.mb for a in acts if a.op == op) == list(range(micro))
        for i in range(micro):
            assert acts.index(Action(FWD, i)) < acts.index(Action(BWD, i))
        ops = {a.op for a in acts}
        assert (RECV_ACT in ops) == (SEND_GRAD in ops) == (s > 0)
        assert (SEND_ACT in ops) == (RECV_GRAD in ops) == (s < stages - 1)


@pytest.mark.parametrize(("stages", "micro", "schedule"), CASES)
def test_sends_match_receives_in_order(stages: int, micro: int, schedule: str) -> None:
    """On each link and direction the receiver takes micro-batches in the order they are sent."""
    for s in range(stages - 1):
        up, down = stage_actions(s, stages, micro, schedule), stage_actions(s + 1, stages, micro, schedule)
        assert [a.mb for a in up if a.op == SEND_ACT] == [a.mb for a in down if a.op == RECV_ACT]
        assert [a.mb for a in down if a.op == SEND_GRAD] == [a.mb for a in up if a.op == RECV_GRAD]


@pytest.mark.parametrize(("stages", "micro", "schedule"), CASES)
def test_in_flight(stages: int, micro: int, schedule: str) -> None:
    """GPipe holds all M micro-batches' activations; 1F1B at most S - s of them."""
    for s in range(stages):
        held = max_in_flight(stage_actions(s, stages, micro, schedule))
        expect = micro if schedule == "gpipe" else min(stages - s, micro)
        assert held == expect == in_flight_theory(s, stages, micro, schedule)
        if schedule == "1f1b":
            assert held <= stages - s


@pytest.mark.parametrize(("stages", "micro", "schedule"), CASES)
def test_no_deadlock_and_bubble(stages: int, micro: int, schedule: str) -> None:
    """Equal forward and backward times: the step is (M + S - 1)(t_f + t_b), every stage idles
    (S - 1)/(M + S - 1) of it (hand-worked: the fill and the drain of the pipe)."""
    makespan, busy = simulate(stages, micro, schedule, 1.0, 1.0)
    assert makespan == pytest.approx((micro + stages - 1) * 2.0)
    for b in busy:
        assert 1 - b / makespan == pytest.approx(bubble_theory(stages, micro))
    assert bubble_theory(stages, micro) == pytest.approx((stages - 1) / (micro + stages - 1))


@pytest.mark.parametrize(("stages", "micro"), [(2, 4), (3, 8), (4, 1)])
def test_gpipe_bubble_with_slower_backwards(stages: int, micro: int) -> None:
    """GPipe's bubble does not depend on the backward being twice the forward."""
    makespan, busy = simulate(stages, micro, "gpipe", 1.0, 2.0)
    assert makespan == pytest.approx((micro + stages - 1) * 3.0)
    assert 1 - busy[0] / makespan == pytest.approx(bubble_theory(stages, micro))


@pytest.mark.parametrize(
    ("args", "words"),
    [((2, 2, 4, "gpipe"), "outside"), ((0, 2, 0, "gpipe"), "micro"), ((0, 2, 4, "zb"), "unknown schedule")],
)
def test_refused(args: tuple[int, int, int, str], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        stage_actions(*args)
