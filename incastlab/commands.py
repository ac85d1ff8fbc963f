"""Subcommands of the experiment stages: compare, straggler, report, analyze, inspect."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from topologies.spec import FabricSpec, SpecError

SCENARIO_DIR = Path(__file__).with_name("scenarios")
EXPERIMENT_FLAGS = {  # flag -> (ExperimentConfig field, type, help)
    "--workers": ("workers", int, "number of workers (default: every host but the PS)"),
    "--strategies": ("strategies", str, "comma-separated: ps,ring,allreduce,async,ssp,backup"),
    "--steps": ("steps", int, "training steps per strategy"),
    "--grad-mb": ("grad_mb", float, "gradient size, MiB of float32 (traffic per step)"),
    "--batch": ("batch", int, "samples per worker per step"),
    "--compute-ms": ("compute_ms", float, "emulated accelerator time per step, ms (0: CPU compute only)"),
    "--lr": ("lr", float, "learning rate"),
    "--seed": ("seed", int, "random seed (same for every strategy)"),
    "--staleness": ("staleness", int, "SSP bound s"),
    "--backup": ("backup", int, "backup workers b (the backup strategy drops the b slowest)"),
    "--capture": ("capture", str, "all | ps-port | none"),
    "--snaplen": ("snaplen", int, "bytes kept per captured packet"),
    "--timeout": ("timeout", float, "seconds a silent peer may take before the run fails"),
    "--run-timeout": ("run_timeout", float, "seconds one strategy may take at most"),
    "--target-loss": ("target_loss", float, "loss for time-to-target in the report"),
    "--fault": ("faults", str, "inject a fault, e.g. link-down:lf1-eth1@5s, kill-worker:2@step3, "
                               "controller-restart@4s (repeatable)"),
}
FABRIC_FLAGS = {
    "--spines": ("spines", int), "--leaves": ("leaves", int), "--hosts-per-leaf": ("hosts_per_leaf", int),
    "--host-mbit": ("host_mbit", float), "--uplink-mbit": ("uplink_mbit", float),
    "--buffer": ("buffer_pkts", int), "--ps-host": ("ps_host", str),
}


DELEGATED = {  # subcommand -> (module, function taking argv)
    "report": ("analysis.report", "report_main"),
    "analyze": ("analysis.cli", "analyze_main"),
    "inspect": ("analysis.cli", "inspect_main"),
}


def _delegate(module: str, func: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        import importlib

        return int(getattr(importlib.import_module(module), func)(args.rest))

    return run


def load_scenario(path: Path) -> dict[str, Any]:
    """A scenario file (JSON): the experiment's parameters; unknown fields are refused by name."""
    from incastlab.experiment import ExperimentConfig

    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise SpecError(f"scenario {path}: cannot read it ({exc.strerror})") from exc
    except ValueError as exc:
        raise SpecError(f"scenario {path}: not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise SpecError(f"scenario {path}: must be a JSON object")
    known = {f.name for f in fields(ExperimentConfig)} | {"description", "name"}
    for key in doc:
        if key not in known:
            raise SpecError(f"scenario {path.name}: unknown field {key!r}")
    return doc


def config_from(args: argparse.Namespace, scenario: dict[str, Any]) -> Any:
    """ExperimentConfig from a scenario, overridden by the flags given on the command line."""
    from incastlab.experiment import ExperimentConfig, Straggler

    fabric = dict(scenario.get("fabric", {}))
    for _flag, (key, _typ) in FABRIC_FLAGS.items():
        if getattr(args, key, None) is not None:
            fabric[key] = getattr(args, key)
    exp = {k: v for k, v in scenario.items() if k not in ("fabric", "description", "name", "stragglers")}
    for _flag, (key, _typ, _help) in EXPERIMENT_FLAGS.items():
        if getattr(args, key, None) is not None:
            exp[key] = getattr(args, key)
    if isinstance(exp.get("strategies"), str):
        exp["strategies"] = [s.strip() for s in exp["strategies"].split(",") if s.strip()]
    stragglers = []
    raw = list(scenario.get("stragglers", [])) + [_parse_straggler(s) for s in (args.straggler or [])]
    for st in raw:
        if not isinstance(st, dict) or "host" not in st:
            raise SpecError("stragglers: each needs a host, e.g. {\"host\": \"h3\", \"cpu\": 0.25}")
        unknown = set(st) - {"host", "cpu", "link_mbit", "slow_every", "slow_factor", "compute_factor"}
        if unknown:
            raise SpecError(f"stragglers: unknown field {sorted(unknown)[0]!r}")
        stragglers.append(Straggler(**st))
    for st in stragglers:
        if st.cpu is not None:
            fabric.setdefault("cpu", {})[st.host] = st.cpu
        if st.link_mbit is not None:
            fabric.setdefault("link_mbit", {})[st.host] = st.link_mbit
    spec = FabricSpec.from_dict(fabric)
    try:
        cfg = ExperimentConfig(fabric=spec, stragglers=stragglers, **exp)
    except TypeError as exc:
        raise SpecError(f"scenario: {exc}") from exc
    cfg.validate()
    return cfg


def _parse_straggler(text: str) -> dict[str, Any]:
    """--straggler h3:cpu=0.25,slow_every=3,slow_factor=4,link_mbit=5"""
    host, _, rest = text.partition(":")
    out: dict[str, Any] = {"host": host}
    for part in filter(None, rest.split(",")):
        key, _, val = part.partition("=")
        if key not in ("cpu", "link_mbit", "slow_every", "slow_factor", "compute_factor"):
            raise SpecError(f"--straggler: unknown field {key!r} "
                            "(cpu, link_mbit, slow_every, slow_factor, compute_factor)")
        try:
            out[key] = int(val) if key == "slow_every" else float(val)
        except ValueError as exc:
            raise SpecError(f"--straggler: {key} needs a number, got {val!r}") from exc
    return out


def cmd_compare(args: argparse.Namespace) -> int:
    """Run the strategies on one fabric; write the run folder, summary, report; print the table."""
    from analysis.summary import comparison_table, summarize
    from incastlab.cli import check_ports_args, say
    from incastlab.experiment import ExperimentError, run_experiment
    from incastlab.runfolder import RunFolder, write_json
    from incastlab.session import fabric_session

    scenario_path = Path(args.scenario) if args.scenario else SCENARIO_DIR / f"{args.default_scenario}.json"
    cfg = config_from(args, load_scenario(scenario_path))
    cfg.interval = args.interval
    check_ports_args(args)
    folder = RunFolder(Path(args.results))
    write_json(folder.path / "config.json", dict(cfg.to_dict(), scenario=str(scenario_path)))
    say(f"run folder: {folder.path}")
    error: str | None = None
    code = 0
    try:
        with fabric_session(cfg.fabric, folder.path, api_port=args.api_port, of_port=args.of_port,
                            api_host=args.api_host, interval=cfg.interval,
                            record=folder.path / "controller.jsonl",
                            datapath=args.datapath, progress=say) as sess:
            say(f"dashboard: {sess.controller.base}/")
            run_experiment(sess, cfg, folder, say)
    except ExperimentError as exc:
        error, code = str(exc), 1
    except KeyboardInterrupt:
        error, code = "interrupted", 130
    finally:
        if (folder.path / "config.json").exists():
            _finish(folder.path, say, summarize, comparison_table, error)
    if error:
        print(f"incastlab {args.command}: {error}; results so far are in {folder.path}", file=sys.stderr)
    return code


def _finish(run_dir: Path, say: Any, summarize: Any, table: Any, error: str | None) -> None:
    """Summary, report and table of whatever the run produced (also after a failure)."""
    try:
        say("summary: computing figures")
        summary = summarize(run_dir)
        print(table(summary), flush=True)
    except Exception as exc:  # noqa: BLE001 - the run's files stay; the report can be rebuilt
        say(f"summary failed: {type(exc).__name__}: {exc}")
        return
    try:
        from analysis.report import build_report

        say("report: building")
        built = build_report(run_dir)
        print(f"report: {built['files']['html']}", flush=True)
    except Exception as exc:  # noqa: BLE001
        say(f"report failed: {type(exc).__name__}: {exc} (rebuild with `incastlab report {run_dir}`)")


def _add_experiment_parser(sub: Any, name: str, text: str, scenario: str) -> None:
    from incastlab.cli import add_fabric_args

    p = sub.add_parser(name, help=text)
    add_fabric_args(p)
    for action in p._actions:  # fabric flags: None unless given, so a scenario's values hold
        if action.dest in {k for k, _ in FABRIC_FLAGS.values()}:
            action.default = None
    for flag, (dest, typ, help_text) in EXPERIMENT_FLAGS.items():
        action = "append" if dest == "faults" else "store"
        p.add_argument(flag, dest=dest, type=typ, default=None, help=help_text, action=action)
    p.add_argument("--straggler", action="append", metavar="HOST:FIELD=V,...",
                   help="slow a worker, e.g. h3:cpu=0.25 or h3:slow_every=3,slow_factor=4 (repeatable)")
    p.add_argument("--scenario", help=f"scenario file (default: the shipped {scenario}.json)")
    p.add_argument("--results", default="results", help="where run folders go (default results/)")
    p.set_defaults(func=cmd_compare, default_scenario=scenario, interval=0.5)


def register(sub: Any) -> None:
    """Add the experiment and analysis subcommands to the `incastlab` parser."""
    _add_experiment_parser(sub, "compare", "the main job: PS vs ring all-reduce, report in results/latest",
                           "compare")
    _add_experiment_parser(sub, "straggler", "sync, async, SSP and backup workers with one straggler",
                           "straggler")
    helps = {"report": "rebuild the report of a saved run folder",
             "analyze": "count retransmissions, dup ACKs... of any pcap",
             "inspect": "print one flow's packets with what each is"}
    for name, (module, func) in DELEGATED.items():  # listed for --help; main() hands them argv
        p = sub.add_parser(name, help=helps[name], add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=_delegate(module, func))
