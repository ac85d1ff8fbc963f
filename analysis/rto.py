"""Retransmission timeouts (RTO) and tail loss probes (TLP) seen in a sender-side capture.

tcp.py counts retransmitted *segments* (split by dup-ACK evidence, not by timer: `analyze` calls
the parts retransmits_with_dup_acks / retransmits_without_dup_acks); this counts timer *events*, as
the kernel counts TcpExtTCPTimeouts and TcpExtTCPLossProbes (tcp_timer.c, tcp_output.c), and how
long each stalled its flow. `inspect` names a retransmission a timer's only where this finds one.

- RTO: the timer fires at least SRTT + max(RTTVAR, rto_min) after it was armed and resends only the
  head (seq == highest cumulative ACK), then backs off 2*RTO, 4*RTO, ... A head retransmission is an
  RTO if (a) it comes at least `tolerance * rto_min` after both the last cumulative-ACK advance and
  the segment's own previous copy (not just the last packet: a sender with a deep host qdisc keeps
  the wire busy long after the timer was armed); (b) it is not in a burst: nothing sent within
  `burst_s` before, nor after unless an ACK came between (keeps out SACK/RACK recovery); (c) sends
  are placed at their TSval when the capture has timestamps (tcpopts.py), so the sender's own queue
  does not bend (a) and (b). With a long timer (200 ms) a head retransmission right after a SACK
  still counts: in SACK recovery the timer fires while SACKs keep arriving. With a short one
  (rto_min_ms=1) the wait cannot tell the two apart, and one within `burst_s` of an ACK is
  taken as ACK-clocked.
- TLP: in the Open state, the first non-burst retransmission of the *last* segment since the last
  ACK advance. With one segment in flight the first such retransmission is the probe, the next an RTO.
- SYN / SYN-ACK timer retransmissions (kind "syn"), which the kernel counts as timeouts too, unless
  a peer packet arrived within `burst_s` before (a SYN-ACK resent for a duplicate SYN).

`retransmits` counts every segment sent below the highest sequence sent before it: the kernel's
TcpRetransSegs on a sender's own capture (Wireshark calls some of these out-of-order instead).

Known differences from the kernel's counters:
- TLPs that send new data are invisible, so `loss_probes` is a lower bound.
- a timeout the kernel suppressed (copy still in the host queue) puts nothing on the wire.
- zero-window probes are excluded (peer's last window 0); spurious RTOs are counted by both.
- without SACK or with tcp_early_retrans < 3 there are no probes: a "probe" here is an RTO.
- tcpdump drops hide events; a sender backlogged in its own qdisc may miss or add a few
  (TSval's 1 ms; docs/DESIGN.md, the table of checks; docs/RESULTS.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from analysis.packets import FIN, RST, SYN, Packets, ip_to_str
from analysis.seqspace import (
    NO_ACK,
    Directions,
    directions,
    group_first,
    group_start,
    seq_len,
    seq_numbers,
    signed32,
)

RTO_MIN_S = 0.2  # Linux TCP_RTO_MIN
TOLERANCE = 0.75  # an RTO is counted from tolerance * rto_min on (timer slack, queueing skew)
BURST_S = 0.005  # sends closer than this belong to one burst (not timer driven)
SHORT_TIMER_BURSTS = 10  # a timer shorter than this many bursts: an ACK just before a resend clocked it

_HALF = np.int64(1 << 41)
_SPAN = np.int64(1 << 43)
_NEG = np.int64(-(1 << 62))
_NEVER = np.int64(-(1 << 62))  # a time (ns) long before any capture


@dataclass(frozen=True)
class RtoEvent:
    """One timeout or loss probe: capture time (s since the epoch), 1-based frame number, the
    retransmitted sequence number (relative to the direction's SYN, or to one less than its first
    sequence number seen when the capture lacks the SYN, as tshark counts; absolute in seq_raw), kind
    ("rto", "syn" or "tlp"), idle_s (seconds with nothing sent in this direction and no ACK
    progress before it: the stall it cost) and backoff (0 for the first timeout of a segment,
    1 for the one after the doubled RTO, ...)."""

    t: float
    frame: int
    seq: int
    seq_raw: int
    kind: str
    idle_s: float
    backoff: int


@dataclass(frozen=True)
class FlowRto:
    """Timeouts of one flow direction (the sender is `src`)."""

    flow: str
    src: str
    sport: int
    dst: str
    dport: int
    timeouts: int  # events of kind "rto" and "syn"
    loss_probes: int  # events of kind "tlp"
    stall_s: float  # sum of idle_s over the timeouts
    events: list[RtoEvent] = field(default_factory=list)
    retransmits: int = 0  # segments sent below the highest sequence number sent before (any cause)


@dataclass(frozen=True)
class RtoAnalysis:
    """Per flow direction that sent data, and totals over all of them."""

    flows: list[FlowRto]

    @property
    def timeouts(self) -> int:
        return sum(f.timeouts for f in self.flows)

    @property
    def loss_probes(self) -> int:
        return sum(f.loss_probes for f in self.flows)

    @property
    def retransmits(self) -> int:
        return sum(f.retransmits for f in self.flows)

    @property
    def stall_s(self) -> float:
        return round(float(sum(f.stall_s for f in self.flows)), 6)

    def by_sender(self) -> dict[str, dict[str, float]]:
        """{sender IP: {"timeouts", "loss_probes", "stall_s", "retransmits"}} summed over its flows
        (the figures to compare with that host's TcpExtTCPTimeouts, TcpExtTCPLossProbes and
        TcpRetransSegs)."""
        out: dict[str, dict[str, float]] = {}
        for f in self.flows:
            row = out.setdefault(f.src, _zero())
            row["timeouts"] += f.timeouts
            row["loss_probes"] += f.loss_probes
            row["stall_s"] = round(row["stall_s"] + f.stall_s, 6)
            row["retransmits"] += f.retransmits
        return out

    def totals(self, src: str | None = None) -> dict[str, float]:
        """{"timeouts", "loss_probes", "stall_s", "retransmits"} over all flows, or over the flows
        sent by src (zeros if it sent none)."""
        if src is not None:
            return self.by_sender().get(src, _zero())
        return {
            "timeouts": self.timeouts,
            "loss_probes": self.loss_probes,
            "stall_s": self.stall_s,
            "retransmits": self.retransmits,
        }

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: totals plus "per_flow" (each flow with its events)."""
        return {**self.totals(), "per_flow": [asdict(f) for f in self.flows]}


