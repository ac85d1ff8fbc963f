"""The run as the report sees it: summary.json (rebuilt when missing) and the run folder's records.

`RunView.open(run_dir)` reads everything once through the run model's readers: `summary` is the
RunSummary (the figures of every table and finding), `folder` the RunFolder, and per strategy a
StrategyView with the typed records the time series are binned from. A section of the report is a
function of a RunView (report/sections/), so it gets the summary and the folder together.
`IncastView.open(folder)` is the same for an incast sweep: incast.json and its collapsed round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from analysis.errors import AnalysisError
from runmodel import SCHEMA
from runmodel.config import ExperimentConfig
from runmodel.fabric import Plan
from runmodel.folder import RunFolder, StrategyFolder
from runmodel.incast import IncastFolder, IncastResult
from runmodel.params import ParamError
from runmodel.records import (
    CaptureReport,
    ControllerSeries,
    CpuSample,
    FaultRecord,
    PsEvent,
    QueueSample,
    Status,
    StepRecord,
    read_json,
)
from runmodel.strategy import StrategySpec
from runmodel.summary import RunSummary, StrategySummary

STRAGGLER_STRATEGIES = ("async", "ssp", "backup")
T = TypeVar("T")
# what analysis.summary writes into each strategy folder next to summary.json (runmodel/folder.py has
# no property for them yet)


def parse_spec(name: str) -> StrategySpec | None:
    """The variant a strategy name stands for (None for a name the run model does not know)."""
    try:
        return StrategySpec.parse(name)
    except ParamError:
        return None


class ReportError(AnalysisError):
    """A run folder the report cannot be built from; str() is one line."""


@dataclass
class StrategyView:
    """One strategy: its figures (summary) and its records, read once."""

    name: str
    folder: StrategyFolder
    summary: StrategySummary
    status: Status | None = None
    steps: dict[int, list[StepRecord]] = field(default_factory=dict)  # rank -> its steps in order
    ps_events: list[PsEvent] = field(default_factory=list)
    controller: ControllerSeries = field(default_factory=ControllerSeries)
    queue: list[QueueSample] = field(default_factory=list)
    faults: list[FaultRecord] = field(default_factory=list)
    capture: CaptureReport | None = None
    cpu: list[CpuSample] = field(default_factory=list)
    goodput_timeline: dict[str, Any] | None = None  # goodput_timeline.json (written by the summary)
    rto_events: list[dict[str, Any]] = field(default_factory=list)  # rto_events.json's events
    dequeue: dict[str, Any] | None = None  # dequeue.json
    retransmits_timeline: dict[str, Any] | None = None  # retransmits_timeline.json

    @classmethod
    def read(cls, sf: StrategyFolder, summary: StrategySummary, problems: list[str]) -> StrategyView:
        """Every record of a strategy folder (an absent folder gives an empty view)."""
        view = cls(sf.name, sf, summary)
        if not sf.exists:
            return view
        view.status = sf.status(problems)
        view.steps = {r: log.steps for r, log in sf.worker_logs(problems).items()}
        view.ps_events = sf.ps_events(problems)
        view.controller = sf.controller_series(problems)
        view.queue = sf.queue_samples(problems)
        view.faults = sf.faults(problems)
        view.capture = sf.capture(problems)
        view.cpu = sf.cpu_samples(problems)
        view.goodput_timeline = _doc(read_json(sf.goodput_file, problems))
        rto = _doc(read_json(sf.rto_events_file, problems)) or {}
        view.rto_events = [e for e in rto.get("events") or [] if isinstance(e, dict) and _is_num(e.get("t"))]
        view.dequeue = _doc(read_json(sf.dequeue_file, problems))
        view.retransmits_timeline = _doc(read_json(sf.retransmits_file, problems))
        return view

    @property
    def spec(self) -> StrategySpec | None:
        """The variant (kind and options) this strategy is."""
        return parse_spec(self.name)

    @property
    def present(self) -> bool:
        """The strategy got as far as its folder."""
        return self.folder.exists

    @property
    def records(self) -> list[StepRecord]:
        """Every step record of every worker."""
        return [r for recs in self.steps.values() for r in recs]

    @property
    def t0(self) -> float | None:
        """The time origin of its timelines: its first training step's start (else status t_start)."""
        starts = [r.t_start for r in self.records]
        if starts:
            return min(starts)
        return self.status.t_start if self.status else None

    @property
    def window(self) -> tuple[float, float] | None:
        """[start, end] of the strategy (status.json's times, else its first and last step)."""
        recs = self.records
        a = self.status.t_start if self.status and self.status.t_start else None
        b = self.status.t_end if self.status and self.status.t_end else None
        a = a if a is not None else min((r.t_start for r in recs), default=None)
        b = b if b is not None else max((r.t_end for r in recs), default=None)
        return (a, b) if a is not None and b is not None and b > a else None

    @property
    def training_end(self) -> float | None:
        """Seconds from t0 to the last step's end."""
        t0, recs = self.t0, self.records
        return max(r.t_end for r in recs) - t0 if recs and t0 is not None else None

    @property
    def ps_family(self) -> bool:
        """Gradients go through a parameter server (ps, ps:shards=4, async, ...)."""
        spec = self.spec
        return bool(spec and spec.uses_ps)


