"""TCP analysis of a capture: retransmissions (fast / timeout), duplicate ACKs, out-of-order,
zero-window, per flow direction and overall, plus a goodput timeline.

The per-packet classification mirrors Wireshark's (see wireshark_seq.py) so our counts agree with
`tshark -Y tcp.analysis.retransmission`, but it is computed with numpy over whole arrays: the
Wireshark state that matters (highest sequence sent, last ACK/window each way, dup-ACK run length)
is a running maximum or a forward fill per direction. Conversations with zero-window probes or ACKs
of data the capture never saw need the sequential state machine and are handed to
wireshark_seq.analyze_exact.

Our own split of retransmissions, named for what it sees (a capture shows no timer):
- retransmits_with_dup_acks: sent while the receiver was repeating an ACK (>= 2 duplicate ACKs in
  its current run) or flagged as fast retransmission by Wireshark: dup-ACK/SACK recovery;
- retransmits_without_dup_acks: all others (an RTO and its go-back-N followers, tail-loss probes,
  RACK). Timer events are counted by rto.rto_events, not here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis import wireshark_seq as ws
from analysis.packets import ACK, FIN, RST, SYN, Packets, ep_to_str, ip_to_str

DUPACK_EVIDENCE = 2  # dup ACKs in the receiver's current run that make a retransmission "fast"
_BIG = np.int64(1 << 42)
_HALF = np.int64(1 << 41)


@dataclass(frozen=True)
class TcpAnalysis:
    """Per-packet classification of one capture (arrays aligned with the Packets arrays).

    bits: wireshark_seq analysis bits; dup_recovery: retransmission with dup-ACK evidence;
    flow: direction id (index into `flows`); new_bytes: bytes beyond the highest sequence seen so
    far in that direction (new data, for goodput).
    """

    packets: Packets
    bits: np.ndarray
    dup_recovery: np.ndarray
    flow: np.ndarray
    conv: np.ndarray
    new_bytes: np.ndarray
    flows: list[tuple[int, int, int, int]]  # (src, sport, dst, dport) per direction id
    exact_conversations: int  # conversations analysed by the sequential fallback

    def retransmission_mask(self) -> np.ndarray:
        """Packets tshark's `tcp.analysis.retransmission` matches."""
        return (self.bits & ws.ANY_RETRANSMISSION) != 0

    def fast_mask(self) -> np.ndarray:
        return self.retransmission_mask() & (self.dup_recovery | ((self.bits & ws.FAST_RETRANSMISSION) != 0))

    def counts(self, sel: np.ndarray | None = None) -> dict[str, int]:
        """The counts of the selected packets (all if sel is None); keys as in the report."""
        bits = self.bits if sel is None else self.bits[sel]
        plen = self.packets.plen if sel is None else self.packets.plen[sel]
        rtx = (bits & ws.ANY_RETRANSMISSION) != 0
        fast = self.fast_mask() if sel is None else self.fast_mask()[sel]
        n_rtx = int(rtx.sum())
        n_fast = int(fast.sum())
        return {
            "packets": int(bits.shape[0]),
            "segments": int((plen > 0).sum()),
            "bytes": int(plen.sum()),
            "retransmits": n_rtx,
            "retransmitted_bytes": int(plen[rtx].sum()),
            "retransmits_with_dup_acks": n_fast,
            "retransmits_without_dup_acks": n_rtx - n_fast,
            "wireshark_fast_retransmits": int(((bits & ws.FAST_RETRANSMISSION) != 0).sum()),
            "spurious_retransmits": int(((bits & ws.SPURIOUS_RETRANSMISSION) != 0).sum()),
            "dup_acks": int(((bits & ws.DUPLICATE_ACK) != 0).sum()),
            "out_of_order": int(((bits & ws.OUT_OF_ORDER) != 0).sum()),
            "zero_window": int(((bits & ws.ZERO_WINDOW) != 0).sum()),
            "lost_segments": int(((bits & ws.LOST_PACKET) != 0).sum()),
        }

    def summary(self) -> dict[str, object]:
        """Overall counts plus `flows` (number of flow directions) and `connections`."""
        out: dict[str, object] = dict(self.counts())
        out["flows"] = len(self.flows)
        out["connections"] = int(self.conv.max()) + 1 if self.conv.size else 0
        return out

    def per_flow(self) -> list[dict[str, object]]:
        """One dict per flow direction: src, sport, dst, dport, first/last time and the counts."""
        order = _stable_order(self.flow)
        starts = np.searchsorted(self.flow[order], np.arange(len(self.flows) + 1))
        ts = self.packets.ts_ns
        res = []
        for fid, (src, sport, dst, dport) in enumerate(self.flows):
            sel = order[starts[fid] : starts[fid + 1]]
            row: dict[str, object] = {
                "flow": f"{ep_to_str(src, sport)}-{ep_to_str(dst, dport)}",
                "src": ip_to_str(src),
                "sport": sport,
                "dst": ip_to_str(dst),
                "dport": dport,
                "t_first": float(ts[sel[0]]) / 1e9,
                "t_last": float(ts[sel[-1]]) / 1e9,
            }
            row.update(self.counts(sel))
            res.append(row)
        return res

    def labels(self, i: int) -> list[str]:
        """Names of what packet i is, for a person (inspect)."""
        b = int(self.bits[i])
        names = []
        if b & ws.FAST_RETRANSMISSION:
            names.append("fast retransmission")
        elif b & ws.SPURIOUS_RETRANSMISSION:
            names.append("spurious retransmission")
        elif b & ws.RETRANSMISSION:
            names.append(
                "retransmission (dup-ACK recovery)" if self.dup_recovery[i] else "retransmission (no dup-ACK)"
            )
        for bit, name in (
            (ws.OUT_OF_ORDER, "out-of-order"),
            (ws.DUPLICATE_ACK, "dup ACK"),
            (ws.ZERO_WINDOW, "zero window"),
            (ws.ZERO_WINDOW_PROBE, "zero-window probe"),
            (ws.ZERO_WINDOW_PROBE_ACK, "zero-window probe ACK"),
            (ws.KEEP_ALIVE, "keep-alive"),
            (ws.KEEP_ALIVE_ACK, "keep-alive ACK"),
            (ws.LOST_PACKET, "previous segment not captured"),
            (ws.ACK_LOST_PACKET, "ACKs unseen segment"),
            (ws.WINDOW_UPDATE, "window update"),
        ):
            if b & bit:
                names.append(name)
        return names


