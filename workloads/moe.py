"""Mixture of experts (`moe`): expert FFNs spread over the hosts, tokens sent to them by all-to-all.

The model: a dense input layer `D_IN -> hidden`, a gate `hidden -> E`, E = N x k expert FFNs
(`hidden -> hidden -> hidden`, k = `moe:experts` on each of the N ranks, expert e on rank e // k),
their output added to the input (the residual), and a classifier `hidden -> CLASSES`. Every rank
trains on its own batch (model.make_batch, its rank's stream; one sample is one token).

Top-1 gating with a fixed capacity, as GShard and Switch do: each rank's tokens fill one buffer of
C = ceil(CAPACITY_FACTOR x batch / E) rows per expert, padded with zeros; tokens beyond an expert's
C are dropped (they pass through the residual only). So every all-to-all moves the same fixed
buffers, N x k x C x hidden floats per rank: dispatch (tokens to the experts) and combine (their
outputs back) in the forward, and their gradients in the backward, 4 per step (workloads.alltoall:
every host receives from all others at once). The dense parameters (everything but the experts)
are data parallel: their gradients averaged by workloads.ring's all-reduce. An expert's gradient
already holds every rank's tokens; it is divided by N, so the training is the unsplit model's on
the mean of the ranks' losses (the oracle: tests/test_moe_procs.py, plain torch, none of this code).
`compute_ms` emulates an accelerator: that long a sleep after the backward (`compute_factor` times
longer on a straggler's rank; every `slow_every`-th step its compute `slow_factor` times as long).
`Rank` is the kind's RankStrategy: it runs on workloads.rankloop's loop, its step line a MoeStepRecord.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from runmodel.job import JobSpec, RankJob
from runmodel.records import MoeStepRecord
from workloads.alltoall import AllToAllStats, all_to_all
from workloads.model import BYTES_PER_PARAM, CLASSES, D_IN, ModelSpec, _generator, make_batch
from workloads.rankloop import NO_SLOWDOWN, RankStrategy, Slowdown, Training
from workloads.ring import chunk_sizes, ring_allreduce_, schedule

CAPACITY_FACTOR = 1.25  # Switch Transformer's training default: a quarter of slack per expert
AUX_WEIGHT = 0.01  # Switch's load-balancing loss coefficient
ALL_TO_ALLS_PER_STEP = 4  # dispatch and combine forward, their gradients backward
_STREAM_MOE_INIT = 5  # model.py's streams are 1-3, pipeline's 4


@dataclass(frozen=True)
class MoeSpec:
    """The model's shape: width `hidden`, `ranks` x `per_rank` experts."""

    hidden: int
    ranks: int
    per_rank: int
    d_in: int = D_IN
    classes: int = CLASSES

    @property
    def experts(self) -> int:
        return self.ranks * self.per_rank

    @classmethod
    def from_grad_mb(cls, grad_mb: float, ranks: int, per_rank: int) -> MoeSpec:
        """The width whose whole model (dense part and every expert) is closest to `grad_mb` MiB."""
        if grad_mb <= 0 or ranks < 1 or per_rank < 1:
            raise ValueError(
                f"need grad_mb > 0, ranks >= 1, experts >= 1; got {grad_mb}, {ranks}, {per_rank}"
            )
        e = ranks * per_rank
        target = grad_mb * 2**20 / BYTES_PER_PARAM
        a, b, c = 2 * e, D_IN + 1 + e + CLASSES + 2 * e, CLASSES - target
        return cls(max(1, round((-b + math.sqrt(b * b - 4 * a * c)) / (2 * a))), ranks, per_rank)

    @classmethod
    def of_job(cls, job: JobSpec | MoeJob) -> MoeSpec:
        """The model of a job.json or of the options it gives every rank (MoeJob)."""
        if isinstance(job, MoeJob):
            return cls.from_grad_mb(job.grad_mb, job.ranks, job.experts)
        return cls.from_grad_mb(job.grad_mb, job.world, job.spec.experts)

    def dense_shapes(self) -> dict[str, tuple[int, ...]]:
        """The data-parallel parameters, in the order of the flat gradient the ring all-reduces."""
        h = self.hidden
        return {"w_in": (self.d_in, h), "b_in": (h,), "w_gate": (h, self.experts), "w_out": (h, self.classes),
                "b_out": (self.classes,)}  # fmt: skip

    @property
    def dense_params(self) -> int:
        return sum(math.prod(s) for s in self.dense_shapes().values())

    @property
    def expert_params(self) -> int:
        """One expert: two hidden x hidden layers with their biases."""
        return 2 * self.hidden * self.hidden + 2 * self.hidden

    @property
    def nparams(self) -> int:
        return self.dense_params + self.experts * self.expert_params

    def capacity(self, tokens: int) -> int:
        """Rows of one (source rank, expert) buffer: ceil(CAPACITY_FACTOR x tokens / E)."""
        return math.ceil(CAPACITY_FACTOR * tokens / self.experts)

    def buffer_bytes(self, tokens: int) -> int:
        """What one rank sends another in one all-to-all: its k experts' padded buffers."""
        return self.per_rank * self.capacity(tokens) * self.hidden * BYTES_PER_PARAM


