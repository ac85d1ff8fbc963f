"""Fabric parameters, the wiring plan and the forwarding rules, without a network."""

from __future__ import annotations

import pytest

from controller.routing import compute_rules, group_id
from runmodel.fabric import FabricSpec, PortRef, build_plan
from runmodel.params import ParamError


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"spines": 0}, "spines"),
        ({"leaves": 0}, "leaves"),
        ({"hosts_per_leaf": -1}, "hosts_per_leaf"),
        ({"host_mbit": 0}, "host_mbit"),
        ({"uplink_mbit": -5}, "uplink_mbit"),
        ({"buffer_pkts": 0}, "buffer_pkts"),
        ({"ps_host": "h9"}, "ps_host"),
        ({"datapath": "warp"}, "datapath"),
        ({"loss_pct": 100}, "loss_pct"),
    ],
)
def test_impossible_fabrics_are_refused_by_field(kwargs, field):
    with pytest.raises(ParamError) as err:
        FabricSpec(**kwargs)
    assert field in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "overrides, field", [({"host_cpu": {"h42": 0.5}}, "cpu"), ({"host_mbit": {"h42": 5.0}}, "link_mbit")]
)
def test_a_slowed_host_must_exist(overrides, field):
    with pytest.raises(ParamError, match=field):
        build_plan(FabricSpec(), **overrides)


def test_unknown_field_is_named():
    with pytest.raises(ParamError, match="bogus"):
        FabricSpec.from_dict({"bogus": 1})


def test_the_plan_survives_its_json():
    plan = build_plan(FabricSpec(spines=3, leaves=2), host_mbit={"h2": 5.0}, host_cpu={"h3": 0.25})
    again = type(plan).from_dict(plan.to_dict())
    assert again == plan and again.host("h2").rate_mbit == 5.0 and again.host("h3").cpu == 0.25


def test_plan_numbers_ports_as_documented():
    spec = FabricSpec(spines=2, leaves=3, hosts_per_leaf=2, ps_host="h4")
    plan = build_plan(spec)
    assert [s.name for s in plan.switches] == ["sp1", "sp2", "lf1", "lf2", "lf3"]
    h4 = plan.host("h4")
    assert (h4.leaf, h4.port, h4.ip, h4.mac) == ("lf2", 4, "10.0.0.4", "00:00:00:00:00:04")
    assert plan.ps_port == PortRef("lf2", 4, "lf2-eth4")
    uplinks = [ln for ln in plan.links if ln.kind == "uplink"]
    assert len(uplinks) == 6
    last = uplinks[-1]
    assert (last.a, last.a_port, last.b, last.b_port) == ("lf3", 2, "sp2", 3)
    assert len({h.mac for h in plan.hosts}) == 6
    assert len(plan.switch_ports()) == 6 * 2 + 6


def test_oversubscription():
    assert FabricSpec(hosts_per_leaf=4, spines=2, host_mbit=20, uplink_mbit=20).oversubscription == 2.0


def _deliver(plan, rules, src_host, dst_mac, max_hops=10):
    """Follow the rules from a host; returns the set of hosts reached and the number of copies."""
    by_name = {r.name: r for r in rules.values()}
    peers = {}
    for ln in plan.links:
        peers[(ln.a, ln.a_port)] = (ln.b, ln.b_port)
        if ln.kind == "uplink":
            peers[(ln.b, ln.b_port)] = (ln.a, ln.a_port)
    host = plan.host(src_host)
    frontier = [(host.leaf, host.port, 0)]
    reached: list[str] = []
    while frontier:
        sw, in_port, hops = frontier.pop()
        assert hops < max_hops, "forwarding loop"
        sr = by_name[sw]
        is_mc = int(dst_mac.split(":")[0], 16) & 1
        cands = [
            f
            for f in sr.flows
            if ("in_port" not in f.match or f.match["in_port"] == in_port)
            and (f.match["eth_dst"] == dst_mac if isinstance(f.match["eth_dst"], str) else is_mc)
        ]
        flow = max(cands, key=lambda f: f.priority)
        group = next((g for g in sr.groups if g.group_id == flow.group), None)
        ports = flow.out_ports if group is None else group.ports[:1]
        for p in ports:
            nxt = peers[(sw, p)]
            if nxt[0].startswith("h"):
                reached.append(nxt[0])
            else:
                frontier.append((nxt[0], nxt[1], hops + 1))
    return reached


def test_unicast_reaches_exactly_the_destination():
    spec = FabricSpec(spines=2, leaves=4, hosts_per_leaf=2)
    plan = build_plan(spec)
    rules = compute_rules(plan)
    for src in plan.hosts:
        for dst in plan.hosts:
            if src is not dst:
                assert _deliver(plan, rules, src.name, dst.mac) == [dst.name]