def _doc(doc: Any) -> dict[str, Any] | None:
    return doc if isinstance(doc, dict) else None


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


@dataclass
class RunView:
    """summary.json and the run folder's records, for the report."""

    folder: RunFolder
    summary: RunSummary
    config: ExperimentConfig
    plan: Plan
    strategies: dict[str, StrategyView]
    rebuilt: str | None = None  # why summary.json was recomputed, if it was
    problems: list[str] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict, repr=False)  # prepared series, see memo()

    @classmethod
    def open(cls, run_dir: Path | str | RunFolder) -> RunView:
        """Read a run folder. summary.json is rendered as written; when it is missing, unreadable or of
        an older schema it is recomputed (and rewritten) by analysis.summary.summarize, the code that
        writes it at the end of a run."""
        from analysis.summary import summarize

        folder = run_dir if isinstance(run_dir, RunFolder) else RunFolder(Path(run_dir))
        if not folder.path.is_dir():
            raise ReportError(f"run folder not found: {folder.path}")
        config = folder.config()  # ParamError (one line) when there is no readable config.json
        plan = folder.plan()
        doc = folder.summary_doc()
        rebuilt = None
        if doc is None:
            rebuilt = (
                "summary.json was missing"
                if not folder.summary_file.exists()
                else "summary.json was unreadable"
            )
        elif int(doc.get("schema") or 1) != SCHEMA:
            rebuilt = f"summary.json was of schema {doc.get('schema') or 1}, not {SCHEMA}"
        summary = summarize(folder) if rebuilt else RunSummary.from_dict(doc or {})
        problems = list(dict.fromkeys(p for p in folder.problems if not p.startswith("summary.json")))
        strategies = {}
        for name in (spec.name for spec in config.strategy_specs):  # as summary.json names them
            fig = summary.strategies.get(name) or StrategySummary()
            strategies[name] = StrategyView.read(folder.strategy(name), fig, problems)
        return cls(folder, summary, config, plan, strategies, rebuilt, problems)

    @property
    def present(self) -> list[StrategyView]:
        """Strategies with a folder, in run order."""
        return [s for s in self.strategies.values() if s.present]

    @property
    def timed(self) -> list[StrategyView]:
        """Strategies with at least one step: the ones with timelines."""
        return [s for s in self.present if s.records]

    @property
    def ps_family(self) -> list[StrategyView]:
        """Present strategies of the PS family."""
        return [s for s in self.present if s.ps_family]

    @property
    def ps_port(self) -> str:
        """The PS host's leaf port."""
        return self.plan.ps_port.name

    def shard_hosts(self, name: str) -> list[str]:
        """The PS hosts of a PS-family variant (every shard's), [] for a collective."""
        spec = parse_spec(name)
        return self.config.shard_hosts(spec) if spec else []

    def shard_ports(self, name: str) -> list[str]:
        """The leaf ports toward a PS-family variant's shard hosts (the PS port first)."""
        hosts = {h.name: h for h in self.plan.hosts}
        return [hosts[h].leaf_port for h in self.shard_hosts(name) if h in hosts]

    @property
    def environment(self) -> dict[str, Any]:
        """config.json's "environment": what the machine gave the run (datapath, kernel, cores, ...)."""
        env = (self.folder.config_doc() or {}).get("environment")
        return env if isinstance(env, dict) else {}

    @property
    def has_stragglers(self) -> bool:
        """Stragglers were configured, or a strategy that exists for them ran."""
        return bool(self.config.stragglers) or any(s.name in STRAGGLER_STRATEGIES for s in self.present)

    @property
    def host_captures(self) -> bool:
        """Hosts were captured (capture "all"): the pcap series exist."""
        return self.config.capture == "all"

    def memo(self, key: str, make: Callable[[], T]) -> T:
        """`make()` once per RunView (series several sections plot, e.g. the pcap series)."""
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]


@dataclass
class IncastView:
    """An incast sweep as its report sees it: incast.json (the IncastResult), the one collapsed round of
    timeline.json (None when the sweep saved none) and the run folder's name."""

    result: IncastResult
    timeline: dict[str, Any] | None
    name: str

    @classmethod
    def open(cls, folder: IncastFolder) -> IncastView:
        """Read a sweep's folder; ParamError (one line) when it has no readable incast.json."""
        result = folder.result()
        if result is None:
            raise ParamError(
                f"{folder.path}: no readable incast.json (run `incastlab incast --rebuild {folder.path}`)"
            )
        tl = read_json(folder.timeline_file) if result.timeline.get("file") else None
        return cls(result, tl if isinstance(tl, dict) else None, folder.path.name)
