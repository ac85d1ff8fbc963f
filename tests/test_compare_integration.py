"""`incastlab compare` for real: PyTorch workers on the fabric, PS vs ring, captured and reported."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from analysis.cli import analyze_counts
from tests.conftest import run_cli

pytestmark = pytest.mark.integration

KEYS = (
    "workers",
    "steps",
    "grad_bytes",
    "iter_time_s",
    "comm_time_s",
    "final_loss",
    "queue_drops_total",
    "ps_port_drops",
    "max_port_drops",
    "tcp_retransmits_kernel",
    "bytes_by_link",
    "max_link_share",
    "tcp_retransmits_pcap",
    "dupack_retransmits_pcap",
    "wireshark_fast_retransmits",
    "dup_acks",
    "fabric_drops_pcap",
    "hot_ports",
    "delivered_bytes_by_receiver",
    "tcp_timeouts_kernel",
    "tcp_timeouts_pcap",
    "bound_s",
    "comm_split",
    "fidelity",
    "busiest_link_utilisation",
)


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
    assert ring["ps_port_drops"] is None and ring["ps_port"] is None  # the ring runs no PS
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


def tshark(pcap: Path, *args: str) -> list[list[str]]:
    """tshark's fields of a capture, one list per packet."""
    assert shutil.which("tshark"), "tshark is installed by make deps"
    out = subprocess.run(
        ["tshark", "-r", str(pcap), *args], capture_output=True, text=True, timeout=300
    ).stdout
    return [line.split("\t") for line in out.splitlines() if line]


def tshark_delivered_bytes(pcap: Path, dst_ip: str) -> int:
    """Unique payload bytes toward dst_ip: the union of (seq, seq + len) ranges per connection direction."""
    spans: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for stream, src, seq, length in tshark(
        pcap,
        "-Y",
        f"ip.dst=={dst_ip} && tcp.len>0",
        "-T",
        "fields",
        "-e",
        "tcp.stream",
        "-e",
        "ip.src",
        "-e",
        "tcp.seq_raw",
        "-e",
        "tcp.len",
    ):
        spans.setdefault((stream, src), []).append((int(seq), int(length)))
    total = 0
    for segs in spans.values():
        base = segs[0][0]
        ranges = sorted((((a - base) % 2**32), ((a - base) % 2**32) + n) for a, n in segs)
        end = -1
        for a, b in ranges:
            if b > end:
                total += b - max(a, end)
                end = b
    return total


def test_the_environment_is_recorded(compare_run):
    import os
    import platform

    run, _ = compare_run
    env = json.loads((run / "config.json").read_text())["environment"]
    assert env["datapath"] in ("user", "kernel") and env["kernel"] == platform.release()
    assert env["cores"] == os.cpu_count() and env["cc"] == "cubic" and env["rto_min_ms"] == 200.0


def test_timeouts_in_the_captures_agree_with_the_kernel(compare_run):
    """Per host: a worker's capture finds its kernel's timeouts (within 10 %); a PS host, whose
    sends wait up to 0.2 s in its own 1000-packet queue, cannot always tell its timer's
    retransmissions from ACK-clocked ones within TSval's 1 ms (eight ps runs: 7 of 20 found, the
    workers within one), and once so far in the fresh-clone CI runs found one more (2 vs 1),
    so its capture is held to at most one above its kernel's count there (README, Limits)."""
    run, _ = compare_run
    summary = json.loads((run / "summary.json").read_text())["strategies"]
    servers = {sh["host"] for sh in json.loads((run / "ps" / "job.json").read_text())["shards"]}
    for name, fig in summary.items():
        kernel = {
            h: c["kernel"].get("TcpExtTCPTimeouts", 0)
            for h, c in json.loads((run / name / "hosts.json").read_text()).items()
        }
        pcap = dict.fromkeys(kernel, 0)
        for ev in json.loads((run / name / "rto_events.json").read_text())["events"]:
            pcap[ev["host"]] += ev["kind"] != "tlp"
        assert sum(pcap.values()) == fig["tcp_timeouts_pcap"]
        assert sum(kernel.values()) == fig["tcp_timeouts_kernel"]
        for host in kernel:
            if name == "ps" and host in servers:
                assert pcap[host] <= kernel[host] + 1, (name, host, kernel[host], pcap[host])
            else:
                assert abs(kernel[host] - pcap[host]) <= max(2, 0.1 * kernel[host]), (name, kernel, pcap)
    ps = json.loads((run / "summary.json").read_text())["strategies"]["ps"]
    assert ps["tcp_timeouts_kernel"] > 0, "an incast into a 20-packet buffer times out"


def test_delivered_bytes_per_receiver_agree_with_tshark(compare_run):
    run, _ = compare_run
    s = json.loads((run / "summary.json").read_text())["strategies"]
    plan = json.loads((run / "plan.json").read_text())
    ip = {h["name"]: h["ip"] for h in plan["hosts"]}
    for strategy, host in (("ps", "h1"), ("ring", "h2"), ("ring", "h5")):
        ours = s[strategy]["delivered_bytes_by_receiver"][host]
        theirs = tshark_delivered_bytes(run / strategy / "pcap" / f"{host}.pcap", ip[host])
        assert theirs > 0 and abs(ours - theirs) <= 0.01 * theirs, (strategy, host, ours, theirs)


