"""Every parameter of an experiment: the config.json of a run.

A scenario file holds these fields (and a `fabric` and a `controller` object, and `servers`, a list
that is the controller's field); flags given on the command line override it.
`ExperimentConfig.validate()` refuses what cannot run, naming the field, before anything is built.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Self

from runmodel import SCHEMA
from runmodel.fabric import FabricSpec, Plan, build_plan
from runmodel.params import ParamError, number, param, refuse_unknown, whole
from runmodel.strategy import (
    COLLECTIVES,
    CONGESTION_CONTROLS,
    HYBRID,
    INSIDE_KNOBS,
    JOB,
    KINDS,
    PIPELINE,
    PS_FAMILY,
    SLOWED_INSIDE,
    StrategySpec,
)

__all__ = [
    "COLLECTIVES",
    "PS_FAMILY",
    "ControllerOptions",
    "ExperimentConfig",
    "Provenance",
    "RunEnvironment",
    "Straggler",
    "StrategySpec",
    "load_scenario",
]

CAPTURES = ("all", "ps-port", "none")
ROUTINGS = ("ecmp", "firstfit", "hedera")  # controller.policy implements each
PACKED, SPREAD = "packed", "spread"
RANK_PLACEMENTS = (PACKED, SPREAD)  # or a list of hosts, one per rank


def is_finite(value: Any) -> bool:
    """A finite int or float (not a bool): what a numeric field may hold."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def split_commas(text: str) -> tuple[str, ...]:
    """'ps, ring' -> ('ps', 'ring')."""
    return tuple(s.strip() for s in text.split(",") if s.strip())


def placement_text(text: str) -> str:
    """A rank placement as config.json holds it: 'packed', 'spread' or 'h3,h5,h2' (no spaces)."""
    return ",".join(split_commas(text))


def spread_over_leaves(hosts: list[str], leaf_of: Any) -> list[str]:
    """`hosts` dealt round-robin over their leaves (leaves in order of first appearance, each leaf's
    hosts in the given order): h2,h3,h4,h5 on lf1,lf2,lf2,lf3 -> h2,h3,h5,h4."""
    by_leaf: dict[str, list[str]] = {}
    for h in hosts:
        by_leaf.setdefault(leaf_of(h), []).append(h)
    rounds = max((len(v) for v in by_leaf.values()), default=0)
    return [leaf[r] for r in range(rounds) for leaf in by_leaf.values() if r < len(leaf)]


STRAGGLER_KNOBS = {
    "cpu": float,
    "link_mbit": float,
    "slow_every": int,
    "slow_factor": float,
    "compute_factor": float,
    "cpuset": str,
    "mem_mb": float,
}
DOCKER_ONLY_KNOBS = ("cpuset", "mem_mb")  # limits only a container host has


