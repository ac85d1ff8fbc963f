"""The os-ken application: proactive leaf-spine forwarding, statistics polling, the HTTP API, and
every TCP/UDP flow learned from the first packets its ingress leaf copies here (controller.flows),
placed by the run's routing policy (controller.policy).

One handler per OpenFlow message type, as in os-ken's sample apps. os-ken instantiates the app
itself, so its configuration (AppConfig: the plan, the run model's ControllerOptions, the files)
is set by controller.main in the module-level CONFIG before it does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import eventlet
import eventlet.wsgi
from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from controller.api import CLIENT_TIMEOUT, ApiApp
from controller.flows import FlowBook, FlowState
from controller.policy import LARGE_SHARE, LargeFlow, estimate_demands, first_fit, hedera_place, link_loads
from controller.routing import (
    COOKIE_BASE,
    COOKIE_FLOW,
    FLOW_TABLE,
    FlowKey,
    FlowRule,
    GroupRule,
    SwitchRules,
    compute_rules,
    flow_entry,
)
from controller.stats import PORT_FIELDS, StatsStore
from runmodel.config import ControllerOptions
from runmodel.fabric import Plan


@dataclass(frozen=True)
class AppConfig:
    """What the app runs with: the plan, the options (the run model's one declaration of them),
    the API's listening socket (opened by controller.main, so a taken port is refused before
    os-ken starts), the sample record and the runner's phase file."""

    plan: Plan
    options: ControllerOptions
    api_socket: Any
    record: Path | None = None
    phase_file: Path | None = None


CONFIG: AppConfig | None = None
LOG = logging.getLogger("incastlab.controller")


