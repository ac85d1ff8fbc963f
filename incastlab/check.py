"""`incastlab check SCENARIO [FLAGS]` and `--check` on every command that runs a scenario: the scenario
file and every flag validated by the code a run validates them with, without root and without building
anything (no fabric, no run folder).

`check` decides which command the file is a scenario of (an incast sweep's fields, a job strategy, else
compare) and parses `COMMAND --scenario SCENARIO --check FLAGS` with that command's own parser, so a
refusal is the very line the run would print (`incastlab compare: steps must be a whole number, got
'5'`, exit 2). What the kernel can run (congestion controls a module would add, the minimum RTO) is
asked only as root, as the run asks it; otherwise the ok line says it was left out. The machine's
passing state (controller ports taken by another run, disk space, dockerd, a job's image) is the run's
to check when it starts: a check says whether the input is right, not whether now is a good moment.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from runmodel.config import ExperimentConfig, read_scenario_object
from runmodel.incast import IncastConfig
from runmodel.params import ParamError
from runmodel.strategy import JOB

ROOT_ONLY = "kernel checks left out: they need root"


def is_root() -> bool:
    """True when this process may load kernel modules, as a run does."""
    return os.geteuid() == 0


def scenario_command(path: Path, flags: list[str]) -> str:
    """The command a scenario file is for: `incast` when it holds a field only a sweep has (or its
    `kind` says so), `job` when it runs a job strategy or a command follows `--`, else `compare`
    (compare, straggler and mitigate read the same fields). ParamError if the file is no JSON object."""
    doc = read_scenario_object(path)
    sweep_only = {f for f in IncastConfig.__dataclass_fields__} - set(ExperimentConfig.__dataclass_fields__)
    if doc.get("kind") == "incast" or sweep_only & set(doc):
        return "incast"
    strategies = doc.get("strategies")
    names = strategies.split(",") if isinstance(strategies, str) else strategies
    kinds = {str(s).split(":")[0].strip() for s in names} if isinstance(names, list) else set()
    return "job" if JOB in kinds or "--" in flags else "compare"


def resolve(scenario: str, shipped: Path) -> tuple[Path, str | None]:
    """The scenario file `scenario` names (a path, or a shipped scenario's name such as `compare`), and
    the command when it is a shipped one (None: decided from the file)."""
    path = Path(scenario)
    named = shipped / f"{scenario}.json"
    if not path.exists() and "/" not in scenario and named.is_file():
        return named, scenario
    return path, None


def check_argv(args: argparse.Namespace, shipped: Path) -> list[str]:
    """`check`'s command line as the run command's: `COMMAND --scenario FILE --check FLAGS...`."""
    flags = list(args.flags)
    path, command = resolve(args.scenario, shipped)
    if command is None:
        try:
            command = scenario_command(path, flags)
        except ParamError:
            command = "compare"  # the run command's own parse refuses the file in its own words
    return [command, "--scenario", str(path), "--check", *flags]


def experiment_line(cfg: ExperimentConfig, scenario: Path, root_checked: bool) -> str:
    """The ok line of an experiment scenario: what the run would do."""
    parts = [
        ", ".join(spec.name for spec in cfg.strategy_specs),
        f"{cfg.n_workers} workers",
        f"{cfg.steps} steps",
    ]
    if cfg.faults:
        parts.append(f"{len(cfg.faults)} fault(s)")
    if cfg.stragglers:
        parts.append(f"{len(cfg.stragglers)} straggler(s)")
    return ok_line(scenario, parts, root_checked)


def incast_line(cfg: IncastConfig, scenario: Path, root_checked: bool, not_run: list[dict[str, str]]) -> str:
    """The ok line of an incast sweep: its curves, sender counts and rounds."""
    parts = [
        f"curves {', '.join(c.name for c in cfg.curves)}",
        f"senders {','.join(map(str, cfg.senders))}",
        f"{cfg.rounds} rounds",
    ]
    parts += [f"{item['line']} would not run ({item['reason']})" for item in not_run]
    return ok_line(scenario, parts, root_checked)


def ok_line(scenario: Path, parts: list[str], root_checked: bool) -> str:
    """`SCENARIO: ok (...)`, with the checks left out said when they were."""
    tail = "" if root_checked else f"; {ROOT_ONLY}"
    return f"{scenario}: ok ({'; '.join(parts)}){tail}"
