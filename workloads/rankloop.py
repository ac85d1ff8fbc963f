"""The strategy contract: one class per kind of rank process, one rank loop they all run on, one registry.

Why (issue #37): pp, tp, moe and fsdp each had a rank loop of their own and joined gloo their own way,
so a straggler's `compute_factor` and `slow_every` reached some of them and not others (pp and tp
never read either, moe only the first): a run said a host straggled and no step of it showed one.
Here the base owns the life cycle, as Mininet's Node owns a host's and CPULimitedHost overrides one
method of it; each kind declares what it is in documented class attributes, as os-ken's OSKenApp
declares OFP_VERSIONS and _CONTEXTS.

A kind (`RankStrategy` subclass, one module of its own) declares:
- `kind`: its StrategySpec kind (`pp`, `tp`, ...), `what`: how its process names itself in an error line;
- `Options`: the dataclass of what each of its ranks is told (validated in its `__post_init__`, the
  one place), built from job.json by `options(job)`;
- `of_job`: the function that builds its Options from job.json, `world_field`: the Options field
  that counts the ranks (hosts) it needs (`world_of(opts)`; a kind whose count is derived overrides it);
- `Record`: its step line's type (a runmodel.records.StepRecord subclass with the kind's own fields);
- `theory`: its payload bytes per step rank to rank, from job.json alone (its module's
  traffic_theory, which analysis.matrix reads);
- `summary_fields`: the StrategySummary fields only it fills (pp's `pp_*`), for the report's readers;
and implements `step(step)` (one training step, its measured figures, a `Measured`) and `record(...)`
(the typed step line from them). The base (`RankStrategy.train`) joins the group (`join_gloo`, the
one join), builds the rank, runs the steps, applies the straggler (`Slowdown`: the emulated
accelerator's `compute_factor` in every `emulate` call the kind makes, and every `slow_every`-th step
`slow_factor` times the step's compute, as workloads.worker does), writes each typed record, and
leaves with the others (a barrier, then the group torn down; a failure is one WorkloadError line).

A new kind is one module (its class) and one line of `REGISTRY` (and its kind in runmodel.strategy).

Not (yet) on this loop: the PS family and the collectives (workloads.worker and workloads.ps), which
have the same straggler semantics in their own loop; the user's `job` kind (incastlab.userjob), which
cannot be slowed from inside, so the config refuses those straggler fields for it.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, ClassVar, Protocol

import torch.distributed as dist

from runmodel.job import JobSpec, RankJob
from runmodel.records import StepRecord
from workloads.errors import WorkloadError, _reason, exit_flushed, rank_main

# kind -> "module:Class" of its RankStrategy (imported when asked for: each pulls in its own model)
REGISTRY = {
    "pp": "workloads.pipeline:Stage",
    "tp": "workloads.tensor:TensorRank",
    "moe": "workloads.moe:Rank",
    "fsdp": "workloads.fsdp:ShardedRank",
    "hybrid": "workloads.hybrid:HybridStage",
}


def strategy_class(kind: str) -> type[RankStrategy]:
    """The RankStrategy of a kind (ValueError naming the known ones)."""
    if kind not in REGISTRY:
        raise ValueError(f"no rank strategy for {kind!r} (known: {', '.join(REGISTRY)})")
    module, _, name = REGISTRY[kind].partition(":")
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, RankStrategy) and cls.kind == kind, (kind, cls)
    return cls


def join_gloo(url: str, rank: int, world: int, timeout_s: float) -> None:
    """Join the gloo process group that meets at `url` (tcp://host:port) as `rank` of `world`;
    `timeout_s` bounds the wait for the others, at the rendezvous and in every collective after it."""
    dist.init_process_group(
        "gloo", init_method=url, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s)
    )


@dataclass(frozen=True)
class Slowdown:
    """How a straggler's rank is slowed (runmodel.config.Straggler, as job.json's RankJob has it):
    its emulated accelerator `compute_factor` times slower on every step, and every `slow_every`-th
    step (steps slow_every - 1, 2 slow_every - 1, ...) `slow_factor` times its whole compute."""

    compute_factor: float = 1.0
    slow_every: int = 0
    slow_factor: float = 1.0

    @classmethod
    def of(cls, me: RankJob) -> Slowdown:
        """A rank's slowdown from its part of job.json."""
        return cls(me.compute_factor, me.slow_every, me.slow_factor)

    def slow_step(self, step: int) -> bool:
        """Whether `step` is one of the slow_every steps."""
        return self.slow_every > 0 and (step + 1) % self.slow_every == 0


NO_SLOWDOWN = Slowdown()


@dataclass(frozen=True, kw_only=True)
class Training:
    """The training parameters every rank of a strategy is told, as job.json has them; a kind's
    Options adds its own shape before them (positional) in a subclass."""

    steps: int
    grad_mb: float
    batch: int
    lr: float
    seed: int
    compute_ms: float = 0.0
    timeout: float = 60.0

    @staticmethod
    def of_job(job: JobSpec) -> dict[str, Any]:
        """These parameters of a strategy's job.json, as keyword arguments of a subclass."""
        return {f.name: getattr(job, f.name) for f in fields(Training)}


class Measured(Protocol):
    """What a kind's step measured: at least its compute (real CPU and emulated accelerator); the
    base adds a slow step's extra compute to it before the kind builds its record."""

    compute_s: float


