"""Scenario files and experiment parameters: refused with a message that names the field."""

from __future__ import annotations

import argparse
import json

import pytest

from incastlab.commands import SCENARIO_DIR, config_from, load_scenario
from topologies.spec import SpecError


def no_flags(**kw) -> argparse.Namespace:
    """A command line that overrides nothing."""
    from incastlab.commands import EXPERIMENT_FLAGS, FABRIC_FLAGS

    ns = {key: None for key, _ in FABRIC_FLAGS.values()}
    ns.update({key: None for key, _, _ in EXPERIMENT_FLAGS.values()})
    ns["straggler"] = None
    ns.update(kw)
    return argparse.Namespace(**ns)


@pytest.mark.parametrize("name", ["compare", "straggler"])
def test_shipped_scenarios_are_valid(name):
    cfg = config_from(no_flags(), load_scenario(SCENARIO_DIR / f"{name}.json"))
    assert cfg.n_workers == 7 and cfg.worker_hosts[0] == "h2"


def test_straggler_scenario_slows_one_worker_with_every_knob():
    cfg = config_from(no_flags(), load_scenario(SCENARIO_DIR / "straggler.json"))
    assert set(cfg.strategies) == {"ps", "ring", "async", "ssp", "backup"}
    (st,) = cfg.stragglers
    assert cfg.fabric.cpu == {st.host: st.cpu} and st.compute_factor > 1 and st.slow_every > 0


@pytest.mark.parametrize("doc, field", [
    ({"strategies": ["ps", "gossip"]}, "strategies"),
    ({"stragglers": [{"host": "h42", "cpu": 0.5}]}, "h42"),
    ({"stragglers": [{"host": "h1", "cpu": 0.5}]}, "h1"),  # the PS runs no worker
    ({"stragglers": [{"host": "h3", "speed": 2}]}, "speed"),
    ({"staleness": -1, "strategies": ["ssp"]}, "staleness"),
    ({"backup": 7, "strategies": ["backup"]}, "backup"),
    ({"workers": 1}, "workers"),
    ({"steps": 0}, "steps"),
    ({"fabric": {"spines": 0}}, "spines"),
    ({"fabric": {"ps_host": "h99"}}, "ps_host"),
    ({"faults": ["kill-worker:9@step1"]}, "kill-worker"),
    ({"faults": ["meteor@3s"]}, "meteor"),
    ({"colour": "blue"}, "colour"),
])
def test_invalid_scenarios_name_the_field(tmp_path, doc, field):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SpecError) as err:
        config_from(no_flags(), load_scenario(path))
    assert field in str(err.value) and "\n" not in str(err.value)


def test_bad_json_and_missing_file_are_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_scenario(bad)
    with pytest.raises(SpecError, match="cannot read"):
        load_scenario(tmp_path / "missing.json")


def test_command_line_overrides_the_scenario():
    cfg = config_from(no_flags(steps=3, hosts_per_leaf=3, straggler=["h4:slow_every=2,slow_factor=3"]),
                      load_scenario(SCENARIO_DIR / "compare.json"))
    assert cfg.steps == 3 and cfg.fabric.hosts_per_leaf == 3 and cfg.n_workers == 11
    assert cfg.stragglers[0].host == "h4" and cfg.stragglers[0].slow_factor == 3.0