@dataclass(frozen=True)
class MoeJob(Training):
    """What every moe rank is told: how many ranks, experts on each, and the training parameters."""

    ranks: int
    experts: int

    def __post_init__(self) -> None:
        MoeSpec.from_grad_mb(self.grad_mb, self.ranks, self.experts)  # refuses what cannot be a model


def moe_job(job: JobSpec) -> MoeJob:
    """moe's part of a strategy's job.json: every rank of the job, `moe:experts=` on each."""
    return MoeJob(job.world, job.spec.experts, **Training.of_job(job))


def ring_sent_bytes(elements: int, rank: int, world: int) -> int:
    """Payload bytes `rank` sends its right neighbour in one ring all-reduce of `elements` float32:
    the chunks ring.schedule names, as ring.chunk_sizes cuts them."""
    if world == 1:
        return 0
    size = chunk_sizes(elements, world)
    return sum(size[sent] for sent, _, _ in schedule(rank, world)) * BYTES_PER_PARAM


def traffic_theory(job: JobSpec) -> dict[tuple[int, int], int]:
    """Payload bytes per step rank a -> rank b: 4 all-to-alls of the padded buffers to every other
    rank, plus the dense gradient's ring all-reduce to the right neighbour."""
    spec, n = MoeSpec.of_job(job), job.world
    a2a = ALL_TO_ALLS_PER_STEP * spec.buffer_bytes(job.batch)
    out = {(a, b): a2a for a in range(n) for b in range(n) if a != b}
    for a in range(n):
        if n > 1:
            out[(a, (a + 1) % n)] += ring_sent_bytes(spec.dense_params, a, n)
    return out


class Params:
    """The dense parameters and some experts' (leaf tensors), each from the seed by name or index,
    so a rank's experts are the same tensors as the unsplit model's."""

    def __init__(self, spec: MoeSpec, experts: range, seed: int) -> None:
        self.spec, self.experts = spec, experts
        g = _generator(seed, _STREAM_MOE_INIT, 0)
        self.dense = {k: torch.randn(*s, generator=g) if k.startswith("w") else torch.zeros(*s)
                      for k, s in spec.dense_shapes().items()}  # fmt: skip
        self.dense["w_out"] *= 0.1  # near-uniform first predictions, as model.init_weights
        h = spec.hidden
        self.expert: dict[int, list[torch.Tensor]] = {}
        for e in experts:
            ge = _generator(seed, _STREAM_MOE_INIT, 1, e)
            w1, w2 = torch.randn(h, h, generator=ge), torch.randn(h, h, generator=ge)
            self.expert[e] = [w1, torch.zeros(h), w2, torch.zeros(h)]
        for t in self.tensors():
            t.requires_grad_(True)

    def tensors(self) -> list[torch.Tensor]:
        return list(self.dense.values()) + [t for e in self.experts for t in self.expert[e]]

    def ffn(self, e: int, x: torch.Tensor) -> torch.Tensor:
        """Expert e on rows x (NTK scaling, as the other models)."""
        w1, b1, w2, b2 = self.expert[e]
        h = self.spec.hidden
        return torch.relu((x @ w1) * (2.0 / h) ** 0.5 + b1) @ w2 * (1.0 / h) ** 0.5 + b2


