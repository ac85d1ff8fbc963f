"""What each training process of one strategy is told: <strategy>/job.json.

Derived from the run's config by one function (`job_for`), written by the runner, read by the
workers and the PS (`python -m workloads.worker --job job.json --rank R`), so no parameter is
passed on a command line that could drift from config.json.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from runmodel.config import PS_FAMILY, ExperimentConfig, StrategySpec
from runmodel.fabric import Plan
from runmodel.folder import StrategyFolder
from runmodel.records import JsonFile
from runmodel.strategy import HYBRID, PIPELINE

GLOO_PORT = 29500  # + the strategy's index in the run: each strategy gets fresh ports
PS_PORT = 29600


@dataclass(frozen=True)
class RankJob:
    """One worker: where it runs and how it is slowed (a straggler)."""

    rank: int
    host: str
    ifname: str  # GLOO_SOCKET_IFNAME: the host's fabric interface
    slow_every: int = 0
    slow_factor: float = 1.0
    compute_factor: float = 1.0
    log: str = ""  # its step log


@dataclass(frozen=True)
class ShardJob:
    """One parameter-server process: shard `index` of `of` (the model split evenly, ps-lite style)."""

    index: int
    host: str
    addr: str
    port: int
    log: str


@dataclass(frozen=True)
class JobSpec(JsonFile):
    """One strategy's processes: every worker, and the PS of the PS family."""

    strategy: str
    world: int
    steps: int
    grad_mb: float
    batch: int
    lr: float
    seed: int
    timeout: float
    compute_ms: float
    staleness: int
    backup: int
    master_addr: str  # rank 0 (collectives) or the first shard (PS family)
    master_port: int
    ranks: tuple[RankJob, ...]
    shards: tuple[ShardJob, ...] = ()  # PS family: one process per shard
    ps_bind: str = "0.0.0.0"
    pull: str = "all"  # PS family: the models of one release sent at once (all) or one after another
    stages: int = 0  # pp: one stage per rank (world); hybrid: each pipeline's; 0 for every other strategy
    micro: int = 1  # pp, hybrid: micro-batches per step
    schedule: str = ""  # pp, hybrid: gpipe or 1f1b
    variant: str = ""  # the strategy's full name (`tp:size=4`): its options, read by StrategySpec.parse

    @property
    def uses_ps(self) -> bool:
        """True for the PS family."""
        return self.strategy in PS_FAMILY

    @property
    def spec(self) -> StrategySpec:
        """The strategy variant with its options (job.json files without `variant`: the kind's defaults)."""
        return StrategySpec.parse(self.variant or self.strategy)

    def shard(self, k: int) -> ShardJob:
        """One shard's part (ValueError if there is no such shard)."""
        if not 0 <= k < len(self.shards):
            raise ValueError(f"shard {k} outside the job's {len(self.shards)} shards")
        return self.shards[k]

    def rank(self, r: int) -> RankJob:
        """One worker's part (ValueError outside the world)."""
        if not 0 <= r < self.world:
            raise ValueError(f"rank {r} outside a world of {self.world}")
        return self.ranks[r]

    def to_dict(self) -> dict[str, Any]:
        """job.json."""
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> JobSpec:
        """From job.json."""
        doc = dict(doc)
        doc["ranks"] = tuple(RankJob(**r) for r in doc["ranks"])
        doc["shards"] = tuple(ShardJob(**k) for k in doc.get("shards", ()))
        return cls(**doc)


def job_for(
    cfg: ExperimentConfig, plan: Plan, spec: StrategySpec, index: int, folder: StrategyFolder
) -> JobSpec:
    """The job of the `index`-th strategy of the run, its logs in its folder."""
    ranks = []
    hosts = cfg.worker_hosts[: spec.hosts]  # pp, tp, hybrid: their ranks on the first hosts
    for rank, host in enumerate(hosts):
        st = cfg.straggler(host)
        ranks.append(
            RankJob(
                rank,
                host,
                plan.host(host).nic,
                slow_every=st.slow_every if st else 0,
                slow_factor=st.slow_factor if st else 1.0,
                compute_factor=st.compute_factor if st else 1.0,
                log=str(folder.worker_log(rank)),
            )
        )
    port = (PS_PORT if spec.uses_ps else GLOO_PORT) + index
    shards = tuple(
        ShardJob(k, host, plan.host(host).ip, port, str(folder.shard_log(k)))
        for k, host in enumerate(cfg.shard_hosts(spec))
    )
    master = shards[0].addr if shards else plan.host(cfg.worker_hosts[0]).ip
    return JobSpec(
        strategy=spec.kind,
        world=len(hosts),
        steps=cfg.steps,
        grad_mb=cfg.grad_mb,
        batch=cfg.batch,
        lr=cfg.lr,
        seed=cfg.seed,
        timeout=cfg.timeout,
        compute_ms=cfg.compute_ms,
        staleness=cfg.staleness,
        backup=cfg.backup,
        master_addr=master,
        master_port=port,
        ranks=tuple(ranks),
        shards=shards,
        pull=spec.pull,
        variant=spec.name,
        **_pipeline_fields(spec),
    )


def _pipeline_fields(spec: StrategySpec) -> dict[str, Any]:
    """job.json's pipeline fields: pp's stages, hybrid's stages per pipeline; none for other kinds."""
    if spec.kind == PIPELINE:
        return {"stages": spec.stages, "micro": spec.micro, "schedule": spec.schedule}
    if spec.kind == HYBRID:
        return {"stages": spec.pp, "micro": spec.micro, "schedule": spec.schedule}
    return {}