def _zero() -> dict[str, float]:
    return {"timeouts": 0, "loss_probes": 0, "stall_s": 0.0, "retransmits": 0}


def _gcummax(vals: np.ndarray, gid: np.ndarray) -> np.ndarray:
    """Running maximum within groups (gid non-decreasing); vals within (-_HALF, _HALF) or _NEG."""
    v = np.where(vals == _NEG, -_HALF, vals) + gid * _SPAN
    m = np.maximum.accumulate(v) - gid * _SPAN
    return np.where(m == -_HALF, _NEG, m)


def _ffill(mask: np.ndarray, gstart: np.ndarray) -> np.ndarray:
    """Per position: index of the last position <= it (same group) where mask is true, else -1."""
    idx = np.maximum.accumulate(np.where(mask, np.arange(mask.shape[0]), -1))
    return np.where(idx >= gstart, idx, -1)


def _shift(x: np.ndarray, first: np.ndarray, fill: np.int64) -> np.ndarray:
    """x of the previous position in the same group (fill at group starts)."""
    y = np.empty_like(x)
    if x.shape[0]:
        y[1:] = x[:-1]
        y[first] = fill
    return y


def _send_times(
    p: Packets, data_o: np.ndarray, first: np.ndarray, tsval: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """When the sender's kernel sent each data packet (ns), and whether that is known from TSval.

    With TSval (ms of the sender's clock) the offset to the capture clock is the smallest
    capture-minus-TSval of the direction (a packet that did not wait), and a send is placed at
    the end of its TSval millisecond but never after its capture; without, the capture time."""
    t = p.ts_ns[data_o]
    if tsval is None:
        return t, np.zeros(t.shape[0], dtype=bool)
    tv = tsval[data_o].astype(np.int64)
    known = tv >= 0
    gid = np.cumsum(first) - 1
    # unwrap TSval per direction (32-bit ms counter), over the packets that carry it
    ki = np.flatnonzero(known)
    ms = np.zeros(t.shape[0], dtype=np.int64)
    if ki.size:
        kg = gid[ki]
        kf = np.ones(ki.size, dtype=bool)
        kf[1:] = kg[1:] != kg[:-1]
        d = np.zeros(ki.size, dtype=np.int64)
        d[1:] = signed32(tv[ki][1:] - tv[ki][:-1])
        d[kf] = 0
        cs = np.cumsum(d)
        ms[ki] = tv[ki][group_start(kf)] + cs - cs[group_start(kf)]
    diff = np.where(known, t - ms * 1_000_000, np.iinfo(np.int64).max)
    ngroups = int(gid[-1]) + 1 if gid.size else 0
    off = np.full(ngroups, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(off, gid, diff)
    sent = np.where(known, np.minimum(t, ms * 1_000_000 + off[gid] + 1_000_000), t)
    return sent, known


def rto_events(
    p: Packets,
    *,
    tsval: np.ndarray | None = None,
    rto_min_s: float = RTO_MIN_S,
    tolerance: float = TOLERANCE,
    burst_s: float = BURST_S,
) -> RtoAnalysis:
    """Timeouts and tail loss probes of every flow direction of a sender-side capture.

    Use the capture of the sending host (its own interface): the rules (module docstring) read
    the ACKs as the sender received them. tsval: per packet, the TCP timestamp value (from
    tcpopts.read_options(p).tsval; -1 where absent); with it the sender's own send times are
    used and a retransmission that followed an ACK within burst_s (ACK-clocked) is no loss probe;
    without it the capture times (exact for a sender without a backlog in its own qdisc).
    rto_min_s: the kernel's minimum RTO (200 ms on Linux); a timeout must come at least
    tolerance * rto_min_s after the ACK progress and the previous copy of the segment; burst_s:
    sends closer than this are one burst (default 5 ms).
    Returns an RtoAnalysis (per flow: events, timeouts, loss_probes, stall_s; totals; by_sender()).
    """
    if len(p) == 0:
        return RtoAnalysis(flows=[])
    d = directions(p)
    _base, seq_rel, ack_rel = seq_numbers(p, d)
    length = seq_len(p)
    data_o = d.order[length[d.order] > 0]  # data packets, by direction, capture order
    if data_o.size == 0:
        return RtoAnalysis(flows=[])
    fo = d.fid[data_o]
    first = group_first(fo)
    gid = np.cumsum(first) - 1
    t, kernel_time = _send_times(p, data_o, first, tsval)
    s = seq_rel[data_o]
    end = s + length[data_o]
    cm = _gcummax(end, gid)  # snd_nxt after each send
    nxt_b = _shift(cm, first, _NEG)  # snd_nxt before it
    rtx = (nxt_b != _NEG) & (s < nxt_b)
    m = data_o.shape[0]
    last = np.ones(m, dtype=bool)
    last[:-1] = first[1:]
    # ---- what the sender had received from the peer before each send (by time)
    ev = _peer_events(p, d, ack_rel)
    q = ev.lookup(fo, t)
    q_next = np.empty_like(q)
    q_next[:-1] = q[1:]
    q_next[last] = -1
    una = ev.get("una", q, _NEG)
    t_adv = ev.get("t_adv", q, _NEVER)
    n_ack = ev.get("n_ack", q, np.int64(0))
    t_ack = ev.get("t_ack", q, _NEVER)
    t_rev = ev.get("t", q, _NEVER)
    dups = ev.get("dups", q, np.int64(0))
    win = ev.get("win", q, np.int64(-1))
    next_ack = ev.get("n_ack", q_next, np.int64(-1))
    prev_t = _shift(t, first, _NEVER)
    next_t = np.empty_like(t)
    next_t[:-1] = t[1:]
    next_t[last] = np.iinfo(np.int64).max
    burst = int(burst_s * 1e9)
    alone_after = last | (next_t - t >= burst) | (next_ack > n_ack)
    single = (t - prev_t >= burst) & alone_after
    ack_clocked = kernel_time & (t - t_ack < burst)
    # previous copy of the same segment start; else the time snd_nxt first passed it
    o2 = np.lexsort((np.arange(m), s, fo))
    same = np.zeros(m, dtype=bool)
    same[1:] = (fo[o2][1:] == fo[o2][:-1]) & (s[o2][1:] == s[o2][:-1])
    px = np.full(m, _NEVER, dtype=np.int64)
    px[o2[1:][same[1:]]] = t[o2[:-1][same[1:]]]
    keys = gid * _SPAN + np.clip(cm, -_HALF, _HALF)
    j = np.searchsorted(keys, gid * _SPAN + np.clip(s, -_HALF, _HALF), side="right")
    j = np.minimum(j, m - 1)
    cover_t = np.where(fo[j] == fo, t[j], _NEVER)
    t_copy = np.where(px != _NEVER, px, cover_t)
    una_eff = np.where(una == _NEG, 0, una)
    head = s == una_eff
    tail = end == nxt_b
    syn = (p.flags[data_o] & SYN) != 0
    thr = int(tolerance * rto_min_s * 1e9)
    waited = np.minimum(t - t_copy, np.where(t_adv == _NEVER, np.iinfo(np.int64).max, t - t_adv))
    # Open state: every earlier retransmission's recovery point acknowledged, no dup ACKs since
    rp = _gcummax(np.where(rtx, nxt_b, _NEG), gid)
    rp_b = _shift(rp, first, _NEG)
    open_state = ((rp_b == _NEG) | (rp_b <= una_eff)) & (dups == 0)
    tlp = rtx & ~syn & single & tail & open_state & ~ack_clocked
    # with a timer far longer than a burst, an ACK just before a head retransmission says nothing (in
    # SACK recovery SACKs keep coming while the timer runs down); with a short one (rto_min_ms=1) the
    # two cannot be told apart by the wait, and the ACK is the likelier cause
    clocked = ack_clocked if thr < SHORT_TIMER_BURSTS * burst else np.zeros_like(ack_clocked)
    rto = rtx & ~syn & ~tlp & head & single & ~clocked & (waited >= thr) & (win != 0)
    syn_to = rtx & syn & (t - t_rev >= burst) & (t - t_copy >= thr)
    idle = t - np.maximum(prev_t, t_adv)
    hit = np.flatnonzero(rto | tlp | syn_to)
    # backoff: consecutive timeouts of the same segment with no ACK progress in between
    backoff = np.zeros(m, dtype=np.int64)
    to_idx = np.flatnonzero(rto | syn_to)
    if to_idx.size > 1:
        a, b = to_idx[:-1], to_idx[1:]
        cont = (fo[a] == fo[b]) & (s[a] == s[b]) & (t_adv[b] <= t[a])
        run = np.zeros(to_idx.size, dtype=np.int64)
        for k in np.flatnonzero(cont).tolist():  # few events: a plain loop
            run[k + 1] = run[k] + 1
        backoff[to_idx] = run
    # tshark-style relative sequence numbers: 0 at the SYN, 1 at the first byte without one
    first_pkt = d.order[d.starts[:-1]]
    rel_base = np.where((p.flags[first_pkt] & SYN) != 0, 0, -1)
    n_rtx = np.bincount(fo[rtx], minlength=len(d.keys))
    per: dict[int, list[int]] = {}
    for k in hit.tolist():
        per.setdefault(int(fo[k]), []).append(k)
    flows: list[FlowRto] = []
    for fid in np.unique(fo).tolist():
        src, sport, dst, dport = d.keys[fid]
        events = []
        for k in per.get(fid, []):
            kind = "syn" if syn_to[k] else ("tlp" if tlp[k] else "rto")
            i = int(data_o[k])
            events.append(
                RtoEvent(
                    t=float(p.ts_ns[i]) / 1e9,
                    frame=int(p.frame[i]),
                    seq=int(s[k] - rel_base[fid]),
                    seq_raw=int(p.seq[i]),
                    kind=kind,
                    idle_s=round(float(idle[k]) / 1e9, 6) if prev_t[k] != _NEVER else 0.0,
                    backoff=int(backoff[k]),
                )
            )
        to = [e for e in events if e.kind != "tlp"]
        flows.append(
            FlowRto(
                flow=d.name(fid),
                src=ip_to_str(src),
                sport=sport,
                dst=ip_to_str(dst),
                dport=dport,
                timeouts=len(to),
                loss_probes=len(events) - len(to),
                stall_s=round(sum(e.idle_s for e in to), 6),
                events=events,
                retransmits=int(n_rtx[fid]),
            )
        )
    return RtoAnalysis(flows=flows)


@dataclass(frozen=True)
class _PeerEvents:
    """The packets each direction's sender received (those of the reverse direction), sorted by
    (direction they answer, time), with the sender's knowledge after each: una, t_adv, n_ack,
    dups, win, t_ack (time of the last ACK-carrying one), t."""

    target: np.ndarray
    key: np.ndarray
    rank_t: np.ndarray
    cols: dict[str, np.ndarray]

    def lookup(self, fid: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Index of the last event answering direction fid[i] at or before t[i], else -1."""
        if self.key.size == 0:
            return np.full(fid.shape[0], -1, dtype=np.int64)
        r = np.searchsorted(self.rank_t, t, side="right")  # events with time <= t have rank < r
        m = np.int64(self.rank_t.shape[0] + 1)
        j = np.searchsorted(self.key, fid.astype(np.int64) * m + r, side="left") - 1
        ok = (j >= 0) & (self.target[np.maximum(j, 0)] == fid)
        return np.where(ok, j, -1)

    def get(self, name: str, j: np.ndarray, fill: np.int64) -> np.ndarray:
        col = self.cols[name]
        return np.where(j >= 0, col[np.maximum(j, 0)], fill) if col.size else np.full(j.shape[0], fill)


def _peer_events(p: Packets, d: Directions, ack_rel: np.ndarray) -> _PeerEvents:
    target_all = d.reverse[d.fid]
    idx = np.flatnonzero(target_all >= 0)
    tgt = target_all[idx]
    ts = p.ts_ns[idx]
    o = np.lexsort((idx, ts, tgt))
    idx, tgt, ts = idx[o], tgt[o], ts[o]
    first = group_first(tgt)
    gstart = group_start(first) if idx.size else idx
    gid = np.cumsum(first) - 1
    ar = ack_rel[idx]
    r = ar != NO_ACK
    vals = np.where(r, ar, _NEG)
    una = _gcummax(vals, gid)
    prev = _shift(una, first, _NEG)
    adv = r & (vals > prev)
    ia = _ffill(adv, gstart)
    t_adv = np.where(ia >= 0, ts[np.maximum(ia, 0)], _NEVER)
    n_ack = np.cumsum(r)
    n_ack = n_ack - (n_ack[gstart] - r[gstart]) if idx.size else n_ack
    pure = (p.plen[idx] == 0) & ((p.flags[idx] & (SYN | FIN | RST)) == 0)
    dup = r & pure & (vals == prev) & (prev != _NEG)
    cd = np.cumsum(dup)
    base_cd = cd[gstart] - dup[gstart] if idx.size else cd
    dups = cd - np.where(ia >= 0, cd[np.maximum(ia, 0)], base_cd)
    iw = _ffill(r, gstart)
    win = np.where(iw >= 0, p.win[idx][np.maximum(iw, 0)].astype(np.int64), -1)
    t_ack = np.where(iw >= 0, ts[np.maximum(iw, 0)], _NEVER)
    rank_t = np.unique(ts)
    m = np.int64(rank_t.shape[0] + 1)
    key = tgt.astype(np.int64) * m + np.searchsorted(rank_t, ts, side="left")
    return _PeerEvents(
        target=tgt,
        key=key,
        rank_t=rank_t,
        cols={"una": una, "t_adv": t_adv, "n_ack": n_ack, "dups": dups, "win": win, "t_ack": t_ack, "t": ts},
    )