@dataclass(frozen=True)
class Straggler:
    """A slowed worker: CPU cap, slower link, periodic slow steps, slower accelerator (any mix)."""

    host: str
    cpu: float | None = None  # share of one CPU (Mininet CPU-limited host)
    link_mbit: float | None = None  # the host's link rate instead of the fabric's host_mbit
    slow_every: int = 0  # every K-th step computes slow_factor times longer (thermal throttling)
    slow_factor: float = 1.0
    compute_factor: float = 1.0  # the emulated accelerator is this many times slower
    cpuset: str | None = None  # cores the host's container may run on ("1", "0-1"; runtime docker)
    mem_mb: float | None = None  # the host's container's memory limit (runtime docker)

    @classmethod
    def parse(cls, text: str) -> Straggler:
        """`h3:cpu=0.25,slow_every=3,slow_factor=4,link_mbit=5,compute_factor=2`."""
        host, _, rest = text.partition(":")
        knobs: dict[str, Any] = {}
        for part in filter(None, rest.split(",")):
            key, _, val = part.partition("=")
            if key not in STRAGGLER_KNOBS:
                raise ParamError(f"--straggler: unknown field {key!r} ({', '.join(STRAGGLER_KNOBS)})")
            try:
                knobs[key] = STRAGGLER_KNOBS[key](val)
            except ValueError as exc:
                raise ParamError(f"--straggler: {key} needs a number, got {val!r}") from exc
        return cls(host=host.strip(), **knobs)

    @classmethod
    def from_dict(cls, doc: Any) -> Straggler:
        """A straggler from a scenario's `stragglers` entry."""
        if not isinstance(doc, dict) or "host" not in doc:
            raise ParamError('stragglers: each needs a host, e.g. {"host": "h3", "cpu": 0.25}')
        unknown = sorted(set(doc) - {"host"} - set(STRAGGLER_KNOBS))
        if unknown:
            raise ParamError(f"stragglers: unknown field {unknown[0]!r}")
        return cls(**doc)

    def validate(self) -> None:
        """Refuse knobs that cannot be (host membership is checked by the config); every number finite,
        as config.json is strict JSON."""
        if self.cpu is not None and not (is_finite(self.cpu) and 0 < self.cpu <= 1):
            raise ParamError(f"stragglers: {self.host}: cpu share must be in (0, 1], got {self.cpu}")
        rate = self.link_mbit
        if rate is not None and not (is_finite(rate) and rate > 0):
            raise ParamError(f"stragglers: {self.host}: link_mbit must be > 0, got {self.link_mbit}")
        factors = (self.slow_factor, self.compute_factor)
        if not (
            isinstance(self.slow_every, int)
            and not isinstance(self.slow_every, bool)
            and self.slow_every >= 0
            and all(is_finite(f) and f >= 1 for f in factors)
        ):
            raise ParamError(
                f"stragglers: {self.host}: slow_every must be >= 0, slow_factor and compute_factor >= 1"
            )
        if self.cpuset is not None and not re.fullmatch(r"\d+(-\d+)?", str(self.cpuset)):
            raise ParamError(
                f"stragglers: {self.host}: cpuset must be a core or a range, e.g. 1 or 0-1, "
                f"got {self.cpuset!r}"
            )
        mem = self.mem_mb
        if mem is not None and not (is_finite(mem) and mem >= 6):
            raise ParamError(f"stragglers: {self.host}: mem_mb must be >= 6 (docker's least), got {mem}")

    @property
    def docker_only(self) -> list[str]:
        """The knobs given that only a container host has."""
        return [k for k in DOCKER_ONLY_KNOBS if getattr(self, k) is not None]


@dataclass(frozen=True)
class ControllerOptions:
    """Where the controller listens and how often it polls the switches."""

    api_host: str = param(
        "127.0.0.1",
        "controller API/dashboard listen address (anything but loopback exposes the unauthenticated API)",
    )
    api_port: int = param(8080, "controller API/dashboard port")
    of_host: str = param("127.0.0.1", "OpenFlow listen address (the switches connect over loopback)")
    of_port: int = param(6653, "OpenFlow port")
    interval: float = param(0.5, "statistics poll interval, s")
    routing: str = param(
        "ecmp",
        "routing policy: ecmp (select-group hash), firstfit (each new flow pinned to the least-loaded "
        "path), hedera (large flows re-placed from their estimated demands every poll)",
        choices=ROUTINGS,
    )
    servers: tuple[str, ...] = param(
        (),
        "machines to place the fabric on with Mininet Cluster Edition, by leaf, reached by ssh as root "
        "(none: this machine)",
        parse=split_commas,
        metavar="S1,S2",
    )

    def validate(self) -> None:
        """Refuse impossible ports, an interval out of range and an unknown routing policy."""
        for name in ("api_port", "of_port"):
            port = getattr(self, name)
            if not isinstance(port, int) or not 0 < port < 65536:
                raise ParamError(f"--{name.replace('_', '-')} must be a TCP port (1-65535), got {port}")
        if self.api_port == self.of_port:
            raise ParamError("--api-port and --of-port must differ")
        number("interval", self.interval, 0, 60, lo_open=True)
        if self.routing not in ROUTINGS:
            raise ParamError(f"--routing must be one of {', '.join(ROUTINGS)}, got {self.routing!r}")
        twice = sorted({s for s in self.servers if list(self.servers).count(s) > 1})
        if twice:
            raise ParamError(f"--servers names {', '.join(twice)} twice: each machine once")

    @property
    def base_url(self) -> str:
        """Base URL of the API as a local client reaches it."""
        host = "127.0.0.1" if self.api_host in ("0.0.0.0", "") else self.api_host
        return f"http://{host}:{self.api_port}"

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ControllerOptions:
        """Options from config.json; unknown keys are refused by name."""
        refuse_unknown(doc, cls, "controller")
        if isinstance(doc.get("servers"), list):  # JSON has no tuples
            doc = {**doc, "servers": tuple(doc["servers"])}
        return cls(**doc)


