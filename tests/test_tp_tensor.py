"""Tensor parallelism (workloads.tensor) without a fabric: the splits and the traffic theory by hand,
and T real processes on loopback (gloo, the ring) against the unsplit model trained in this process."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from tests.test_pp_pipeline import job_of, run_ranks
from workloads.pipeline import PipeSpec, init_layer, unsplit_losses
from workloads.tensor import (
    TensorJob,
    TensorRank,
    hidden_slice,
    layer_pairs,
    ring_bytes_to_right,
    run_rank,
    traffic_theory,
)


def test_pairs_and_splits_by_hand() -> None:
    """The 8-layer model pairs layers 1-2, 3-4, 5-6 (0 and 7 replicated); a width of 144 over 3 ranks
    is 48 each, 43 over 3 is 14, 14, 15."""
    assert layer_pairs(PipeSpec(hidden=144)) == [(1, 2), (3, 4), (5, 6)]
    assert layer_pairs(PipeSpec(hidden=8, depth=5)) == [(1, 2)]  # layer 3 left over: replicated
    assert [hidden_slice(PipeSpec(hidden=144), 3, r) for r in range(3)] == [
        slice(0, 48),
        slice(48, 96),
        slice(96, 144),
    ]
    assert [hidden_slice(PipeSpec(hidden=43), 3, r) for r in range(3)] == [
        slice(0, 14),
        slice(14, 28),
        slice(28, 43),
    ]
    with pytest.raises(ValueError, match="cannot split a hidden width of 4 over 5"):
        hidden_slice(PipeSpec(hidden=4), 5, 0)


def test_ranks_hold_the_whole_model_between_them() -> None:
    """Column-parallel layers' slices side by side, row-parallel layers' one above the other, are the
    unsplit layers (pipeline.init_layer); the first and last layers are whole on every rank."""
    job = TensorJob(size=3, steps=1, grad_mb=0.05, batch=8, lr=0.1, seed=5)
    ranks = [TensorRank(job, r) for r in range(3)]
    for n in range(job.spec.depth):
        w, b = init_layer(job.spec, n, job.seed)
        ws = [rank.params[n][0].detach() for rank in ranks]
        bs = [rank.params[n][1].detach() for rank in ranks]
        if n in (1, 3, 5):
            assert torch.equal(torch.cat(ws, dim=1), w) and torch.equal(torch.cat(bs), b), n
        elif n in (2, 4, 6):
            assert torch.equal(torch.cat(ws, dim=0), w) and all(torch.equal(x, b) for x in bs), n
        else:
            assert all(torch.equal(x, w) for x in ws) and all(torch.equal(x, b) for x in bs), n


def test_ring_bytes_by_hand() -> None:
    """10 floats over 3 ranks are chunks of 4, 3, 3: rank 0 sends chunks 0, 2 (reduce-scatter) and
    1, 0 (all-gather) = 14 floats, ranks 1 and 2 13 each; 5 over 2: each sends both chunks once."""
    assert [ring_bytes_to_right(10, 3, r) for r in range(3)] == [56, 52, 52]
    assert [ring_bytes_to_right(5, 2, r) for r in range(2)] == [20, 20]
    assert ring_bytes_to_right(10, 1, 0) == 0


def test_traffic_theory_by_hand() -> None:
    """tp:size=3 of the 0.5 MiB model at batch 32: 6 all-reduces a step (3 pairs, forward and
    backward) of 32 x 144 = 4608 floats, chunks of 1536; each rank sends its right neighbour 4
    chunks per all-reduce: 6 x 4 x 1536 x 4 = 147456 bytes, nothing to its left."""
    got = traffic_theory(job_of("tp:size=3", grad_mb=0.5, batch=32))
    assert got == {(0, 1): 147456, (1, 2): 147456, (2, 0): 147456}


@pytest.mark.processes
@pytest.mark.parametrize("size", [2, 3])
def test_same_loss_as_unsplit(tmp_path: Path, rng: random.Random, size: int) -> None:
    """Every rank's losses are the unsplit model's, step by step, within relative 1e-5 (the
    row-parallel sums add the ranks' shares in another order than one matrix product); the ranks
    log bit-identical losses; each logs the theory's bytes: its row sum sent, its column sum
    received. Width 43 over 2 or 3 ranks and 32 x 43 floats per all-reduce: uneven splits."""
    seed = rng.randrange(1 << 30)
    print(f"model seed {seed}")
    job = TensorJob(size=size, steps=6, grad_mb=0.05, batch=32, lr=0.5, seed=seed)
    lines = run_ranks(run_rank, job, size, tmp_path)
    want = unsplit_losses(job.spec, job.seed, job.steps, job.batch, job.lr)
    got = [line["loss"] for line in lines[0]]
    print(f"tp size {size}: {got}\nunsplit: {want}")
    assert got == pytest.approx(want, rel=1e-5)
    frozen = unsplit_losses(job.spec, job.seed, job.steps, job.batch, lr=0.0)
    assert max(abs(a - b) for a, b in zip(want[1:], frozen[1:], strict=True)) > 1e-3  # it trains
    assert all([line["loss"] for line in rank] == got for rank in lines)
    theory = traffic_theory(job_of(f"tp:size={size}", grad_mb=job.grad_mb, batch=job.batch))
    for r, rank in enumerate(lines):
        assert [line["step"] for line in rank] == list(range(job.steps))
        assert {line["allreduces"] for line in rank} == {6}
        assert {line["bytes_sent"] for line in rank} == {sum(n for (a, _), n in theory.items() if a == r)}
        assert {line["bytes_recv"] for line in rank} == {sum(n for (_, b), n in theory.items() if b == r)}
