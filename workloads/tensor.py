"""Tensor parallelism (`tp`): every layer pair of the pp model split over T ranks, as Megatron-LM does.

The model is workloads.pipeline's (PipeSpec.from_grad_mb: 8 linear layers D_IN -> hidden -> ... ->
CLASSES, each seeded per layer by pipeline.init_layer). Its hidden -> hidden layers go two by two,
(1, 2), (3, 4), (5, 6): the first of a pair column-parallel (rank r holds its output columns [a, b)
and their biases), the second row-parallel (its input rows [a, b)), so a rank's ReLU'd slice of
the pair's middle activations feeds its own rows and only the pair's output needs a sum. That is
Megatron's g, an all-reduce of the pair's output (batch x hidden) in the forward, identity in the
backward, and its f before the pair: identity in the forward, an all-reduce of the gradient of the
pair's input (batch x hidden) in the backward. The layers that do not pair, the first (D_IN ->
hidden) and the last (hidden -> CLASSES), are replicated: every rank holds them whole and computes
them on the same inputs. Every all-reduce is workloads.ring's ring, so a rank sends only to its
right neighbour and the bytes are exactly known (traffic_theory): 2 x pairs all-reduces a step.

Every rank trains on the full batch (model.make_batch, rank 0's stream) and so computes the same
loss, then applies SGD to its own parameters; the replicated ones stay bit-identical because the
ring hands every rank the same bits. The same training as pipeline.unsplit_losses, up to the order
of float sums. `compute_ms` emulates an accelerator: that long a sleep after the rank's forward and
again after its backward (`compute_factor` times longer on a straggler's rank; every `slow_every`-th
step its compute `slow_factor` times as long). `TensorRank` is the kind's RankStrategy: it runs on
workloads.rankloop's loop, its step line a TensorStepRecord.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from runmodel.job import JobSpec, RankJob
from runmodel.records import TensorStepRecord
from workloads.model import BYTES_PER_PARAM, ModelSpec, make_batch, shard_bounds
from workloads.pipeline import PipeSpec, SplitTraining, init_layer
from workloads.rankloop import NO_SLOWDOWN, RankStrategy, Slowdown
from workloads.ring import chunk_sizes, ring_allreduce_, schedule


def layer_pairs(spec: PipeSpec) -> list[tuple[int, int]]:
    """The (column-parallel, row-parallel) layer pairs: the hidden -> hidden layers two by two (an
    odd one left over would be replicated, as the first and the last are)."""
    middle = list(range(1, spec.depth - 1))
    return [(n, n + 1) for n in middle[: len(middle) // 2 * 2 : 2]]


def hidden_slice(spec: PipeSpec, size: int, rank: int) -> slice:
    """Rank `rank`'s part of a pair's middle width: the first layer's output columns, the second's
    input rows (as even a split as the width allows)."""
    if not 1 <= size <= spec.hidden:
        raise ValueError(f"cannot split a hidden width of {spec.hidden} over {size} ranks")
    return slice(*shard_bounds(spec.hidden, size)[rank])


def ring_bytes_to_right(numel: int, world: int, rank: int) -> int:
    """Payload bytes rank `rank` sends its right neighbour in one workloads.ring all-reduce of `numel`
    float32: the chunks (ring.chunk_sizes) its ring schedule sends."""
    chunk = chunk_sizes(numel, world)
    return sum(chunk[sent] for sent, _, _ in schedule(rank, world)) * BYTES_PER_PARAM


def traffic_theory(job: JobSpec) -> dict[tuple[int, int], int]:
    """Payload bytes per training step from rank a to rank b: two ring all-reduces of batch x hidden
    float32 per layer pair (the pair's output forward, its input's gradient backward), each rank
    sending to its right neighbour only."""
    spec, world = PipeSpec.from_grad_mb(job.grad_mb), job.world
    per_step = 2 * len(layer_pairs(spec))
    return {
        (r, (r + 1) % world): per_step * ring_bytes_to_right(job.batch * spec.hidden, world, r)
        for r in range(world)
    }


@dataclass(frozen=True)
class TensorJob(SplitTraining):
    """What every tp rank is told: how many ranks split each pair, and the training parameters."""

    size: int

    def __post_init__(self) -> None:
        hidden_slice(self.spec, self.size, 0)  # refuses a width too narrow to split


def tensor_job(job: JobSpec) -> TensorJob:
    """tp's part of a strategy's job.json: the layers split over every rank of the job."""
    return TensorJob(job.world, **SplitTraining.of_job(job))


class Ring:
    """This rank's all-reduces over the whole group (workloads.ring), with what they moved and cost."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size
        self.bytes_sent = self.bytes_recv = self.calls = 0
        self.comm_s = self.wait_s = 0.0

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """The sum of every rank's `x` (a new tensor of x's shape, the same bits on every rank)."""
        t0 = time.perf_counter()
        flat = x.detach().reshape(-1).clone()
        stats = ring_allreduce_(flat, self.rank, self.size)
        self.bytes_sent += stats.bytes_sent
        self.bytes_recv += stats.bytes_recv
        self.wait_s += stats.first_wait_s
        self.calls += 1
        self.comm_s += time.perf_counter() - t0
        return flat.view_as(x)