class RunConfig:
    """What the two run configs (ExperimentConfig, IncastConfig) do alike with their fabric and
    controller fields."""

    def refuse_non_finite(self) -> None:
        """Refuse a NaN or an infinity anywhere in the config (`fabric.delay_ms`, `timeout`...), named by
        its path: config.json is strict JSON, so a run would die writing it. Run after validate()."""
        cfg: Any = self

        def walk(value: Any, name: str) -> None:
            if isinstance(value, float) and not math.isfinite(value):
                raise ParamError(f"{name} must be a finite number, got {value!r}")
            if isinstance(value, dict):
                for key, item in value.items():
                    walk(item, f"{name}.{key}" if name else str(key))
            elif isinstance(value, list | tuple):
                for k, item in enumerate(value):
                    walk(item, f"{name}[{k}]")

        walk(cfg.to_dict(), "")

    def overridden(self, fabric: dict[str, Any], controller: dict[str, Any], top: dict[str, Any]) -> Self:
        """This config with the given fields replaced (the flags given on a command line)."""
        cfg: Any = self
        return replace(
            cfg,
            fabric=replace(cfg.fabric, **fabric),
            controller=replace(cfg.controller, **controller),
            **top,
        )


@dataclass(frozen=True)
class ExperimentConfig(RunConfig):
    """Every parameter of a run (config.json). One field, one flag: see runmodel.params."""

    fabric: FabricSpec = param(factory=FabricSpec, cli=False)
    controller: ControllerOptions = param(factory=ControllerOptions, cli=False)
    workers: int = param(0, "number of workers (0: every host but the PS, or the hosts --placement lists)")
    rank_placement: str = param(
        PACKED,
        "which host runs each worker rank: packed (a leaf's hosts before the next leaf's), spread "
        "(round-robin over the leaves) or the hosts in rank order, e.g. h3,h5,h2 (not the PS "
        "shards' placement= option of a ps variant)",
        flag="--placement",
        parse=placement_text,
        metavar="packed|spread|H,H,...",
    )
    strategies: tuple[str, ...] = param(
        ("ps", "ring"),
        "comma-separated: " + ",".join(KINDS) + "; a "
        "variant takes options, e.g. ps:shards=4, ps:rto_min_ms=1, "
        "ring:cc=bbr, ps:shards=2:placement=colocated",
        parse=split_commas,
        metavar="S1,S2",
    )
    steps: int = param(10, "training steps per strategy")
    grad_mb: float = param(0.5, "gradient size, MiB of float32 (what each worker exchanges per step)")
    batch: int = param(32, "samples per worker per step")
    compute_ms: float = param(0.0, "emulated accelerator time per step, ms (0: CPU compute only)")
    lr: float = param(1.0, "learning rate")
    seed: int = param(0, "random seed (the same for every strategy)")
    staleness: int = param(2, "SSP bound s: the fastest worker may lead the slowest by s steps")
    backup: int = param(1, "backup workers b: the backup strategy drops the b slowest each step")
    capture: str = param(
        "all", "packet capture: every host and the PS port, the PS port only, or none", choices=CAPTURES
    )
    snaplen: int = param(128, "bytes kept per captured packet")
    queue_sample_ms: float = param(10.0, "queue backlog sampling interval, ms")
    cc: str = param("cubic", "TCP congestion control in every host", choices=CONGESTION_CONTROLS)
    timeout: float = param(60.0, "seconds a silent peer may take before the run fails")
    run_timeout: float = param(900.0, "seconds one strategy may take at most")
    target_loss: float | None = param(None, "loss for the report's time-to-target (default: none)")
    faults: tuple[str, ...] = param(
        (),
        "inject a fault, e.g. link-down:lf1-eth1@5s, kill-worker:2@step3, controller-restart@4s (repeatable)",
        flag="--fault",
        repeat=True,
        metavar="KIND[:TARGET]@WHEN",
    )
    stragglers: tuple[Straggler, ...] = param(
        (),
        "slow a worker, e.g. h3:cpu=0.25 or h3:slow_every=3,slow_factor=4 (repeatable)",
        flag="--straggler",
        repeat=True,
        parse=Straggler.parse,
        metavar="HOST:FIELD=V,...",
    )
    job_image: str = param(
        "",
        "the image of the job strategy's containers, one per worker host (incastlab "
        "job --image; it must exist here)",
        flag="--image",
        metavar="IMAGE",
    )
    job_dir: str = param(
        "",
        "the folder mounted read-only in each job container at its own path, the command's working "
        "directory; none: the folder incastlab runs in",
        flag="--job-dir",
        metavar="DIR",
    )
    job_command: tuple[str, ...] = param((), cli=False)  # the job's command line: `incastlab job ... -- CMD`
    name: str = param("", cli=False)
    description: str = param("", cli=False)

    # -- derived ------------------------------------------------------------------------------
    @property
    def strategy_specs(self) -> list[StrategySpec]:
        """The strategies with their options, in run order."""
        return [StrategySpec.parse(s) for s in self.strategies]

    def shard_hosts(self, spec: StrategySpec) -> list[str]:
        """The PS hosts of a PS-family variant: shard k on its own host (dedicated: the PS host's
        position on leaves spread evenly from the PS host's leaf on; colocated: on worker k's host)."""
        if not spec.uses_ps:
            return []
        if spec.placement == "colocated":
            return self.worker_hosts[: spec.shards]
        per, leaves = self.fabric.hosts_per_leaf, self.fabric.leaves
        leaf0, offset = divmod(int(self.fabric.ps_host[1:]) - 1, per)
        k = spec.shards
        if k <= leaves:  # one per leaf, the leaves spread evenly over the fabric
            return [f"h{((leaf0 + (i * leaves) // k) % leaves) * per + offset + 1}" for i in range(k)]
        order = [
            f"h{((leaf0 + j) % leaves) * per + (offset + r) % per + 1}"
            for r in range(per)
            for j in range(leaves)
        ]
        return order[:k]

    @property
    def server_hosts(self) -> list[str]:
        """Hosts no worker may use: the PS host and every dedicated shard host of the run."""
        out = [self.fabric.ps_host]
        for spec in self._specs_or_empty():
            if spec.dedicated_shards:
                out += [h for h in self.shard_hosts(spec) if h not in out]
        return out

    def _specs_or_empty(self) -> list[StrategySpec]:
        try:
            return self.strategy_specs
        except ParamError:
            return []

    @property
    def candidate_hosts(self) -> list[str]:
        """Every host but the PS hosts, in name order: where workers may run."""
        servers = set(self.server_hosts)
        return [h for h in self.fabric.host_names if h not in servers]

    @property
    def placement_hosts(self) -> tuple[str, ...]:
        """The hosts a listed rank placement names, in rank order (empty for packed and spread)."""
        if self.rank_placement in RANK_PLACEMENTS:
            return ()
        return split_commas(self.rank_placement)

    @property
    def n_workers(self) -> int:
        """How many workers train."""
        return self.workers or len(self.placement_hosts) or len(self.candidate_hosts)

    @property
    def worker_hosts(self) -> list[str]:
        """The hosts that run workers, in rank order (rank r on the r-th): the rank placement's
        choice among the candidate hosts."""
        if self.placement_hosts:
            return list(self.placement_hosts[: self.n_workers])
        hosts = self.candidate_hosts
        if self.rank_placement == SPREAD:
            hosts = spread_over_leaves(hosts, self.fabric.leaf_of)
        return hosts[: self.n_workers]

    def placement_line(self) -> str:
        """The ranks' hosts in one line with their leaves: `rank placement spread: 0 h2 (lf1), ...`."""
        where = ", ".join(f"{r} {h} ({self.fabric.leaf_of(h)})" for r, h in enumerate(self.worker_hosts))
        kind = self.rank_placement if self.rank_placement in RANK_PLACEMENTS else "given"
        return f"rank placement {kind}: {where}"

    def check_placement(self) -> None:
        """Refuse a rank placement that cannot be: a word that is neither packed nor spread, a host
        not in the fabric, a PS host, one host twice, or a list whose length is not --workers."""
        text = self.rank_placement
        if not isinstance(text, str) or not text:
            raise ParamError(f"placement must be packed, spread or hosts like h3,h5, got {text!r}")
        given = self.placement_hosts
        if not given:
            return
        if len(given) == 1 and not re.fullmatch(r"h\d+", given[0]):
            raise ParamError(f"placement must be packed, spread or hosts like h3,h5, got {text!r}")
        for host in given:
            self.fabric.check_host("placement", host)
            if host in self.server_hosts:
                raise ParamError(f"placement: {host} is a PS host of this run, it cannot run a worker")
        twice = next((h for k, h in enumerate(given) if h in given[:k]), None)
        if twice:
            raise ParamError(f"placement: {twice} is named twice (one rank per host)")
        if self.workers and len(given) != self.workers:
            raise ParamError(
                f"placement names {len(given)} hosts for {self.workers} workers: give one host per rank"
            )

    @property
    def grad_bytes(self) -> int:
        """Bytes of one gradient (whole float32 values)."""
        return int(round(self.grad_mb * 2**20 / 4)) * 4

    def plan(self) -> Plan:
        """The wiring plan, stragglers' slower links and CPU caps included."""
        return build_plan(
            self.fabric,
            host_mbit={s.host: s.link_mbit for s in self.stragglers if s.link_mbit is not None},
            host_cpu={s.host: s.cpu for s in self.stragglers if s.cpu is not None},
        )

    def straggler(self, host: str) -> Straggler | None:
        """The straggler settings of a host, if it is one."""
        return next((s for s in self.stragglers if s.host == host), None)

    # -- checks ---------------------------------------------------------------------------------
    def validate(self) -> None:
        """Refuse a run that cannot happen, naming the field."""
        self.controller.validate()
        if not self.strategies:
            raise ParamError("strategies: name at least one")
        for spec in self.strategy_specs:
            if spec.dedicated_shards > self.fabric.n_hosts - 2:
                raise ParamError(
                    f"strategies: {spec.name}: {spec.shards} shards need {spec.shards} PS hosts "
                    f"and 2 workers, the fabric has {self.fabric.n_hosts} hosts"
                )
        whole("workers", self.workers, 0)
        self.check_placement()
        others = self.candidate_hosts
        if self.workers > len(others):
            raise ParamError(
                f"workers must be 1..{len(others)} (hosts but the PS hosts "
                f"{', '.join(self.server_hosts)}), got {self.workers}"
            )
        n = self.n_workers
        if n < 2:
            raise ParamError(f"workers: data-parallel training needs at least 2 workers, got {n}")
        names = [spec.name for spec in self.strategy_specs]
        if len(set(names)) != len(names):
            raise ParamError("strategies: each strategy may appear once")
        for spec in self.strategy_specs:
            if spec.placement == "colocated" and spec.shards > n:
                raise ParamError(f"strategies: {spec.name}: colocated shards must be at most the {n} workers")
            if spec.hosts is not None and spec.hosts > n:
                raise ParamError(f"strategies: {spec.name}: needs {spec.hosts} worker hosts, have {n}")
            if spec.kind in (PIPELINE, HYBRID) and self.batch % spec.micro:
                raise ParamError(
                    f"strategies: {spec.name}: micro ({spec.micro}) must divide the batch ({self.batch})"
                )
        if any(spec.kind == JOB for spec in self.strategy_specs):
            if not self.job_command or not all(isinstance(a, str) and a for a in self.job_command):
                raise ParamError(
                    "job: give the command to run in every worker container after --, e.g. "
                    "incastlab job --image IMAGE -- python3 train.py"
                )
            if not isinstance(self.job_image, str) or not self.job_image.strip():
                raise ParamError("job: --image IMAGE names the image of the job's containers")
            if not isinstance(self.job_dir, str) or (self.job_dir and not Path(self.job_dir).is_dir()):
                raise ParamError(f"job: --job-dir {self.job_dir!r} is not a folder here")
        whole("steps", self.steps, 1)
        number("grad_mb", self.grad_mb, 0, 256, lo_open=True)
        whole("batch", self.batch, 1)
        number("compute_ms", self.compute_ms, 0)
        number("lr", self.lr, 0, lo_open=True)
        whole("seed", self.seed, 0)
        if not isinstance(self.staleness, int) or self.staleness < 0:
            raise ParamError(f"staleness (ssp bound s) must be >= 0, got {self.staleness}")
        if not isinstance(self.backup, int) or not 0 <= self.backup < n:
            raise ParamError(
                f"backup (b backup workers) must be in [0, {n - 1}] for {n} workers, got {self.backup}"
            )
        if self.capture not in CAPTURES:
            raise ParamError(f"capture must be all, ps-port or none, got {self.capture!r}")
        whole("snaplen", self.snaplen, 16, 65535)
        number("queue_sample_ms", self.queue_sample_ms, 1, 1000)
        if self.cc not in CONGESTION_CONTROLS:
            raise ParamError(f"cc must be one of {', '.join(CONGESTION_CONTROLS)}, got {self.cc!r}")
        number("timeout", self.timeout, 0, lo_open=True)
        number("run_timeout", self.run_timeout, 0, lo_open=True)
        if self.target_loss is not None:
            number("target_loss", self.target_loss)
        workers = set(self.worker_hosts)
        for st in self.stragglers:
            self.fabric.check_host("stragglers", st.host)
            if st.host not in workers:
                raise ParamError(f"stragglers: host {st.host!r} runs no worker in this run")
            st.validate()
            self.check_straggler_reach(st)
        self.refuse_non_finite()
        faults = self.parsed_faults()
        if any(spec.kind == JOB for spec in self.strategy_specs):
            by_step = [text for text, f in zip(self.faults, faults, strict=True) if f.at_step is not None]
            if by_step:  # a job's steps are read off its traffic afterwards, not known while it runs
                raise ParamError(
                    f"faults: {by_step[0]!r}: a job's faults are timed in seconds "
                    f"(e.g. @5s), its steps are not known while it runs"
                )

    def check_straggler_reach(self, st: Straggler) -> None:
        """Refuse a straggler field a strategy of the run cannot honour, naming both: a `job`'s ranks
        run the user's command, so compute_factor and slow_every would never reach a step of it."""
        knobs = [k for k in INSIDE_KNOBS if getattr(st, k) != getattr(Straggler, k)]
        for spec in self.strategy_specs:
            if knobs and spec.kind not in SLOWED_INSIDE:
                raise ParamError(
                    f"stragglers: {st.host}: {knobs[0]} cannot slow {spec.name}: its own command "
                    f"computes (cpu, link_mbit, cpuset and mem_mb reach it)"
                )

    def parsed_faults(self) -> list[Any]:
        """The fault specs, checked against the fabric."""
        from runmodel.faults import parse_fault

        plan = self.plan()
        return [parse_fault(f, plan, self.n_workers) for f in self.faults]

    # -- files ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """config.json: the parameters, plus the hosts that run workers (derived, named as such)."""
        doc = run_fields_doc(self, {"schema": SCHEMA})
        doc["worker_hosts"] = self.worker_hosts
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any], where: str = "config") -> ExperimentConfig:
        """A config from config.json or a scenario (unknown fields refused by name)."""
        doc = parse_run_fields(
            doc,
            cls,
            where,
            derived=("schema", "worker_hosts", "scenario", "environment", "provenance"),
            lists=("strategies", "faults", "job_command"),
            comma=("strategies",),
        )
        if isinstance(doc.get("rank_placement"), list | tuple):  # a scenario may list the hosts
            doc["rank_placement"] = ",".join(map(str, doc["rank_placement"]))
        if "stragglers" in doc:
            if not isinstance(doc["stragglers"], list | tuple):
                raise ParamError(f"{where}: stragglers must be a list")
            doc["stragglers"] = tuple(Straggler.from_dict(s) for s in doc["stragglers"])
        return cls(**doc)


