"""`incastlab compare` for real: PyTorch workers on the fabric, PS vs ring, captured and reported."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from incastlab.analyze import analyze_counts
from tests.conftest import run_cli, timeout_bounds
from tests.tshark import tshark_count, tshark_delivered_bytes, tshark_fields

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


def test_the_environment_is_recorded(compare_run):
    import os
    import platform

    run, _ = compare_run
    env = json.loads((run / "config.json").read_text())["environment"]
    assert env["datapath"] in ("user", "kernel") and env["kernel"] == platform.release()
    assert env["cores"] == os.cpu_count() and env["cc"] == "cubic" and env["rto_min_ms"] == 200.0


def _timeouts(run: Path, strategy: str) -> tuple[dict[str, int], dict[str, int]]:
    """Per host: (the kernel's TcpExtTCPTimeouts, the timeouts found in its own capture)."""
    hosts = json.loads((run / strategy / "hosts.json").read_text())
    kernel = {h: int(c["kernel"].get("TcpExtTCPTimeouts", 0)) for h, c in hosts.items()}
    pcap = dict.fromkeys(kernel, 0)
    for ev in json.loads((run / strategy / "rto_events.json").read_text())["events"]:
        pcap[ev["host"]] += ev["kind"] != "tlp"
    return kernel, pcap


def _ps_hosts(run: Path) -> set[str]:
    return {sh["host"] for sh in json.loads((run / "ps" / "job.json").read_text())["shards"]}


def test_timeouts_in_the_workers_captures_agree_with_the_kernel(compare_run):
    """A floor and a ceiling per worker host: its capture finds its kernel's timeouts to within one
    (10 % from ten on), and the workers' total to within 5 %; the summary's totals are the hosts'."""
    run, _ = compare_run
    summary = json.loads((run / "summary.json").read_text())["strategies"]
    servers = _ps_hosts(run)
    for name, fig in summary.items():
        kernel, pcap = _timeouts(run, name)
        assert (
            sum(pcap.values()) == fig["tcp_timeouts_pcap"]
            and sum(kernel.values()) == fig["tcp_timeouts_kernel"]
        )
        workers = [h for h in kernel if not (name == "ps" and h in servers)]
        for host in workers:
            lo, hi = timeout_bounds(kernel[host], ps_host=False)
            assert lo <= pcap[host] <= hi, (name, host, kernel, pcap)
        k_sum, p_sum = sum(kernel[h] for h in workers), sum(pcap[h] for h in workers)
        assert abs(k_sum - p_sum) <= max(1, 0.05 * k_sum), (name, k_sum, p_sum)
    ps_kernel, _ = _timeouts(run, "ps")
    assert sum(ps_kernel.values()) >= 3, "an incast into a 20-packet buffer times out"


def test_timeouts_in_the_ps_hosts_capture_agree_with_the_kernel(compare_run):
    """The PS host too has a floor and a ceiling (tests.conftest.timeout_bounds): at least half of
    its kernel's timeouts and at most two more; compare_run's 1 MiB replies make the floor at least 2,
    so a capture analysis that lost the PS host's own timeouts fails here."""
    run, _ = compare_run
    kernel, pcap = _timeouts(run, "ps")
    for host in _ps_hosts(run):
        lo, hi = timeout_bounds(kernel[host], ps_host=True)
        print(f"PS host {host}: kernel {kernel[host]} timeouts, capture {pcap[host]}, bounds {lo}-{hi}")
        assert lo >= 2, f"the run must give the PS host's floor something to hold: kernel {kernel[host]}"
        assert lo <= pcap[host] <= hi, (host, kernel[host], pcap[host])


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
    total = sum(
        tshark_count(
            run / "ps" / "pcap" / f"{h['name']}.pcap",
            f"tcp.analysis.fast_retransmission && ip.src=={h['ip']}",
        )
        for h in plan["hosts"]
    )
    assert fig["wireshark_fast_retransmits"] == total


def _tc_drops(run: Path, strategy: str) -> dict[str, int]:
    """Per switch port: the increase of its HTB class's drop counter over the strategy, from the raw
    kernel samples of queue_depth.jsonl (what tc -s class show reports)."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for line in (run / strategy / "queue_depth.jsonl").read_text().splitlines():
        q = json.loads(line)
        first.setdefault(q["port"], q["drops"])
        last[q["port"]] = q["drops"]
    return {p: last[p] - first[p] for p in last}


def test_each_strategy_is_judged_at_its_own_hot_ports(compare_run):
    """The PS's worst queue, found from the kernel's drop counters, is where the plan says its
    incast lands: the PS's own port, or a spine port down into the PS's leaf (ECMP may put most of
    the incast on one uplink). The ring never touches the PS's port."""
    run, _ = compare_run
    s = json.loads((run / "summary.json").read_text())["strategies"]
    plan = json.loads((run / "plan.json").read_text())
    ps_host = next(h for h in plan["hosts"] if h["name"] == plan["ps_host"])
    ps_port = f"{ps_host['leaf']}-eth{ps_host['port']}"
    into_ps_leaf = {
        f"{ln['b']}-eth{ln['b_port']}"
        for ln in plan["links"]
        if ln["a"] == ps_host["leaf"] and ln["kind"] == "uplink"
    }
    drops = _tc_drops(run, "ps")
    worst = max(drops, key=lambda p: drops[p])
    assert drops[worst] > 0 and worst in {ps_port} | into_ps_leaf, (worst, drops)
    assert drops[s["ps"]["worst_queue_port"]] == drops[worst], "the summary names the port that dropped most"
    assert s["ps"]["ps_port"] == ps_port and s["ps"]["hot_ports"][0]["port"] == ps_port
    ring_drops = _tc_drops(run, "ring")
    assert ring_drops.get(ps_port, 0) == 0, "the ring sends nothing to the PS host"
    assert s["ring"]["worst_queue_port"] != ps_port
    backlog = [
        json.loads(line)["backlog_packets"]
        for line in (run / "ring" / "queue_depth.jsonl").read_text().splitlines()
        if json.loads(line)["port"] == s["ring"]["worst_queue_port"]
    ]
    assert max(backlog) > 0, "the ring's own worst port queues up"


def _theory_bound_s(config: dict, strategy: str) -> float:
    """The step's communication lower bound worked out from config.json alone: S in wire bytes
    (1448-byte payloads travel as 1514-byte frames), B the host link; PS (N + 1) S / B, ring
    2 (N - 1) S / (N B)."""
    n = len(config["worker_hosts"])
    wire = config["grad_mb"] * 2**20 * 1514 / 1448
    rate = config["fabric"]["host_mbit"] * 1e6 / 8
    return (n + 1) * wire / rate if strategy == "ps" else 2 * (n - 1) * wire / (n * rate)


def test_communication_time_is_at_or_above_its_bound(compare_run):
    run, _ = compare_run
    config = json.loads((run / "config.json").read_text())
    for name, fig in json.loads((run / "summary.json").read_text())["strategies"].items():
        bound = _theory_bound_s(config, name)
        assert fig["bound_s"] == pytest.approx(bound, rel=1e-3), name
        assert fig["comm_time_s"] >= bound, (name, fig["comm_time_s"], bound)
        assert fig["comm_split"]["bound_s"] == pytest.approx(bound, rel=1e-3)


def _wire_losses(run: Path, strategy: str) -> int:
    """Data segments a sender's capture shows leaving it that the receiver's capture never shows
    (each copy counted, so a retransmission that got through does not hide the original's loss),
    from tshark's fields of every host capture."""
    plan = json.loads((run / "plan.json").read_text())
    ip = {h["name"]: h["ip"] for h in plan["hosts"]}
    sent: collections.Counter[tuple[str, ...]] = collections.Counter()
    got: collections.Counter[tuple[str, ...]] = collections.Counter()
    for host, addr in ip.items():
        pcap = run / strategy / "pcap" / f"{host}.pcap"
        if not pcap.is_file():
            continue
        fields = ("ip.src", "tcp.srcport", "ip.dst", "tcp.dstport", "tcp.seq_raw", "tcp.len")
        for row in tshark_fields(pcap, *fields, display="tcp.len > 0"):
            key = tuple(row)
            if row[0] == addr:
                sent[key] += 1
            elif row[2] == addr:
                got[key] += 1
    receivers = {k[2] for k in got}
    return sum(max(0, n - got[k]) for k, n in sent.items() if k[2] in receivers)


def test_fidelity_from_the_kernels_drop_counters_and_tshark(compare_run):
    """The unexplained loss share from outside the product: losses on the wire (tshark, every host
    capture) that no switch queue's kernel drop counter (tc's) accounts for; and the default compare
    on this machine kind is trustworthy."""
    run, _ = compare_run
    summary = json.loads((run / "summary.json").read_text())
    for name, fig in summary["strategies"].items():
        lost, dropped = _wire_losses(run, name), sum(_tc_drops(run, name).values())
        assert abs(lost - fig["fabric_drops_pcap"]) <= max(2, 0.02 * lost), (
            name,
            lost,
            fig["fabric_drops_pcap"],
        )
        assert dropped == fig["queue_drops_total"], (name, dropped)
        share = max(0, lost - dropped) / lost if lost else 0.0
        fid = fig["fidelity"]
        assert fid["unexplained_loss_share"] == pytest.approx(share, abs=0.02), (name, lost, dropped)
        assert fid["cpu_busy_max"] is not None and 0 < fid["cpu_busy_max"] <= 1.0
        assert 0.85 <= fid["dequeue_gap_median_over_ideal"] <= 1.15, (
            name,
            "a backlogged port ran at its rate",
        )
    ps = summary["strategies"]["ps"]["fidelity"]
    assert ps["unexplained_loss_share"] <= 0.05, "the PS's losses are the switch queues' drops"


def test_the_compare_is_trustworthy_but_for_the_rings_loss_counter(compare_run):
    """Whatever the verdict, it is the known one. OVS's userspace datapath sends a port's packets in
    batches (sendmmsg); when a call's first packet is refused by the full queue the rest of the batch
    is dropped unoffered, so tc counts refusals, not lost packets, and the ring's losses exceed the
    queues' count in about half of the runs (docs/DESIGN.md, the fidelity verdict; 10-15 % at the
    default 0.5 MiB, 32 % in one run at compare_run's 1 MiB). So: the PS is trustworthy; the ring is
    trustworthy, or degraded for that one reason alone, in that direction (the captures saw more
    losses than the queues counted: the share is above the limit, not a CPU or pace reason); the
    run's verdict is the ring's, with its reasons. The share's size is the batches', not bounded."""
    run, _ = compare_run
    summary = json.loads((run / "summary.json").read_text())
    per = {name: fig["fidelity"] for name, fig in summary["strategies"].items()}
    assert per["ps"]["verdict"] == "trustworthy" and per["ps"]["reasons"] == [], per["ps"]["reasons"]
    ring = per["ring"]
    print(f"ring: {ring['verdict']}, unexplained loss share {ring['unexplained_loss_share']}")
    # the verdict follows the share (a verdict that never degrades, or always does, fails here)
    assert (ring["unexplained_loss_share"] > 0.05) == (ring["verdict"] == "degraded"), ring
    if ring["verdict"] == "degraded":
        assert len(ring["reasons"]) == 1 and "counted by no switch queue" in ring["reasons"][0], ring
        assert ring["unexplained_loss_share"] > 0.05, ring
    else:
        assert ring["verdict"] == "trustworthy" and ring["reasons"] == [], ring
    assert summary["fidelity"] == {
        "verdict": ring["verdict"],
        "reasons": [f"ring: {r}" for r in ring["reasons"]],
    }


def test_retransmissions_agree_with_tshark_on_the_incast_capture(compare_run):
    run, _ = compare_run
    pcap = run / "ps" / "pcap" / "h2.pcap"
    ours = analyze_counts(str(pcap))["retransmits"]
    theirs = tshark_count(pcap, "tcp.analysis.retransmission")
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


def test_the_switches_count_every_large_flow_as_the_senders_capture_does(compare_run):
    """Every flow over 1 MB that the controller learned from the switches (controller.jsonl, kind
    flow): its bytes within 2 % of tshark's frame bytes of that 5-tuple on the sender's capture."""
    run, _ = compare_run
    final: dict[str, dict] = {}
    for line in (run / "controller.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("kind") == "flow" and row["bytes"] >= final.get(row["flow"], {"bytes": -1})["bytes"]:
            final[row["flow"]] = row
    large = {f: r for f, r in final.items() if r["bytes"] > 1_000_000 and r["src"]}
    assert len(large) >= 7, f"a compare's training flows are large: {sorted(final)}"
    wire: collections.Counter[tuple[str, str, int, int]] = collections.Counter()
    for pcap in run.glob("*/pcap/h*.pcap"):
        for src, dst, sport, dport, size in tshark_fields(
            pcap, "ip.src", "ip.dst", "tcp.srcport", "tcp.dstport", "frame.len", display="tcp"
        ):
            if pcap.stem == next((r["src"] for r in large.values() if r["src_ip"] == src), None):
                wire[(src, dst, int(sport), int(dport))] += int(size)
    for flow, r in large.items():
        theirs = wire[(r["src_ip"], r["dst_ip"], r["sport"], r["dport"])]
        assert abs(r["bytes"] - theirs) <= 0.02 * theirs, (
            f"{flow}: switches {r['bytes']} B, tshark {theirs} B"
        )
