"""The routing policies' pure parts: first fit, Hedera's demand estimation and placement, the flow
entries they produce and the flow book that reads the switches' counters. Every expected value is
worked by hand in the comment beside it."""

from __future__ import annotations

import pytest

from controller.flows import FlowBook
from controller.policy import LargeFlow, estimate_demands, first_fit, hedera_place, link_loads
from controller.routing import (
    COOKIE_BASE,
    COOKIE_FLOW,
    FLOW_TABLE,
    FORWARD_TABLE,
    FlowKey,
    compute_rules,
    flow_entry,
)
from runmodel.fabric import FabricSpec, build_plan

KEY = FlowKey("tcp", "10.0.0.2", "10.0.0.5", 40112, 29500)


def test_demands_a_receiver_limit_frees_its_senders_other_flow():
    # A sends to X and Y; B and C send to Y only. Round 1: A's two flows 1/2 each, B's and C's 1;
    # Y receives 2.5 > 1, every flow into Y at least 1/3, so all three get 1/3 (converged).
    # Round 2: A's flow to X takes what A->Y leaves: 1 - 1/3 = 2/3. Round 3 changes nothing.
    pairs = [("A", "X"), ("A", "Y"), ("B", "Y"), ("C", "Y")]
    assert estimate_demands(pairs) == pytest.approx([2 / 3, 1 / 3, 1 / 3, 1 / 3])


def test_demands_a_small_flow_into_a_full_receiver_keeps_its_sender_share():
    # A sends to W, X, Y, Z (1/4 each); B and C send to Y (1 each). Y receives 2.25 > 1: the fair
    # share 1/3 is above A->Y's 1/4, so A->Y keeps 1/4 and B, C split the rest: (1 - 1/4)/2 = 3/8.
    pairs = [("A", "W"), ("A", "X"), ("A", "Y"), ("A", "Z"), ("B", "Y"), ("C", "Y")]
    assert estimate_demands(pairs) == pytest.approx([1 / 4, 1 / 4, 1 / 4, 1 / 4, 3 / 8, 3 / 8])


def test_demands_of_a_ring_are_a_full_link_each():
    # each host sends one flow and receives one: nothing limits a flow below its host's link
    ring = [("h1", "h2"), ("h2", "h3"), ("h3", "h4"), ("h4", "h1")]
    assert estimate_demands(ring) == pytest.approx([1.0] * 4)


def test_first_fit_takes_the_path_whose_busier_link_is_lightest():
    # via sp1: uplink 5, downlink 0 -> 5; via sp2: 1 and 8 -> 8; via sp3: 2 and 2 -> 2 (Mbit/s)
    load = {
        ("lf1", "sp1"): 5e6,
        ("lf1", "sp2"): 1e6,
        ("sp2", "lf2"): 8e6,
        ("lf1", "sp3"): 2e6,
        ("sp3", "lf2"): 2e6,
    }
    spine, why = first_fit("lf1", "lf2", ["sp1", "sp2", "sp3"], load)
    assert spine == "sp3"
    assert "sp1 5.0 0" in why and "sp2 8.0 0" in why and "sp3 2.0 0" in why


def test_first_fit_spreads_flows_opened_on_an_idle_fabric():
    # loads within the same whole Mbit/s (an ACK stream's 0.3): the path with fewer active flows wins
    load = {("lf1", "sp1"): 0.3e6, ("sp2", "lf2"): 0.1e6}
    flows = {("lf1", "sp1"): 1.0, ("sp1", "lf2"): 1.0, ("lf1", "sp2"): 2.0}
    spine, why = first_fit("lf1", "lf2", ["sp1", "sp2", "sp3"], load, flows)
    assert spine == "sp3" and "sp2 0.1 2" in why
    # a ring's four connections opened at once, each counted on its path as it is pinned
    counts: dict = {}
    chosen = []
    for _ in range(4):
        sp, _ = first_fit("lf1", "lf2", ["sp1", "sp2", "sp3", "sp4"], {}, counts)
        chosen.append(sp)
        counts.update(link_loads([("lf1", "lf2", sp, counts.get(("lf1", sp), 0.0) + 1.0)]))
    assert chosen == ["sp1", "sp2", "sp3", "sp4"]


