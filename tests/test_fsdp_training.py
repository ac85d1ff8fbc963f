"""fsdp and the ring as real processes on loopback (`python -m workloads.fsdp` and
`python -m workloads.worker`, each from its job.json, gloo over 127.0.0.1): the same losses for the
same seed and data, and the bytes each rank logged equal to its strategy's pair bytes worked by
hand (tests/splits_theory.py, not the product's traffic_theory)."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from runmodel.job import JobSpec
from tests.procs import free_port
from tests.splits_theory import RunSize, fsdp_pairs, ring_pairs
from tests.test_fsdp_unit import job
from workloads.model import ModelSpec, init_weights, loss_and_grad, make_batch, sgd_

pytestmark = pytest.mark.processes

WORLD, STEPS, LR = 3, 4, 0.5
MODULES = {"ring": "workloads.worker", "fsdp": "workloads.fsdp"}


def run_job(spec: JobSpec, tmp: Path) -> list[list[dict]]:
    """Every rank of `spec` as the module its strategy runs; each rank's step lines."""
    ranks = tuple(dataclasses.replace(r, log=str(tmp / f"{spec.strategy}{r.rank}.jsonl")) for r in spec.ranks)
    spec = dataclasses.replace(spec, ranks=ranks, master_port=free_port())
    path = tmp / f"{spec.strategy}.json"
    spec.write(path)
    cmd = [sys.executable, "-m", MODULES[spec.strategy], "--job", str(path), "--rank"]
    procs = [subprocess.Popen([*cmd, str(r)], stderr=subprocess.PIPE, text=True) for r in range(spec.world)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * spec.world, errs
    lines = [[json.loads(x) for x in Path(r.log).read_text().splitlines()] for r in ranks]
    return [[d for d in rank if "step" in d and "event" not in d] for rank in lines]


def test_fsdp_trains_like_the_ring(tmp_path: Path, rng: random.Random) -> None:
    """Per rank and step, fsdp's loss is the ring's within relative 1e-5 (the gradients are
    bit-identical; the sums across the ranks run in another order, as fsdp's chunks are per
    layer, so the weights differ in the last bits). Every rank logs, every step, bytes sent
    equal to its row of the hand-worked pair bytes and bytes received to its column."""
    seed = rng.randrange(2**31)
    print(f"training seed {seed}")
    runs = {}
    for strategy, theory in (("ring", ring_pairs), ("fsdp", fsdp_pairs)):
        spec = dataclasses.replace(job(strategy, WORLD, grad_mb=0.05), steps=STEPS, seed=seed, lr=LR)
        lines = runs[strategy] = run_job(spec, tmp_path)
        want = theory(RunSize(WORLD, STEPS, spec.batch, 0.05, (strategy,)))
        for r, rank in enumerate(lines):
            assert [d["step"] for d in rank] == list(range(STEPS))
            row = sum(n for (a, _), n in want.items() if a == r)
            col = sum(n for (_, b), n in want.items() if b == r)
            assert {(d["bytes_sent"], d["bytes_recv"]) for d in rank} == {(row, col)}, (strategy, r)
    for r in range(WORLD):
        ring = [d["loss"] for d in runs["ring"][r]]
        fsdp = [d["loss"] for d in runs["fsdp"][r]]
        print(f"rank {r}: ring {ring}\n        fsdp {fsdp}")
        assert fsdp == pytest.approx(ring, rel=1e-5)
        assert fsdp[0] == ring[0]  # the same initial weights and batch: the first loss to the bit
    # it trains, and as plain SGD does: one process stepping on the mean of the ranks' gradients
    # (an independent loop) gives fsdp's losses; the weights move far enough from the initial ones
    # that the frozen model's losses are off by more than the tolerance (over 200 seeds the largest
    # gap was always >= 8e-3, while one (rank, step) alone can be as close as 1.4e-5).
    reference, frozen = sgd_reference(seed)
    for r in range(WORLD):
        assert [d["loss"] for d in runs["fsdp"][r]] == pytest.approx(reference[r], rel=1e-5), r
    gap = max(abs(a - b) for r in range(WORLD) for a, b in zip(reference[r], frozen[r], strict=True))
    assert gap > 1e-3, (seed, gap)


def sgd_reference(seed: int) -> tuple[list[list[float]], list[list[float]]]:
    """Per rank and step, the loss of single-process SGD on the mean gradient of the WORLD ranks'
    batches, and the loss the initial weights score on the same batch."""
    model = ModelSpec.from_grad_mb(0.05)
    w0 = init_weights(model, seed)
    w = w0.clone()
    losses: list[list[float]] = [[] for _ in range(WORLD)]
    frozen: list[list[float]] = [[] for _ in range(WORLD)]
    for step in range(STEPS):
        grads = []
        for r in range(WORLD):
            x, y = make_batch(model, seed, r, step, 32)
            loss, grad = loss_and_grad(model, w, x, y)
            losses[r].append(loss)
            frozen[r].append(loss_and_grad(model, w0, x, y)[0])
            grads.append(grad)
        sgd_(w, sum(grads) / WORLD, LR)
    return losses, frozen


def test_a_lone_rank_fails_in_one_line(tmp_path: Path) -> None:
    """Rank 1 of 2 with nobody at the master port: after the job's timeout, one stderr line of ours
    naming the rank and the rendezvous (the last; c10d's C++ logs its own before it), exit 1, no
    Python traceback."""
    spec = dataclasses.replace(job("fsdp", 2, grad_mb=0.05), timeout=3)
    ranks = tuple(dataclasses.replace(r, log=str(tmp_path / f"r{r.rank}.jsonl")) for r in spec.ranks)
    spec = dataclasses.replace(spec, ranks=ranks, master_port=free_port())
    spec.write(tmp_path / "job.json")
    cmd = [sys.executable, "-m", "workloads.fsdp", "--job", str(tmp_path / "job.json"), "--rank", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    print(proc.stderr)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("worker 1: rendezvous (rank 1/2, tcp://127.0.0.1:")