class RankStrategy:
    """One rank of a strategy whose ranks join one gloo group: the life cycle (`train`) is the
    base's; a kind sets the class attributes below and implements `options`, `world`, `step` and
    `record` (see the module's docstring)."""

    kind: ClassVar[str]  # the StrategySpec kind
    what: ClassVar[str] = "rank"  # the process in an error line: `<what> R: ...`
    Options: ClassVar[type[Training]]  # what every rank is told
    Record: ClassVar[type[StepRecord]]  # the step line's type
    summary_fields: ClassVar[tuple[str, ...]] = ()  # StrategySummary fields only this kind fills
    back_to_back: ClassVar[bool] = False  # a step starts when the last ended (its wait for input is in it)

    def __init__(self, job: Training, rank: int, slow: Slowdown = NO_SLOWDOWN) -> None:
        self.job, self.rank, self.slow = job, rank, slow

    theory: ClassVar[Callable[[JobSpec], dict[tuple[int, int], int]]]  # bytes a step, rank to rank
    of_job: ClassVar[Callable[[JobSpec], Training]]  # its Options from its job.json
    world_field: ClassVar[str]  # the Options field that counts its ranks

    # -- what a kind declares and implements --------------------------------------------------------
    @classmethod
    def traffic_theory(cls, job: JobSpec) -> dict[tuple[int, int], int]:
        """Payload bytes per training step from rank a to rank b (the kind's `theory`)."""
        return cls.theory(job)

    @classmethod
    def options(cls, job: JobSpec) -> Training:
        """The kind's Options from its job.json (its `of_job`)."""
        return cls.of_job(job)

    @classmethod
    def world_of(cls, opts: Any) -> int:
        """The ranks the kind's options need (the hosts it trains on): its `world_field`."""
        return int(getattr(opts, cls.world_field))

    @classmethod
    def make(cls, opts: Any, rank: int, slow: Slowdown) -> RankStrategy:
        """Rank `rank`'s part (a kind whose constructor takes more overrides this)."""
        return cls(opts, rank, slow)

    def step(self, step: int) -> Any:
        """One training step; its Measured figures."""
        raise NotImplementedError

    def record(self, step: int, t_start: float, t_end: float, measured: Any) -> StepRecord:
        """The step's line, of the kind's Record type."""
        raise NotImplementedError

    def describe(self, world: int) -> str:
        """This rank in an error line (a kind may name its peers)."""
        return f"{self.what} {self.rank}/{world}"

    # -- what the base does for every kind ------------------------------------------------------
    def emulate(self, share: float = 1.0) -> None:
        """The emulated accelerator: `share` x compute_ms, `compute_factor` times longer on a
        straggler. Each kind calls it where its compute happens (and says how many shares a step has)."""
        if self.job.compute_ms:
            time.sleep(self.job.compute_ms * share * self.slow.compute_factor / 1000.0)

    def straggle(self, step: int, measured: Measured) -> None:
        """On a slow_every step, the compute `slow_factor` times as long: that much more, slept after
        the step (as workloads.worker does) and counted in its compute."""
        if self.slow.slow_step(step) and self.slow.slow_factor > 1.0:
            t0 = time.perf_counter()
            time.sleep(measured.compute_s * (self.slow.slow_factor - 1.0))
            measured.compute_s += time.perf_counter() - t0

    @classmethod
    def train(
        cls,
        opts: Any,
        rank: int,
        master: str,
        write: Callable[[Any], None],
        slow: Slowdown = NO_SLOWDOWN,
    ) -> None:
        """Join the group of world_of(opts) at `master` (rank 0's host:port) as `rank`, train every step,
        `write` each step's record, and leave together with the others. A failure is one
        WorkloadError naming the rank (and the step); the group is torn down only after a barrier
        every rank reached (a failed gloo group may block in its teardown; the process exits anyway)."""
        world = cls.world_of(opts)
        url = f"tcp://{master}"
        try:
            join_gloo(url, rank, world, opts.timeout)
        except (RuntimeError, ValueError, OSError) as exc:
            raise WorkloadError(f"rendezvous (rank {rank}/{world}, {url}) failed: {_reason(exc)}") from None
        me = cls.make(opts, rank, slow)
        step = -1
        try:
            t_start = time.time()
            for step in range(opts.steps):
                if not cls.back_to_back:
                    t_start = time.time()
                measured = me.step(step)
                me.straggle(step, measured)
                t_end = time.time()
                write(me.record(step, t_start, t_end, measured))
                t_start = t_end
            step = -1
            dist.barrier()  # no rank tears down its sockets while a neighbour still reads
        except (RuntimeError, ValueError, OSError) as exc:
            at = f" at step {step}" if step >= 0 else ""
            raise WorkloadError(f"{me.describe(world)} failed{at}: {_reason(exc)}") from None
        dist.destroy_process_group()

    @classmethod
    def run_job(cls, job: JobSpec, me: RankJob, master: str, write: Callable[[Any], None]) -> None:
        """Rank `me.rank` of the kind's job (workloads.errors.rank_main's `run`)."""
        cls.train(cls.options(job), me.rank, master, write, Slowdown.of(me))

    @classmethod
    def main(cls, module: str, doc: str | None) -> None:
        """`python -m MODULE --job job.json --rank R` for this kind: exits with rank_main's code."""
        exit_flushed(rank_main(module, doc, cls.what, cls.run_job))
