"""TCP options of the packets of a capture: timestamps (TSval/TSecr) and the window scale.

pcapfile.read_pcap keeps the fixed header fields only; this reads the file at `Packets.path`
again and decodes the options of the packets it returned, vectorised: Packets.tcp_at says where
each TCP header is in the file (pcap or pcapng, IPv4 or IPv6), and the options are walked at
most 40 steps for all packets at once.

Why rto.py wants TSval: a Linux sender stamps TSval when TCP builds the segment, in ms of its own
clock, so TSval tells when the kernel sent a packet even if the packet waited in the host's qdisc
long before the capture point saw it (a PS host's deep qdisc: see docs/RESULTS.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.packets import Packets

_PAD = 128


@dataclass(frozen=True)
class TcpOptions:
    """Per packet (aligned with the Packets arrays): tsval, tsecr (int64, -1 without the
    timestamp option or if not captured) and wscale (int64 shift, -1 without the option)."""

    tsval: np.ndarray
    tsecr: np.ndarray
    wscale: np.ndarray


def _be(buf: np.ndarray, at: np.ndarray, nbytes: int) -> np.ndarray:
    out = np.zeros(at.shape[0], dtype=np.int64)
    for i in range(nbytes):
        out = (out << 8) | buf[at + i].astype(np.int64)
    return out


def read_options(p: Packets) -> TcpOptions:
    """Timestamps and window scale of every packet of p (read again from p.path).

    If the file changed since it was read (it is shorter, or a packet's ports differ), or a
    packet's options were not captured, the values are -1 (callers fall back to what they do
    without)."""
    n = len(p)
    none = TcpOptions(
        tsval=np.full(n, -1, dtype=np.int64),
        tsecr=np.full(n, -1, dtype=np.int64),
        wscale=np.full(n, -1, dtype=np.int64),
    )
    if n == 0:
        return none
    try:
        raw = np.fromfile(p.path, dtype=np.uint8)
    except OSError:
        return none
    buf = np.zeros(raw.shape[0] + _PAD, dtype=np.uint8)
    buf[: raw.shape[0]] = raw
    tcp, end = p.tcp_at, p.tcp_at + p.tcp_cap  # end of the captured bytes of each packet
    if int(end.max()) > raw.shape[0] or not (
        np.array_equal(_be(buf, tcp, 2), p.sport) and np.array_equal(_be(buf, tcp + 2, 2), p.dport)
    ):
        return none
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