@dataclass
class Routing:
    """One rank's top-1 routing of its tokens."""

    slot: torch.Tensor  # kept tokens' rows in the (E x C) dispatch buffer
    kept: torch.Tensor  # indices of the kept tokens
    gate: torch.Tensor  # the kept tokens' gate probabilities (differentiable)
    load: list[int]  # tokens that chose each expert, before capacity
    aux: torch.Tensor  # Switch's load-balancing loss


def front(p: Params, x: torch.Tensor) -> tuple[torch.Tensor, Routing]:
    """Dense input layer and the gate: the hidden rows and where each goes (top-1, capacity C)."""
    s, d = p.spec, p.dense
    h = torch.relu((x @ d["w_in"]) * (2.0 / s.d_in) ** 0.5 + d["b_in"])
    probs = F.softmax((h @ d["w_gate"]) * (1.0 / s.hidden) ** 0.5, dim=1)
    gate, idx = probs.max(dim=1)
    onehot = F.one_hot(idx, s.experts)
    pos = (onehot.cumsum(0) - 1).gather(1, idx[:, None]).squeeze(1)  # arrival order within its expert
    cap = s.capacity(x.shape[0])
    kept = torch.nonzero(pos < cap).squeeze(1)
    frac = onehot.float().mean(0)
    aux = s.experts * (frac * probs.mean(0)).sum()
    return h, Routing(idx[kept] * cap + pos[kept], kept, gate[kept], onehot.sum(0).tolist(), aux)


def dispatch(p: Params, h: torch.Tensor, r: Routing) -> torch.Tensor:
    """The padded buffers (ranks, k, C, hidden): row block [j, l] for expert j x k + l."""
    s = p.spec
    cap = s.capacity(h.shape[0])
    buf = h.new_zeros(s.experts * cap, s.hidden).index_add(0, r.slot, h[r.kept])
    return buf.view(s.ranks, s.per_rank, cap, s.hidden)


def experts_apply(p: Params, rank: int, recv: torch.Tensor) -> torch.Tensor:
    """Rank `rank`'s experts on what every rank sent them: recv (ranks, k, C, hidden), in and out."""
    n, k, cap, h = recv.shape
    outs = [p.ffn(rank * k + j, recv[:, j].reshape(n * cap, h)).view(n, cap, h) for j in range(k)]
    return torch.stack(outs, dim=1)


def head(p: Params, h: torch.Tensor, back: torch.Tensor, r: Routing) -> torch.Tensor:
    """Combine: each kept token's expert output, times its gate, added to its residual; the logits."""
    rows = back.reshape(-1, p.spec.hidden).index_select(0, r.slot) * r.gate[:, None]
    y = h.index_add(0, r.kept, rows)
    return (y @ p.dense["w_out"]) * (1.0 / p.spec.hidden) ** 0.5 + p.dense["b_out"]


def sgd_(tensors: list[torch.Tensor], lr: float) -> None:
    with torch.no_grad():
        for t in tensors:
            assert t.grad is not None
            t.sub_(t.grad, alpha=lr)
            t.grad = None


@dataclass
class Ledger:
    """A step's all-to-all figures, added to by every call (forward and backward)."""

    stats: AllToAllStats = field(default_factory=AllToAllStats)
    seconds: float = 0.0


