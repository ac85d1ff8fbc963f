"""Delivered payload bytes: what reached the receiver, each sequence byte counted once.

Take the receiver's capture (its own interface). Every payload byte of a flow direction is counted
once, at the time of its first arrival, whether that arrival was an original segment or a
retransmission; a second copy (a retransmission of bytes that had arrived, a duplicate) adds
nothing. Bytes the receiver never got (lost on the way) are simply not there.

This differs from tcp.goodput_timeline, which counts only bytes beyond the highest sequence number
seen so far: a byte whose original was lost and that first arrives in a retransmission (below the
highest sequence seen) is missing from that timeline, so it undercounts exactly when there are
losses. Here a byte counts at its first arrival, in order or not.

How, vectorised: the start and end of every segment of a direction cut its sequence space into
elementary intervals; each interval belongs to the earliest segment (in capture order) that
covers it; a segment's delivered bytes are the lengths of the intervals it owns.

Checked against tshark's (tcp.seq_raw, tcp.len) ranges; sample figures: docs/RESULTS.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from analysis.packets import SYN, Packets, ip_to_str, str_to_ip
from analysis.seqspace import Directions, directions, seq_numbers

BIN_S = 0.1
# the longest series (2.3 days at 0.1 s); a capture that spans more (one spanning weeks, or one
# record dated decades off) gets its counts without the series: Delivered.note says so
MAX_BINS = 2_000_000
_HALF = np.int64(1 << 41)
_SPAN = np.int64(1 << 43)


@dataclass(frozen=True)
class FlowDelivered:
    """One flow direction (src sends, dst receives): unique payload bytes, all payload bytes the
    capture saw (copies included), bytes whose first arrival was below the highest sequence number
    seen before (mostly retransmissions that repaired a loss), and bytes per time bin."""

    flow: str
    src: str
    sport: int
    dst: str
    dport: int
    bytes: int
    captured_bytes: int
    late_bytes: int
    series: list[int]


@dataclass(frozen=True)
class Delivered:
    """Delivered bytes of a capture. Bins are `bin_s` wide from `t0` (s since the epoch); every
    series has the same length. `by_receiver`: {receiver IP: {"bytes": n, "series": [...]}}.
    `note`: None, or the one line saying why every series is empty though bytes arrived (the
    records span more than MAX_BINS bins); the byte counts are whole either way."""

    t0: float
    bin_s: float
    flows: list[FlowDelivered]
    by_receiver: dict[str, dict[str, object]]
    note: str | None = None

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.flows)

    def mbit_s(self, series: list[int]) -> list[float]:
        """A byte series as Mbit/s per bin."""
        return [round(x * 8 / self.bin_s / 1e6, 3) for x in series]

    def to_dict(self) -> dict[str, object]:
        return {
            "t0": self.t0,
            "bin_s": self.bin_s,
            "note": self.note,
            "bytes": self.bytes,
            "by_receiver": self.by_receiver,
            "per_flow": [asdict(f) for f in self.flows],
        }


def first_arrival_bytes(p: Packets) -> np.ndarray:
    """Per packet: payload bytes that arrived for the first time with it (int64, 0 for copies)."""
    d = directions(p)
    _base, seq_rel, _ack = seq_numbers(p, d)
    return _first_arrival(p, d, seq_rel)


def _first_arrival(p: Packets, d: Directions, seq_rel: np.ndarray) -> np.ndarray:
    out = np.zeros(len(p), dtype=np.int64)
    idx = np.flatnonzero(p.plen > 0)
    if idx.size == 0:
        return out
    start = seq_rel[idx] + ((p.flags[idx] & SYN) != 0)
    end = start + p.plen[idx]
    off = d.fid[idx].astype(np.int64) * _SPAN + _HALF
    ks, ke = off + np.clip(start, -_HALF, _HALF - 1), off + np.clip(end, -_HALF, _HALF - 1)
    b = np.unique(np.concatenate([ks, ke]))
    lo, hi = np.searchsorted(b, ks), np.searchsorted(b, ke)
    cnt = hi - lo
    tot = int(cnt.sum())
    seg = np.repeat(np.arange(idx.size), cnt)  # ascending: capture order
    cells = np.repeat(lo, cnt) + (np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt))
    cell, owner_at = np.unique(cells, return_index=True)  # first occurrence = earliest segment
    width = b[cell + 1] - b[cell]
    out[idx] = np.bincount(seg[owner_at], weights=width, minlength=idx.size).astype(np.int64)
    return out


def delivered_bytes(
    p: Packets, *, bin_s: float = BIN_S, t0: float | None = None, receiver: str | int | None = None
) -> Delivered:
    """Unique payload bytes per flow direction and per receiver, totals and per-bin series.

    bin_s: bin width in seconds (default 0.1); t0: start of the first bin (s since the epoch;
    default the capture's first packet; packets before it count in the totals, not in the series);
    receiver: only flows toward this IPv4 address (dotted quad or integer). A capture whose
    records span more than MAX_BINS bins from t0 gets its counts with empty series and a note.
    """
    if bin_s <= 0:
        raise ValueError("bin_s must be > 0")
    ts = p.ts_ns
    start_ns = int(round(t0 * 1e9)) if t0 is not None else (int(ts.min()) if ts.size else 0)
    if not len(p):
        return Delivered(t0=start_ns / 1e9, bin_s=bin_s, flows=[], by_receiver={})
    width = int(round(bin_s * 1e9))
    nbins = int((int(ts.max()) - start_ns) // width) + 1 if int(ts.max()) >= start_ns else 0
    note = None
    if nbins > MAX_BINS:
        days = (int(ts.max()) - start_ns) / 86_400e9
        note = (
            f"no delivered-bytes series: the records span {days:,.1f} days, over {MAX_BINS:,} bins"
            f" of {bin_s:g} s (the counts are whole)"
        )
        nbins = 0
    d = directions(p)
    _base, seq_rel, _ack = seq_numbers(p, d)
    new = _first_arrival(p, d, seq_rel)
    data = p.plen > 0
    if receiver is not None:
        data &= p.dst == (str_to_ip(receiver) if isinstance(receiver, str) else int(receiver))
    # "late": first arrival below the highest sequence number seen before in that direction
    o = d.order
    end = seq_rel + p.plen + ((p.flags & SYN) != 0)
    fo = d.fid[o]
    gfirst = np.ones(o.shape[0], dtype=bool)
    gfirst[1:] = fo[1:] != fo[:-1]
    gid = np.cumsum(gfirst) - 1
    e = np.where(data[o], np.clip(end[o], -_HALF, _HALF), -_HALF) + gid * _SPAN
    hi_after = np.maximum.accumulate(e) - gid * _SPAN
    hi_before = np.empty_like(hi_after)
    hi_before[1:] = hi_after[:-1]
    hi_before[gfirst] = -_HALF
    beyond = np.empty(len(p), dtype=np.int64)
    beyond[o] = np.clip(end[o] - np.maximum(hi_before, seq_rel[o]), 0, None)
    late = np.clip(new - np.minimum(beyond, p.plen), 0, None)
    in_range = (ts >= start_ns) & (nbins > 0)
    bins = np.where(in_range, (ts - start_ns) // width, 0)
    od = o[data[o]]
    fod = d.fid[od]
    bounds = np.flatnonzero(np.r_[True, fod[1:] != fod[:-1], True]) if od.size else np.zeros(1, np.int64)
    flows: list[FlowDelivered] = []
    totals: dict[str, int] = {}
    sums: dict[str, np.ndarray] = {}
    for a, z in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        sel = od[a:z]
        src, sport, dst, dport = d.keys[int(fod[a])]
        keep = sel[in_range[sel]]
        series = np.bincount(bins[keep], weights=new[keep], minlength=nbins).astype(np.int64)
        fd = FlowDelivered(
            flow=d.name(int(fod[a])),
            src=ip_to_str(src),
            sport=sport,
            dst=ip_to_str(dst),
            dport=dport,
            bytes=int(new[sel].sum()),
            captured_bytes=int(p.plen[sel].sum()),
            late_bytes=int(late[sel].sum()),
            series=series.tolist(),
        )
        flows.append(fd)
        sums[fd.dst] = sums.get(fd.dst, np.zeros(nbins, dtype=np.int64)) + series
        totals[fd.dst] = totals.get(fd.dst, 0) + fd.bytes
    by_recv: dict[str, dict[str, object]] = {
        k: {"bytes": totals[k], "series": v.tolist()} for k, v in sums.items()
    }
    return Delivered(t0=start_ns / 1e9, bin_s=bin_s, flows=flows, by_receiver=by_recv, note=note)
