"""`make cluster-check`: the default fabric over two container servers with Cluster Edition, and a
short compare over them.

The check starts its own servers and network and removes them; the assertions read its check.json
and the compare's run folder against independent oracles (the plan's wiring, a hand count of the
links that must cross servers, the VXLAN devices' kernel counters, ping's own summaries, the
switches' queue counters as the controller polled them, the workers' own step records) and ask
docker and the kernel directly that nothing is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis.pcapfile import read_pcap
from analysis.rto import rto_events
from analysis.tcpopts import read_options
from runmodel.fabric import FabricSpec, Plan, build_plan
from tests.conftest import ROOT, guarded_host
from tests.tshark import need_tshark, tshark_count, tshark_delivered_bytes
from topologies import testservers

pytestmark = pytest.mark.integration
PINGS = 50  # clustercheck.ping_rtt's count per pair


@pytest.fixture(scope="module")
def server_image() -> str:
    """The server image, built (or found current) before the check's clock starts: on a fresh
    machine it is the base's debootstrap plus the Debian packages from the mirror, minutes."""
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "topologies.testservers", "image"],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
    )
    print(f"server image: {time.monotonic() - t0:.1f} s\n{proc.stderr}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return testservers.SERVER_IMAGE


def test_cluster_check_over_two_container_servers(tmp_path: Path, server_image: str) -> None:
    need_tshark()
    with guarded_host("make cluster-check"):
        proc = subprocess.run(
            [sys.executable, "-m", "incastlab.clustercheck", "--workdir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=280,
            cwd=ROOT,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "all-pairs ping: no loss" in proc.stderr
    doc = json.loads((tmp_path / "check.json").read_text())
    cluster = doc["cluster"]
    plan = build_plan(FabricSpec())

    # the servers are recorded, and placement is by leaf: every host on its leaf's server
    assert sorted(cluster["servers"]) == [testservers.server_ip(1), testservers.server_ip(2)]
    for host in plan.hosts:
        assert cluster["placement"][host.name] == cluster["placement"][host.leaf], host.name
    # 4 leaves split 2 + 2, one spine per server: each leaf reaches the other server's spine by a tunnel
    assert sorted((t["a"], t["b"]) for t in cluster["tunnels"]) == [
        ("lf1", "sp2"),
        ("lf2", "sp2"),
        ("lf3", "sp1"),
        ("lf4", "sp1"),
    ]
    assert cluster["tunnel"] == {"kind": "vxlan", "udp_port": 4789, "fabric_mtu": 1500}
    # the OpenFlow listener is on the servers' network's gateway, not on every address
    assert cluster["controller"] == f"{testservers.GATEWAY}:6653"

    # kernel counters of the 8 tunnel ends: the pings across crossed them, and nothing dropped there
    counters = cluster["tunnel_counters"]
    assert len(counters) == 2 * len(cluster["tunnels"])
    assert sum(c["tx_packets"] for c in counters.values()) >= 2 * PINGS  # requests and replies
    assert all(c["tx_dropped"] == c["rx_dropped"] == c["tx_errors"] == 0 for c in counters.values())
    assert {c["mtu"] for c in counters.values()} == {1500}  # the kernel's MTU of each tunnel end
    for pair, rtt in doc["rtt"].items():
        assert rtt["loss_pct"] == 0.0 and rtt["avg_ms"] > 0, pair

    # the compare over the servers tells the one-machine story
    run = Path(doc["compare"]["run"])
    assert doc["compare"]["exit"] == 0
    config = json.loads((run / "config.json").read_text())
    assert config["controller"]["servers"] == [testservers.server_ip(1), testservers.server_ip(2)]
    assert json.loads((run / "cluster.json").read_text())["placement"] == cluster["placement"]
    ps_port = plan.ps_port.name
    drops = {s: port_queue_drops(run / s / "timeseries.jsonl", ps_port) for s in ("ps", "ring")}
    assert drops["ps"] > 0 and drops["ring"] == 0, drops  # incast at the PS port only under ps
    steps = {s: worker_steps(run / s) for s in ("ps", "ring")}
    mean = {
        s: sum(t for rec in v.values() for t, _ in rec) / sum(map(len, v.values())) for s, v in steps.items()
    }
    assert mean["ps"] > mean["ring"], mean  # PS slower than ring
    final = {s: {w: rec[-1][1] for w, rec in v.items()} for s, v in steps.items()}
    assert final["ps"] == final["ring"] and len(final["ps"]) == 7, final  # the same last loss, rank by rank

    # captured on the servers, stopped there with tcpdump's own counters; the oracles agree
    check_captures(run, plan)

    # the queue samplers ran on the servers: the PS port's drops as the controller counted them
    for s in ("ps", "ring"):
        qsum = json.loads((run / s / "queue_depth_summary.json").read_text())
        assert qsum["error"] is None and sorted(qsum["servers"]) == sorted(cluster["servers"]), qsum
        assert set(qsum["ports"]) == set(plan.port_names()), s
        assert qsum["ports"][ps_port]["drops_delta"] == drops[s], (s, qsum["ports"][ps_port], drops)
    # each server's CPU, sampled there, judged per strategy
    server_cpu = json.loads((run / "cluster.json").read_text())["server_cpu"]
    assert sorted(server_cpu) == ["ps", "ring"]
    for s, by_server in server_cpu.items():
        assert sorted(by_server) == sorted(cluster["servers"]), s
        assert all(f["cpu_busy_max"] is not None and 0 < f["cpu_busy_max"] <= 1 for f in by_server.values())

    # Ctrl-C takes the fabric down on every server; after a SIGKILL, `incastlab clean` does
    held = doc["interrupted"]
    assert held["SIGINT_exit"] == 130 and held["SIGKILL_exit"] == -9 and held["clean_exit"] == 0
    assert all(b.split() for b in held["held_before_clean"].values())  # the kill left bridges there
    for key in ("left_after_SIGINT", "left_after_SIGKILL"):
        assert all(not v for left in held[key].values() for v in left.values()), (key, held[key])

    # nothing left on the servers (asked before they were removed) nor here (asked now, directly)
    assert all(not v for left in doc["left_on_servers"].values() for v in left.values()), doc[
        "left_on_servers"
    ]
    ps = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"label={testservers.SERVER_LABEL}"],
        capture_output=True,
        text=True,
    )
    assert ps.returncode == 0 and ps.stdout.strip() == ""
    assert subprocess.run(
        ["docker", "network", "inspect", testservers.NETWORK], capture_output=True
    ).returncode
    assert not Path(f"/sys/class/net/{testservers.BRIDGE}").exists()
    vx = subprocess.run(["ip", "-o", "link", "show", "type", "vxlan"], capture_output=True, text=True)
    assert vx.stdout.strip() == ""


def port_queue_drops(timeseries: Path, port: str) -> int:
    """Drops the switch counted at `port`'s queue within one strategy's window (last poll - first)."""
    rows = [json.loads(ln) for ln in timeseries.read_text().splitlines() if ln.strip()]
    seen = [r["drops"] for r in rows if r.get("kind") == "queue" and r.get("name") == port]
    assert seen, f"no queue samples of {port} in {timeseries}"
    return max(seen) - min(seen)


def worker_steps(folder: Path) -> dict[str, list[tuple[float, float]]]:
    """Per worker, (iteration time, loss) of its steps in step order, from its own records."""
    out = {}
    for f in sorted(folder.glob("worker-*.jsonl")):
        recs = [json.loads(ln) for ln in f.read_text().splitlines() if ln.strip()]
        steps = sorted(
            (r["step"], r["t_end"] - r["t_start"], round(r["loss"], 5)) for r in recs if "loss" in r
        )
        out[f.stem] = [(t, loss) for _, t, loss in steps]
    return out


def check_captures(run: Path, plan: Plan) -> None:
    """Per strategy: every capture point (each host and the PS port, each on its server) stopped by
    SIGINT there, so tcpdump's closing counters came back; in each host's capture, of what it sent,
    the retransmissions tshark flags against the analysis's (summary.json's Wireshark-style count),
    and the analysis's retransmitted segments (rto_events) exactly the kernel's TcpRetransSegs
    (hosts.json); under ps the PS host's capture and the PS port's hold the same bytes to the PS."""
    summary = json.loads((run / "summary.json").read_text())["strategies"]
    ps_ip = plan.host(plan.ps_host).ip
    for s in ("ps", "ring"):
        cap = json.loads((run / s / "capture.json").read_text())
        names = {pt["name"] for pt in cap["points"]}
        assert {"ps-port", *({plan.ps_host} if s == "ps" else set())} <= names, names
        for pt in cap["points"]:
            assert pt["error"] is None and pt["packets_captured"] is not None, pt
            assert pt["packets_dropped_kernel"] is not None, pt
        hosts = json.loads((run / s / "hosts.json").read_text())
        assert summary[s]["tcp_retransmits_kernel"] == sum(
            int(h["kernel"].get("TcpRetransSegs", 0)) for h in hosts.values()
        )
        tshark = 0
        for pt in cap["points"]:
            if pt["name"] == "ps-port":
                continue
            ip = plan.host(pt["name"]).ip
            pcap = read_pcap(run / s / pt["file"], allow_truncated=True)
            segs = rto_events(pcap, tsval=read_options(pcap).tsval).totals(ip)["retransmits"]
            assert segs == int(hosts[pt["name"]]["kernel"].get("TcpRetransSegs", 0)), (s, pt["name"])
            tshark += tshark_count(run / s / pt["file"], f"tcp.analysis.retransmission && ip.src=={ip}")
        ours = summary[s]["tcp_retransmits_pcap"]
        print(f"{s}: retransmissions tshark {tshark}, analysis {ours}")
        assert abs(ours - tshark) <= max(1, 0.01 * tshark), (s, ours, tshark)
        if s == "ps":  # the incast: retransmissions, and the PS's bytes in both its captures
            assert tshark > 0, "an incast into a 20-packet buffer retransmits"
            to_ps = tshark_delivered_bytes(run / s / "pcap" / f"{plan.ps_host}.pcap", ps_ip)
            at_port = tshark_delivered_bytes(run / s / "pcap" / "ps-port.pcap", ps_ip)
            assert to_ps > 0 and at_port == to_ps, (to_ps, at_port)
