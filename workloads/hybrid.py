"""Data and pipeline parallelism together (`hybrid:dp=D:pp=P`): D pipelines of P stages each.

Global rank g = pipeline x P + stage. Each pipeline is a pp pipeline (workloads.pipeline.Stage,
GPipe or 1F1B over `micro` micro-batches) on its own batch: pipeline p trains on model.make_batch's
stream p, `batch` samples, so a step trains on D x batch samples. After a step's backwards, stage s
of every pipeline sums its layers' gradients with stage s of the others and divides by D, then
applies SGD: every pipeline keeps the same weights, and the training is the unsplit model's on the D
batches one after another (pipeline.unsplit_losses with pipelines=D), its loss the mean of the
pipelines' last-stage losses (what the run's summary averages).

The gradient sum is a direct exchange on gloo point-to-point, not the ring: workloads.ring's
all-reduce runs over ranks 0..N-1 of the whole group, and a stage's peers are ranks s, P + s, ...
Each stage sends its whole gradient to the same stage of every other pipeline and adds what it
receives in pipeline order, so every pipeline gets the same bits. For D = 2 that moves what a ring
would (each side sends the gradient once); for larger D, (D - 1) gradients where a ring sends
2 (D - 1)/D.

`HybridStage` is the kind's RankStrategy (workloads.rankloop): a pp Stage whose gradients are
averaged across the pipelines before its SGD, its step line a HybridStepRecord.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from runmodel.job import JobSpec, RankJob
from runmodel.records import HybridStepRecord
from workloads.model import BYTES_PER_PARAM
from workloads.pipeline import PipeJob, PipeSpec, SplitTraining, Stage, StageStep, stage_pairs
from workloads.rankloop import NO_SLOWDOWN, Slowdown

_TAG_GRADS = 1 << 20  # above every micro-batch's tags (2 x micro + 1)


def traffic_theory(job: JobSpec) -> dict[tuple[int, int], int]:
    """Payload bytes per training step from rank a to rank b: inside each pipeline, pp's (the batch's
    activations forward and their gradients back between consecutive stages,
    pipeline.stage_pairs); across pipelines, each stage's whole gradient to the same stage of
    every other pipeline."""
    dp, pp = job.spec.dp, job.spec.pp
    spec = PipeSpec.from_grad_mb(job.grad_mb)
    out: dict[tuple[int, int], int] = {}
    for p in range(dp):
        out |= stage_pairs(job.grad_mb, job.batch, pp, base=p * pp)
    for s in range(pp):
        grad = spec.params_of(spec.stage_layers(s, pp)) * BYTES_PER_PARAM
        out |= {(p * pp + s, q * pp + s): grad for p in range(dp) for q in range(dp) if p != q}
    return out


def exchange_sum(flat: torch.Tensor, peers: list[int], me: int) -> tuple[torch.Tensor, int, int]:
    """The sum of `flat` over `peers` (global ranks; this process is peers[me]), added in the peers'
    order so every peer gets the same bits; with the payload bytes sent and received."""
    parts: list[torch.Tensor] = []
    recvs, sends = [], []
    for k, peer in enumerate(peers):
        if k == me:
            parts.append(flat)
            continue
        buf = torch.empty_like(flat)
        recvs.append(dist.irecv(buf, src=peer, tag=_TAG_GRADS))
        parts.append(buf)
    for k, peer in enumerate(peers):
        if k != me:
            sends.append(dist.isend(flat, dst=peer, tag=_TAG_GRADS))
    for work in recvs + sends:
        work.wait()
    total = parts[0].clone()
    for part in parts[1:]:
        total.add_(part)
    moved = (len(peers) - 1) * flat.numel() * flat.element_size()
    return total, moved, moved


@dataclass(frozen=True)
class HybridJob(PipeJob):
    """What every hybrid rank is told: each pipeline's shape (PipeJob: its stages are `stages`) and
    the number of pipelines."""

    dp: int

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dp < 1:
            raise ValueError(f"dp must be >= 1, got {self.dp}")


def hybrid_job(job: JobSpec) -> HybridJob:
    """The pipelines' part of a strategy's job.json: each pipeline's shape and their number."""
    spec = job.spec
    return HybridJob(spec.pp, spec.micro, spec.schedule, spec.dp, **SplitTraining.of_job(job))


class HybridStage(Stage):
    """Stage `stage` of pipeline `pipeline` of `dp`: a pp stage whose gradients are averaged with the
    same stage of the other pipelines before its SGD."""

    kind = "hybrid"
    what = "hybrid rank"
    Options = HybridJob
    of_job = staticmethod(hybrid_job)
    theory = staticmethod(traffic_theory)
    Record = HybridStepRecord
    summary_fields = ()
    job: HybridJob

    def __init__(self, job: HybridJob, pipeline: int, stage: int, slow: Slowdown = NO_SLOWDOWN) -> None:
        super().__init__(job, stage, base=pipeline * job.stages, data=pipeline, slow=slow)
        self.dp, self.pipeline = job.dp, pipeline
        self.peers = [q * job.stages + stage for q in range(job.dp)]

    @classmethod
    def world_of(cls, opts: HybridJob) -> int:
        return opts.dp * opts.stages

    @classmethod
    def make(cls, opts: HybridJob, rank: int, slow: Slowdown) -> HybridStage:
        """Global rank g is pipeline x stages + stage."""
        pipeline, stage = divmod(rank, opts.stages)
        return cls(opts, pipeline, stage, slow)

    def reduce_grads(self, out: StageStep) -> None:
        """Every gradient of the stage's layers replaced by its mean over the pipelines."""
        grads = [t.grad for pair in self.layers.params for t in pair]
        assert all(g is not None for g in grads)
        flat = torch.cat([g.reshape(-1) for g in grads if g is not None])
        total, sent, recv = exchange_sum(flat, self.peers, self.pipeline)
        total.div_(self.dp)
        offset = 0
        for g in grads:
            assert g is not None
            g.copy_(total[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
        out.bytes_sent += sent
        out.bytes_recv += recv

    def record(self, step: int, t_start: float, t_end: float, measured: StageStep) -> HybridStepRecord:
        """pp's step line with the pipeline and the number of pipelines."""
        kw = self.stage_fields(step, t_start, t_end, measured)
        return HybridStepRecord(**kw, pipeline=self.pipeline, dp=self.dp)


def run_rank(job: PipeJob, dp: int, rank: int, master: str, write: Any, slow: Slowdown = NO_SLOWDOWN) -> None:
    """Global rank `rank` of dp pipelines of job.stages stages: join, train, write its steps, leave."""
    opts = HybridJob(job.stages, job.micro, job.schedule, dp, **SplitTraining.of_job(job))
    HybridStage.train(opts, rank, master, write, slow)


def run_job(job: JobSpec, me: RankJob, master: str, write: Any) -> None:
    """Rank `me.rank` of a hybrid job (the entry point is workloads.errors.rank_main)."""
    HybridStage.run_job(job, me, master, write)


if __name__ == "__main__":
    HybridStage.main("workloads.hybrid", __doc__)