def test_first_fit_ties_go_to_the_first_spine_and_no_spine_is_refused():
    assert first_fit("lf1", "lf2", ["sp2", "sp1"], {})[0] == "sp2"
    with pytest.raises(ValueError):
        first_fit("lf1", "lf2", [], {})


def test_link_loads_add_each_flow_on_both_links_of_its_path():
    loads = link_loads([("lf1", "lf2", "sp1", 3.0), ("lf1", "lf3", "sp1", 4.0), ("lf1", "lf1", "sp1", 9.0)])
    assert loads == {("lf1", "sp1"): 7.0, ("sp1", "lf2"): 3.0, ("sp1", "lf3"): 4.0}


def test_hedera_spreads_two_colliding_full_rate_flows_and_leaves_the_first():
    # two 20 Mbit/s flows hashed onto sp1, uplinks 20 Mbit/s: the first (by name) stays, the second
    # has no room on sp1 (20 + 20 > 22) and goes to the first spine with room, sp2
    flows = [LargeFlow("a", "lf1", "lf2", "sp1", 20e6), LargeFlow("b", "lf1", "lf2", "sp1", 20e6)]
    moves = hedera_place(flows, ["sp1", "sp2"], 20e6)
    assert list(moves) == ["b"] and moves["b"][0] == "sp2"
    assert "demand 20.0" in moves["b"][1]


def test_hedera_leaves_a_full_rate_flow_beside_an_ack_stream():
    # 20 Mbit/s of demand plus other connections' ACKs and small flows (1.7 Mbit/s, as measured) on a
    # 20 Mbit/s uplink: 21.7 is within the 10 % room (22), so the flow stays even where another spine
    # carries less (0.9); 2.5 Mbit/s more (22.5) is not, and it moves
    flow = [LargeFlow("a", "lf1", "lf2", "sp1", 20e6)]
    base = {("lf1", "sp1"): 1.7e6, ("lf1", "sp2"): 0.9e6}
    assert hedera_place(flow, ["sp1", "sp2"], 20e6, base) == {}
    assert hedera_place(flow, ["sp1", "sp2"], 20e6, {("lf1", "sp1"): 2.5e6})["a"][0] == "sp2"


def test_hedera_moves_nothing_when_every_flow_fits_where_it_is():
    flows = [LargeFlow("a", "lf1", "lf2", "sp1", 10e6), LargeFlow("b", "lf1", "lf2", "sp1", 10e6)]
    assert hedera_place(flows, ["sp1", "sp2"], 20e6) == {}


def test_hedera_counts_the_other_flows_load():
    # sp1's downlink to lf2 already carries 15 Mbit/s of small flows: a 10 Mbit/s flow moves to sp2
    moves = hedera_place(
        [LargeFlow("a", "lf1", "lf2", "sp1", 10e6)], ["sp1", "sp2"], 20e6, {("sp1", "lf2"): 15e6}
    )
    assert moves["a"][0] == "sp2"


def test_flow_entries_hash_or_pin_and_carry_the_flow_cookie():
    hashed, pinned = flow_entry(KEY), flow_entry(KEY, 2)
    assert hashed.table == pinned.table == FLOW_TABLE
    assert hashed.goto == FORWARD_TABLE and hashed.out_ports == ()
    assert pinned.goto is None and pinned.out_ports == (2,)
    assert hashed.cookie == pinned.cookie == COOKIE_FLOW
    assert pinned.match == {
        "eth_type": 0x0800,
        "ip_proto": 6,
        "ipv4_src": "10.0.0.2",
        "ipv4_dst": "10.0.0.5",
        "tcp_src": 40112,
        "tcp_dst": 29500,
    }
    assert FlowKey.from_match(pinned.match) == KEY
    assert FlowKey.from_match({"eth_type": 0x0806}) is None