def test_broadcast_reaches_every_other_host_once_without_loops():
    spec = FabricSpec(spines=3, leaves=4, hosts_per_leaf=3)
    plan = build_plan(spec)
    rules = compute_rules(plan)
    for src in plan.hosts:
        reached = _deliver(plan, rules, src.name, "ff:ff:ff:ff:ff:ff")
        assert sorted(reached) == sorted(h.name for h in plan.hosts if h is not src)


def test_leaves_spread_remote_traffic_over_every_spine():
    plan = build_plan(FabricSpec(spines=3, leaves=2))
    rules = compute_rules(plan)
    lf1 = next(r for r in rules.values() if r.name == "lf1")
    assert [(g.group_id, g.ports) for g in lf1.groups] == [(group_id("lf2"), (1, 2, 3))]
    remote = [f for f in lf1.flows if f.group == group_id("lf2")]
    assert len(remote) == 2  # h3, h4 on lf2


def test_a_dead_uplink_is_steered_around_by_every_leaf():
    plan = build_plan(FabricSpec(spines=2, leaves=3))
    assert plan.uplink_of_port("sp1", 2) == ("lf2", "sp1")
    assert plan.uplink_of_port("lf2", 1) == ("lf2", "sp1")
    assert plan.uplink_of_port("lf2", 3) is None
    rerouted = compute_rules(plan, down={("lf2", "sp1")})
    rules = {r.name: r for r in rerouted.values()}
    groups = {name: {g.group_id: g.ports for g in r.groups} for name, r in rules.items() if r.role == "leaf"}
    assert groups["lf1"] == {group_id("lf2"): (2,), group_id("lf3"): (1, 2)}
    assert groups["lf2"] == {group_id("lf1"): (2,), group_id("lf3"): (2,)}
    assert groups["lf3"] == {group_id("lf1"): (1, 2), group_id("lf2"): (2,)}
    for src in plan.hosts:  # every host still reaches every other
        for dst in plan.hosts:
            if src is not dst:
                assert _deliver(plan, rerouted, src.name, dst.mac) == [dst.name]


def test_leftovers_name_containers_in_the_order_a_reader_counts_them() -> None:
    from topologies.hygiene import Leftovers

    left = Leftovers(containers=["incastlab-h10", "incastlab-h2", "incastlab-h1"], veths=["a", "b"])
    assert left.describe() == "2 veths, containers incastlab-h1 incastlab-h2 incastlab-h10"
    assert not left.empty() and Leftovers().describe() == "nothing"


def _tc_red_wlog(qmin: int, burst: int, avpkt: int) -> int:
    """iproute2's tc_red_eval_ewma: the log of the queue weight tc picks, -1 where none fits."""
    a = burst + 1 - qmin / avpkt
    if a < 1.0:
        return -1
    w = 0.5
    for wlog in range(1, 32):
        if a <= (1 - (1 - w) ** burst) / w:
            return wlog
        w /= 2
    return -1


@pytest.mark.parametrize("mark_pkts", [1, 2, 3, 4, 8, 20, 250, 999])
def test_red_marking_queue_has_a_weight_tc_can_compute(mark_pkts: int) -> None:
    from topologies.fabric import FRAME_BYTES, red_marking_qdisc

    args = red_marking_qdisc(max(3, 4 * mark_pkts), mark_pkts, 20.0)
    opt = dict(zip(args[1::2], args[2::2], strict=False))
    assert args[0] == "red" and args[-1] == "ecn"
    assert int(opt["min"]) == mark_pkts * FRAME_BYTES < int(opt["max"]) <= int(opt["limit"])
    wlog = _tc_red_wlog(int(opt["min"]), int(opt["burst"]), int(opt["avpkt"]))
    # the kernel's red_check_params: the thresholds shifted by wlog must fit in 32 bits
    assert 1 <= wlog and int(opt["max"]).bit_length() + wlog < 32
    # what failed in the VM (K = 1, avpkt one frame): tc picks wlog 27, 1514 << 27 overflows, EINVAL
    assert FRAME_BYTES.bit_length() + _tc_red_wlog(FRAME_BYTES, 2, FRAME_BYTES) >= 32


def test_the_controller_check_survives_a_hello_that_is_not_text() -> None:
    """An OpenFlow HELLO with a transaction id that is not UTF-8 (Mininet's telnet check died on one)."""
    import socket
    import threading

    from topologies.topo import FabricController

    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def hello() -> None:
            conn, _ = server.accept()
            with conn:
                conn.sendall(bytes([0x04, 0x00, 0x00, 0x08, 0xA4, 0xFF, 0x00, 0x9C]))

        t = threading.Thread(target=hello, daemon=True)
        t.start()
        assert FabricController.isListening(None, "127.0.0.1", port) is True  # type: ignore[arg-type]
        t.join(timeout=5)
    assert FabricController.isListening(None, "127.0.0.1", port) is False  # type: ignore[arg-type]
