"""A strategy with options: `ps`, `ps:shards=4`, `ps:rto_min_ms=1`, `ring:cc=bbr`, `ps:shards=2:cc=reno`,
`ps:pull=serial`, `pp:stages=3:micro=4:schedule=1f1b`, `tp:size=4`, `moe:experts=2`, `hybrid:dp=2:pp=3`.

Each variant is a row of its own in the table, summary.json and the report, named by what it is
(`name`: the kind, then its non-default options in a fixed order), in a folder of its own
(`folder`: the name with ':' -> '_' and '=' -> '-'); the grammar is runmodel.options's.
"""

from __future__ import annotations

from dataclasses import dataclass

from runmodel.options import OptionGrammar, Variant
from runmodel.params import ParamError

PS_FAMILY = ("ps", "async", "ssp", "backup")
COLLECTIVES = ("ring", "allreduce")
PIPELINE = "pp"  # the model's layers in stages on consecutive worker hosts (workloads.pipeline)
TENSOR = "tp"  # each layer's weights split over the hosts, Megatron-LM's column then row (workloads.tensor)
SHARDED = "fsdp"  # parameters, gradients and optimizer state sharded over the workers (workloads.fsdp)
EXPERTS = "moe"  # expert layers over the hosts, tokens dispatched by all-to-all (workloads.moe)
HYBRID = "hybrid"  # dp pipelines of pp stages, each stage's gradients all-reduced across (workloads.hybrid)
MODEL_SPLITS = (PIPELINE, TENSOR, SHARDED, EXPERTS, HYBRID)
JOB = "job"  # the user's own training command, in containers of the user's image (incastlab job)
KINDS = PS_FAMILY + COLLECTIVES + MODEL_SPLITS + (JOB,)
# straggler fields a rank applies from inside its own step (workloads.worker's loop, workloads.rankloop's):
# only the kinds that run incastlab's ranks can honour them (a `job` runs the user's command)
INSIDE_KNOBS = ("compute_factor", "slow_every")
SLOWED_INSIDE = PS_FAMILY + COLLECTIVES + MODEL_SPLITS
# the module every rank of a kind runs (`python -m MODULE --job job.json --rank R`)
WORKER_MODULES = {
    PIPELINE: "workloads.pipeline",
    TENSOR: "workloads.tensor",
    SHARDED: "workloads.fsdp",
    EXPERTS: "workloads.moe",
    HYBRID: "workloads.hybrid",
}
CONGESTION_CONTROLS = ("cubic", "reno", "bbr", "dctcp")
PLACEMENTS = ("dedicated", "colocated")
PULLS = ("all", "serial")  # a PS answers every released worker at once, or one after another
SHARDABLE = ("ps", "async")  # a backup or SSP quorum must be one decision, not one per shard
SCHEDULES = ("gpipe", "1f1b")  # pp: all forwards then all backwards, or one forward one backward
PP_DEPTH = 8  # linear layers of the pipeline's model (workloads.pipeline): at most 8 stages


