"""What each training process of one strategy is told: <strategy>/job.json.

Derived from the run's config by one function (`job_for`), written by the runner, read by the
workers and the PS (`python -m workloads.worker --job job.json --rank R`), so no parameter is
passed on a command line that could drift from config.json.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runmodel.config import PS_FAMILY, ExperimentConfig
from runmodel.fabric import Plan

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
class JobSpec:
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
    master_addr: str  # the PS (PS family) or rank 0 (collectives)
    master_port: int
    ranks: tuple[RankJob, ...]
    ps_host: str | None = None
    ps_bind: str = "0.0.0.0"
    ps_log: str = ""

    @property
    def uses_ps(self) -> bool:
        """True for the PS family."""
        return self.strategy in PS_FAMILY

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
        return cls(**doc)

    def write(self, path: Path) -> None:
        """Write job.json."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: Path) -> JobSpec:
        """Read job.json."""
        return cls.from_dict(json.loads(Path(path).read_text()))


def job_for(cfg: ExperimentConfig, plan: Plan, strategy: str, index: int, out_dir: Path) -> JobSpec:
    """The job of the `index`-th strategy of the run, its logs in `out_dir`."""
    ps = strategy in PS_FAMILY
    ranks = []
    for rank, host in enumerate(cfg.worker_hosts):
        st = cfg.straggler(host)
        ranks.append(RankJob(rank, host, plan.host(host).nic,
                             slow_every=st.slow_every if st else 0,
                             slow_factor=st.slow_factor if st else 1.0,
                             compute_factor=st.compute_factor if st else 1.0,
                             log=str(out_dir / f"worker-{rank}.jsonl")))
    master = plan.host(cfg.fabric.ps_host if ps else cfg.worker_hosts[0]).ip
    return JobSpec(strategy=strategy, world=cfg.n_workers, steps=cfg.steps, grad_mb=cfg.grad_mb,
                   batch=cfg.batch, lr=cfg.lr, seed=cfg.seed, timeout=cfg.timeout, compute_ms=cfg.compute_ms,
                   staleness=cfg.staleness, backup=cfg.backup, master_addr=master,
                   master_port=(PS_PORT if ps else GLOO_PORT) + index, ranks=tuple(ranks),
                   ps_host=cfg.fabric.ps_host if ps else None,
                   ps_log=str(out_dir / "ps.jsonl") if ps else "")
