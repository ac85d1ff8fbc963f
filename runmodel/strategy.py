"""A strategy with options: `ps`, `ps:shards=4`, `ps:rto_min_ms=1`, `ring:cc=bbr`, `ps:shards=2:cc=reno`,
`ps:pull=serial`, `pp:stages=3:micro=4:schedule=1f1b`.

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
JOB = "job"  # the user's own training command, in containers of the user's image (incastlab job)
KINDS = PS_FAMILY + COLLECTIVES + (PIPELINE, JOB)
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
    schedule: str = "gpipe"  # pp: gpipe (all forwards, then all backwards) or 1f1b

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
        if (self.stages, self.micro, self.schedule) != (2, 4, "gpipe") and self.kind != PIPELINE:
            raise ParamError(f"{what}: stages, micro and schedule are pp options")
        if not isinstance(self.stages, int) or not 2 <= self.stages <= PP_DEPTH:
            raise ParamError(f"{what}: stages must be 2..{PP_DEPTH} (the pp model has {PP_DEPTH} layers)")
        if not isinstance(self.micro, int) or self.micro < 1:
            raise ParamError(f"{what}: micro must be a whole number >= 1")
        if self.schedule not in SCHEDULES:
            raise ParamError(f"{what}: schedule must be one of {', '.join(SCHEDULES)}")

    @property
    def uses_ps(self) -> bool:
        """True for the PS family."""
        return self.kind in PS_FAMILY

    @property
    def hosts(self) -> int | None:
        """Worker hosts this variant trains on: a pipeline's stages (None: every worker)."""
        return self.stages if self.kind == PIPELINE else None

    @property
    def dedicated_shards(self) -> int:
        """PS hosts of their own this variant needs (0 for collectives and colocated shards)."""
        return self.shards if self.uses_ps and self.placement == "dedicated" else 0
