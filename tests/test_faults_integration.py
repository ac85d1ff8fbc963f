"""Faults on a real fabric: a dead uplink, a restarted controller, an interrupted or killed run."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from incastlab.cleanup import find_leftovers
from incastlab.runfolder import read_jsonl
from tests.conftest import ROOT, incastlab_cmd, run_cli

pytestmark = pytest.mark.integration
SHORT = ["--workers", "3", "--capture", "ps-port"]


def events(run: Path, strategy: str) -> list[dict]:
    return [r for r in read_jsonl(run / strategy / "timeseries.jsonl") if r.get("kind") == "event"]


def test_a_dead_uplink_is_routed_around_and_training_goes_on(clean_host, tmp_path):
    proc = run_cli(["compare", "--strategies", "ring", "--steps", "8", *SHORT,
                    "--fault", "link-down:lf2-eth1@step2", "--fault", "flap:lf3-eth2@step5",
                    "--results", str(tmp_path)], timeout=600)
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
    proc = run_cli(["compare", "--strategies", "ps", "--steps", "12", *SHORT,
                    "--fault", "controller-restart@step2", "--results", str(tmp_path)], timeout=600)
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
    proc = run_cli(["compare", "--strategies", "async", "--steps", "8", *SHORT,
                    "--fault", "kill-worker:1@step2", "--results", str(tmp_path)], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "training goes on with 2 workers" in proc.stderr
    run = tmp_path / "latest" / "async"
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "complete" and list(status["lost_workers"]) == ["1"]
    for rank in (0, 2):
        rows = read_jsonl(run / f"worker-{rank}.jsonl")
        assert rows[-1].get("event") == "done" and len(rows) == 9
    lost = [r for r in read_jsonl(run / "ps.jsonl") if r.get("event") == "worker_lost"]
    assert [r["worker"] for r in lost] == [1]


def start_compare(tmp_path: Path) -> subprocess.Popen[str]:
    argv = incastlab_cmd() + ["compare", "--strategies", "ps,ring", "--steps", "6", *SHORT,
                              "--results", str(tmp_path)]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_run_leaves_a_readable_folder_and_a_clean_host(clean_host, tmp_path, sig):
    rng = random.Random(int(time.time()))
    proc = start_compare(tmp_path)
    time.sleep(rng.uniform(4.0, 18.0))  # anywhere from fabric start-up to the middle of a strategy
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    run = next(p for p in tmp_path.iterdir() if p.name != "latest")
    if sig == signal.SIGINT:
        assert proc.returncode == 130, err[-2000:]
        assert find_leftovers().empty(), "Ctrl-C must tear the fabric down"
        summary = json.loads((run / "summary.json").read_text())
        assert summary["complete"] is False
    else:
        cleaned = run_cli(["clean"], timeout=120)
        assert cleaned.returncode == 0 and find_leftovers().empty()
    rebuilt = run_cli(["report", str(run)], timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr
    html = (run / "report.html").read_text()
    assert "incomplete" in html.lower()
    again = run_cli(["compare", "--strategies", "ring", "--steps", "2", *SHORT, "--results", str(tmp_path)],
                    timeout=600)
    assert again.returncode == 0, "the next run starts cleanly: " + again.stderr[-1500:]
