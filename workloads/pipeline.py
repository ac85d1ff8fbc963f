"""Pipeline parallelism (`pp`): a deeper MLP cut into S contiguous stages, one process each.

Stage s holds layers [a, b) of the model, runs its forwards and backwards per micro-batch in the
order of its schedule (workloads.schedules: GPipe or 1F1B), receives activations from stage s - 1
and their gradients from stage s + 1 over torch.distributed gloo point-to-point (non-blocking
sends, blocking receives, the schedule's order), then applies SGD to its own layers. Every stage
rebuilds the step's batch from the seed (model.make_batch, rank 0's stream): the first needs the
inputs, the last the labels, so only activations and gradients cross the network:
batch x hidden x 4 bytes each way between consecutive stages per step, whatever M.

The last stage's loss is the mean of the micro-batches' losses, each scaled by 1/M before its
backward, so the gradients add up to the full batch's: the same training as `unsplit_losses`.
`compute_ms` emulates an accelerator: that long a sleep in each micro-batch's forward and again in
its backward (`compute_factor` times longer on a straggler's stage; every `slow_every`-th step its
compute `slow_factor` times as long: workloads.rankloop). A stage's step line
(runmodel.records.StageStepRecord) says how long it computed (busy) and how long it waited (the
bubble: idle / step time). `Stage` is the kind's RankStrategy: it runs on workloads.rankloop's loop.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from runmodel.job import JobSpec, RankJob
from runmodel.records import StageStepRecord
from runmodel.strategy import PP_DEPTH, SCHEDULES
from workloads.model import BYTES_PER_PARAM, CLASSES, D_IN, ModelSpec, _generator, make_batch, shard_bounds
from workloads.rankloop import NO_SLOWDOWN, RankStrategy, Slowdown, Training
from workloads.schedules import (
    BWD,
    FWD,
    RECV_ACT,
    RECV_GRAD,
    SEND_ACT,
    SEND_GRAD,
    bubble_theory,
    stage_actions,
)

_STREAM_PP_INIT = 4  # model.py's streams are 1-3


@dataclass(frozen=True)
class PipeSpec:
    """An MLP of `depth` linear layers `D_IN -> hidden -> ... -> hidden -> CLASSES` (ReLU between)."""

    hidden: int
    depth: int = PP_DEPTH
    d_in: int = D_IN
    classes: int = CLASSES

    @classmethod
    def from_grad_mb(cls, grad_mb: float, depth: int = PP_DEPTH) -> PipeSpec:
        """The hidden width whose whole gradient is closest to `grad_mb` MiB (all stages together)."""
        if grad_mb <= 0 or depth < 2:
            raise ValueError(f"need grad_mb > 0 and depth >= 2, got {grad_mb} and {depth}")
        target = grad_mb * 2**20 / BYTES_PER_PARAM
        a, b, c = depth - 2, D_IN + 1 + (depth - 2) + CLASSES, CLASSES - target
        h = -c / b if a == 0 else (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
        return cls(hidden=max(1, round(h)), depth=depth)

    def shape(self, layer: int) -> tuple[int, int]:
        """(fan_in, fan_out) of linear layer `layer`."""
        fan_in = self.d_in if layer == 0 else self.hidden
        return fan_in, self.classes if layer == self.depth - 1 else self.hidden

    @property
    def nparams(self) -> int:
        return self.params_of(range(self.depth))

    def params_of(self, layers: range) -> int:
        """Weights and biases of `layers` (a stage's: its gradient is that many floats)."""
        return sum(i * o + o for i, o in map(self.shape, layers))

    def scale(self, layer: int) -> float:
        """NTK scaling of layer `layer`'s product, (gain / fan_in) ** 0.5 (gain 2 before a ReLU, 1 for
        the model's last layer), as model.loss_and_grad: one learning rate for every width."""
        return ((1.0 if layer == self.depth - 1 else 2.0) / self.shape(layer)[0]) ** 0.5

    def stage_layers(self, stage: int, stages: int) -> range:
        """The contiguous layers of one stage (as even a split as the layer count allows)."""
        if not 1 <= stages <= self.depth:
            raise ValueError(f"cannot cut {self.depth} layers into {stages} stages")
        return range(*shard_bounds(self.depth, stages)[stage])

    def act_bytes(self, rows: int) -> int:
        """Bytes of the activations (or their gradient) of `rows` samples at a stage boundary."""
        return rows * self.hidden * BYTES_PER_PARAM


def init_layer(spec: PipeSpec, layer: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer `layer`'s weights (fan_in x fan_out, standard normal from the seed's stream of that
    layer) and zero bias: the same tensors whichever way, or into however many parts, the model is cut."""
    fan_in, fan_out = spec.shape(layer)
    w = torch.randn(fan_in, fan_out, generator=_generator(seed, _STREAM_PP_INIT, layer))
    if layer == spec.depth - 1:
        w = w * 0.1  # near-uniform first predictions, as model.init_weights
    return w, torch.zeros(fan_out)


class Layers:
    """Some contiguous layers of the model, as leaf tensors, initialised from the seed per layer
    (so a stage's layers are the same tensors whichever way the model is cut)."""

    def __init__(self, spec: PipeSpec, layers: range, seed: int) -> None:
        self.spec, self.layers = spec, layers
        self.params: list[tuple[torch.Tensor, torch.Tensor]] = []
        for n in layers:
            w, b = init_layer(spec, n, seed)
            self.params.append((w.requires_grad_(True), b.requires_grad_(True)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """ReLU after every layer but the model's last; NTK scaling, as model.loss_and_grad."""
        for n, (w, b) in zip(self.layers, self.params, strict=True):
            x = (x @ w) * self.spec.scale(n) + b
            if n != self.spec.depth - 1:
                x = torch.relu(x)
        return x

    def sgd_(self, lr: float) -> None:
        """Plain SGD on the accumulated gradients, then clear them."""
        with torch.no_grad():
            for t in (t for pair in self.params for t in pair):
                assert t.grad is not None
                t.sub_(t.grad, alpha=lr)
                t.grad = None


def unsplit_losses(
    spec: PipeSpec, seed: int, steps: int, batch: int, lr: float, pipelines: int = 1
) -> list[float]:
    """The same model trained whole, one process, the full batch at once: the pipeline's oracle.
    With `pipelines` > 1 (hybrid) the full batch is every pipeline's batch one after another
    (model.make_batch's streams 0 .. pipelines - 1), its loss their mean."""
    model = Layers(spec, range(spec.depth), seed)
    losses = []
    for step in range(steps):
        parts = [make_batch(ModelSpec(spec.hidden), seed, p, step, batch) for p in range(pipelines)]
        x, y = torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])
        loss = F.cross_entropy(model.forward(x), y)
        loss.backward()
        model.sgd_(lr)
        losses.append(float(loss.detach()))
    return losses


@dataclass(frozen=True, kw_only=True)
class SplitTraining(Training):
    """The training parameters of a split of this module's model (pp, tp, hybrid): rankloop's
    Training, and the model they describe."""

    @property
    def spec(self) -> PipeSpec:
        return PipeSpec.from_grad_mb(self.grad_mb)


@dataclass(frozen=True)
class PipeJob(SplitTraining):
    """What every stage process is told: the pipeline's shape and the training parameters."""

    stages: int
    micro: int
    schedule: str

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r} (known: {', '.join(SCHEDULES)})")
        if self.micro < 1 or self.batch % self.micro:
            raise ValueError(f"micro must be >= 1 and divide the batch ({self.batch}), got {self.micro}")
        if not 1 <= self.stages <= PP_DEPTH:
            raise ValueError(f"stages must be in 1..{PP_DEPTH}, got {self.stages}")

    @property
    def bubble_theory(self) -> float:
        return bubble_theory(self.stages, self.micro)


def stage_bytes_theory(grad_mb: float, batch: int) -> int:
    """Payload bytes each way between two consecutive stages per step: the batch's activations at
    the boundary (batch x hidden float32) forward and as many gradient bytes back, whatever M."""
    return PipeSpec.from_grad_mb(grad_mb).act_bytes(batch)


def traffic_theory(job: JobSpec) -> dict[tuple[int, int], int]:
    """Payload bytes per training step from stage a to stage b (the traffic-matrix figure's theory):
    between consecutive stages the batch's activations forward and as many gradient bytes back
    (stage_bytes_theory), whatever M; nothing between the others."""
    return stage_pairs(job.grad_mb, job.batch, job.world)


def stage_pairs(grad_mb: float, batch: int, stages: int, base: int = 0) -> dict[tuple[int, int], int]:
    """traffic_theory of one pipeline whose stages are ranks base .. base + stages - 1."""
    each_way = stage_bytes_theory(grad_mb, batch)
    return {pair: each_way for r in range(base, base + stages - 1) for pair in ((r, r + 1), (r + 1, r))}


def pipe_job(job: JobSpec) -> PipeJob:
    """The pipeline's part of a strategy's job.json."""
    return PipeJob(job.stages, job.micro, job.schedule, **SplitTraining.of_job(job))


@dataclass
class StageStep:
    """One step of one stage, as measured (rankloop's Measured)."""

    compute_s: float = 0.0  # busy: forwards and backwards, real CPU plus the emulated accelerator
    in_flight: int = 0  # the most micro-batches whose activations it held at once
    bytes_sent: int = 0
    bytes_recv: int = 0
    loss: float | None = None  # the last stage only
    sends: list[Any] = field(default_factory=list)


class Stage(RankStrategy):
    """One stage process's part of the pipeline: pp's RankStrategy (workloads.rankloop runs it).

    `base` is the global rank of the pipeline's first stage (its stages are ranks base .. base + S - 1)
    and `data` the make_batch stream its batches come from: 0 and 0 for pp, one pipeline of several
    for hybrid. A subclass may act on the gradients between the backwards and the SGD (reduce_grads)."""

    kind = "pp"
    what = "pipeline stage"
    Options = PipeJob
    of_job = staticmethod(pipe_job)
    world_field = "stages"
    theory = staticmethod(traffic_theory)
    Record = StageStepRecord
    summary_fields = (
        "pp_bubble",
        "pp_bubble_by_stage",
        "pp_bubble_theory",
        "pp_in_flight_by_stage",
        "pp_stage_bytes_theory",
    )
    back_to_back = True  # a stage's wait for the next step's input is its idle, in the step
    job: PipeJob

    def __init__(
        self, job: PipeJob, stage: int, base: int = 0, data: int = 0, slow: Slowdown = NO_SLOWDOWN
    ) -> None:
        super().__init__(job, base + stage, slow)
        self.stage, self.base, self.data = stage, base, data
        self.spec = job.spec
        self.layers = Layers(self.spec, self.spec.stage_layers(stage, job.stages), job.seed)
        self.plan = stage_actions(stage, job.stages, job.micro, job.schedule)
        self.rows = job.batch // job.micro

    @classmethod
    def make(cls, opts: PipeJob, rank: int, slow: Slowdown) -> Stage:
        return cls(opts, rank, slow=slow)

    def step(self, step: int) -> StageStep:
        """Run the stage's actions for one step, then its SGD; waits for its sends to leave."""
        job, s, out = self.job, self.stage, StageStep()
        last = s == job.stages - 1
        x, y = make_batch(ModelSpec(self.spec.hidden), job.seed, self.data, step, job.batch)
        inputs: dict[int, torch.Tensor] = {}
        outputs: dict[int, torch.Tensor] = {}
        grads: dict[int, torch.Tensor] = {}
        losses = []
        for a in self.plan:
            i, tag = a.mb, 2 * a.mb
            if a.op == RECV_ACT:
                buf = torch.empty(self.rows, self.spec.hidden)
                dist.recv(buf, src=self.rank - 1, tag=tag)
                inputs[i] = buf.requires_grad_(True)
                out.bytes_recv += buf.numel() * buf.element_size()
            elif a.op == RECV_GRAD:
                grads[i] = torch.empty(self.rows, self.spec.hidden)
                dist.recv(grads[i], src=self.rank + 1, tag=tag + 1)
                out.bytes_recv += grads[i].numel() * grads[i].element_size()
            elif a.op == SEND_ACT:
                act = outputs[i].detach().contiguous()
                out.sends.append((dist.isend(act, dst=self.rank + 1, tag=tag), act))
                out.bytes_sent += act.numel() * act.element_size()
            elif a.op == SEND_GRAD:
                g = inputs.pop(i).grad
                assert g is not None
                out.sends.append((dist.isend(g, dst=self.rank - 1, tag=tag + 1), g))
                out.bytes_sent += g.numel() * g.element_size()
            else:
                c0 = time.perf_counter()
                if a.op == FWD:
                    rows = slice(i * self.rows, (i + 1) * self.rows)
                    h = self.layers.forward(x[rows] if s == 0 else inputs[i])
                    if last:
                        loss = F.cross_entropy(h, y[rows])
                        losses.append(float(loss.detach()))
                        h = loss / job.micro
                    outputs[i] = h
                    out.in_flight = max(out.in_flight, len(outputs))
                else:
                    assert a.op == BWD
                    h = outputs.pop(i)
                    h.backward(None if last else grads.pop(i))
                self.emulate()  # compute_ms per micro-batch's forward, and again per backward
                out.compute_s += time.perf_counter() - c0
        for work, _ in out.sends:
            work.wait()
        out.sends.clear()
        self.reduce_grads(out)
        self.layers.sgd_(job.lr)
        out.loss = sum(losses) / len(losses) if losses else None
        return out

    def reduce_grads(self, out: StageStep) -> None:
        """Between the step's backwards and its SGD: nothing in a pipeline of its own."""

    def stage_fields(self, step: int, t_start: float, t_end: float, measured: StageStep) -> dict[str, Any]:
        """The fields of the stage's step line: a StepRecord's (what every strategy's summary reads)
        and the pipeline's own (stage, in_flight, bubble and its theory)."""
        job = self.job
        span = max(t_end - t_start, 1e-9)
        return {
            "rank": self.rank,
            "strategy": self.kind,
            "step": step,
            "t_start": t_start,
            "t_end": t_end,
            "compute_s": measured.compute_s,
            "comm_s": span - measured.compute_s,
            "wait_s": span - measured.compute_s,
            "bytes_sent": measured.bytes_sent,
            "bytes_recv": measured.bytes_recv,
            "loss": measured.loss,
            "samples": job.batch if self.stage == 0 else 0,
            "stage": self.stage,
            "micro": job.micro,
            "schedule": job.schedule,
            "in_flight": measured.in_flight,
            "bubble": round(1.0 - measured.compute_s / span, 6),
            "bubble_theory": round(job.bubble_theory, 6),
        }

    def record(self, step: int, t_start: float, t_end: float, measured: StageStep) -> StageStepRecord:
        """The step's line (stage_fields)."""
        return StageStepRecord(**self.stage_fields(step, t_start, t_end, measured))


def run_stage(job: PipeJob, stage: int, master: str, write: Any, slow: Slowdown = NO_SLOWDOWN) -> None:
    """Join the pipeline's process group at `master` (host:port, stage 0's), train every step,
    `write` each step's StageStepRecord, and leave together with the other stages (rankloop's loop)."""
    Stage.train(job, stage, master, write, slow)


def run_job(job: JobSpec, me: RankJob, master: str, write: Any) -> None:
    """Stage `me.rank` of a pp job (the entry point is workloads.errors.rank_main)."""
    Stage.run_job(job, me, master, write)


if __name__ == "__main__":
    Stage.main("workloads.pipeline", __doc__)