def run_fields_doc(cfg: Any, head: dict[str, Any]) -> dict[str, Any]:
    """A run config (ExperimentConfig, IncastConfig) as the JSON object parse_run_fields reads back:
    `head` (schema, kind) first, then every field, fabric and controller as objects, a tuple as a
    list (its dataclasses, such as stragglers, as objects)."""
    doc = dict(head)
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if f.name == "fabric":
            doc[f.name] = value.to_dict()
        elif f.name == "controller":
            doc[f.name] = asdict(value)
        elif isinstance(value, tuple | list):
            doc[f.name] = [asdict(v) if is_dataclass(v) else v for v in value]
        else:
            doc[f.name] = value
    return doc


def parse_run_fields(
    doc: dict[str, Any],
    cls: type,
    where: str,
    derived: tuple[str, ...],
    lists: tuple[str, ...],
    comma: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A run config's JSON object as keyword arguments of `cls` (ExperimentConfig, IncastConfig):
    the fields written for readers only (`derived`) dropped, unknown ones refused by name, fabric and
    controller parsed, a JSON list in `lists` (or, for those in `comma`, a comma-separated string)
    made a tuple."""
    doc = {k: v for k, v in doc.items() if k not in derived}
    if "servers" in doc:  # a scenario's top-level list is the controller's field, declared there only
        controller = doc.get("controller", {})
        if isinstance(controller, dict) and "servers" in controller:
            raise ParamError(f"{where}: servers given twice, at the top and in controller: give it once")
        if isinstance(controller, dict):
            doc["controller"] = {**controller, "servers": doc.pop("servers")}
    refuse_unknown(doc, cls, where)
    if "fabric" in doc:
        if not isinstance(doc["fabric"], dict):
            raise ParamError(f"{where}: fabric must be an object")
        doc["fabric"] = FabricSpec.from_dict(doc["fabric"])
    if "controller" in doc:
        if not isinstance(doc["controller"], dict):
            raise ParamError(f"{where}: controller must be an object")
        doc["controller"] = ControllerOptions.from_dict(doc["controller"])
    for key in lists:
        if key in comma and isinstance(doc.get(key), str):
            doc[key] = split_commas(doc[key])
        if key in doc:
            if not isinstance(doc[key], list | tuple):
                raise ParamError(f"{where}: {key} must be a list")
            doc[key] = tuple(doc[key])
    return doc


def read_scenario_object(path: Path) -> dict[str, Any]:
    """A scenario file's JSON object; ParamError in one line if it cannot be read or is not one."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ParamError(f"scenario {path}: cannot read it ({exc.strerror})") from exc
    except ValueError as exc:
        raise ParamError(f"scenario {path}: not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise ParamError(f"scenario {path}: must be a JSON object")
    return doc


def load_scenario(path: Path) -> ExperimentConfig:
    """A scenario file (JSON): an ExperimentConfig's fields; unknown fields are refused by name."""
    doc = read_scenario_object(path)
    try:
        return ExperimentConfig.from_dict(doc, where=f"scenario {path.name}")
    except TypeError as exc:
        raise ParamError(f"scenario {path.name}: {exc}") from exc


@dataclass(frozen=True)
class RunEnvironment:
    """What the machine gave the run (found, not chosen): recorded so a figure can be read in context."""

    datapath: str  # OVS datapath used: kernel or user
    kernel: str  # uname -r
    cores: int
    cc: str  # congestion control the hosts used
    rto_min_ms: float  # minimum RTO of the hosts' TCP
    virtualisation: str  # tcg, kvm or none (what systemd-detect-virt or the CPU flags say)
    python: str
    torch: str
    runtime: str = "netns"  # what the hosts were: docker containers or network namespaces
    runtime_why: str = ""  # why that runtime (asked for, or what the default found)
    image: str = ""  # the containers' image (runtime docker)


@dataclass(frozen=True)
class Provenance:
    """What started the run (config.json's `provenance`, schema 4 on): the code, by its version and
    git commit, and the command line, so a run can be traced to what made it and made again."""

    version: str  # the incastlab package's version
    commit: str | None  # the git commit of the checkout it ran from (None: not run from a checkout)
    dirty: bool | None  # tracked files differed from that commit (None: unknown)
    command: tuple[str, ...]  # the command line, `incastlab` first, as given
    cwd: str  # where the command ran (its relative paths are from here)

    def to_dict(self) -> dict[str, Any]:
        """config.json's `provenance` object."""
        return dict(asdict(self), command=list(self.command))

    @classmethod
    def from_dict(cls, doc: Any) -> Provenance | None:
        """From config.json; None for a run of an older schema that recorded none (unknown keys ignored)."""
        if not isinstance(doc, dict):
            return None
        return cls(
            version=str(doc.get("version") or "unknown"),
            commit=doc.get("commit"),
            dirty=doc.get("dirty"),
            command=tuple(doc.get("command") or ()),
            cwd=str(doc.get("cwd") or ""),
        )
