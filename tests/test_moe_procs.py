"""moe's ranks as real gloo processes on 127.0.0.1: each rank's logged bytes against the traffic
theory's row and column sums, its losses against the unsplit model's (one process, the all-to-all a
transpose, no network), and training that lowers the loss."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os

import pytest

from tests.procs import free_port, spawn_ranks
from tests.test_moe_unit import moe_job

pytestmark = pytest.mark.processes

SEED, STEPS, BATCH, GRAD_MB = 1, 8, 16, 0.05


def _child(rank: int, job_doc: dict, out: mp.Queue) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    import torch

    from runmodel.job import JobSpec
    from workloads.moe import run_rank

    torch.set_num_threads(1)
    lines: list[dict] = []
    run_rank(JobSpec.from_dict(job_doc), rank, lines.append)
    out.put((rank, lines))


@pytest.mark.parametrize(("variant", "workers"), [("moe:experts=2", 3), ("moe", 4)])
def test_ranks_move_the_theory_and_train_as_the_unsplit_model(variant: str, workers: int) -> None:
    from workloads.moe import MoeSpec, traffic_theory, unsplit_losses

    print(f"seed={SEED} (the job's training seed, fixed: the loss must fall for it)")
    job = moe_job(variant, workers=workers, batch=BATCH, grad_mb=GRAD_MB, steps=STEPS, seed=SEED)
    job = dataclasses.replace(
        job,
        master_addr="127.0.0.1",
        master_port=free_port(),
        ranks=tuple(dataclasses.replace(r, ifname="lo") for r in job.ranks),
    )
    lines = spawn_ranks(_child, job.world, job.to_dict())
    theory = traffic_theory(job)
    n = job.world
    for r in range(n):
        assert [d["step"] for d in lines[r]] == list(range(STEPS))
        row = sum(theory[(r, b)] for b in range(n) if b != r)
        col = sum(theory[(a, r)] for a in range(n) if a != r)
        assert {d["bytes_sent"] for d in lines[r]} == {row}, (r, row)
        assert {d["bytes_recv"] for d in lines[r]} == {col}, (r, col)
        assert {d["a2a_calls"] for d in lines[r]} == {4}
        for d in lines[r]:  # every token counted once: kept or dropped
            assert sum(d["expert_load"]) == BATCH and 0 <= d["tokens_dropped"] <= BATCH
    oracle = unsplit_losses(MoeSpec.of_job(job), SEED, STEPS, BATCH, job.lr)
    got = [[lines[r][s]["loss"] for r in range(n)] for s in range(STEPS)]
    print(f"{variant}: per-step losses {[[round(x, 4) for x in s] for s in got]}")
    for s in range(STEPS):
        assert got[s] == pytest.approx(oracle[s], abs=1e-4), s
    mean = [sum(s) / n for s in got]
    half = STEPS // 2
    assert sum(mean[half:]) < sum(mean[:half]), mean
