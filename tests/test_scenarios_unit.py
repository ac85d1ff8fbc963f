"""Scenario files, parameters and their flags: refused by field, and every flag reaches config.json
and a stage that acts on it (table-driven over the parser itself)."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from incastlab.cli import SCENARIO_DIR, build_parser, config_from_args
from runmodel.config import ControllerOptions, ExperimentConfig, load_scenario
from runmodel.fabric import FabricSpec
from runmodel.folder import RunFolder
from runmodel.params import ParamError, flags

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("runmodel", "topologies", "controller", "workloads", "capture", "analysis", "report", "incastlab")


def parse(*argv: str, command: str = "compare"):
    return build_parser().parse_args([command, *argv])


@pytest.mark.parametrize("name", ["compare", "straggler"])
def test_shipped_scenarios_are_valid(name):
    cfg = config_from_args(parse(command=name), load_scenario(SCENARIO_DIR / f"{name}.json"))
    assert cfg.n_workers == 7 and cfg.worker_hosts[0] == "h2"


def test_mitigate_scenario_puts_the_shards_on_their_own_hosts_on_different_leaves():
    cfg = config_from_args(parse(command="mitigate"), load_scenario(SCENARIO_DIR / "mitigate.json"))
    specs = {s.name: s for s in cfg.strategy_specs}
    assert list(specs) == [
        "ps",
        "ps:rto_min_ms=1",
        "ps:pull=serial",
        "ps:shards=2",
        "ps:shards=4",
        "ps:shards=4:pull=serial",
        "ring",
    ]
    four = cfg.shard_hosts(specs["ps:shards=4"])
    assert four == ["h1", "h4", "h7", "h10"] and len({cfg.plan().host(h).leaf for h in four}) == 4
    assert cfg.shard_hosts(specs["ps:shards=2"]) == ["h1", "h7"]
    assert not set(four) & set(cfg.worker_hosts) and cfg.n_workers == 8


@pytest.mark.parametrize(
    "strategies, needle",
    [
        ("ps:shards=7", "7 shards need 7 PS hosts"),  # more shards than the fabric can host
        ("ps:turbo=1", "unknown option 'turbo'"),
        ("ps:shards=two", "shards needs a number"),
        ("ssp:shards=2", "only ps and async can be sharded"),
        ("ring:placement=colocated", "parameter-server option"),
        ("ps:rto_min_ms=0", "rto_min_ms must be in (0, 2000]"),
        ("ps:cc=vegas", "cc must be one of"),
        ("ps:pull=some", "pull must be one of all, serial"),
        ("ring:pull=serial", "pull is a parameter-server option"),
        ("ps,ps", "each strategy may appear once"),
    ],
)
def test_invalid_strategy_options_are_one_line(strategies, needle):
    with pytest.raises(ParamError) as err:
        config_from_args(parse("--strategies", strategies), load_scenario(SCENARIO_DIR / "compare.json"))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_workers_cannot_take_a_dedicated_shard_host():
    args = parse("--hosts-per-leaf", "3", "--strategies", "ps:shards=4,ring", "--workers", "9")
    with pytest.raises(ParamError, match="hosts but the PS hosts h1, h4, h7, h10"):
        config_from_args(args, load_scenario(SCENARIO_DIR / "compare.json"))


def test_straggler_scenario_slows_one_worker_with_every_knob():
    cfg = config_from_args(parse(command="straggler"), load_scenario(SCENARIO_DIR / "straggler.json"))
    assert set(cfg.strategies) == {"ps", "ring", "async", "ssp", "backup"}
    (st,) = cfg.stragglers
    assert cfg.plan().host(st.host).cpu == st.cpu and st.compute_factor > 1 and st.slow_every > 0


@pytest.mark.parametrize(
    "doc, field",
    [
        ({"strategies": ["ps", "gossip"]}, "strategies"),
        ({"stragglers": [{"host": "h42", "cpu": 0.5}]}, "h42"),
        ({"stragglers": [{"host": "h1", "cpu": 0.5}]}, "h1"),  # the PS runs no worker
        ({"stragglers": [{"host": "h3", "speed": 2}]}, "speed"),
        ({"stragglers": [{"host": "h3", "cpu": 1.5}]}, "cpu"),
        ({"staleness": -1, "strategies": ["ssp"]}, "staleness"),
        ({"backup": 7, "strategies": ["backup"]}, "backup"),
        ({"workers": 1}, "workers"),
        ({"steps": 0}, "steps"),
        ({"cc": "vegas"}, "cc"),
        ({"fabric": {"spines": 0}}, "spines"),
        ({"fabric": {"ps_host": "h99"}}, "ps_host"),
        ({"controller": {"api_port": 70000}}, "api-port"),
        ({"faults": ["kill-worker:9@step1"]}, "kill-worker"),
        ({"faults": ["meteor@3s"]}, "meteor"),
        ({"colour": "blue"}, "colour"),
        ({"servers": ["a", "b"], "controller": {"servers": ["a"]}}, "servers given twice"),
        ({"servers": ["a", "a"]}, "--servers names a twice"),
    ],
)
def test_invalid_scenarios_name_the_field(tmp_path, doc, field):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ParamError) as err:
        config_from_args(parse(), load_scenario(path))
    assert field in str(err.value) and "\n" not in str(err.value)


def test_bad_json_and_missing_file_are_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ParamError, match="not valid JSON"):
        load_scenario(bad)
    with pytest.raises(ParamError, match="cannot read"):
        load_scenario(tmp_path / "missing.json")


def test_command_line_overrides_the_scenario():
    args = parse("--steps", "3", "--hosts-per-leaf", "3", "--straggler", "h4:slow_every=2,slow_factor=3")
    cfg = config_from_args(args, load_scenario(SCENARIO_DIR / "compare.json"))
    assert cfg.steps == 3 and cfg.fabric.hosts_per_leaf == 3 and cfg.n_workers == 11
    assert cfg.stragglers[0].host == "h4" and cfg.stragglers[0].slow_factor == 3.0


def test_a_scenarios_top_level_servers_are_the_controllers(tmp_path):
    """`servers` at the top of a scenario (as the issue writes it) lands in controller.servers, the
    field's one declaration, and config.json keeps it there; the flag still overrides it."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"servers": ["10.249.0.11", "10.249.0.12"], "steps": 3}))
    cfg = config_from_args(parse(), load_scenario(path))
    assert cfg.controller.servers == ("10.249.0.11", "10.249.0.12") and cfg.steps == 3
    written = json.loads(json.dumps(cfg.to_dict()))  # as config.json holds it
    assert written["controller"]["servers"] == ["10.249.0.11", "10.249.0.12"] and "servers" not in written
    assert config_from_args(parse("--servers", "s9"), load_scenario(path)).controller.servers == ("s9",)


