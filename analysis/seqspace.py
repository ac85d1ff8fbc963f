"""Flow directions and unwrapped sequence/ACK numbers of a capture, as whole numpy arrays.

Shared by rto.py and goodput.py. A direction is one (src, sport, dst, dport); a connection is the
pair of a direction and its reverse. Sequence numbers are unwrapped per direction (32-bit
wrap-around removed) and made relative to the first sequence number the capture saw in that
direction; ACK numbers are unwrapped the same way and expressed in the frame of the direction they
acknowledge, so `ack_rel` of a packet can be compared with `seq_rel` of the reverse direction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.packets import ACK, FIN, SYN, Packets, ep_to_str

NO_ACK = np.int64(-(1 << 62))  # ack_rel of a packet without the ACK flag (or without a reverse direction)


@dataclass(frozen=True)
class Directions:
    """Direction and connection of every packet of a capture.

    fid: direction id per packet (index into `keys`); conv: connection id per packet; side: 0/1
    (which of the connection's two directions); keys: (src, sport, dst, dport) per direction id;
    reverse: per direction id, the id of the reverse direction or -1 if the capture has none;
    order: packet indices sorted by direction (capture order within one), starts: boundaries of
    each direction in `order` (len(keys) + 1).
    """

    fid: np.ndarray
    conv: np.ndarray
    side: np.ndarray
    keys: list[tuple[int, int, int, int]]
    reverse: np.ndarray
    order: np.ndarray
    starts: np.ndarray

    def name(self, d: int) -> str:
        """'a.b.c.d:port-e.f.g.h:port' of direction d."""
        src, sport, dst, dport = self.keys[d]
        return f"{ep_to_str(src, sport)}-{ep_to_str(dst, dport)}"


def stable_order(ids: np.ndarray) -> np.ndarray:
    """np.argsort(ids, kind="stable") of non-negative ids (radix sort when they fit 16 bits)."""
    if ids.size and int(ids.max()) < 1 << 16:
        return np.argsort(ids.astype(np.uint16), kind="stable")
    return np.argsort(ids, kind="stable")


def directions(p: Packets) -> Directions:
    """Direction/connection ids of every packet (see Directions)."""
    a = (p.src.astype(np.uint64) << np.uint64(16)) | p.sport.astype(np.uint64)
    b = (p.dst.astype(np.uint64) << np.uint64(16)) | p.dport.astype(np.uint64)
    ends = np.unique(np.concatenate([a, b]))
    ne = np.int64(max(len(ends), 1))
    ia, ib = np.searchsorted(ends, a).astype(np.int64), np.searchsorted(ends, b).astype(np.int64)
    dk = ia * ne + ib
    dkeys, fid = np.unique(dk, return_inverse=True)
    fid = fid.ravel().astype(np.int64)
    fa, fb = dkeys // ne, dkeys % ne
    rk = fb * ne + fa
    pos = np.searchsorted(dkeys, rk)
    pos_c = np.minimum(pos, max(len(dkeys) - 1, 0))
    reverse = np.where((pos < len(dkeys)) & (dkeys[pos_c] == rk), pos_c, -1) if len(dkeys) else pos
    ckeys = np.minimum(dkeys, rk)
    _u, conv_of = np.unique(ckeys, return_inverse=True)
    conv = conv_of.ravel()[fid].astype(np.int64) if len(dkeys) else fid
    side = (dkeys > rk).astype(np.int64)[fid] if len(dkeys) else fid
    keys = [
        (int(x) >> 16, int(x) & 0xFFFF, int(y) >> 16, int(y) & 0xFFFF)
        for x, y in zip(ends[fa].tolist(), ends[fb].tolist(), strict=True)
    ]
    order = stable_order(fid)
    starts = np.searchsorted(fid[order], np.arange(len(keys) + 1))
    return Directions(
        fid=fid, conv=conv, side=side, keys=keys, reverse=reverse.astype(np.int64), order=order, starts=starts
    )


def signed32(x: np.ndarray) -> np.ndarray:
    """x (int64) as a signed 32-bit difference: wrap-around removed."""
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def group_first(sorted_ids: np.ndarray) -> np.ndarray:
    """True where a run of equal ids starts (sorted_ids grouped)."""
    first = np.ones(sorted_ids.shape[0], dtype=bool)
    first[1:] = sorted_ids[1:] != sorted_ids[:-1]
    return first


def group_start(first: np.ndarray) -> np.ndarray:
    """Per position: the position where its group starts (first[0] must be True)."""
    starts = np.flatnonzero(first)
    return np.repeat(starts, np.diff(np.r_[starts, first.shape[0]]))


def _unwrap_sorted(vals: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Per group (first marks starts): cumulative signed 32-bit differences, 0 at each start."""
    d = np.zeros(vals.shape[0], dtype=np.int64)
    if vals.shape[0] > 1:
        d[1:] = signed32(vals[1:] - vals[:-1])
    d[first] = 0
    cs = np.cumsum(d)
    return cs - cs[group_start(first)] if vals.shape[0] else cs


def seq_numbers(p: Packets, d: Directions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(base, seq_rel, ack_rel).

    base: per direction, the absolute (32-bit) sequence number of its first packet; seq_rel: per
    packet, its sequence number minus its direction's base, unwrapped (int64); ack_rel: per packet,
    its ACK number minus the base of the reverse direction, unwrapped, or NO_ACK when the packet has
    no ACK flag or the capture has no reverse direction.
    """
    n = len(p)
    o = d.order
    seq = p.seq.astype(np.int64)
    fo = d.fid[o]
    first = group_first(fo)
    seq_rel = np.empty(n, dtype=np.int64)
    seq_rel[o] = _unwrap_sorted(seq[o], first)
    base = seq[o[d.starts[:-1]]] if len(d.keys) else np.zeros(0, dtype=np.int64)
    ack_rel = np.full(n, NO_ACK, dtype=np.int64)
    has = (p.flags[o] & ACK) != 0
    idx = o[has]
    if idx.size:
        fi = d.fid[idx]
        rev = d.reverse[fi]
        af = group_first(fi)
        ack = p.ack.astype(np.int64)[idx]
        rel = _unwrap_sorted(ack, af)
        start = group_start(af)
        rbase = base[np.maximum(rev, 0)]
        rel += signed32(ack[start] - rbase[start])
        ack_rel[idx] = np.where(rev >= 0, rel, NO_ACK)
    return base, seq_rel, ack_rel


def seq_len(p: Packets) -> np.ndarray:
    """Sequence space each packet occupies: payload plus one for SYN and for FIN."""
    fl = p.flags
    return p.plen + ((fl & SYN) != 0).astype(np.int64) + ((fl & FIN) != 0).astype(np.int64)