@dataclass(frozen=True)
class StrategySpec(Variant):
    """One strategy variant: the kind and its options (`name`, `folder`: Variant's)."""

    GRAMMAR = OptionGrammar(what="strategies", example="ps:shards=4", lead="kind")  # not a field

    kind: str
    shards: int = 1  # PS family: the model split over this many PS hosts (ps-lite's even split)
    placement: str = "dedicated"  # shards on hosts of their own (on different leaves) or on the workers'
    rto_min_ms: float | None = None  # minimum RTO in every host while this strategy runs
    cc: str | None = None  # congestion control in every host while this strategy runs
    pull: str = "all"  # PS family: replies to all released workers at once, or one at a time (serial)
    stages: int = 2  # pp: the model cut into this many stages, one per worker host (the first ones)
    micro: int = 4  # pp: micro-batches per step (they must divide the batch)
    schedule: str = "gpipe"  # pp, hybrid: gpipe (all forwards, then all backwards) or 1f1b
    size: int = 0  # tp: the hosts each layer is split over (0: every worker)
    experts: int = 1  # moe: experts on each host
    dp: int = 2  # hybrid: pipelines, each stage's gradients all-reduced across them
    pp: int = 2  # hybrid: stages of each pipeline

    @classmethod
    def parse(cls, text: str) -> StrategySpec:
        """`KIND[:OPTION=VALUE[:...]]`; refuses unknown kinds and options by name."""
        kind = text.strip().split(":")[0].strip()
        if kind not in KINDS:
            raise ParamError(f"strategies: unknown strategy {kind!r} (known: {', '.join(KINDS)})")
        spec = cls.GRAMMAR.parse(cls, text)
        spec.validate(text)
        return spec

    def validate(self, text: str = "") -> None:
        """Refuse options that cannot be, naming the variant."""
        what = f"strategies: {text or self.name!r}"
        if not isinstance(self.shards, int) or self.shards < 1:
            raise ParamError(f"{what}: shards must be a whole number >= 1")
        if self.shards > 1 and self.kind not in SHARDABLE:
            raise ParamError(f"{what}: only {' and '.join(SHARDABLE)} can be sharded")
        if self.placement not in PLACEMENTS:
            raise ParamError(f"{what}: placement must be dedicated or colocated")
        if self.placement != "dedicated" and self.kind not in PS_FAMILY:
            raise ParamError(f"{what}: placement is a parameter-server option")
        if self.rto_min_ms is not None and not 0 < self.rto_min_ms <= 2000:
            raise ParamError(f"{what}: rto_min_ms must be in (0, 2000]")
        if self.cc is not None and self.cc not in CONGESTION_CONTROLS:
            raise ParamError(f"{what}: cc must be one of {', '.join(CONGESTION_CONTROLS)}")
        if self.pull not in PULLS:
            raise ParamError(f"{what}: pull must be one of {', '.join(PULLS)}")
        if self.pull != "all" and self.kind not in PS_FAMILY:
            raise ParamError(f"{what}: pull is a parameter-server option")
        if self.stages != 2 and self.kind != PIPELINE:
            raise ParamError(f"{what}: stages is a pp option (hybrid's stages are pp=)")
        if (self.micro, self.schedule) != (4, "gpipe") and self.kind not in (PIPELINE, HYBRID):
            raise ParamError(f"{what}: micro and schedule are pp and hybrid options")
        if self.size != 0 and self.kind != TENSOR:
            raise ParamError(f"{what}: size is a tp option")
        if self.experts != 1 and self.kind != EXPERTS:
            raise ParamError(f"{what}: experts is a moe option")
        if (self.dp, self.pp) != (2, 2) and self.kind != HYBRID:
            raise ParamError(f"{what}: dp and pp are hybrid options")
        if not isinstance(self.stages, int) or not 2 <= self.stages <= PP_DEPTH:
            raise ParamError(f"{what}: stages must be 2..{PP_DEPTH} (the pp model has {PP_DEPTH} layers)")
        if not isinstance(self.micro, int) or self.micro < 1:
            raise ParamError(f"{what}: micro must be a whole number >= 1")
        if self.schedule not in SCHEDULES:
            raise ParamError(f"{what}: schedule must be one of {', '.join(SCHEDULES)}")
        if not isinstance(self.size, int) or self.size == 1 or self.size < 0:
            raise ParamError(f"{what}: size must be a whole number >= 2 (or 0: every worker)")
        if not isinstance(self.experts, int) or self.experts < 1:
            raise ParamError(f"{what}: experts must be a whole number >= 1")
        if not isinstance(self.dp, int) or self.dp < 1:
            raise ParamError(f"{what}: dp must be a whole number >= 1")
        if not isinstance(self.pp, int) or not 2 <= self.pp <= PP_DEPTH:
            raise ParamError(f"{what}: pp must be 2..{PP_DEPTH} (the pp model has {PP_DEPTH} layers)")

    @property
    def uses_ps(self) -> bool:
        """True for the PS family."""
        return self.kind in PS_FAMILY

    @property
    def hosts(self) -> int | None:
        """Worker hosts this variant trains on: a pipeline's stages, tp's size, hybrid's dp x pp
        (None: every worker)."""
        if self.kind == PIPELINE:
            return self.stages
        if self.kind == TENSOR:
            return self.size or None
        if self.kind == HYBRID:
            return self.dp * self.pp
        return None

    @property
    def module(self) -> str:
        """The module each of this variant's ranks runs."""
        return WORKER_MODULES.get(self.kind, "workloads.worker")

    @property
    def dedicated_shards(self) -> int:
        """PS hosts of their own this variant needs (0 for collectives and colocated shards)."""
        return self.shards if self.uses_ps and self.placement == "dedicated" else 0
