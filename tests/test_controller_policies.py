"""The controller app's policy paths with a recording datapath: what it sends to the switches when a
flow starts, when Hedera re-places flows and when a pinned uplink dies (os-ken's real OpenFlow 1.3
message classes, no switch). Rates are fed in as the switches' counters would give them."""

from __future__ import annotations

from typing import Any

from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser

from controller.app import FabricController
from controller.flows import FlowBook
from controller.routing import FlowKey, compute_rules
from controller.stats import StatsStore
from runmodel.fabric import FabricSpec, build_plan


class Datapath:
    """Records the messages the controller sends."""

    ofproto = ofproto_v1_3
    ofproto_parser = ofproto_v1_3_parser

    def __init__(self, dpid: int) -> None:
        self.id = dpid
        self.sent: list[Any] = []

    def send_msg(self, msg: Any) -> None:
        self.sent.append(msg)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def controller(routing: str) -> tuple[FabricController, dict[str, Datapath], Clock]:
    """The app's state without os-ken's start-up: 2 spines, 2 leaves of 2 hosts, 20 Mbit/s links."""
    plan = build_plan(FabricSpec(spines=2, leaves=2, hosts_per_leaf=2))
    ctl = FabricController.__new__(FabricController)
    clock = Clock()
    ctl.plan, ctl.routing, ctl.down = plan, routing, set()
    ctl.rules = compute_rules(plan)
    ctl.store = StatsStore(plan, clock=clock)
    ctl.flows = FlowBook(plan)
    ctl.recorded = {}
    dps = {r.name: Datapath(dpid) for dpid, r in ctl.rules.items()}
    ctl.datapaths = {dp.id: dp for dp in dps.values()}
    return ctl, dps, clock


def start(ctl: FabricController, dps: dict[str, Datapath], key: FlowKey, leaf: str) -> Any:
    state, new = ctl.flows.packet_in(key, leaf, 74, ctl.store.now())
    assert new
    ctl._place_new(dps[leaf], ctl.rules[dps[leaf].id], state)
    return state


def outputs(msg: Any) -> list[int]:
    return [a.port for i in msg.instructions for a in getattr(i, "actions", [])]


def test_firstfit_pins_two_flows_started_together_to_different_uplinks():
    ctl, dps, _ = controller("firstfit")
    a = start(ctl, dps, FlowKey("tcp", "10.0.0.1", "10.0.0.3", 1000, 2000), "lf1")
    b = start(ctl, dps, FlowKey("tcp", "10.0.0.2", "10.0.0.4", 1001, 2001), "lf1")
    assert (a.pinned, b.pinned) == ("sp1", "sp2")
    leaf_mods = [m for m in dps["lf1"].sent if m.table_id == 0]
    assert [outputs(m) for m in leaf_mods] == [[1], [2]]  # lf1's ports 1, 2 go to sp1, sp2
    assert all(len(dps[s].sent) == 2 for s in ("sp1", "sp2"))  # every spine counts both
    pins = [e for e in ctl.store.events if e["event"] == "flow_pinned"]
    assert [(e["old_path"], e["new_path"]) for e in pins] == [(None, "sp1"), (None, "sp2")]


def test_ecmp_leaves_a_new_flow_to_the_hash():
    ctl, dps, _ = controller("ecmp")
    state = start(ctl, dps, FlowKey("udp", "10.0.0.1", "10.0.0.3", 1000, 2000), "lf1")
    (mod,) = dps["lf1"].sent
    assert state.pinned is None and outputs(mod) == []
    assert [type(i).__name__ for i in mod.instructions] == ["OFPInstructionGotoTable"]
    assert not ctl.store.events


def test_hedera_moves_one_of_two_full_rate_flows_hashed_onto_one_spine():
    ctl, dps, clock = controller("hedera")
    keys = [
        FlowKey("tcp", "10.0.0.1", "10.0.0.3", 1000, 2000),
        FlowKey("tcp", "10.0.0.2", "10.0.0.4", 1001, 2001),
    ]
    for k in keys:
        start(ctl, dps, k, "lf1")
    for second in (1, 2):  # each flow at 20 Mbit/s = 2.5 MB/s, both counted by sp1
        clock.t += 1
        for k in keys:
            ctl.flows.leaf_counts(k, "lf1", 2_500_000 * second, 2000 * second, float(second), clock.t)
            ctl.flows.spine_counts(k, "sp1", 2_500_000 * second)
    before = len(dps["lf1"].sent)
    ctl._rebalance()
    (mod,) = dps["lf1"].sent[before:]
    assert mod.command == ofproto_v1_3.OFPFC_MODIFY_STRICT and outputs(mod) == [2]
    (moved,) = [e for e in ctl.store.events if e["event"] == "flow_moved"]
    assert (moved["old_path"], moved["new_path"]) == ("sp1", "sp2") and "demand 20.0" in moved["why"]
    ctl._rebalance()  # placed: nothing moves again
    assert len(dps["lf1"].sent) == before + 1


def test_a_flow_pinned_over_a_dead_uplink_moves_to_a_live_one():
    ctl, dps, _ = controller("firstfit")
    state = start(ctl, dps, FlowKey("tcp", "10.0.0.1", "10.0.0.3", 1000, 2000), "lf1")
    assert state.pinned == "sp1"
    ctl.down.add(("lf2", "sp1"))
    ctl._repin_off(("lf2", "sp1"))
    assert state.pinned == "sp2" and outputs(dps["lf1"].sent[-1]) == [2]
    (moved,) = [e for e in ctl.store.events if e["event"] == "flow_moved"]
    assert moved["why"].startswith("link lf2-sp1 down")
