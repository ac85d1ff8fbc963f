"""make ecmp's analysis without a fabric: the hash's collision rate and the collision count against
hand-worked numbers, and a whole run's analysis on a synthetic record of uplink counters."""

from __future__ import annotations

import json

import pytest

from analysis.ecmp import (
    analyze_run,
    collided,
    collision_share,
    expected_collision_rate,
    flows_from_bytes,
    ring_flows,
)
from incastlab.cli import SCENARIO_DIR
from incastlab.ecmp import ecmp_table, sweep_configs
from runmodel.config import load_scenario
from runmodel.folder import RunFolder
from runmodel.params import ParamError
from runmodel.records import write_json, write_jsonl


@pytest.mark.parametrize(
    ("flows", "uplinks", "rate"),
    [
        (4, 4, 1 - 24 / 256),  # 4!/4^4 of the placements give each flow its own uplink
        (3, 4, 1 - 24 / 64),  # 4*3*2 distinct of 4^3
        (2, 4, 1 / 4),  # the second lands on the first's uplink
        (2, 2, 1 / 2),
        (1, 4, 0.0),
        (5, 4, 1.0),  # pigeonhole
    ],
)
def test_expected_collision_rate_by_hand(flows, uplinks, rate):
    assert expected_collision_rate(flows, uplinks) == pytest.approx(rate)


def test_four_on_four_is_about_91_percent():
    assert round(expected_collision_rate(4, 4), 4) == 0.9062


@pytest.mark.parametrize(
    ("counts", "n"), [([1, 1, 1, 1], 0), ([2, 1, 1, 0], 2), ([2, 2, 0, 0], 4), ([4, 0, 0, 0], 4), ([3, 1], 3)]
)
def test_collided_counts_the_flows_that_share(counts, n):
    assert collided(counts) == n


def test_flows_from_bytes_rounds_to_the_flow_count():
    # one uplink carried twice the bytes of two others, one only ACKs: 1/0/2/1
    got = flows_from_bytes({"sp1": 2.98e6, "sp2": 0.08e6, "sp3": 5.85e6, "sp4": 2.98e6}, 4)
    assert got == {"sp1": 1, "sp2": 0, "sp3": 2, "sp4": 1}
    assert sum(flows_from_bytes({"a": 1.0, "b": 1.0, "c": 1.0}, 4).values()) == 4
    assert flows_from_bytes({"a": 0.0, "b": 0.0}, 4) == {"a": 0, "b": 0}


def test_ring_flows_of_interleaved_and_packed_ranks():
    leaf = {f"h{i}": "lf1" if i <= 5 else "lf2" for i in range(1, 11)}
    interleaved = ["h1", "h6", "h2", "h7", "h3", "h8", "h4", "h9"]
    assert ring_flows(interleaved, leaf) == {"lf1": 4, "lf2": 4}
    packed = ["h1", "h2", "h3", "h4", "h6", "h7", "h8", "h9"]
    assert ring_flows(packed, leaf) == {"lf1": 1, "lf2": 1}


def _synthetic_run(tmp_path, per_flow: float = 3e6):
    """A run folder as `make ecmp` leaves one: config, ring's controller samples, summary.json.
    lf1 hashed its 4 ring flows 1/0/2/1 over sp1..sp4, lf2 one per uplink."""
    policy, seed, cfg = sweep_configs(load_scenario(SCENARIO_DIR / "compare.json"), ["ecmp"], 1, 3, 0.5)[0]
    folder = RunFolder.create(tmp_path, name="ecmp-s1", link_latest=False)
    folder.write_config(cfg)
    share = {"lf1": [1, 0, 2, 1], "lf2": [1, 1, 1, 1]}
    rows = []
    for k, t in enumerate([100.0, 100.5, 101.0, 101.5]):
        for leaf, flows in share.items():
            for s, n in enumerate(flows, start=1):
                tx = (n * per_flow + 20_000) * k / 3  # each sample a third of the window, ACKs beside
                rows.append(
                    {"t": t, "switch": leaf, "port": s, "peer": f"sp{s}", "kind": "port", "tx_bytes": tx}
                )
    sf = folder.strategy("ring")
    sf.path.mkdir(parents=True)
    write_jsonl(sf.timeseries_file, rows)
    strat = {"state": "complete", "grad_bytes": 524288, "comm_time_s": 0.5, "iter_time_s": 0.6}
    write_json(folder.summary_file, {"strategies": {"ring": strat}})
    return folder.path


