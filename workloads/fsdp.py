"""Fully sharded data parallelism (`fsdp`, ZeRO-3): the ring's model and data, each rank holding 1/N.

The same training as the `ring` strategy (workloads.model's two-layer MLP, rank r's own batches,
the gradient averaged over the N ranks, plain SGD), but no rank keeps the whole model. The FSDP
units are the model's two linear layers, (w1, b1) and (w2, b2): each is a contiguous slice of
model.py's flat vector, so a unit is gathered, used and freed as one tensor, as PyTorch FSDP
wraps layers, and splitting per layer (not the flat vector as a whole) is what lets a layer be
gathered without the other. Rank r holds chunk r of each unit (workloads.ring's cut, chunk_sizes)
and the same chunk of its gradient; plain SGD has no optimizer state, so there is none to shard.

Per step, per unit, FSDP's default (FULL_SHARD, reshard after forward): a ring all-gather of the
unit's parameters before its forward, freed after it; another all-gather before its backward,
which recomputes the unit's forward from its saved input (the parameters were freed, so autograd
cannot hold them), then a ring reduce-scatter of the unit's gradient (the sum; rank r divides its
chunk by N, as the ring averages), then SGD on the own chunk. Every collective sends only to the
right neighbour: per step a rank sends 3 x (N-1)/N of the model (`traffic_theory`, exactly).
PyTorch FSDP keeps the root's parameters between forward and backward; with no root wrapper
here both layers are re-gathered, as the model-size theory of ZeRO-3 counts them.

`compute_ms` emulates an accelerator: half of it after the forward, half after the backward
(`compute_factor` times longer on a straggler's rank; every `slow_every`-th step its compute
`slow_factor` times as long, as workloads.worker's). `ShardedRank` is the kind's RankStrategy: it
runs on workloads.rankloop's loop, its step line an FsdpStepRecord.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from runmodel.job import JobSpec, RankJob
from runmodel.records import FsdpStepRecord
from workloads.exchange import ExchangeStats
from workloads.model import BYTES_PER_PARAM, ModelSpec, init_weights, make_batch, sgd_
from workloads.rankloop import NO_SLOWDOWN, RankStrategy, Slowdown, Training
from workloads.ring import RingStats, chunk_sizes, ring_all_gather_, ring_reduce_scatter_


def unit_bounds(spec: ModelSpec) -> list[tuple[int, int]]:
    """[start, stop) of each FSDP unit in model.py's flat vector: (w1, b1), then (w2, b2)."""
    first = spec.d_in * spec.hidden + spec.hidden
    return [(0, first), (first, spec.nparams)]


