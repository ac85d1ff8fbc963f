"""TCP options of the packets of a capture: timestamps (TSval/TSecr) and the window scale.

pcapfile.read_pcap keeps the fixed header fields only; this reads the file at `Packets.path`
again and decodes the options of the packets it returned, vectorised: the record offsets follow
from the captured lengths the Packets already hold (one header read per non-TCP record in
between), and the options are walked at most 40 steps for all packets at once.

Why rto.py wants TSval: a Linux sender stamps TSval when TCP builds the segment, in ms of its own
clock, so TSval tells when the kernel sent a packet even if the packet waited in the host's qdisc
long before the capture point saw it (a PS host's deep qdisc: see docs/RESULTS.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.pcapfile import (
    LINKTYPE_ETHERNET,
    LINKTYPE_IPV4,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
    Packets,
)

_LINK_LEN = {
    LINKTYPE_ETHERNET: 14,
    LINKTYPE_LINUX_SLL: 16,
    LINKTYPE_LINUX_SLL2: 20,
    LINKTYPE_NULL: 4,
    LINKTYPE_RAW: 0,
    LINKTYPE_IPV4: 0,
}
_PAD = 128


@dataclass(frozen=True)
class TcpOptions:
    """Per packet (aligned with the Packets arrays): tsval, tsecr (int64, -1 without the
    timestamp option or if not captured) and wscale (int64 shift, -1 without the option)."""

    tsval: np.ndarray
    tsecr: np.ndarray
    wscale: np.ndarray


def _record_offsets(buf: np.ndarray, p: Packets) -> np.ndarray | None:
    """Byte offset of each packet's record header, or None if the file no longer matches."""
    order = ">" if p.big_endian else "<"
    n_rec = p.records
    cap = np.full(n_rec, -1, dtype=np.int64)
    cap[p.frame - 1] = p.caplen
    unknown = np.flatnonzero(cap < 0).tolist()
    offs = np.empty(n_rec, dtype=np.int64)
    start, k = 24, 0
    for u in unknown + [n_rec]:
        seg = cap[k:u]
        if seg.size:
            steps = np.cumsum(16 + seg)
            offs[k:u] = start + np.r_[0, steps[:-1]]
            start += int(steps[-1])
        if u == n_rec:
            break
        if start + 16 > buf.shape[0] - _PAD:
            return None
        offs[u] = start
        start += 16 + int(buf[start + 8 : start + 12].view(order + "u4")[0])
        k = u + 1
    got = offs[p.frame - 1]
    if got.size and (int(got.max()) + 16 > buf.shape[0] - _PAD):
        return None
    caps = np.ndarray((buf.shape[0] - 3,), dtype=order + "u4", buffer=buf, offset=0, strides=(1,))
    if got.size and not np.array_equal(caps[got + 8].astype(np.int64), p.caplen):
        return None
    return got


def _be(buf: np.ndarray, at: np.ndarray, nbytes: int) -> np.ndarray:
    out = np.zeros(at.shape[0], dtype=np.int64)
    for i in range(nbytes):
        out = (out << 8) | buf[at + i].astype(np.int64)
    return out


def read_options(p: Packets) -> TcpOptions:
    """Timestamps and window scale of every packet of p (read again from p.path).

    Pass the Packets as read_pcap returned them and select afterwards: every record left out of
    p costs one header read in Python. If the file changed since it was read, or a packet's
    options were not captured, the values are -1 (callers fall back to what they do without)."""
    n = len(p)
    none = TcpOptions(
        tsval=np.full(n, -1, dtype=np.int64),
        tsecr=np.full(n, -1, dtype=np.int64),
        wscale=np.full(n, -1, dtype=np.int64),
    )
    if n == 0 or p.linktype not in _LINK_LEN:
        return none
    try:
        raw = np.fromfile(p.path, dtype=np.uint8)
    except OSError:
        return none
    buf = np.zeros(raw.shape[0] + _PAD, dtype=np.uint8)
    buf[: raw.shape[0]] = raw
    rec = _record_offsets(buf, p)
    if rec is None:
        return none
    end = rec + 16 + p.caplen  # end of the captured bytes of each record
    l3 = rec + 16 + _LINK_LEN[p.linktype]
    if p.linktype == LINKTYPE_ETHERNET:
        for _ in range(2):  # 802.1Q / 802.1ad tags
            et = _be(buf, l3 - 2, 2)
            l3 = np.where((et == 0x8100) | (et == 0x88A8), l3 + 4, l3)
    tcp = l3 + (buf[np.minimum(l3, buf.shape[0] - 1)] & 15).astype(np.int64) * 4
    doff = (buf[np.minimum(tcp + 12, buf.shape[0] - 1)] >> 4).astype(np.int64) * 4
    stop = np.minimum(tcp + doff, end)
    pos = tcp + 20
    tsval, tsecr, wscale = none.tsval.copy(), none.tsecr.copy(), none.wscale.copy()
    active = pos < stop
    for _ in range(40):
        if not active.any():
            break
        i = np.flatnonzero(active)
        at = pos[i]
        kind = buf[at].astype(np.int64)
        ln = np.where(kind == 1, 1, buf[at + 1].astype(np.int64))
        bad = (kind == 0) | ((kind != 1) & (ln < 2)) | (at + ln > stop[i])
        ts = ~bad & (kind == 8) & (ln == 10)
        tsval[i[ts]] = _be(buf, at[ts] + 2, 4)
        tsecr[i[ts]] = _be(buf, at[ts] + 6, 4)
        ws = ~bad & (kind == 3) & (ln == 3)
        wscale[i[ws]] = buf[at[ws] + 2].astype(np.int64)
        pos[i] = at + ln
        active[i] = ~bad & (pos[i] < stop[i])
    return TcpOptions(tsval=tsval, tsecr=tsecr, wscale=wscale)