def test_analysis_of_a_synthetic_record(tmp_path):
    rows = analyze_run(_synthetic_run(tmp_path))
    ring = next(r for r in rows if r["strategy"] == "ring")
    assert ring["leaves"]["lf1"]["per_uplink"] == {"sp1": 1, "sp2": 0, "sp3": 2, "sp4": 1}
    assert ring["leaves"]["lf2"]["per_uplink"] == {"sp1": 1, "sp2": 1, "sp3": 1, "sp4": 1}
    assert ring["leaves"]["lf1"]["collided"] == 2 and ring["collided"] == 2 and ring["collision"]
    assert ring["ring_flows"] == 8
    # every interval of the record has the window's shares
    assert [p["flows"]["sp3"] for p in ring["leaves"]["lf1"]["over_time"]] == [2, 2, 2]
    assert (
        ring["leaves"]["lf1"]["collided_intervals"] == 3 and ring["leaves"]["lf2"]["collided_intervals"] == 0
    )
    assert ring["expected_rate_leaf"] == pytest.approx(1 - 24 / 256)
    assert ring["expected_rate"] == pytest.approx(1 - (24 / 256) ** 2)  # either leaf colliding
    # busbw by hand: 524288 B * 8 / 0.5 s = 8.388608 Mbit/s, x 2*7/8
    assert ring["busbw_mbit"] == pytest.approx(8.388608 * 1.75)
    assert collision_share(rows) == (1, 2)
    table = ecmp_table([{"policy": "ecmp", "seed": 1, **r} for r in rows])
    doc = table.to_doc()
    assert doc["rows"][0]["flows_per_uplink"] == "lf1 1/0/2/1 lf2 1/1/1/1"
    assert doc["footer"] == [
        "ecmp: 2+ ring flows on one uplink in 1 of 2 leaf draws (50%); "
        "the hash's expected rate 91% (1 - n!/((n-k)! n^k))"
    ]
    json.dumps(doc, allow_nan=False)


def test_the_report_section_shows_the_runs_collisions(tmp_path):
    from report.run import RunView
    from report.sections.ecmp import ecmp

    run_dir = _synthetic_run(tmp_path)
    assert ecmp(RunView.open(run_dir)) is None  # no ecmp.json yet: nothing to say
    write_json(run_dir / "ecmp.json", {"schema": "incastlab.ecmp/1", "rows": analyze_run(run_dir)})
    section = ecmp(RunView.open(run_dir))
    table = section.blocks[1]
    assert table.values["ring lf1"]["collided"] == 2 and table.values["ring lf2"]["collided"] == 0
    assert [r.bad for r in table.rows if r.label.startswith("ring")] == [True, False]
    assert table.rows[0].cells[4] == "3 of 3"


def test_a_policy_the_controller_lacks_is_refused():
    with pytest.raises(ParamError, match="nosuch"):
        sweep_configs(load_scenario(SCENARIO_DIR / "compare.json"), ["nosuch"], 1, 3, 0.5)


def test_strategies_are_some_of_ring_and_allreduce():
    base = load_scenario(SCENARIO_DIR / "compare.json")
    runs = sweep_configs(base, ["ecmp", "hedera"], 2, 3, 0.5, ("ring",))
    assert [(p, s) for p, s, _ in runs] == [("ecmp", 1), ("ecmp", 2), ("hedera", 1), ("hedera", 2)]
    assert all(cfg.strategies == ("ring",) for _, _, cfg in runs)
    assert sweep_configs(base, ["ecmp"], 1, 3, 0.5)[0][2].strategies == ("ring", "allreduce")
    for wrong in [("ring", "moe"), ()]:
        with pytest.raises(ParamError, match="give some of ring,allreduce"):
            sweep_configs(base, ["ecmp"], 1, 3, 0.5, wrong)


def test_link_mbit_sets_every_link_and_a_bad_rate_is_refused():
    base = load_scenario(SCENARIO_DIR / "compare.json")
    fabric = sweep_configs(base, ["ecmp"], 1, 3, 0.5, ("ring",), 10)[0][2].fabric
    assert (fabric.host_mbit, fabric.uplink_mbit) == (10, 10)
    default = sweep_configs(base, ["ecmp"], 1, 3, 0.5)[0][2].fabric
    assert (default.host_mbit, default.uplink_mbit) == (base.fabric.host_mbit, base.fabric.uplink_mbit)
    with pytest.raises(ParamError, match="mbit"):
        sweep_configs(base, ["ecmp"], 1, 3, 0.5, ("ring",), 0)