def test_a_bad_flag_value_is_one_line():
    with pytest.raises(ParamError, match="--steps"):
        config_from_args(parse("--steps", "many"), load_scenario(SCENARIO_DIR / "compare.json"))


# -- every flag, from the parser itself ------------------------------------------------------------
# A valid value other than the default for each flag; a flag added without one fails the test below.
SAMPLES = {
    "--workers": "3",
    "--placement": "spread",
    "--routing": "firstfit",
    "--servers": "10.249.0.11,10.249.0.12",
    "--strategies": "ring,ps",
    "--steps": "3",
    "--grad-mb": "0.25",
    "--batch": "8",
    "--compute-ms": "5",
    "--lr": "0.5",
    "--seed": "7",
    "--staleness": "3",
    "--backup": "2",
    "--capture": "ps-port",
    "--snaplen": "96",
    "--queue-sample-ms": "20",
    "--cc": "reno",
    "--timeout": "30",
    "--run-timeout": "300",
    "--target-loss": "2.0",
    "--fault": "link-down:lf1-eth1@5s",
    "--straggler": "h3:cpu=0.5",
    "--spines": "3",
    "--leaves": "3",
    "--hosts-per-leaf": "3",
    "--host-mbit": "12.5",
    "--uplink-mbit": "15",
    "--buffer-pkts": "30",
    "--ps-host": "h8",
    "--host-buffer-pkts": "500",
    "--delay-ms": "5",
    "--loss-pct": "1",
    "--datapath": "user",
    "--api-host": "127.0.0.2",
    "--api-port": "8181",
    "--of-host": "127.0.0.3",
    "--of-port": "6655",
    "--interval": "0.25",
    "--runtime": "netns",
    "--image": "example/trainer:1",
    "--job-dir": "/tmp",
}


def _param_actions(command: str):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return [a for a in sub._actions if a.dest.startswith("param_")]


@pytest.mark.parametrize("command", ["compare", "straggler", "mitigate", "job", "fabric", "dashboard"])
def test_every_flag_of_the_parser_reaches_config_json(tmp_path, command):
    actions = _param_actions(command)
    assert actions, "the parser has parameter flags"
    experiment = command in ("compare", "straggler", "mitigate", "job")
    scenario = load_scenario(SCENARIO_DIR / f"{command}.json") if experiment else None
    if command == "job":  # the command comes after `--`, not from a flag
        scenario = dataclasses.replace(scenario, job_command=("python3", "train.py"), job_image="mine:1")
    for action in actions:
        flag = action.option_strings[0]
        assert flag in SAMPLES, f"{flag}: add a sample value to SAMPLES so the flag is tested"
        args = parse(flag, SAMPLES[flag], command=command)
        field = action.dest.removeprefix("param_")
        if scenario is None:  # fabric/dashboard: fabric and controller only
            from incastlab.cli import fabric_and_controller

            spec, options = fabric_and_controller(args)
            cfg = ExperimentConfig(fabric=spec, controller=options)
        else:
            cfg = config_from_args(args, scenario)
        folder = RunFolder.create(tmp_path / command / field, link_latest=False)
        folder.write_config(cfg)
        back = ExperimentConfig.from_dict(json.loads(folder.config_file.read_text()))
        owner = next(
            c
            for c in (ExperimentConfig, FabricSpec, ControllerOptions)
            if field in {f.name for f in flags(c)}
        )
        got = getattr(
            back if owner is ExperimentConfig else back.fabric if owner is FabricSpec else back.controller,
            field,
        )
        fl = next(f for f in flags(owner) if f.name == field)
        want = (fl.parse(SAMPLES[flag]),) if fl.repeat else fl.parse(SAMPLES[flag])
        assert got == want and got != fl.default, f"{flag} did not reach config.json ({got!r})"


def _consumers(field: str) -> list[str]:
    """Places in the product that read `.field` (or the key "field" of a loaded document, outside the
    run model), not counting the parameter classes' own checks and conversions."""
    skip = {"validate", "to_dict", "from_dict", "check_host", "overridden", "parse"}
    found = []
    for pkg in PRODUCT:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for fn in ast.walk(tree):
                if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and fn.name not in skip:
                    for node in ast.walk(fn):
                        attr = isinstance(node, ast.Attribute) and node.attr == field
                        key = pkg != "runmodel" and isinstance(node, ast.Constant) and node.value == field
                        if attr or key:
                            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


@pytest.mark.parametrize("owner", [ExperimentConfig, FabricSpec, ControllerOptions])
def test_every_parameter_is_read_by_a_stage(owner):
    dead = [fl.flag for fl in flags(owner) if not _consumers(fl.name)]
    assert not dead, f"parameters no stage reads (dead flags): {dead}"
