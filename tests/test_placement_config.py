"""Rank placement (`--placement`, config `rank_placement`): which host runs each worker rank.

The expected hosts are worked by hand from the fabric's numbering (h1..hN leaf by leaf); the leaf
of each host is read from the wiring plan (build_plan), not from the code that places the ranks.
"""

from __future__ import annotations

import json

import pytest

from runmodel.config import ExperimentConfig, spread_over_leaves
from runmodel.fabric import FabricSpec
from runmodel.folder import RunFolder
from runmodel.job import job_for
from tests.conftest import config_refusal, run_cli

DEFAULT = FabricSpec()  # 4 leaves x 2 hosts, PS h1
WIDE = FabricSpec(leaves=2, hosts_per_leaf=4)  # 2 leaves x 4 hosts, PS h1


def cfg(**kw) -> ExperimentConfig:
    out = ExperimentConfig(**kw)
    out.validate()
    return out


def leaves(c: ExperimentConfig) -> list[str]:
    plan = c.plan()
    return [plan.host(h).leaf for h in c.worker_hosts]


def test_packed_is_the_default_and_keeps_name_order() -> None:
    """Today's order: every host but the PS, leaf by leaf."""
    c = cfg()
    assert c.rank_placement == "packed"
    assert c.worker_hosts == ["h2", "h3", "h4", "h5", "h6", "h7", "h8"]
    assert cfg(workers=3).worker_hosts == ["h2", "h3", "h4"]


def test_spread_deals_ranks_round_robin_over_the_leaves() -> None:
    """lf1 holds h2 only (h1 is the PS): h2 h3 h5 h7, then the leaves' second hosts h4 h6 h8."""
    c = cfg(rank_placement="spread")
    assert c.worker_hosts == ["h2", "h3", "h5", "h7", "h4", "h6", "h8"]
    assert leaves(c)[:4] == ["lf1", "lf2", "lf3", "lf4"]
    three = cfg(rank_placement="spread", workers=3)
    assert three.worker_hosts == ["h2", "h3", "h5"]
    wide = cfg(fabric=WIDE, rank_placement="spread", workers=4)
    assert wide.worker_hosts == ["h2", "h5", "h3", "h6"]
    assert leaves(wide) == ["lf1", "lf2", "lf1", "lf2"]  # every ring neighbour across the spines
    assert leaves(cfg(fabric=WIDE, workers=4)) == ["lf1", "lf1", "lf1", "lf2"]  # packed: one crossing


def test_spread_over_leaves_by_hand() -> None:
    leaf = {"a": 1, "b": 2, "c": 2, "d": 3, "e": 3, "f": 3}.__getitem__
    assert spread_over_leaves(list("abcdef"), leaf) == list("abdcef")
    assert spread_over_leaves([], leaf) == []


def test_a_list_is_the_rank_order_and_sets_the_count() -> None:
    c = cfg(rank_placement="h7,h3,h5")
    assert (c.worker_hosts, c.n_workers) == (["h7", "h3", "h5"], 3)
    assert cfg(rank_placement="h7,h3,h5", workers=3).worker_hosts == ["h7", "h3", "h5"]


def test_placement_reaches_config_json_and_the_job(tmp_path) -> None:
    """config.json keeps the choice and the hosts; job.json's rank r runs on the r-th listed host."""
    c = cfg(rank_placement="h8,h2,h5", strategies=("ring",))
    folder = RunFolder.create(tmp_path, link_latest=False)
    folder.write_config(c)
    doc = json.loads(folder.config_file.read_text())
    assert (doc["rank_placement"], doc["worker_hosts"]) == ("h8,h2,h5", ["h8", "h2", "h5"])
    back = ExperimentConfig.from_dict(doc)
    assert back.worker_hosts == ["h8", "h2", "h5"]
    spec = c.strategy_specs[0]
    job = job_for(c, c.plan(), spec, 0, folder.strategy(spec.name))
    assert [(r.rank, r.host, r.ifname) for r in job.ranks] == [
        (0, "h8", "h8-eth0"),
        (1, "h2", "h2-eth0"),
        (2, "h5", "h5-eth0"),
    ]
    assert job.master_addr == c.plan().host("h8").ip


def test_a_scenario_may_list_the_hosts() -> None:
    c = ExperimentConfig.from_dict({"rank_placement": ["h4", "h6"]}, where="scenario x.json")
    c.validate()
    assert c.worker_hosts == ["h4", "h6"]


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"rank_placement": "sprad"}, "packed, spread or hosts"),
        ({"rank_placement": ""}, "packed, spread or hosts"),
        ({"rank_placement": "h3,h99"}, "'h99' does not exist"),
        ({"rank_placement": "h3,lf1"}, "'lf1' does not exist"),
        ({"rank_placement": "h1,h3"}, "h1 is a PS host"),
        ({"rank_placement": "h3,h5", "strategies": ("ps:shards=2",)}, "h5 is a PS host"),  # shard 2's host
        ({"rank_placement": "h3,h4,h3"}, "h3 is named twice"),
        ({"rank_placement": "h3,h4,h5", "workers": 4}, "3 hosts for 4 workers"),
        ({"rank_placement": "h3,h4,h5", "workers": 2}, "3 hosts for 2 workers"),
        ({"rank_placement": "h3"}, "at least 2 workers"),
    ],
)
def test_bad_placements_are_refused_in_one_line(kw, words) -> None:
    msg = config_refusal(**kw)
    assert words in msg, msg


def test_the_cli_refuses_before_anything_is_built() -> None:
    """--check needs no root: a bad list is refused in one line; a good one passes, its one line
    on stdout (the ranks' hosts are said by the run itself, see test_placement_integration)."""
    bad = run_cli(["compare", "--check", "--placement", "h2,h2"], timeout=120)
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines() == [
        "incastlab compare: placement: h2 is named twice (one rank per host)"
    ]
    good = run_cli(["compare", "--check", "--placement", "spread", "--workers", "3"], timeout=120)
    assert good.returncode == 0, good.stderr
    assert good.stderr == "" and "3 workers" in good.stdout
    shown = run_cli(["compare", "--help"], timeout=120).stdout
    assert "--placement" in shown and "not the PS" in " ".join(shown.split())