class _SumForward(torch.autograd.Function):
    """Megatron's g: the ranks' partial outputs summed in the forward; the backward passes through."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, ring: Ring) -> torch.Tensor:
        return ring.sum(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class _SumBackward(torch.autograd.Function):
    """Megatron's f: the forward passes through; the ranks' gradients of the input summed backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, ring: Ring) -> torch.Tensor:
        ctx.ring = ring
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return ctx.ring.sum(grad), None


@dataclass
class TensorStep:
    """One step of one rank, as measured (rankloop's Measured): its loss, its compute (the step
    outside the all-reduces) and the all-reduces' figures."""

    loss: float
    compute_s: float
    ring: Ring


class TensorRank(RankStrategy):
    """One rank's part of the model: the replicated layers whole, its slice of every pair; tp's
    RankStrategy (workloads.rankloop runs it)."""

    kind = "tp"
    what = "tensor-parallel rank"
    Options = TensorJob
    of_job = staticmethod(tensor_job)
    world_field = "size"
    theory = staticmethod(traffic_theory)
    Record = TensorStepRecord
    job: TensorJob

    def __init__(self, job: TensorJob, rank: int, slow: Slowdown = NO_SLOWDOWN) -> None:
        super().__init__(job, rank, slow)
        self.spec = spec = job.spec
        self.pairs = dict(layer_pairs(spec))  # column layer -> row layer
        rows = set(self.pairs.values())
        part = hidden_slice(spec, job.size, rank)
        self.params: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for n in range(spec.depth):
            w, b = init_layer(spec, n, job.seed)
            if n in self.pairs:
                w, b = w[:, part].clone(), b[part].clone()  # column-parallel
            elif n in rows:
                w = w[part, :].clone()  # row-parallel; the bias is added once, after the sum
            self.params[n] = (w.requires_grad_(True), b.requires_grad_(True))
        self.ring = Ring(rank, job.size)

    def _layer(self, n: int, x: torch.Tensor) -> torch.Tensor:
        w, b = self.params[n]
        x = (x @ w) * self.spec.scale(n) + b
        return x if n == self.spec.depth - 1 else torch.relu(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The model's output on every rank alike (two all-reduces per pair: one here, one in backward)."""
        n = 0
        while n < self.spec.depth:
            if n not in self.pairs:
                x, n = self._layer(n, x), n + 1
                continue
            m = self.pairs[n]
            h = self._layer(n, _SumBackward.apply(x, self.ring))  # this rank's columns of the middle
            w, b = self.params[m]
            partial = (h @ w) * self.spec.scale(m)  # this rank's rows' share of the pair's output
            x, n = torch.relu(_SumForward.apply(partial, self.ring) + b), m + 1
        return x

    def step(self, step: int) -> TensorStep:
        """One training step on the full batch; self.ring then holds the step's all-reduces' bytes
        and times."""
        job = self.job
        t0 = time.perf_counter()
        self.ring = Ring(self.rank, job.size)
        x, y = make_batch(ModelSpec(self.spec.hidden), job.seed, 0, step, job.batch)
        loss = F.cross_entropy(self.forward(x), y)
        self.emulate()  # compute_ms after the forward, and again after the backward
        loss.backward()
        self.emulate()
        with torch.no_grad():
            for t in (t for pair in self.params.values() for t in pair):
                assert t.grad is not None
                t.sub_(t.grad, alpha=job.lr)
                t.grad = None
        compute_s = max(time.perf_counter() - t0 - self.ring.comm_s, 0.0)
        return TensorStep(float(loss.detach()), compute_s, self.ring)

    def record(self, step: int, t_start: float, t_end: float, measured: TensorStep) -> TensorStepRecord:
        """The rank's step line: a StepRecord (compute_s is the step's time outside the all-reduces)
        plus tp's own fields (size, allreduces)."""
        ring = measured.ring
        return TensorStepRecord(
            rank=self.rank,
            strategy=self.kind,
            step=step,
            t_start=t_start,
            t_end=t_end,
            compute_s=measured.compute_s,
            comm_s=ring.comm_s,
            wait_s=ring.wait_s,
            bytes_sent=ring.bytes_sent,
            bytes_recv=ring.bytes_recv,
            loss=measured.loss,
            samples=self.job.batch if self.rank == 0 else 0,  # every rank trains on the same batch
            tp_size=self.job.size,
            allreduces=ring.calls,
        )


def run_rank(job: TensorJob, rank: int, master: str, write: Any, slow: Slowdown = NO_SLOWDOWN) -> None:
    """Join the group at `master` (host:port, rank 0's), train every step, `write` each step's
    TensorStepRecord, and leave together with the other ranks (rankloop's loop)."""
    TensorRank.train(job, rank, master, write, slow)


def run_job(job: JobSpec, me: RankJob, master: str, write: Any) -> None:
    """Rank `me.rank` of a tp job (the entry point is workloads.errors.rank_main)."""
    TensorRank.run_job(job, me, master, write)


if __name__ == "__main__":
    TensorRank.main("workloads.tensor", __doc__)
