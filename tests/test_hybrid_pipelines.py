"""Hybrid data and pipeline parallelism (workloads.hybrid) without a fabric: its traffic theory by
hand, and dp x pp real processes on loopback against the unsplit model trained on the dp batches."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.test_pp_pipeline import job_of, run_ranks
from workloads.hybrid import run_rank, traffic_theory
from workloads.pipeline import PipeJob, unsplit_losses


def test_traffic_theory_by_hand() -> None:
    """hybrid:dp=2:pp=2 of the 0.5 MiB model at batch 32: in each pipeline (ranks 0-1, 2-3)
    32 x 144 x 4 = 18432 bytes each way; across, stage 0 (layers 0-3: 32 x 144 + 144 + 3 x (144 x
    144 + 144) = 67392 floats) sends 269568 bytes, stage 1 (layers 4-7: 3 x 20880 + 144 x 10 + 10 =
    64090 floats) 256360, to the same stage of the other pipeline; nothing between other ranks."""
    got = traffic_theory(job_of("hybrid:dp=2:pp=2", grad_mb=0.5, batch=32))
    assert got == {
        (0, 1): 18432, (1, 0): 18432, (2, 3): 18432, (3, 2): 18432,
        (0, 2): 269568, (2, 0): 269568, (1, 3): 256360, (3, 1): 256360,
    }  # fmt: skip


def _run_hybrid(job: tuple[PipeJob, int], rank: int, master: str, write: Any) -> None:
    run_rank(*job, rank, master, write)


@pytest.mark.processes
@pytest.mark.parametrize(("dp", "pp", "micro", "schedule"), [(2, 2, 4, "gpipe"), (3, 2, 2, "1f1b")])
def test_same_loss_as_unsplit(
    tmp_path: Path, rng: random.Random, dp: int, pp: int, micro: int, schedule: str
) -> None:
    """The mean of the pipelines' last-stage losses is, step by step, the unsplit model's trained on
    the dp batches at once (relative 1e-5: micro-batches and the exchange sum in another order);
    every rank logs the theory's bytes, its row sum sent and its column sum received."""
    seed = rng.randrange(1 << 30)
    print(f"model seed {seed}")
    job = PipeJob(pp, micro, schedule, steps=5, grad_mb=0.05, batch=32, lr=0.5, seed=seed)
    lines = run_ranks(_run_hybrid, (job, dp), dp * pp, tmp_path)
    want = unsplit_losses(job.spec, seed, job.steps, job.batch, job.lr, pipelines=dp)
    lasts = [lines[p * pp + pp - 1] for p in range(dp)]
    got = [sum(rank[t]["loss"] for rank in lasts) / dp for t in range(job.steps)]
    print(f"hybrid dp={dp} pp={pp}: {got}\nunsplit: {want}")
    assert got == pytest.approx(want, rel=1e-5)
    frozen = unsplit_losses(job.spec, seed, job.steps, job.batch, 0.0, pipelines=dp)
    assert max(abs(a - b) for a, b in zip(want[1:], frozen[1:], strict=True)) > 1e-3  # it trains
    assert len({rank[1]["loss"] for rank in lasts}) == dp  # the pipelines did train on their own data
    theory = traffic_theory(job_of(f"hybrid:dp={dp}:pp={pp}", grad_mb=job.grad_mb, batch=job.batch))
    for r, rank in enumerate(lines):
        assert [line["step"] for line in rank] == list(range(job.steps))
        assert {(line["pipeline"], line["stage"]) for line in rank} == {divmod(r, pp)}
        assert {line["bytes_sent"] for line in rank} == {sum(n for (a, _), n in theory.items() if a == r)}
        assert {line["bytes_recv"] for line in rank} == {sum(n for (_, b), n in theory.items() if b == r)}
