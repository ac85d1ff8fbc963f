"""Every strategy trains on a real fabric; with a straggler, each trades waiting for staleness."""

from __future__ import annotations

import json

import pytest

from runmodel.records import read_jsonl
from tests.conftest import run_in_fresh_folder

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def straggler_run(tmp_path_factory):
    """The shipped straggler scenario, shortened: 3 workers, h3 (rank 1) slow, 6 steps."""
    strategies = "ps,ring,allreduce,async,ssp,backup"
    args = ["straggler", "--workers", "3", "--steps", "6", "--strategies", strategies]
    run, _ = run_in_fresh_folder(tmp_path_factory, "straggler", args, timeout=1200)
    return run, json.loads((run / "summary.json").read_text())


def test_every_strategy_lowers_the_loss(straggler_run):
    _, summary = straggler_run
    for name, fig in summary["strategies"].items():
        assert fig["state"] == "complete" and fig["steps"] == 6, name
        assert fig["final_loss"] < fig["first_loss"], f"{name}: loss did not decrease"


def test_sync_strategies_wait_on_the_straggler_and_async_does_not(straggler_run):
    s = straggler_run[1]["strategies"]
    fast = ("0", "2")  # rank 1 (h3) is the straggler

    def fast_util(name: str) -> float:
        return sum(s[name]["worker_compute_share_by_rank"][r] for r in fast) / len(fast)

    for sync in ("ps", "ring", "allreduce"):
        assert fast_util("async") > fast_util(sync), f"async keeps fast workers busier than {sync}"
    assert s["async"]["staleness_max"] > 0, "async applies stale gradients"
    assert s["ps"]["staleness_max"] == 0


def test_ssp_never_exceeds_its_bound(straggler_run):
    run, summary = straggler_run
    s = summary["strategies"]
    bound = summary["config"]["staleness"]
    gaps = [r["gap"] for r in read_jsonl(run / "ssp" / "ps.jsonl") if r.get("event") == "release"]
    assert gaps and max(gaps) <= bound
    assert s["ssp"]["ssp_max_gap"] == max(gaps)


def test_backup_discards_exactly_b_updates_per_step(straggler_run):
    run, summary = straggler_run
    s = summary["strategies"]
    b = summary["config"]["backup"]
    steps = [r for r in read_jsonl(run / "backup" / "ps.jsonl") if r.get("event") == "step"]
    assert len(steps) == 6
    assert all(len(r["discarded"]) == b and len(r["applied"]) == 3 - b for r in steps)
    assert s["backup"]["updates_discarded"] == 6 * b


def test_the_report_has_the_straggler_section(straggler_run):
    run, _ = straggler_run
    html = (run / "report.html").read_text()
    for needle in ("compute share", "staleness", "ssp"):
        assert needle in html.lower()