class _AllToAll(torch.autograd.Function):
    """An all-to-all whose gradient is the all-to-all of the gradient (it is its own transpose)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, rank: int, world: int, ledger: Ledger) -> torch.Tensor:  # noqa: D102
        ctx.rank, ctx.world, ctx.ledger = rank, world, ledger
        return _exchange(x, rank, world, ledger)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:  # noqa: D102
        return _exchange(grad, ctx.rank, ctx.world, ctx.ledger), None, None, None


def _exchange(x: torch.Tensor, rank: int, world: int, ledger: Ledger) -> torch.Tensor:
    t0 = time.perf_counter()
    out, stats = all_to_all(x.detach(), rank, world)
    ledger.stats.add(stats)
    ledger.seconds += time.perf_counter() - t0
    return out


@dataclass
class MoeStep:
    """One step of one rank, as measured."""

    loss: float
    aux: float
    compute_s: float
    comm_s: float
    a2a: AllToAllStats
    ring_sent: int
    ring_recv: int
    load: list[int]
    dropped: int


class Rank(RankStrategy):
    """One rank's part: the dense model (a replica) and its k experts; moe's RankStrategy
    (workloads.rankloop runs it)."""

    kind = "moe"
    what = "moe rank"
    Options = MoeJob
    of_job = staticmethod(moe_job)
    world_field = "ranks"
    theory = staticmethod(traffic_theory)
    Record = MoeStepRecord
    job: MoeJob

    def __init__(self, job: MoeJob, rank: int, slow: Slowdown = NO_SLOWDOWN) -> None:
        super().__init__(job, rank, slow)
        self.spec = MoeSpec.of_job(job)
        k = self.spec.per_rank
        self.p = Params(self.spec, range(rank * k, (rank + 1) * k), job.seed)

    def step(self, step: int) -> MoeStep:
        job, n, ledger = self.job, self.job.ranks, Ledger()
        t0 = time.perf_counter()
        x, y = make_batch(ModelSpec(self.spec.hidden), job.seed, self.rank, step, job.batch)
        h, r = front(self.p, x)
        recv = _AllToAll.apply(dispatch(self.p, h, r), self.rank, n, ledger)
        back = _AllToAll.apply(experts_apply(self.p, self.rank, recv), self.rank, n, ledger)
        ce = F.cross_entropy(head(self.p, h, back, r), y)
        (ce + AUX_WEIGHT * r.aux).backward()
        self.emulate()  # compute_ms once a step, after the backward
        dense = list(self.p.dense.values())
        grads = [t.grad for t in dense]
        assert all(g is not None for g in grads)
        flat = torch.cat([g.reshape(-1) for g in grads if g is not None]).contiguous()
        t1 = time.perf_counter()
        ring = ring_allreduce_(flat, self.rank, n)
        ring_s = time.perf_counter() - t1
        flat.div_(n)
        offset = 0
        for t in dense:
            t.grad = flat[offset : offset + t.numel()].view_as(t)
            offset += t.numel()
        for e in self.p.experts:
            for t in self.p.expert[e]:
                assert t.grad is not None
                t.grad.div_(n)
        sgd_(self.p.tensors(), job.lr)
        comm = ledger.seconds + ring_s
        return MoeStep(
            loss=float(ce.detach()),
            aux=float(r.aux.detach()),
            compute_s=time.perf_counter() - t0 - comm,
            comm_s=comm,
            a2a=ledger.stats,
            ring_sent=ring.bytes_sent,
            ring_recv=ring.bytes_recv,
            load=r.load,
            dropped=job.batch - int(r.kept.numel()),
        )

    def record(self, step: int, t_start: float, t_end: float, m: MoeStep) -> MoeStepRecord:
        """The rank's step line: a StepRecord plus moe's own fields (all-to-all and ring bytes apart,
        the tokens its experts were chosen by, the dropped ones, the capacity)."""
        return MoeStepRecord(
            rank=self.rank,
            strategy=self.kind,
            step=step,
            t_start=t_start,
            t_end=t_end,
            compute_s=m.compute_s,
            comm_s=m.comm_s,
            wait_s=m.a2a.wait_s,
            bytes_sent=m.a2a.bytes_sent + m.ring_sent,
            bytes_recv=m.a2a.bytes_recv + m.ring_recv,
            loss=m.loss,
            samples=self.job.batch,
            a2a_bytes_sent=m.a2a.bytes_sent,
            a2a_bytes_recv=m.a2a.bytes_recv,
            a2a_calls=m.a2a.calls,
            ring_bytes_sent=m.ring_sent,
            aux_loss=round(m.aux, 6),
            expert_load=m.load,
            tokens_dropped=m.dropped,
            capacity=self.spec.capacity(self.job.batch),
        )


def run_rank(job: JobSpec, rank: int, write: Any) -> None:
    """Rank `rank` of the job (its straggler's slowdown from job.json): join the job's gloo group,
    train every step, `write` each step's MoeStepRecord, leave together (rankloop's loop)."""
    master = f"{job.master_addr}:{job.master_port}"
    Rank.train(moe_job(job), rank, master, write, Slowdown.of(job.rank(rank)))


def run_job(job: JobSpec, me: RankJob, master: str, write: Any) -> None:
    """Rank `me.rank` of a moe job (the entry point is workloads.errors.rank_main)."""
    Rank.run_job(job, me, master, write)


if __name__ == "__main__":
    Rank.main("workloads.moe", __doc__)
