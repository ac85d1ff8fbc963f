"""`make cluster-check`: the default fabric over two container servers with Cluster Edition.

The check starts its own servers and network and removes them; the assertions read its check.json
against independent oracles (the plan's wiring, a hand count of the links that must cross servers,
the VXLAN devices' kernel counters, ping's own summaries) and ask docker and the kernel directly
that nothing is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runmodel.fabric import FabricSpec, build_plan
from tests.conftest import ROOT, guarded_host
from topologies import testservers

pytestmark = pytest.mark.integration
PINGS = 50  # clustercheck.ping_rtt's count per pair


def test_cluster_check_over_two_container_servers(tmp_path):
    with guarded_host("make cluster-check"):
        proc = subprocess.run(
            [sys.executable, "-m", "incastlab.clustercheck", "--workdir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=170,
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