class FabricController(app_manager.OSKenApp):
    """Installs forwarding when a switch connects; polls its port and queue statistics."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = CONFIG
        assert cfg is not None, "controller.main sets controller.app.CONFIG before os-ken starts the app"
        self.plan: Plan = cfg.plan
        self.interval: float = cfg.options.interval
        self.down: set[tuple[str, str]] = set()  # dead (leaf, spine) links
        self.port_state: dict[tuple[str, int], bool] = {}
        self.rules: dict[int, SwitchRules] = compute_rules(self.plan)
        self.store = StatsStore(self.plan, record=cfg.record)
        self.datapaths: dict[int, Any] = {}
        self.routing: str = cfg.options.routing
        self.flows = FlowBook(self.plan)
        self.recorded: dict[FlowKey, tuple[int, str | None]] = {}  # (bytes, path) last written
        self.api = ApiApp(
            self.plan,
            self.store,
            lambda: set(self.datapaths),
            phase_file=cfg.phase_file,
            flows=lambda n: self.flows.top(self.store.now(), n),
        )
        self.listener = cfg.api_socket
        self.threads.append(
            hub.spawn(
                eventlet.wsgi.server, self.listener, self.api, log_output=False, socket_timeout=CLIENT_TIMEOUT
            )
        )
        self.threads.append(hub.spawn(self._poll))

    # -- switch life cycle ------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev: Any) -> None:
        """A switch connected: replace its flows and groups with the plan's."""
        dp = ev.msg.datapath
        rules = self.rules.get(dp.id)
        if rules is None:
            LOG.warning("switch %016x is not in the plan; leaving it alone", dp.id)
            return
        self._install(dp, rules)
        self.datapaths[dp.id] = dp
        self.store.add_event("switch_connected", switch=rules.name)
        LOG.info("%s connected: %d flows, %d groups", rules.name, len(rules.flows), len(rules.groups))

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def state_change(self, ev: Any) -> None:
        """A switch disconnected: stop polling it."""
        dp = ev.datapath
        if ev.state == DEAD_DISPATCHER and dp.id in self.datapaths:
            del self.datapaths[dp.id]
            self.store.add_event("switch_disconnected", switch=self.store.dpid_name.get(dp.id, str(dp.id)))

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def port_status(self, ev: Any) -> None:
        """A port went up or down: record it; for a leaf-spine link, steer around it."""
        msg = ev.msg
        ofp = msg.datapath.ofproto
        name = self.store.dpid_name.get(msg.datapath.id, str(msg.datapath.id))
        port = msg.desc.port_no
        down = (
            bool(msg.desc.state & ofp.OFPPS_LINK_DOWN)
            or bool(msg.desc.config & ofp.OFPPC_PORT_DOWN)
            or msg.reason == ofp.OFPPR_DELETE
        )
        if self.port_state.get((name, port)) == (not down):
            return  # OVS repeats itself: one event per real change
        first = (name, port) not in self.port_state
        self.port_state[(name, port)] = not down
        if first and not down:
            return
        self.store.add_event("port_down" if down else "port_up", switch=name, port=port)
        link = self.plan.uplink_of_port(name, port)
        if link is None:
            return
        changed = link not in self.down if down else link in self.down
        (self.down.add if down else self.down.discard)(link)
        if changed:
            self.rules = compute_rules(self.plan, self.down)
            for dpid, dp in list(self.datapaths.items()):
                for group in self.rules[dpid].groups:
                    dp.send_msg(self._group_mod(dp, group, modify=True))
            self.store.add_event(
                "reroute",
                link=f"{link[0]}-{link[1]}",
                state="down" if down else "up",
                dead_links=sorted(f"{a}-{b}" for a, b in self.down),
            )
            LOG.info("link %s-%s %s: groups rewritten", link[0], link[1], "down" if down else "up")
            if down:
                self._repin_off(link)

    def _repin_off(self, link: tuple[str, str]) -> None:
        """Flows pinned over a dead leaf-spine link move to the least-loaded live path (the hashed
        ones follow the rewritten groups)."""
        leaf, spine = link
        for state in list(self.flows.flows.values()):
            if state.pinned == spine and leaf in (state.leaf, state.dst_leaf):
                live = self._live_spines(state)
                if live:
                    new, why = first_fit(state.leaf, state.dst_leaf, live, self._loads(skip={state.key}))
                    self._pin(state, new, "flow_moved", f"link {leaf}-{spine} down; {why}")

    # -- statistics -------------------------------------------------------------------------
    def _poll(self) -> None:
        """Ask every connected switch for port, queue and flow statistics every interval; under
        `hedera`, re-place the large flows from the previous poll's rates first."""
        while True:
            try:
                self._rebalance()
            except Exception:  # noqa: BLE001 - a policy's failure must not stop the statistics
                LOG.exception("rebalance failed")
            for dp in list(self.datapaths.values()):
                parser, ofp = dp.ofproto_parser, dp.ofproto
                try:
                    dp.send_msg(parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
                    dp.send_msg(parser.OFPQueueStatsRequest(dp, 0, ofp.OFPP_ANY, ofp.OFPQ_ALL))
                    dp.send_msg(
                        parser.OFPFlowStatsRequest(
                            dp, table_id=FLOW_TABLE, cookie=COOKIE_FLOW, cookie_mask=0xFFFFFFFFFFFFFFFF
                        )
                    )
                except Exception as exc:  # noqa: BLE001 - a dying switch must not stop the poller
                    LOG.warning("stats request to %016x failed: %s", dp.id, exc)
            hub.sleep(self.interval)

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def port_stats_reply(self, ev: Any) -> None:
        """Port counters: bytes, packets, drops per port."""
        dpid = ev.msg.datapath.id
        t = self.store.now()
        for s in ev.msg.body:
            counters = {f: getattr(s, f) for f in PORT_FIELDS}
            self.store.add_port(dpid, s.port_no, counters, s.duration_sec + s.duration_nsec * 1e-9, t)

    @set_ev_cls(ofp_event.EventOFPQueueStatsReply, MAIN_DISPATCHER)
    def queue_stats_reply(self, ev: Any) -> None:
        """Queue counters: OVS reports the qdisc's drops as tx_errors."""
        dpid = ev.msg.datapath.id
        t = self.store.now()
        for s in ev.msg.body:
            counters = {"tx_bytes": s.tx_bytes, "tx_packets": s.tx_packets, "drops": s.tx_errors}
            self.store.add_queue(
                dpid, s.port_no, s.queue_id, counters, s.duration_sec + s.duration_nsec * 1e-9, t
            )

    # -- flows ------------------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev: Any) -> None:
        """A copy of a new flow's packet (the original went on by the hash): learn the flow, install
        its exact entry on the ingress leaf and every spine, placed by the routing policy."""
        msg = ev.msg
        rules = self.rules.get(msg.datapath.id)
        key = flow_key(msg.data)
        if rules is None or rules.role != "leaf" or key is None:
            return
        state, new = self.flows.packet_in(key, rules.name, msg.total_len, self.store.now())
        if new or not state.installed:
            state.installed = True
            self._place_new(msg.datapath, rules, state)

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def flow_stats_reply(self, ev: Any) -> None:
        """Per-flow counters: the ingress leaf's give bytes and rate, the spines' the path."""
        rules = self.rules.get(ev.msg.datapath.id)
        if rules is None:
            return
        t = self.store.now()
        for s in ev.msg.body:
            key = FlowKey.from_match(dict(s.match.items()))
            if key is None:
                continue
            if rules.role == "leaf":
                duration = s.duration_sec + s.duration_nsec * 1e-9
                state = self.flows.leaf_counts(key, rules.name, s.byte_count, s.packet_count, duration, t)
                self._record(state, t)
            else:
                self.flows.spine_counts(key, rules.name, s.byte_count)

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def flow_removed(self, ev: Any) -> None:
        """An idle entry expired on the ingress leaf: keep its last counters; a new packet re-learns it."""
        msg = ev.msg
        rules = self.rules.get(msg.datapath.id)
        key = FlowKey.from_match(dict(msg.match.items()))
        if rules is not None and rules.role == "leaf" and key is not None:
            self.flows.removed(key, msg.byte_count, msg.packet_count)

    def _record(self, state: FlowState, t: float) -> None:
        """A flow row into the record and the series when its bytes or path changed."""
        mark = (state.bytes, state.path)
        if self.recorded.get(state.key) != mark:
            self.recorded[state.key] = mark
            self.store.add_sample(state.row(t))

    def _place_new(self, dp: Any, rules: SwitchRules, state: FlowState) -> None:
        """Exact entries for a new flow: the leaf's pinned by the policy (or hashed), the spines' count."""
        out_port = None
        if state.dst_leaf and state.dst_leaf != state.leaf:
            spine, why = self._choose_new(state)
            if spine is not None:
                out_port = rules.uplinks[spine]
                old, state.pinned = state.pinned, spine
                self.store.add_event(
                    "flow_pinned", flow=state.key.name, old_path=old, new_path=spine, why=why
                )
            entry = flow_entry(state.key)
            for dpid, sp in list(self.datapaths.items()):
                if self.rules[dpid].role == "spine":
                    sp.send_msg(self._flow_mod(sp, entry))
        dp.send_msg(self._flow_mod(dp, flow_entry(state.key, out_port)))

    def _choose_new(self, state: FlowState) -> tuple[str | None, str]:
        """The spine a new cross-leaf flow is pinned to, and why (None: the hash places it)."""
        if self.routing != "firstfit":
            return None, "hash"
        return first_fit(
            state.leaf, state.dst_leaf, self._live_spines(state), self._loads(), self._loads(count=True)
        )

    def _spines(self) -> list[str]:
        """Every spine of the plan, in order."""
        return [sw.name for sw in sorted(self.plan.switches, key=lambda s: s.dpid) if sw.role == "spine"]

    def _live_spines(self, state: FlowState) -> list[str]:
        """Spines both of a flow's leaves reach over live links."""
        return [
            sp
            for sp in self._spines()
            if (state.leaf, sp) not in self.down and (state.dst_leaf, sp) not in self.down
        ]

    def _demand(self, state: FlowState) -> float:
        """A flow's load: its measured rate; a flow not measured yet counts as its host's link rate."""
        return state.rate_bps if state.measured else self._host_bps(state)

    def _loads(self, skip: set[FlowKey] | None = None, count: bool = False) -> dict[tuple[str, str], float]:
        """Each directed leaf-spine link's load from the active flows on it (pinned or hashed), or
        with `count` how many active flows it carries."""
        now = self.store.now()
        return link_loads(
            (s.leaf, s.dst_leaf, s.pinned or s.path, 1.0 if count else self._demand(s))
            for s in self.flows.flows.values()
            if s.active(now) and (skip is None or s.key not in skip)
        )

    def _rebalance(self) -> None:
        """Hedera: re-place the large flows from their estimated demands; each move is an event."""
        if self.routing != "hedera":
            return
        now = self.store.now()
        large = [
            s
            for s in self.flows.flows.values()
            if s.active(now)
            and s.dst_leaf
            and s.dst_leaf != s.leaf
            and s.installed
            and (s.pinned or s.path)
            and s.rate_bps >= LARGE_SHARE * self._host_bps(s)
        ]
        if not large:
            return
        shares = estimate_demands([(s.key.src_ip, s.key.dst_ip) for s in large])
        flows = [
            LargeFlow(s.key.name, s.leaf, s.dst_leaf, s.pinned or s.path, share * self._host_bps(s))
            for s, share in zip(large, shares, strict=True)
        ]
        by_name = {s.key.name: s for s in large}
        uplink_bps = min(ln.rate_mbit for ln in self.plan.links if ln.kind == "uplink") * 1e6
        dead = {sp for _, sp in self.down}
        spines = [sp for sp in self._spines() if sp not in dead] or self._spines()
        base = self._loads(skip={s.key for s in large})
        for name, (spine, why) in hedera_place(flows, spines, uplink_bps, base).items():
            self._pin(by_name[name], spine, "flow_moved", why)

    def _host_bps(self, state: FlowState) -> float:
        """The link rate of the flow's sending host (0 for an address outside the plan)."""
        src = self.flows.host_of_ip.get(state.key.src_ip)
        return src.rate_mbit * 1e6 if src else 0.0

    def _pin(self, state: FlowState, spine: str, event: str, why: str) -> None:
        """Point a flow's ingress entry at `spine`'s uplink (counters kept) and say so."""
        dpid = next((d for d, r in self.rules.items() if r.name == state.leaf), None)
        dp = self.datapaths.get(dpid) if dpid is not None else None
        if dp is None:
            return
        dp.send_msg(self._flow_mod(dp, flow_entry(state.key, self.rules[dpid].uplinks[spine]), modify=True))
        old, state.pinned = state.pinned or state.path, spine
        self.store.add_event(event, flow=state.key.name, old_path=old, new_path=spine, why=why)

    # -- flow programming -------------------------------------------------------------------
    def _install(self, dp: Any, rules: SwitchRules) -> None:
        """Replace the plan's rules on a switch; flow entries (COOKIE_FLOW) stay, so flows pinned by a
        previous controller keep their path."""
        parser, ofp = dp.ofproto_parser, dp.ofproto
        dp.send_msg(
            parser.OFPFlowMod(
                datapath=dp,
                command=ofp.OFPFC_DELETE,
                table_id=ofp.OFPTT_ALL,
                out_port=ofp.OFPP_ANY,
                out_group=ofp.OFPG_ANY,
                cookie=COOKIE_BASE,
                cookie_mask=0xFFFFFFFFFFFFFFFF,
                match=parser.OFPMatch(),
            )
        )
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL))
        for group in rules.groups:
            dp.send_msg(self._group_mod(dp, group))
        for flow in rules.flows + rules.front:
            dp.send_msg(self._flow_mod(dp, flow))
        dp.send_msg(parser.OFPBarrierRequest(dp))

    @staticmethod
    def _group_mod(dp: Any, group: GroupRule, modify: bool = False) -> Any:
        parser, ofp = dp.ofproto_parser, dp.ofproto
        buckets = [
            parser.OFPBucket(
                weight=1, watch_port=port, watch_group=ofp.OFPG_ANY, actions=[parser.OFPActionOutput(port)]
            )
            for port in group.ports
        ]
        return parser.OFPGroupMod(
            dp,
            command=ofp.OFPGC_MODIFY if modify else ofp.OFPGC_ADD,
            type_=ofp.OFPGT_SELECT,
            group_id=group.group_id,
            buckets=buckets,
        )

    @staticmethod
    def _flow_mod(dp: Any, flow: FlowRule, modify: bool = False) -> Any:
        parser, ofp = dp.ofproto_parser, dp.ofproto
        if flow.group is not None:
            actions = [parser.OFPActionGroup(flow.group)]
        else:
            actions = [parser.OFPActionOutput(p) for p in flow.out_ports]
        if flow.to_controller:
            actions.append(parser.OFPActionOutput(ofp.OFPP_CONTROLLER, max_len=128))
        instructions = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
        if flow.goto is not None:
            instructions.append(parser.OFPInstructionGotoTable(flow.goto))
        return parser.OFPFlowMod(
            datapath=dp,
            cookie=flow.cookie,
            table_id=flow.table,
            command=ofp.OFPFC_MODIFY_STRICT if modify else ofp.OFPFC_ADD,
            priority=flow.priority,
            idle_timeout=flow.idle_timeout,
            flags=ofp.OFPFF_SEND_FLOW_REM if flow.cookie == COOKIE_FLOW else 0,
            match=parser.OFPMatch(**flow.match),
            instructions=instructions,
        )


def flow_key(frame: bytes) -> FlowKey | None:
    """The 5-tuple of an IPv4 TCP or UDP frame (the head the switch sent), else None."""
    from os_ken.lib.packet import ipv4, packet, tcp, udp

    try:
        pkt = packet.Packet(frame)
    except Exception:  # noqa: BLE001 - a truncated or odd frame is just not a flow
        return None
    ip = pkt.get_protocol(ipv4.ipv4)
    l4 = pkt.get_protocol(tcp.tcp) or pkt.get_protocol(udp.udp)
    if ip is None or l4 is None:
        return None
    proto = "tcp" if isinstance(l4, tcp.tcp) else "udp"
    return FlowKey(proto, ip.src, ip.dst, l4.src_port, l4.dst_port)
