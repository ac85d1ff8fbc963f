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

from runmodel.fabric import FabricSpec, build_plan
from tests.conftest import ROOT, guarded_host
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
