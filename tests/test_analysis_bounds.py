"""Known answers for every communication bound of analysis.bounds, worked out by hand here.

The numbers are the textbook formulas at round values, so a wrong factor (N for N + 1, a missing
2, K applied twice, payload bytes taken for wire bytes) moves a result far from its answer:
- the synchronous PS: (N + 1) S / B; asynchronous: N S / B; sharded over K dedicated hosts: / K;
- K colocated shards: (S (K - 1) + (N - 1) S) / (K B);
- the ring (and gloo's all-reduce): 2 (N - 1) S / (N B);
- push-then-pull, a PS with no overlap: 2 N S / (K B).
S is in wire bytes: 1448 payload bytes travel as a 1514-byte frame.
"""

from __future__ import annotations

import pytest

from analysis.bounds import comm_bound_s, comm_split, push_then_pull_s
from runmodel.strategy import StrategySpec

# S = 1448 * 1000 payload bytes = 1,514,000 wire bytes; B = 10 Mbit/s = 1,250,000 bytes/s,
# so one S over one link takes exactly 1.2112 s
PAYLOAD = 1448 * 1000
ONE_S = 1_514_000 / 1_250_000  # 1.2112 s
LINK_MBIT = 10.0


@pytest.mark.parametrize(
    ("spec", "workers", "seconds"),
    [
        ("ps", 7, 8 * ONE_S),  # (7 + 1) S / B = 9.6896 s
        ("ssp", 7, 8 * ONE_S),
        ("backup", 4, 5 * ONE_S),
        ("async", 7, 7 * ONE_S),  # no barrier: N S / B
        ("ps:shards=2", 7, 4 * ONE_S),  # (7 + 1) S / (2 B)
        ("ps:shards=4", 7, 2 * ONE_S),
        ("async:shards=2", 6, 3 * ONE_S),  # 6 S / (2 B)
        ("ps:shards=2:placement=colocated", 7, 3.5 * ONE_S),  # (S + 6 S) / (2 B)
        ("ps:shards=4:placement=colocated", 7, 2.25 * ONE_S),  # (3 S + 6 S) / (4 B)
        ("ring", 7, 12 / 7 * ONE_S),  # 2 * 6 S / (7 B)
        ("ring", 2, 1 * ONE_S),  # 2 * 1 S / (2 B)
        ("allreduce", 4, 1.5 * ONE_S),  # 2 * 3 S / (4 B)
        ("ps:pull=serial", 3, 4 * ONE_S),  # the order of replies does not change the bound
        ("ps:rto_min_ms=1:cc=reno", 3, 4 * ONE_S),  # nor does TCP
    ],
)
def test_comm_bound_known_answers(spec: str, workers: int, seconds: float) -> None:
    got = comm_bound_s(StrategySpec.parse(spec), workers, PAYLOAD, LINK_MBIT)
    assert got == pytest.approx(seconds, rel=1e-9), (spec, workers)


def test_the_bound_scales_with_size_and_inversely_with_rate() -> None:
    ps = StrategySpec.parse("ps")
    assert comm_bound_s(ps, 7, 2 * PAYLOAD, LINK_MBIT) == pytest.approx(2 * 8 * ONE_S)
    assert comm_bound_s(ps, 7, PAYLOAD, 2 * LINK_MBIT) == pytest.approx(8 * ONE_S / 2)


@pytest.mark.parametrize(
    ("spec", "workers", "seconds"),
    [
        ("ps", 7, 14 * ONE_S),  # 2 N S / B
        ("ps:shards=2", 7, 7 * ONE_S),
        ("async", 3, 6 * ONE_S),
        ("ps:shards=2:placement=colocated", 7, None),  # shards on workers: no single PS link
        ("ring", 7, None),
    ],
)
def test_push_then_pull_known_answers(spec: str, workers: int, seconds: float | None) -> None:
    got = push_then_pull_s(StrategySpec.parse(spec), workers, PAYLOAD, LINK_MBIT)
    assert got == (None if seconds is None else pytest.approx(seconds, rel=1e-9))


def test_comm_split_adds_up_and_spreads_timeout_stalls_over_steps() -> None:
    # 4 steps, 1.0 s of timeout stalls in all: 0.25 s a step; 3.0 = 2.0 + 0.25 + 0.75
    assert comm_split(3.0, 2.0, 1.0, 4) == {"bound_s": 2.0, "timeouts_s": 0.25, "rest_s": 0.75}
    # a time below bound + stalls (a bound or a stall overestimated) leaves no negative rest
    assert comm_split(2.1, 2.0, 1.0, 4)["rest_s"] == 0.0
    assert comm_split(3.0, 2.0, 1.0, 0)["timeouts_s"] == 0.0
