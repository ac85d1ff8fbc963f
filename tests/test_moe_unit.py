"""moe's model size, capacity and traffic theory against hand-worked numbers, its bad options."""

from __future__ import annotations

from pathlib import Path

import pytest

from runmodel.job import JobSpec
from tests.conftest import config_refusal


def moe_job(variant: str = "moe:experts=2", workers: int = 3, **cfg: object) -> JobSpec:
    """The job.json a run of `variant` would hand its ranks (the config's own job_for)."""
    from runmodel.config import ExperimentConfig
    from runmodel.folder import RunFolder
    from runmodel.job import job_for

    c = ExperimentConfig(strategies=(variant,), workers=workers, **cfg)  # type: ignore[arg-type]
    c.validate()
    spec = c.strategy_specs[0]
    folder = RunFolder(Path("/nonexistent")).strategy(spec.name)
    return JobSpec.from_dict(job_for(c, c.plan(), spec, 0, folder).to_dict())


def test_width_and_capacity_by_hand() -> None:
    """0.05 MiB = 13107.2 floats over 3 ranks x 2 experts: width 31 gives a dense part of
    32x31 + 31 + 31x6 + 31x10 + 10 = 1529 and experts of 2x31x31 + 2x31 = 1984, 13433 in all
    (width 30: 12640, further off). 8 tokens: capacity ceil(1.25 x 8 / 6) = 2."""
    from workloads.moe import MoeSpec

    s = MoeSpec.from_grad_mb(0.05, 3, 2)
    assert (s.hidden, s.experts, s.dense_params, s.expert_params, s.nparams) == (31, 6, 1529, 1984, 13433)
    assert s.capacity(8) == 2 and s.capacity(32) == 7 and s.capacity(48) == 10


def test_traffic_theory_by_hand() -> None:
    """3 ranks, 2 experts each, batch 8, 0.05 MiB: one all-to-all buffer rank to rank is
    2 experts x 2 rows x 31 floats x 4 B = 496 B, 4 a step = 1984 B to every other rank. The ring
    cuts the 1529 dense floats into 510, 510, 509 and rank a sends every chunk but a+1's
    (reduce-scatter) and every chunk but a+2's (all-gather): rank 0 and 1 send 3058 - 1019 = 2039
    floats (8156 B), rank 2 3058 - 1020 = 2038 (8152 B), each to its right neighbour only."""
    from workloads.moe import traffic_theory

    job = moe_job(batch=8, grad_mb=0.05)
    assert job.world == 3 and job.spec.experts == 2
    assert traffic_theory(job) == {
        (0, 1): 1984 + 8156, (1, 2): 1984 + 8156, (2, 0): 1984 + 8152,
        (1, 0): 1984, (2, 1): 1984, (0, 2): 1984,
    }  # fmt: skip


def test_two_ranks_ring_goes_both_ways() -> None:
    """2 ranks x 1 expert, batch 8, 0.05 MiB: 4 h^2 + (32 + 1 + 2 + 10 + 4) h + 10 = 13107.2 gives
    h = 51.4, width 51; dense 32x51 + 51 + 51x2 + 51x10 + 10 = 2305 floats. Capacity ceil(1.25 x 8
    / 2) = 5, so 4 all-to-alls of 5 x 51 x 4 B. With 2 ranks the right neighbour is the left one:
    chunks of 1153 and 1152, rank 0 sends chunk 0 (reduce-scatter) and chunk 1 (all-gather), all
    2305 floats, and so does rank 1."""
    from workloads.moe import MoeSpec, traffic_theory

    s = MoeSpec.from_grad_mb(0.05, 2, 1)
    assert s.hidden == 51
    dense = 32 * 51 + 51 + 51 * 2 + 51 * 10 + 10
    assert s.dense_params == dense == 2305
    a2a = 4 * 5 * 51 * 4
    job = moe_job("moe", workers=2, batch=8, grad_mb=0.05)
    assert traffic_theory(job) == {(0, 1): a2a + 2305 * 4, (1, 0): a2a + 2305 * 4}


@pytest.mark.parametrize(
    ("strategies", "words"),
    [
        (("moe:experts=0",), "experts must be a whole number >= 1"),
        (("moe:experts=-2",), "experts must be a whole number >= 1"),
        (("moe:experts=1.5",), "experts"),
        (("ring:experts=2",), "experts is a moe option"),
        (("moe:size=2",), "size is a tp option"),
        (("moe:micro=2",), "micro and schedule are pp and hybrid options"),
        (("moe:bogus=1",), "bogus"),
    ],
)
def test_bad_moe_options_refused_in_one_line(strategies: tuple[str, ...], words: str) -> None:
    """Refused by the config's validate, before any fabric is built, in one line naming the option."""
    msg = config_refusal(strategies=strategies, workers=2)
    assert words in msg and strategies[0].split(":")[1].split("=")[0] in msg, msg


def test_moe_job_runs_every_worker() -> None:
    """moe trains on every worker host (spec.hosts is None), its options in job.json's variant."""
    job = moe_job("moe:experts=3", workers=4)
    assert job.world == 4 and job.spec.experts == 3 and job.spec.module == "workloads.moe"


def test_hand_worked_pairs_at_the_splits_runs_size() -> None:
    """tests/splits_theory.py (the integration test's expected bytes) by hand. The splits run, 6
    ranks x 1 expert, batch 512, 0.5 MiB: 12 h^2 + 61 h + 10 = 131072 floats gives h = 102.0 (131080
    floats at 102, 128583 at 101); C = ceil(640 / 6) = 107; a buffer of 107 x 102 x 4 = 43656 B, 4
    a step = 174624 B to every other rank. The dense part 49 x 102 + 10 = 5008 floats, in chunks
    835 x 4 and 834 x 2: rank r sends 10016 - c[r+1] - c[r+2] floats to r + 1, 8346 from ranks 0, 1
    and 5, 8347 from 2 and 4, 8348 from 3. At 3 ranks x 2 experts, batch 8, 0.05 MiB: the numbers
    of test_traffic_theory_by_hand."""
    from tests.splits_theory import MoeSize, RunSize, moe_pairs, moe_size

    size = RunSize(6, 4, 512, 0.5, ("ring", "moe"))
    assert moe_size(size) == MoeSize(hidden=102, experts=6, per_rank=1, capacity=107, dense=5008)
    ring = {0: 8346, 1: 8346, 2: 8347, 3: 8348, 4: 8347, 5: 8346}
    want = {(a, b): 174624 for a in range(6) for b in range(6) if a != b}
    for a, floats in ring.items():
        want[(a, (a + 1) % 6)] += floats * 4
    assert moe_pairs(size) == want
    small = RunSize(3, 4, 8, 0.05, ("moe:experts=2",))
    assert moe_pairs(small) == {
        (0, 1): 1984 + 8156, (1, 2): 1984 + 8156, (2, 0): 1984 + 8152,
        (1, 0): 1984, (2, 1): 1984, (0, 2): 1984,
    }  # fmt: skip
