"""`incastlab paths` without a fabric: arguments refused in one line, the carrier rule, the table."""

from __future__ import annotations

import json

import pytest

from incastlab.cli import main
from incastlab.paths import Probe, ProbeSpec, carrier, paths_table, spine_ports
from runmodel.fabric import FabricSpec, build_plan


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["h1", "h1"], "both h1"),
        (["h1", "h2"], "both under lf1"),
        (["h1", "h99"], "'h99' does not exist"),
        (["h1", "h3", "--count", "0"], "count must be >= 1"),
        (["h1", "h3", "--count", "257"], "count must be <= 256"),
        (["h1", "h3", "--dport", "70000"], "dport must be <= 65535"),
        (["h1", "h3", "--proto", "icmp"], "invalid choice"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(argv, said, capsys):
    assert main(["paths", *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err


def test_spine_ports_lead_to_the_destinations_leaf():
    plan = build_plan(FabricSpec(spines=4, leaves=3, hosts_per_leaf=2))
    # h5 is under lf3: spine port 3 of every spine (spine port j goes to leaf j)
    assert spine_ports(plan, "h5") == {"sp1": 3, "sp2": 3, "sp3": 3, "sp4": 3}


def test_the_carrier_is_the_one_spine_that_moved_by_the_probes_packets():
    assert carrier({"sp1": 0, "sp2": 3}, 3) == "sp2"
    assert carrier({"sp1": 1, "sp2": 4}, 3) == "sp2"  # a stray frame beside the probe
    assert carrier({"sp1": 3, "sp2": 3}, 3) is None  # two spines: not one flow's path
    assert carrier({"sp1": 2, "sp2": 0}, 3) is None  # a probe lost on the way


def test_table_counts_flows_per_spine():
    probes = [Probe(40000, "sp1", {"sp1": 3, "sp2": 0}), Probe(40001, "sp2", {"sp1": 0, "sp2": 3})]
    probes.append(Probe(40002, "sp2", {"sp1": 0, "sp2": 3}))
    doc = paths_table(ProbeSpec("h1", "h3", count=3), probes).to_doc()
    assert [r["spine"] for r in doc["rows"]] == ["sp1", "sp2", "sp2"]
    assert doc["rows"][0]["pkts_sp1"] == 3
    assert "flows per spine: sp1 1, sp2 2" in doc["footer"]
    json.dumps(doc, allow_nan=False)
