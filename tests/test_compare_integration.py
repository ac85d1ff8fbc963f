"""`incastlab compare` for real: PyTorch workers on the fabric, PS vs ring, captured and reported."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from analysis.cli import analyze_counts
from tests.conftest import guarded_host, run_cli

pytestmark = pytest.mark.integration

KEYS = ("workers", "steps", "grad_bytes", "iter_time_s", "comm_time_s", "final_loss", "queue_drops_total",
        "ps_port_drops", "max_port_drops", "tcp_retransmits_kernel", "bytes_by_link", "max_link_share",
        "tcp_retransmits_pcap", "tcp_fast_retransmits", "tcp_timeout_retransmits", "dup_acks",
        "fabric_drops_pcap")


@pytest.fixture(scope="module")
def compare_run(tmp_path_factory):
    """One short default compare run (7 workers, default fabric) shared by the checks below."""
    results = tmp_path_factory.mktemp("results")
    with guarded_host("compare"):
        proc = run_cli(["compare", "--steps", "4", "--results", str(results)], timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return results / "latest", proc


def test_summary_has_every_documented_key(compare_run):
    run, _ = compare_run
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["strategies"]) == {"ps", "ring"}
    for name, fig in summary["strategies"].items():
        missing = [k for k in KEYS if k not in fig]
        assert not missing, f"{name} lacks {missing}"
        assert fig["workers"] == 7 and fig["steps"] == 4 and fig["state"] == "complete"
    assert summary["config"]["fabric"]["spines"] == 2 and summary["complete"] is True
    cap = summary["capture"]
    assert cap["enabled"] and cap["packets_captured"] > 0
    assert cap["complete"] == (cap["packets_dropped_kernel"] == 0 and not cap["incomplete_points"])


def test_ps_collapses_at_its_port_and_ring_spreads(compare_run):
    run, proc = compare_run
    s = json.loads((run / "summary.json").read_text())["strategies"]
    ps, ring = s["ps"], s["ring"]
    assert ps["ps_port_drops"] > 0, "the incast must overflow the PS port's 20-packet buffer"
    assert ps["tcp_retransmits_kernel"] > 0 and ps["tcp_retransmits_pcap"] > 0
    assert ring["ps_port_drops"] == 0
    assert ring["max_link_share"] < ps["max_link_share"]
    assert ring["iter_time_s"] < ps["iter_time_s"]
    assert "ps" in proc.stdout and "ring" in proc.stdout and "report:" in proc.stdout


def test_same_seeds_same_loss(compare_run):
    run, _ = compare_run
    s = json.loads((run / "summary.json").read_text())["strategies"]
    assert s["ps"]["final_loss"] == pytest.approx(s["ring"]["final_loss"], rel=1e-4)


def test_run_folder_keeps_logs_series_pcaps_and_report(compare_run):
    run, _ = compare_run
    for strategy in ("ps", "ring"):
        d = run / strategy
        assert len(list(d.glob("worker-*.jsonl"))) == 7
        assert (d / "timeseries.jsonl").stat().st_size > 0
        assert (d / "queue_depth.jsonl").stat().st_size > 0
        cap = json.loads((d / "capture.json").read_text())
        assert cap["points"][0]["name"] == "ps-port"
        hosts = [pt for pt in cap["points"] if pt["name"] != "ps-port"]  # ring sends nothing to the PS
        assert len(hosts) == (8 if strategy == "ps" else 7)
        assert all((d / pt["file"]).stat().st_size > 24 for pt in hosts)
    assert (run / "report.html").stat().st_size > 10_000
    assert (run / "report.md").exists()


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_retransmissions_agree_with_tshark_on_the_incast_capture(compare_run):
    run, _ = compare_run
    pcap = run / "ps" / "pcap" / "h2.pcap"
    ours = analyze_counts(str(pcap))["retransmits"]
    out = subprocess.run(["tshark", "-r", str(pcap), "-Y", "tcp.analysis.retransmission", "-T", "fields",
                          "-e", "frame.number"], capture_output=True, text=True, timeout=300).stdout
    theirs = len(out.split())
    assert theirs > 0, "a worker's capture of an incast must hold retransmissions"
    assert abs(ours - theirs) <= max(1, 0.01 * theirs)


def test_a_crashed_worker_ends_the_run_with_its_name_and_keeps_the_results(clean_host, tmp_path):
    proc = run_cli(["compare", "--strategies", "ps,ring", "--workers", "3", "--steps", "8",
                    "--capture", "ps-port", "--fault", "kill-worker:1@step2", "--results", str(tmp_path)],
                   timeout=600)
    assert proc.returncode == 1
    err = proc.stderr.strip().splitlines()[-1]
    assert "worker 1 (h3)" in err and "at step" in err and "Traceback" not in proc.stderr
    run = tmp_path / "latest"
    status = json.loads((run / "ps" / "status.json").read_text())
    assert status["state"] == "failed" and "worker 1" in status["error"]
    assert not (run / "ring").exists(), "the run stops at the failed strategy"
    rows = (run / "ps" / "worker-0.jsonl").read_text().splitlines()
    assert len(rows) >= 2
    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] is False and summary["strategies"]["ps"]["state"] == "failed"
    assert (run / "report.html").exists()


def test_bad_experiment_input_is_refused_by_name(clean_host, tmp_path):
    for args, needle in ((["--strategies", "ps,bogus"], "bogus"), (["--workers", "9"], "workers"),
                         (["--backup", "7", "--strategies", "backup"], "backup"),
                         (["--straggler", "h42:cpu=0.5"], "h42"), (["--staleness", "-1"], "staleness"),
                         (["--fault", "link-down:lf9-eth1@2s"], "lf9-eth1")):
        proc = run_cli(["compare", "--results", str(tmp_path)] + args, timeout=60)
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not any(Path(tmp_path).iterdir()), "nothing is written for a refused run"
