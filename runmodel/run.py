"""Reading a run from Python: `load_run(path)` gives a run folder's parameters, provenance, figures
and per-strategy records as the run model's own dataclasses (exported as `incastlab.load_run`).

    from incastlab import load_run
    run = load_run("results/latest")
    print(run.config.steps, run.provenance.commit if run.provenance else "before schema 4")
    for name, s in run.strategies.items():
        print(name, s.summary.iter_time_s, s.summary.iter_time_p90_s, [r.loss for r in s.steps])

It reads what the run wrote and computes nothing: summary.json as written (an older schema's
fields that did not exist yet keep their defaults; `incastlab report RUN` rewrites it), and each
strategy's other records through its `folder` (`ps_events()`, `queue_samples()`, `hosts()`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from runmodel.config import ExperimentConfig, Provenance, RunEnvironment
from runmodel.folder import RunFolder, StrategyFolder
from runmodel.params import ParamError
from runmodel.records import Status, StepRecord, WorkerLog
from runmodel.strategy import StrategySpec
from runmodel.summary import RunSummary, StrategySummary

__all__ = ["Run", "StrategyRecords", "load_run"]


@dataclass
class StrategyRecords:
    """One strategy of a run: how it ended, its figures, its workers' step records."""

    name: str  # the variant's name, as in config.json's strategies ("ps", "ps:shards=4")
    spec: StrategySpec
    folder: StrategyFolder  # the readers of its other records
    status: Status | None  # None: it never started (no status.json)
    summary: StrategySummary  # its block of summary.json (defaults when the summary has none)
    workers: dict[int, WorkerLog]  # by rank

    @property
    def steps(self) -> list[StepRecord]:
        """Every worker's step records, in step then rank order."""
        return sorted((r for log in self.workers.values() for r in log.steps), key=lambda r: (r.step, r.rank))


@dataclass
class Run:
    """A run folder, read."""

    path: Path
    folder: RunFolder
    config: ExperimentConfig
    provenance: Provenance | None  # None: written before schema 4
    environment: RunEnvironment | None  # None: the fabric never came up (or an unreadable record)
    summary: RunSummary | None  # None: no readable summary.json
    strategies: dict[str, StrategyRecords]  # in run order
    problems: list[str] = field(default_factory=list)  # what could not be read, one line each


def _environment(doc: object, problems: list[str]) -> RunEnvironment | None:
    if not isinstance(doc, dict):
        return None
    known = {f.name for f in fields(RunEnvironment)}
    try:
        return RunEnvironment(**{k: v for k, v in doc.items() if k in known})
    except TypeError as exc:
        problems.append(f"config.json: environment: {exc}")
        return None


def load_run(path: str | Path) -> Run:
    """Read the run folder at `path` (e.g. results/latest). ParamError in one line when it is no run
    folder of compare, straggler, mitigate or job (an incast sweep has runmodel.incast's readers)."""
    folder = RunFolder(Path(path).resolve())
    doc = folder.config_doc()
    if doc is None:
        raise ParamError(f"not a run folder (no readable config.json): {path}")
    if doc.get("kind") == "incast":
        raise ParamError(f"{path}: an incast sweep; read it with runmodel.incast (IncastFolder)")
    config = ExperimentConfig.from_dict(doc)
    problems = folder.problems
    summary_doc = folder.summary_doc()
    summary = RunSummary.from_dict(summary_doc) if summary_doc is not None else None
    strategies = {}
    for spec in config.strategy_specs:
        sf = folder.strategy(spec.name)
        figures = summary.strategies.get(spec.name) if summary else None
        strategies[spec.name] = StrategyRecords(
            name=spec.name,
            spec=spec,
            folder=sf,
            status=sf.status(problems),
            summary=figures or StrategySummary(),
            workers=sf.worker_logs(problems),
        )
    return Run(
        path=folder.path,
        folder=folder,
        config=config,
        provenance=Provenance.from_dict(doc.get("provenance")),
        environment=_environment(doc.get("environment"), problems),
        summary=summary,
        strategies=strategies,
        problems=problems,
    )