def test_wireshark_fast_retransmits_are_tsharks(compare_run):
    run, _ = compare_run
    fig = json.loads((run / "summary.json").read_text())["strategies"]["ps"]
    plan = json.loads((run / "plan.json").read_text())
    total = 0
    for h in plan["hosts"]:
        pcap = run / "ps" / "pcap" / f"{h['name']}.pcap"
        total += len(
            tshark(
                pcap,
                "-Y",
                f"tcp.analysis.fast_retransmission && ip.src=={h['ip']}",
                "-T",
                "fields",
                "-e",
                "frame.number",
            )
        )
    assert fig["wireshark_fast_retransmits"] == total


def test_each_strategy_is_judged_at_its_own_hot_ports(compare_run):
    from runmodel.records import read_queue_samples

    run, _ = compare_run
    s = json.loads((run / "summary.json").read_text())["strategies"]
    ps = s["ps"]
    # the PS is judged where its own traffic goes: its port carries the most, and its worst queue is
    # one of its hot ports (the PS port, or a spine port into the PS's leaf when ECMP put most of the
    # incast on one 20 Mbit/s uplink: one CI run dropped 258 there against 165 at the PS port)
    assert ps["hot_ports"][0]["port"] == ps["ps_port"]
    assert ps["worst_queue_port"] in {p["port"] for p in ps["hot_ports"]}
    ring = s["ring"]
    assert ring["worst_queue_port"] != s["ps"]["ps_port"], "the ring never uses the PS port"
    assert ring["hot_ports"] and ring["hot_ports"][0]["tx_bytes"] >= ring["hot_ports"][-1]["tx_bytes"]
    samples = [
        q
        for q in read_queue_samples(run / "ring" / "queue_depth.jsonl")
        if q.port == ring["worst_queue_port"]
    ]
    assert max(q.backlog_packets for q in samples) > 0, "the ring's own worst port queues up"


def test_bounds_split_and_fidelity_hold_together(compare_run):
    run, _ = compare_run
    summary = json.loads((run / "summary.json").read_text())
    for name, fig in summary["strategies"].items():
        assert fig["iter_time_s"] >= fig["bound_s"] > 0, (name, "no step beats its lower bound")
        split = fig["comm_split"]
        assert split["bound_s"] == fig["bound_s"] and split["timeouts_s"] >= 0 and split["rest_s"] >= 0
        fid = fig["fidelity"]
        assert fid["verdict"] in ("trustworthy", "degraded") and isinstance(fid["reasons"], list)
        want = max(0, fig["fabric_drops_pcap"] - fig["queue_drops_total"]) / max(1, fig["fabric_drops_pcap"])
        assert fid["unexplained_loss_share"] == pytest.approx(want, abs=1e-3)
        assert fid["cpu_busy_max"] is not None and 0 < fid["cpu_busy_max"] <= 1.0
        assert fid["dequeue_gap_median_over_ideal"] is not None
    assert summary["fidelity"]["verdict"] in ("trustworthy", "degraded")


def test_retransmissions_agree_with_tshark_on_the_incast_capture(compare_run):
    run, _ = compare_run
    pcap = run / "ps" / "pcap" / "h2.pcap"
    ours = analyze_counts(str(pcap))["retransmits"]
    out = subprocess.run(
        [
            "tshark",
            "-r",
            str(pcap),
            "-Y",
            "tcp.analysis.retransmission",
            "-T",
            "fields",
            "-e",
            "frame.number",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    theirs = len(out.split())
    assert theirs > 0, "a worker's capture of an incast must hold retransmissions"
    assert abs(ours - theirs) <= max(1, 0.01 * theirs)


def test_a_crashed_worker_ends_the_run_with_its_name_and_keeps_the_results(clean_host, tmp_path):
    proc = run_cli(
        [
            "compare",
            "--strategies",
            "ps,ring",
            "--workers",
            "3",
            "--steps",
            "8",
            "--capture",
            "ps-port",
            "--fault",
            "kill-worker:1@step2",
            "--results",
            str(tmp_path),
        ],
        timeout=600,
    )
    assert proc.returncode == 1
    err = proc.stderr.strip().splitlines()[-1]
    assert "worker 1 (h3)" in err or "worker 1 (h3, container incastlab-h3)" in err, err
    assert "at step" in err and "Traceback" not in proc.stderr
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
    for args, needle in (
        (["--strategies", "ps,bogus"], "bogus"),
        (["--workers", "9"], "workers"),
        (["--backup", "7", "--strategies", "backup"], "backup"),
        (["--straggler", "h42:cpu=0.5"], "h42"),
        (["--staleness", "-1"], "staleness"),
        (["--fault", "link-down:lf9-eth1@2s"], "lf9-eth1"),
    ):
        proc = run_cli(["compare", "--results", str(tmp_path)] + args, timeout=60)
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not any(Path(tmp_path).iterdir()), "nothing is written for a refused run"
