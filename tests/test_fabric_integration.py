"""The real fabric: Mininet + userspace/kernel OVS + the os-ken controller, as root."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from runmodel.config import ControllerOptions
from runmodel.fabric import FabricSpec, build_plan
from tests.conftest import guarded_host
from tests.iperf import start_incast
from tests.waiting import tcp_listening, wait_for, wait_for_polls
from topologies import hosttcp

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """One default fabric shared by the read-only checks of this module."""
    from incastlab.session import fabric_session

    workdir = tmp_path_factory.mktemp("fabric")
    plan = build_plan(FabricSpec(buffer_pkts=20))
    with guarded_host("the session"), fabric_session(plan, ControllerOptions(), workdir) as sess:
        yield sess


def port_tx(sess, name):
    return next(p["tx_bytes"] for p in sess.controller.get("/api/ports")["ports"] if p["name"] == name)


def test_all_pairs_ping_has_no_loss(session):
    assert session.fabric.net.pingAll(timeout=1) == 0


def test_ecmp_spreads_flows_between_two_leaves_over_both_spines(session):
    fab = session.fabric
    ports = {"sp1-eth3", "sp2-eth3"}
    t0 = time.time()
    wait_for_polls(session.controller.get, t0, ports)  # counters polled after any earlier traffic
    before = {n: port_tx(session, n) for n in ports}
    srv = fab.host("h5").popen(["iperf3", "-s", "-1", "-p", "5999"])
    wait_for(lambda: tcp_listening(srv.pid, 5999), 15, "the iperf3 server on h5 to listen")
    cli = fab.host("h3").popen(["iperf3", "-c", "10.0.0.5", "-p", "5999", "-P", "16", "-t", "2", "-J"])
    cli.communicate(timeout=60)
    srv.wait(timeout=10)
    wait_for_polls(session.controller.get, time.time(), ports)
    moved = {n: port_tx(session, n) - before[n] for n in ports}
    # h3 sits on lf2, h5 on lf3: spine port 3 leads down to lf3 on both spines; 16 flows all
    # hashed onto one spine would happen once in 2^15 runs
    assert all(v > 200_000 for v in moved.values()), moved


def tc_class_drops(dev: str) -> int:
    out = subprocess.run(["tc", "-s", "class", "show", "dev", dev], capture_output=True, text=True).stdout
    m = re.search(r"class htb 1:1 .*?dropped (\d+)", out, re.S)
    assert m, out
    return int(m.group(1))


def test_incast_drops_seen_by_the_api_equal_the_kernel_counters(session):
    fab = session.fabric
    ps_port = session.plan.ps_port.name
    servers, clients = start_incast(fab, 5400, "-n", "1M")
    answered_under_load = 0

    def clients_done() -> bool:
        nonlocal answered_under_load
        assert session.controller.get("/api/queues", timeout=5)["queues"]
        done = all(c.poll() is not None for c in clients)
        answered_under_load += not done  # an answer while the incast was still running
        return done

    wait_for(clients_done, 120, "the iperf3 clients to finish", interval=0.3)
    for p in clients + servers:
        p.wait(timeout=60)
    # the controller's view is up to date once it has polled the PS port's queue after the traffic
    wait_for_polls(session.controller.get, time.time(), {ps_port}, kind="queue")
    api = next(q for q in session.controller.get("/api/queues")["queues"] if q["name"] == ps_port)
    kernel = tc_class_drops(ps_port)
    assert kernel > 0, "a 7-to-1 incast into a 20-packet buffer must drop"
    assert api["drops"] == kernel
    assert answered_under_load >= 1, "the API must answer while the incast fills the PS port"


def test_topology_api_matches_the_fabric(session):
    doc = session.controller.get("/api/topology")
    assert len(doc["switches"]) == 6 and all(s["connected"] for s in doc["switches"])
    assert len(doc["hosts"]) == 8 and len(doc["links"]) == 16
    series = session.controller.get(f"/api/timeseries?since={time.time() - 5}")["samples"]
    kinds = {s["kind"] for s in series}  # flow rows only in the polls where a flow moved bytes
    assert {"port", "queue"} <= kinds <= {"port", "queue", "flow"}, kinds


def _route_metrics(pid: int) -> dict:
    """The fabric route's metrics in pid's namespace, from `ip -j route` (congestion, quickack)."""
    out = subprocess.run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", "ip", "-j", "route", "show", "10.0.0.0/8"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (route,) = json.loads(out)
    return {k: v for m in route.get("metrics", []) for k, v in m.items()}


def _rto_min_us(pid: int) -> int:
    return int(
        subprocess.run(
            ["nsenter", f"--net=/proc/{pid}/ns/net", "sysctl", "-n", "net.ipv4.tcp_rto_min_us"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )


def test_set_tcp_is_what_each_hosts_kernel_reports(session):
    """Session.set_tcp (cc, minimum RTO, quickack in one host) against `ip -j route` and the sysctl
    in every host's namespace. Runs last: it leaves the hosts on reno."""
    plan = session.plan
    quick = plan.host_names[0]
    rto = 5.0 if hosttcp.rto_min_settable() else None
    got = session.set_tcp("reno", rto, quickack=[quick])
    assert set(got) == set(plan.host_names)
    for name in plan.host_names:
        pid = session.fabric.host(name).shell.pid
        metrics = _route_metrics(pid)
        assert metrics.get("congestion") == got[name].cc == "reno", (name, metrics)
        assert bool(metrics.get("quickack")) == got[name].quickack == (name == quick), (name, metrics)
        if rto is not None:
            assert _rto_min_us(pid) == 5000 and got[name].rto_min_ms == 5.0
    # a host set again without quickack loses it; only the checked host is read back
    again = session.set_tcp("reno", None, hosts=[quick], check=[quick])
    assert set(again) == {quick} and not again[quick].quickack
    assert "quickack" not in _route_metrics(session.fabric.host(quick).shell.pid)