def test_only_a_leafs_host_ports_copy_new_flows_to_the_controller():
    plan = build_plan(FabricSpec(spines=2, leaves=2, hosts_per_leaf=2))
    rules = {r.name: r for r in compute_rules(plan).values()}
    copying = {f.match["in_port"] for f in rules["lf1"].front if f.to_controller}
    assert copying == {3, 4}  # ports 1, 2 go to the spines
    assert not any(f.to_controller for f in rules["sp1"].front)
    for r in rules.values():  # everything else goes on to the forwarding table
        assert any(f.priority == 0 and f.match == {} and f.goto == FORWARD_TABLE for f in r.front)
        assert all(f.cookie == COOKIE_BASE for f in r.front + r.flows)
    assert rules["lf1"].uplinks == {"sp1": 1, "sp2": 2}


def test_flow_book_adds_the_early_frames_and_finds_the_spine_that_counted():
    plan = build_plan(FabricSpec(spines=2, leaves=2, hosts_per_leaf=2))
    book = FlowBook(plan)
    state, new = book.packet_in(KEY, "lf1", 74, t=100.0)
    assert new and (state.src, state.dst, state.dst_leaf) == (
        "h2",
        "",
        "",
    )  # 10.0.0.5 is not in a 4-host plan
    assert not book.packet_in(KEY, "lf1", 1514, t=100.01)[1]
    book.leaf_counts(KEY, "lf1", 10_000, 8, duration=1.0, t=101.0)
    book.leaf_counts(KEY, "lf1", 260_000, 180, duration=2.0, t=102.0)
    assert state.bytes == 260_000 + 74 + 1514 and state.packets == 182
    assert state.rate_bps == pytest.approx(250_000 * 8)
    book.spine_counts(KEY, "sp1", 0)
    book.spine_counts(KEY, "sp2", 200_000)
    assert state.path == "sp2"
    book.removed(KEY, 300_000, 200)  # the entry expired: its last count stays in the flow's bytes
    assert state.bytes == 300_000 + 74 + 1514 and not state.installed
    row = book.top(now=103.0, n=1)[0]
    assert row["kind"] == "flow" and row["flow"] == "tcp 10.0.0.2:40112>10.0.0.5:29500"
    assert row["age_s"] == pytest.approx(3.0) and row["spine"] == "sp2"


@pytest.mark.parametrize("order", [("sp1", "sp2"), ("sp2", "sp1")])
def test_a_flows_first_counts_name_the_spine_that_carried_most(order):
    # its first packets were hashed over sp2 (300 B), then it was pinned to sp1 (5 MB): whatever the
    # order of the spines' replies, sp1 is its path; then sp2 growing makes sp2 the path
    plan = build_plan(FabricSpec(spines=2, leaves=2, hosts_per_leaf=2))
    book = FlowBook(plan)
    book.packet_in(KEY, "lf1", 74, t=1.0)
    counts = {"sp1": 5_000_000, "sp2": 300}
    for spine in order:
        state = book.spine_counts(KEY, spine, counts[spine])
    assert state.path == "sp1"
    book.spine_counts(KEY, "sp1", 5_000_000)
    book.spine_counts(KEY, "sp2", 400)
    assert state.path == "sp2"


def test_a_restarted_controller_adopts_an_entry_it_did_not_install():
    plan = build_plan(FabricSpec(spines=2, leaves=2, hosts_per_leaf=2))
    book = FlowBook(plan)
    key = FlowKey("udp", "10.0.0.1", "10.0.0.3", 5000, 6000)
    state = book.leaf_counts(key, "lf1", 5000, 5, duration=4.0, t=50.0)
    assert (state.t_start, state.src, state.dst, state.dst_leaf) == (46.0, "h1", "h3", "lf2")


def test_an_unknown_routing_policy_is_refused_in_one_line():
    from runmodel.config import ControllerOptions
    from runmodel.params import ParamError

    ControllerOptions(routing="hedera").validate()
    with pytest.raises(ParamError, match=r"^--routing must be one of ecmp, firstfit, hedera, got 'ospf'$"):
        ControllerOptions(routing="ospf").validate()
