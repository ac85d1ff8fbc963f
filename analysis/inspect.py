"""Show a person the packets of one TCP connection with what each one is (retransmission, dup
ACK, out-of-order, zero window ...), using tcp.py's classification and scapy's decoding."""

from __future__ import annotations

import sys
from typing import TextIO

import numpy as np
import scapy.layers.l2  # noqa: F401  (registers the link types with scapy)
from scapy.layers.inet import TCP
from scapy.utils import PcapReader

from analysis.errors import AnalysisError
from analysis.pcapfile import read_pcap, str_to_ip
from analysis.tcp import analyze


def parse_flow(spec: str) -> tuple[int, int, int, int]:
    """'10.0.0.2:40000-10.0.0.1:5000' -> (src, sport, dst, dport) as integers."""
    try:
        left, right = spec.split("-")
        (sa, sp), (da, dp) = left.rsplit(":", 1), right.rsplit(":", 1)
        return str_to_ip(sa), int(sp), str_to_ip(da), int(dp)
    except ValueError:
        raise AnalysisError(f"bad --flow {spec!r}, want SRC:PORT-DST:PORT") from None


def inspect_flow(path: str, flow: str, around: float | None = None, span: float = 0.05,
                 out: TextIO = sys.stdout) -> int:
    """Print the packets of the connection `flow` (both directions); returns how many were printed.

    around: seconds since the first packet of the capture; only packets within +-span are shown.
    """
    src, sport, dst, dport = parse_flow(flow)
    pk = read_pcap(path)
    an = analyze(pk)
    fwd = (pk.src == src) & (pk.sport == sport) & (pk.dst == dst) & (pk.dport == dport)
    rev = (pk.src == dst) & (pk.sport == dport) & (pk.dst == src) & (pk.dport == sport)
    sel = fwd | rev
    if not sel.any():
        raise AnalysisError(f"no packets of flow {flow} in {path}")
    t0 = int(pk.ts_ns[0])
    rel = (pk.ts_ns - t0) / 1e9
    if around is not None:
        sel &= np.abs(rel - around) <= span
    idx = np.flatnonzero(sel)
    want = {int(pk.frame[i]): int(i) for i in idx}
    base_seq = {True: int(pk.seq[fwd][0]), False: int(pk.seq[rev][0]) if rev.any() else 0}
    printed = 0
    with PcapReader(path) as reader:
        for frame, pkt in enumerate(reader, start=1):
            if frame > max(want, default=0):
                break
            i = want.get(frame)
            if i is None:
                continue
            is_fwd = bool(fwd[i])
            rseq = (int(pk.seq[i]) - base_seq[is_fwd]) & 0xFFFFFFFF
            rack = (int(pk.ack[i]) - base_seq[not is_fwd]) & 0xFFFFFFFF
            tcp = pkt.getlayer(TCP)
            fl = str(tcp.flags) if tcp is not None else "?"
            what = ", ".join(an.labels(i))
            out.write(f"{frame:>7} {rel[i]:10.6f} {'->' if is_fwd else '<-'} {fl:<4} seq={rseq:<10} "
                      f"ack={rack:<10} len={int(pk.plen[i]):<5} win={int(pk.win[i]):<5} {what}\n")
            printed += 1
    return printed