def goodput_timeline(an: TcpAnalysis, bin_s: float = 0.1, flow: int | None = None) -> dict[str, object]:
    """New-data bytes per time bin (from the first packet of the capture): goodput as the capture saw it."""
    if bin_s <= 0:
        raise ValueError("bin_s must be > 0")
    ts = an.packets.ts_ns
    sel = np.ones(ts.shape[0], dtype=bool) if flow is None else an.flow == flow
    t0 = int(ts.min()) if ts.size else 0
    bins = ((ts[sel] - t0) // int(bin_s * 1e9)).astype(np.int64)
    nb = int(bins.max()) + 1 if bins.size else 0
    by = np.bincount(bins, weights=an.new_bytes[sel], minlength=nb).astype(np.int64)
    return {
        "t0": t0 / 1e9,
        "bin_s": bin_s,
        "bytes": by.tolist(),
        "mbit_s": [round(float(x) * 8 / bin_s / 1e6, 3) for x in by],
    }


def _unique_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(x, return_inverse=True), but a plain sort plus a binary search of the (usually
    few) distinct values is several times faster than the argsort np.unique does."""
    u = np.unique(x)
    return u, np.searchsorted(u, x)


def _ids(p: Packets) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int, int, int]]]:
    """Direction id, conversation id and side (0/1) of every packet."""
    a = (p.src.astype(np.uint64) << np.uint64(16)) | p.sport.astype(np.uint64)
    b = (p.dst.astype(np.uint64) << np.uint64(16)) | p.dport.astype(np.uint64)
    ends = np.unique(np.concatenate([a, b]))
    ne = np.int64(len(ends))
    dk = np.searchsorted(ends, a) * ne + np.searchsorted(ends, b)
    if ne * ne <= 1 << 22:  # few endpoints: a lookup table instead of sorting the keys
        seen = np.zeros(int(ne * ne), dtype=bool)
        seen[dk] = True
        dkeys = np.flatnonzero(seen)
        lut = np.empty(seen.shape[0], dtype=np.int64)
        lut[dkeys] = np.arange(dkeys.shape[0])
        flow = lut[dk]
    else:
        dkeys, flow = _unique_inverse(dk)
    # conversation and side are functions of the direction: work them out once per direction
    fa, fb = dkeys // ne, dkeys % ne
    _ckeys, conv_of = np.unique(np.minimum(fa, fb) * ne + np.maximum(fa, fb), return_inverse=True)
    conv = conv_of.ravel()[flow]
    side = (fa > fb).astype(np.int64)[flow]
    flows = []
    for x, y in zip(ends[fa].tolist(), ends[fb].tolist(), strict=True):
        flows.append((x >> 16, x & 0xFFFF, y >> 16, y & 0xFFFF))
    return flow, conv, side, flows


def _stable_order(ids: np.ndarray) -> np.ndarray:
    """np.argsort(ids, kind="stable") of non-negative ids; ids that fit 16 bits get numpy's radix
    sort (same result, several times faster than the merge sort for 64-bit values)."""
    if ids.size and int(ids.max()) < 1 << 16:
        return np.argsort(ids.astype(np.uint16), kind="stable")
    return np.argsort(ids, kind="stable")


def _group_start(first: np.ndarray) -> np.ndarray:
    """Per position of a sorted array: the position where its group starts (first[0] is True)."""
    starts = np.flatnonzero(first)
    return np.repeat(starts, np.diff(np.r_[starts, first.shape[0]]))


def _groups(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """ids grouped: the stable order that sorts them, the sorted ids, where each group of equal ids
    begins (bool, per sorted position) and each sorted position's group start."""
    order = _stable_order(ids)
    ordered = ids[order]
    first = np.ones(ordered.shape[0], dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    return order, ordered, first, _group_start(first)


def _lt32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = a.astype(np.int64, copy=False) - b.astype(np.int64, copy=False)
    d &= 0xFFFFFFFF
    return d > 0x7FFFFFFF


def analyze(p: Packets, *, exact_fallback: bool = True) -> TcpAnalysis:
    """Classify every packet of the capture (see module docstring).

    exact_fallback=False keeps the vectorised result everywhere (tests compare both paths).
    """
    n = len(p)
    flow, conv, side, flows = _ids(p)
    ts = p.ts_ns
    seq = p.seq.astype(np.int64)
    ack = p.ack.astype(np.int64)
    win = p.win.astype(np.int32)  # signed: -1 stands for "no window yet"
    plen = p.plen
    fl = p.flags
    synfin = ((fl & (SYN | FIN)) != 0).astype(np.int64)
    sfr = (fl & (SYN | FIN | RST)) != 0

    # ---- per direction, in direction-sorted order
    o, fo, first_s, gstart = _groups(flow)
    sq = seq[o]
    d32 = np.zeros(n, dtype=np.int64)
    d32[1:] = ((sq[1:] - sq[:-1] + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    d32[first_s] = 0
    cs = np.cumsum(d32)
    base = sq[gstart]
    s64 = base + cs - cs[gstart]  # unwrapped sequence numbers
    end64 = s64 + plen[o] + synfin[o]
    fbig = fo.astype(np.int64, copy=False) * _BIG
    key = fbig + (end64 - base + _HALF)
    cm = np.maximum.accumulate(key) - fbig - _HALF + base  # nextseq after
    nsb = np.empty(n, dtype=np.int64)  # nextseq before (invalid at first)
    nsb[1:] = cm[:-1]
    nsb[first_s] = -1
    adv = first_s | (end64 > nsb)
    lastadv = np.maximum.accumulate(np.where(adv, np.arange(n), -1))
    nstime_b = np.empty(n, dtype=np.int64)
    nstime_b[1:] = ts[o][lastadv[:-1]]
    nstime_b[first_s] = 0
    prev = np.empty(n, dtype=np.int64)
    prev[1:] = o[:-1]
    prev[first_s] = -1

    # scatter back to capture order
    def back(x: np.ndarray) -> np.ndarray:
        y = np.empty_like(x)
        y[o] = x
        return y

    nextseq_b, nextseq_a, nstime_before, prev_same = back(nsb), back(cm), back(nstime_b), back(prev)
    seq64 = back(s64)
    first = np.zeros(n, dtype=bool)
    first[o[first_s]] = True
    # ---- maxseqtobeacked, to find ACKs of unseen data (these need the exact path)
    m_after = back(_max_seq_to_be_acked(fo, s64, end64, nsb, cm, first_s))
    # free the direction-sorted temporaries: fresh memory is slow (page faults), reused is not
    del sq, d32, cs, base, gstart, s64, end64, key, fbig, cm, nsb, adv, lastadv, nstime_b, prev, fo
    has_prev = ~first
    prevwin = np.where(has_prev, win[np.maximum(prev_same, 0)], -1)
    prevack = np.where(has_prev, ack[np.maximum(prev_same, 0)], 0)
    del prev_same
    nsb32 = nextseq_b & 0xFFFFFFFF

    # ---- last packet of the reverse direction (capture order)
    oc, co, cfirst, cstart = _groups(conv)
    sd = side[oc]
    # the reverse direction's last packet is the one before the current run of this side began
    chg = np.zeros(n, dtype=bool)
    chg[1:] = sd[1:] != sd[:-1]
    run = np.maximum.accumulate(np.where(chg, np.arange(n), 0))
    rl = np.where(run > cstart, run - 1, -1)
    rev_last = np.empty(n, dtype=np.int64)
    rev_last[oc] = np.where(rl >= 0, oc[np.maximum(rl, 0)], -1)
    del co, cstart, sd, chg, run, rl
    has_rev = rev_last >= 0
    rj = np.maximum(rev_last, 0)
    del rev_last
    rev_ack = np.where(has_rev, ack[rj], 0)
    rev_acktime = np.where(has_rev, ts[rj], 0)
    rev_win = np.where(has_rev, win[rj], -1)

    # ---- flags that need only "before" state
    seq32 = seq
    ka = has_prev & (plen <= 1) & (seq32 == ((nextseq_b - 1) & 0xFFFFFFFF)) & ~sfr
    zwp = has_prev & (plen == 1) & (seq32 == nsb32) & (rev_win == 0)
    rev_ka = has_rev & ka[rj]
    same = has_prev & (plen == 0) & (seq32 == nsb32) & (ack == prevack) & ~sfr
    same_win = same & (win != 0) & (win == prevwin)
    dup = same_win & ~rev_ka
    wupd = same & (win != 0) & (win != prevwin)
    zw = (win == 0) & ~sfr & ~zwp
    lost = has_prev & (seq64 > nextseq_b) & ((fl & RST) == 0) & ~zwp

    # dup-ACK run length after each packet (reset when the ACK number changes)
    gfirst = np.flatnonzero((ack != prevack)[o] | first_s)
    dupo = dup[o].astype(np.int64)
    dcs = np.cumsum(dupo)
    before = dcs[gfirst] - dupo[gfirst]
    dupnum = back(dcs - np.repeat(before, np.diff(np.r_[gfirst, n])))
    rev_dupnum = np.where(has_rev, dupnum[rj], 0)
    del gfirst, dupo, dcs, before, dupnum, prevack, prevwin

    rev_m = np.where(has_rev, m_after[rj], 0)
    ack_lost = has_rev & (rev_m != 0) & _lt32(rev_m & 0xFFFFFFFF, ack) & ((fl & ACK) != 0)

    # ---- handshake RTT per conversation -> out-of-order threshold
    thres = _ooo_threshold(ts, fl, conv, oc, cfirst)

    # ---- retransmission / out-of-order classification
    cand = ((plen > 0) | (synfin > 0)) & ~ka
    sna = has_prev & (seq64 < nextseq_b) & ~((plen > 1) & (seq64 == nextseq_b - 1))
    spur = cand & (plen > 0) & (rev_ack != 0) & ~_lt32(rev_ack, (seq + plen) & 0xFFFFFFFF)
    dt_ack = ts - rev_acktime
    fast = (
        cand
        & ~spur
        & sna
        & (rev_dupnum >= 2)
        & (rev_ack == seq32)
        & (dt_ack >= 0)
        & (dt_ack < ws.FAST_RTX_WINDOW_NS)
    )
    dt_next = ts - nstime_before
    ooo = (
        cand & ~spur & ~fast & sna & (dt_next >= 0) & (dt_next < thres) & (nextseq_b != seq64 + plen + synfin)
    )
    rtx = cand & ~spur & ~fast & ~ooo & sna

    bits = np.zeros(n, dtype=np.uint16)
    for mask, bit in (
        (rtx, ws.RETRANSMISSION),
        (fast, ws.FAST_RETRANSMISSION),
        (spur, ws.SPURIOUS_RETRANSMISSION),
        (ooo, ws.OUT_OF_ORDER),
        (dup, ws.DUPLICATE_ACK),
        (zw, ws.ZERO_WINDOW),
        (ka, ws.KEEP_ALIVE),
        (same_win & rev_ka, ws.KEEP_ALIVE_ACK),
        (wupd, ws.WINDOW_UPDATE),
        (lost, ws.LOST_PACKET),
        (ack_lost, ws.ACK_LOST_PACKET),
    ):
        np.bitwise_or(bits, np.uint16(bit), out=bits, where=mask)
    dup_recovery = rev_dupnum >= DUPACK_EVIDENCE
    new_bytes = np.where(first, plen, np.clip(nextseq_a - np.maximum(nextseq_b, seq64), 0, None))
    new_bytes = np.minimum(new_bytes, plen)

    # ---- sequential fallback for what the vectorised state cannot follow
    hard = np.unique(conv[zwp | ack_lost]) if exact_fallback else np.zeros(0, dtype=np.int64)
    if hard.size:
        sel = np.flatnonzero(np.isin(conv, hard))
        bits[sel] = ws.analyze_exact(
            ts[sel], p.seq[sel], p.ack[sel], plen[sel], p.flags[sel], p.win[sel], conv[sel], side[sel]
        )
        dup_recovery[sel] = _exact_dup_recovery(bits[sel], conv[sel], side[sel], p.ack[sel])
    dup_recovery &= (bits & ws.ANY_RETRANSMISSION) != 0
    return TcpAnalysis(
        packets=p,
        bits=bits,
        dup_recovery=dup_recovery,
        flow=flow,
        conv=conv,
        new_bytes=new_bytes,
        flows=flows,
        exact_conversations=int(hard.size),
    )


def _max_seq_to_be_acked(
    fo: np.ndarray, s64: np.ndarray, end64: np.ndarray, nsb: np.ndarray, cm: np.ndarray, first_s: np.ndarray
) -> np.ndarray:
    """Wireshark's 'max seq to be acked' after each packet (direction-sorted order, 32-bit).

    It follows nextseq until a segment jumps over a hole (or extends past nextseq from below);
    then it stays at the hole until a segment starting exactly there arrives. Only those breaks
    are walked in Python, with binary searches for the filling segment.
    """
    n = fo.shape[0]
    m = cm.copy()
    brk = np.flatnonzero(~first_s & (s64 != nsb) & (end64 > nsb))
    if brk.size == 0:
        return m & 0xFFFFFFFF
    gfirst = _group_start(first_s)
    k1 = fo.astype(np.int64) * _BIG + (s64 - s64[gfirst] + _HALF)
    order = np.lexsort((np.arange(n), k1))
    ks = k1[order]
    gend = np.r_[np.flatnonzero(fo[1:] != fo[:-1]) + 1, n]
    gend_of = gend[np.searchsorted(gend, np.arange(n), side="right")]
    i = 0
    while i < brk.size:
        b = int(brk[i])
        hole = int(nsb[b])
        target = k1[b] - (s64[b] - hole)
        lo, hi = np.searchsorted(ks, target, "left"), np.searchsorted(ks, target, "right")
        cands = order[lo:hi]
        later = cands[cands > b]
        j = int(later.min()) if later.size else int(gend_of[b])
        j = min(j, int(gend_of[b]))
        m[b:j] = hole
        i = int(np.searchsorted(brk, j, "right")) if j < n else brk.size
    return m & 0xFFFFFFFF


_HANDSHAKE_LOOKAHEAD = 8  # packets after a conversation's first SYN searched for the handshake ACK


def _ooo_threshold(
    ts: np.ndarray, fl: np.ndarray, conv: np.ndarray, oc: np.ndarray, cfirst: np.ndarray
) -> np.ndarray:
    """Per packet: the conversation's handshake RTT once known (Wireshark's ooo_thres), else 3 ms.

    The RTT is taken at the conversation's first pure ACK that follows a SYN (without ACK) and has
    another timestamp than the latest such SYN. That ACK is nearly always within a few packets of
    the first SYN, so only those are looked at; if one conversation's is not, all are computed
    densely (_handshake_acks_dense).
    """
    n = ts.shape[0]
    flo = fl[oc]
    syn = np.flatnonzero(((flo & SYN) != 0) & ((flo & ACK) == 0))  # conv-sorted positions
    if syn.size == 0:
        return np.full(n, ws.DEFAULT_OOO_NS, dtype=np.int64)
    sconv = conv[oc[syn]]
    s0 = syn[np.r_[True, sconv[1:] != sconv[:-1]]]  # first SYN of each conversation with one
    cend = np.r_[np.flatnonzero(cfirst[1:]) + 1, n]
    end0 = cend[np.searchsorted(cend, s0, side="right")]
    q = s0[:, None] + np.arange(1, _HANDSHAKE_LOOKAHEAD + 1)
    inside = q < end0[:, None]
    q = np.minimum(q, n - 1)
    last_syn = syn[np.searchsorted(syn, q, side="right") - 1]  # >= s0: same conversation if inside
    fq = flo[q]
    tso_q, tso_s = ts[oc[q]], ts[oc[last_syn]]
    good = inside & ((fq & (SYN | ACK)) == ACK) & (tso_q != tso_s)
    found = good.any(axis=1)
    if not found.all() and (~found & (end0 - s0 > _HANDSHAKE_LOOKAHEAD + 1)).any():
        ks, rtt = _handshake_acks_dense(ts, flo, oc, cfirst)  # a handshake ACK beyond the lookahead
    else:
        first = good.argmax(axis=1)
        rows = np.flatnonzero(found)
        ks = q[rows, first[rows]]
        rtt = (tso_q - tso_s)[rows, first[rows]]
    if ks.size == 0:
        return np.full(n, ws.DEFAULT_OOO_NS, dtype=np.int64)
    # the RTT applies to the packets of the conversation after that ACK (in capture order)
    cid = conv[oc[ks]]
    nconv = int(conv.max()) + 1
    after = np.full(nconv, n, dtype=np.int64)
    after[cid] = oc[ks]
    val = np.zeros(nconv, dtype=np.int64)
    val[cid] = rtt
    return np.where(np.arange(n) > after[conv], val[conv], np.int64(ws.DEFAULT_OOO_NS))


def _handshake_acks_dense(
    ts: np.ndarray, flo: np.ndarray, oc: np.ndarray, cfirst: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Conv-sorted position and RTT of each conversation's handshake ACK, over all packets."""
    n = ts.shape[0]
    tso = ts[oc]
    pos = np.arange(n)
    cstart = _group_start(cfirst)
    is_syn = ((flo & SYN) != 0) & ((flo & ACK) == 0)
    last_syn = np.maximum.accumulate(np.where(is_syn, pos, -1))
    last_syn = np.where(last_syn >= cstart, last_syn, -1)
    pure_ack = (flo & (SYN | ACK)) == ACK
    rtt = np.where(last_syn >= 0, tso - tso[np.maximum(last_syn, 0)], 0)
    cand = np.flatnonzero(pure_ack & (last_syn >= 0) & (rtt != 0))
    cstart_c = cstart[cand]
    firsts = np.r_[True, cstart_c[1:] != cstart_c[:-1]] if cand.size else np.zeros(0, dtype=bool)
    ks = cand[firsts]
    return ks, rtt[ks]


def _exact_dup_recovery(bits: np.ndarray, conv: np.ndarray, side: np.ndarray, ack: np.ndarray) -> np.ndarray:
    """Dup-ACK evidence for the fallback path: the receiver's dup-ACK run length at each packet."""
    out = np.zeros(bits.shape[0], dtype=bool)
    run: dict[tuple[int, int], int] = {}
    last: dict[tuple[int, int], int] = {}
    rows = zip(bits.tolist(), conv.tolist(), side.tolist(), ack.tolist(), strict=True)
    for i, (b, c, s, a) in enumerate(rows):
        k = (c, s)
        if last.get(k) != a:
            run[k] = 0
        if b & ws.DUPLICATE_ACK:
            run[k] = run.get(k, 0) + 1
        last[k] = a
        out[i] = run.get((c, 1 - s), 0) >= DUPACK_EVIDENCE
    return out
