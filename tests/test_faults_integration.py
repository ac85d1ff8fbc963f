"""Faults on a real fabric: a dead uplink, a restarted controller, an interrupted or killed run."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from incastlab.cleanup import find_leftovers
from runmodel.records import read_jsonl
from tests.conftest import run_cli
from tests.running import Running, assert_exit_130_soon, interrupt_at

pytestmark = pytest.mark.integration
SHORT = ["--workers", "3", "--capture", "ps-port"]


def events(run: Path, strategy: str) -> list[dict]:
    return [r for r in read_jsonl(run / strategy / "timeseries.jsonl") if r.get("kind") == "event"]


def test_a_dead_uplink_is_routed_around_and_training_goes_on(clean_host, tmp_path):
    proc = run_cli(
        [
            "compare",
            "--strategies",
            "ring",
            "--steps",
            "8",
            *SHORT,
            "--fault",
            "link-down:lf2-eth1@step2",
            "--fault",
            "flap:lf3-eth2@step5",
            "--results",
            str(tmp_path),
        ],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = tmp_path / "latest"
    fired = read_jsonl(run / "ring" / "faults.jsonl")
    down = [(f["event"], f["state"]) for f in fired if f["kind"] == "link-down"]
    assert down == [("fired", "down"), ("restored", "up")]
    flaps = [f["state"] for f in fired if f["kind"] == "flap"]
    assert flaps[0] == "down" and flaps[-1] == "up" and len(flaps) == 6
    ev = events(run, "ring")
    assert any(e["event"] == "port_down" and e["switch"] == "lf2" and e["port"] == 1 for e in ev)
    reroutes = [e for e in ev if e["event"] == "reroute"]
    assert reroutes[0]["state"] == "down" and reroutes[0]["dead_links"] == ["lf2-sp1"]
    assert reroutes[-1]["state"] == "up"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["strategies"]["ring"]["steps"] == 8 and summary["complete"]


def test_controller_restart_keeps_forwarding_and_leaves_a_visible_gap(clean_host, tmp_path):
    proc = run_cli(
        [
            "compare",
            "--strategies",
            "ps",
            "--steps",
            "12",
            *SHORT,
            "--fault",
            "controller-restart@step2",
            "--results",
            str(tmp_path),
        ],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = tmp_path / "latest"
    fired = read_jsonl(run / "ps" / "faults.jsonl")
    t_kill = next(f["t"] for f in fired if f["state"] == "killed")
    t_back = next(f["t"] for f in fired if f["state"] == "restarted")
    samples = sorted(r["t"] for r in read_jsonl(run / "ps" / "timeseries.jsonl") if r.get("kind") == "port")
    gaps = [b - a for a, b in zip(samples, samples[1:], strict=False) if a <= t_back and b >= t_kill]
    assert max(gaps) >= (t_back - t_kill) * 0.9, "the statistics gap must show in the time series"
    assert any(s > t_back for s in samples), "statistics resume after the restart"
    steps = [r for r in read_jsonl(run / "ps" / "worker-0.jsonl") if "step" in r]
    assert len(steps) == 12, "training went on through the gap (flows stayed installed)"


def test_async_carries_on_without_a_killed_worker_and_says_so(clean_host, tmp_path):
    proc = run_cli(
        [
            "compare",
            "--strategies",
            "async",
            "--steps",
            "8",
            *SHORT,
            "--fault",
            "kill-worker:1@step2",
            "--results",
            str(tmp_path),
        ],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "training goes on with 2 workers" in proc.stderr
    run = tmp_path / "latest" / "async"
    fired = [(f["event"], f["target"]) for f in read_jsonl(run / "faults.jsonl")]
    assert fired == [("fired", "1")], "the kill follows worker 1's own steps, so it finds it running"
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "complete" and list(status["lost_workers"]) == ["1"]
    for rank in (0, 2):
        rows = read_jsonl(run / f"worker-{rank}.jsonl")
        assert rows[-1].get("event") == "done" and len(rows) == 9
    lost = [r for r in read_jsonl(run / "ps.jsonl") if r.get("event") == "worker_lost"]
    assert [r["worker"] for r in lost] == [1]


# Ctrl-C points of a compare run: (line saying the run got there, line saying it moved on, the
# largest random delay it cannot outlast). The controller takes ~0.6 s to answer, bring-up 3-6 s,
# a step of 3 workers well over a second (4 steps remain after step 2), the report a few seconds;
# "report: building" comes after the fabric is down, the report's path on stdout when it is done.
COMPARE_POINTS = {
    "controller start": ("starting controller", "building fabric", 0.1),
    "fabric build": ("building fabric", "fabric up in", 1.0),
    "mid-strategy": (r"ps: step [2-5]/6\b", r"ps: done", 0.5),  # progress lines may skip a step
    "report": ("report: building", r"^report: (?!building)", 0.1),
}
COMPARE = ["compare", "--strategies", "ps,ring", "--steps", "6", *SHORT]


def run_dir(results: Path) -> Path:
    return next(p for p in results.iterdir() if p.name != "latest")


def assert_readable_incomplete_run(run: Path, summary_expected: bool = True) -> None:
    """summary.json says incomplete; `incastlab report` rebuilds a report that says so."""
    if summary_expected:
        summary = json.loads((run / "summary.json").read_text())
        assert summary["complete"] is False
    rebuilt = run_cli(["report", str(run)], timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "incomplete" in (run / "report.html").read_text().lower()


@pytest.mark.parametrize("point", list(COMPARE_POINTS))
def test_ctrl_c_at_any_point_of_a_compare_run(clean_host, tmp_path, rng, point):
    at, moved_on, max_delay = COMPARE_POINTS[point]
    run = Running([*COMPARE, "--results", str(tmp_path)])
    code, secs = interrupt_at(run, rng, at, moved_on, max_delay)
    assert_exit_130_soon(code, secs, run)
    assert find_leftovers().empty(), f"Ctrl-C during {point} left {find_leftovers().describe()}"
    if point == "mid-strategy":
        assert_readable_incomplete_run(run_dir(tmp_path))


def test_a_killed_run_is_cleaned_and_the_next_one_starts(clean_host, tmp_path, rng):
    run = Running([*COMPARE, "--results", str(tmp_path)])
    code, _ = interrupt_at(run, rng, *COMPARE_POINTS["mid-strategy"], sig=signal.SIGKILL, group=False)
    assert code == -signal.SIGKILL
    assert not find_leftovers().empty(), "kill -9 leaves the fabric behind: that is what clean is for"
    cleaned = run_cli(["clean"], timeout=120)
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
    assert find_leftovers().empty(), f"clean left {find_leftovers().describe()}"
    assert_readable_incomplete_run(run_dir(tmp_path), summary_expected=False)
    again = run_cli(
        ["compare", "--strategies", "ring", "--steps", "2", *SHORT, "--results", str(tmp_path)], timeout=600
    )
    assert again.returncode == 0, "the next run starts cleanly: " + again.stderr[-1500:]