def layer1(spec: ModelSpec, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """The first unit's forward on its gathered flat parameters (w1, b1): model.loss_and_grad's."""
    n = spec.d_in * spec.hidden
    return torch.relu((x @ p[:n].view(spec.d_in, spec.hidden)) * (2.0 / spec.d_in) ** 0.5 + p[n:])


def layer2(spec: ModelSpec, h: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """The second unit's forward (w2, b2): the logits, as model.loss_and_grad computes them."""
    n = spec.hidden * spec.classes
    return (h @ p[:n].view(spec.hidden, spec.classes)) * (1.0 / spec.hidden) ** 0.5 + p[n:]


def shards_of(spec: ModelSpec, flat: torch.Tensor, rank: int, world: int) -> list[torch.Tensor]:
    """Rank `rank`'s chunk of every unit of `flat` (copies: the rank keeps only these)."""
    return [torch.tensor_split(flat[a:b], world)[rank].clone() for a, b in unit_bounds(spec)]


def traffic_theory(job: JobSpec) -> dict[tuple[int, int], int]:
    """Payload bytes per step from rank a to rank b: every collective is a ring to the right
    neighbour, per unit two all-gathers (rank r sends every chunk but r+1's) and one reduce-scatter
    (every chunk but its own): 3 x (N-1)/N of the model's bytes, to the byte of the chunking."""
    world = job.world
    spec = ModelSpec.from_grad_mb(job.grad_mb)
    out: dict[tuple[int, int], int] = {}
    for r in range(world if world > 1 else 0):
        right = (r + 1) % world
        elems = 0
        for a, b in unit_bounds(spec):
            c = chunk_sizes(b - a, world)
            elems += 2 * (b - a - c[right]) + (b - a - c[r])
        out[(r, right)] = elems * BYTES_PER_PARAM
    return out


@dataclass
class FsdpStep(ExchangeStats):
    """One step of one rank, as measured (rankloop's Measured): its collectives' numbers, its loss
    and compute time."""

    loss: float = 0.0
    compute_s: float = 0.0


@dataclass(frozen=True)
class FsdpJob(Training):
    """What every fsdp rank is told: the ranks the model is sharded over, the training parameters."""

    world: int

    def __post_init__(self) -> None:
        if self.world < 1:
            raise ValueError(f"fsdp needs at least one rank, got {self.world}")


def fsdp_job(job: JobSpec) -> FsdpJob:
    """fsdp's part of a strategy's job.json: every rank of the job."""
    return FsdpJob(job.world, **Training.of_job(job))


class ShardedRank(RankStrategy):
    """One rank's shards of the model and the step that trains them; fsdp's RankStrategy
    (workloads.rankloop runs it)."""

    kind = "fsdp"
    what = "worker"
    Options = FsdpJob
    of_job = staticmethod(fsdp_job)
    world_field = "world"
    theory = staticmethod(traffic_theory)
    Record = FsdpStepRecord
    job: FsdpJob

    def __init__(self, job: FsdpJob, rank: int, slow: Slowdown = NO_SLOWDOWN) -> None:
        super().__init__(job, rank, slow)
        self.spec = spec = ModelSpec.from_grad_mb(job.grad_mb)
        self.world, self.lr = job.world, job.lr
        self.units = unit_bounds(spec)
        self.shards = shards_of(spec, init_weights(spec, job.seed), rank, job.world)
        self.shard_bytes = sum(s.numel() for s in self.shards) * BYTES_PER_PARAM

    def describe(self, world: int) -> str:
        """The rank and its ring neighbours."""
        left, right = (self.rank - 1) % world, (self.rank + 1) % world
        return f"fsdp rank {self.rank}/{world} (ring with ranks {left} and {right})"

    def _count(self, out: FsdpStep, stats: RingStats, t0: float) -> None:
        out.bytes_sent += stats.bytes_sent
        out.bytes_recv += stats.bytes_recv
        out.wait_s += stats.first_wait_s
        out.comm_s += time.perf_counter() - t0

    def gather(self, u: int, out: FsdpStep) -> torch.Tensor:
        """Unit `u`'s whole parameters, all-gathered from every rank's chunk."""
        t0 = time.perf_counter()
        a, b = self.units[u]
        full = torch.empty(b - a)
        torch.tensor_split(full, self.world)[self.rank].copy_(self.shards[u])
        self._count(out, ring_all_gather_(full, self.rank, self.world), t0)
        return full

    def reduce_(self, u: int, grad: torch.Tensor, out: FsdpStep) -> torch.Tensor:
        """This rank's chunk of unit `u`'s gradient averaged over the ranks (reduce-scatter, then / N)."""
        t0 = time.perf_counter()
        self._count(out, ring_reduce_scatter_(grad, self.rank, self.world), t0)
        return torch.tensor_split(grad, self.world)[self.rank].div_(self.world)

    def step(self, step: int) -> FsdpStep:
        """On the rank's batch of `step`: forward unit by unit, backward in reverse, each gradient
        reduce-scattered, SGD on the shards."""
        out, spec = FsdpStep(), self.spec
        x, y = make_batch(spec, self.job.seed, self.rank, step, self.job.batch)
        t0 = time.perf_counter()
        with torch.no_grad():
            p1 = self.gather(0, out)
            h = layer1(spec, x, p1)
            del p1  # freed after the forward (reshard_after_forward)
            p2 = self.gather(1, out)
            out.loss = float(F.cross_entropy(layer2(spec, h, p2), y))
            del p2
        self.emulate(0.5)
        p2 = self.gather(1, out).requires_grad_(True)
        h_in = h.requires_grad_(True)
        F.cross_entropy(layer2(spec, h_in, p2), y).backward()
        assert p2.grad is not None and h_in.grad is not None
        grads = [torch.empty(0), self.reduce_(1, p2.grad, out)]
        grad_h = h_in.grad
        del p2, h_in, h
        p1 = self.gather(0, out).requires_grad_(True)
        layer1(spec, x, p1).backward(grad_h)
        assert p1.grad is not None
        grads[0] = self.reduce_(0, p1.grad, out)
        del p1
        self.emulate(0.5)
        for shard, g in zip(self.shards, grads, strict=True):
            sgd_(shard, g, self.lr)  # the ring's update, on the own chunk only
        out.compute_s = time.perf_counter() - t0 - out.comm_s
        return out

    def record(self, step: int, t_start: float, t_end: float, measured: FsdpStep) -> FsdpStepRecord:
        """The step's line: a StepRecord plus the rank's shard size."""
        return FsdpStepRecord(
            rank=self.rank,
            strategy=self.kind,
            step=step,
            t_start=t_start,
            t_end=t_end,
            samples=self.job.batch,
            **asdict(measured),  # the measured numbers are the record's fields of the same names
            shard_bytes=self.shard_bytes,
        )


def train(job: JobSpec, me: RankJob, master: str, write: Any) -> None:
    """Rank `me.rank` of an fsdp job (the entry point is workloads.errors.rank_main): join the ranks'
    gloo group at `master` (rank 0's host:port), train every step, `write` each step's line, and
    leave together (rankloop's loop)."""
    ShardedRank.run_job(job, me, master, write)


if __name__ == "__main__":
    ShardedRank.main("workloads.fsdp", __doc__)
