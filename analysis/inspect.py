"""Show a person a capture's TCP connections (busiest first, like tshark's conversation table),
and the packets of one of them with what each one is, using tcp.py's and rto.py's classification.

Labels use tshark's words ("retransmission", "fast retransmission", "spurious retransmission",
"dup ACK", ...); a retransmission is said to be a timer's ("RTO timeout", "tail loss probe") only
when rto.rto_events finds a timer event at it, i.e. it came at least the timer's wait (from the
rto_min in force) after the segment's previous copy and the last ACK progress. A retransmission a
few ms into a burst is tshark's plain "retransmission", never a timeout.

Sequence numbers, ACK numbers and windows are shown the way tshark shows them:

- relative sequence numbers (default): a direction's base is its SYN's sequence number, or, when
  the capture lacks the SYN, one less than the first sequence number seen, or one less than the
  first ACK number that acknowledged it if that came first; values modulo 2**32, as tshark;
- absolute (--absolute): the numbers in the headers;
- a SYN without ACK shows no ACK number (its ACK field means nothing);
- windows are scaled by the shift each side announced in its SYN when both SYNs of the handshake
  are in the capture and both carry the option; with only one of them carrying it no scaling is in
  use (the raw value is the window); without the handshake the values are the raw, unscaled fields
  and the header says so.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

import numpy as np

from analysis import wireshark_seq as ws
from analysis.errors import AnalysisError
from analysis.packets import ACK, SYN, Packets, str_to_ip
from analysis.pcapfile import read_pcap
from analysis.rto import RTO_MIN_S, rto_events
from analysis.seqspace import directions
from analysis.tcp import TcpAnalysis, analyze
from analysis.tcpopts import read_options

_FLAG_LETTERS = (
    (0x01, "F"),
    (0x02, "S"),
    (0x04, "R"),
    (0x08, "P"),
    (0x10, "A"),
    (0x20, "U"),
    (0x40, "E"),
    (0x80, "C"),
    (0x100, "N"),
)
M32 = 0xFFFFFFFF
SHOWN_WHEN_MISSING = 5  # connections named when a --flow is not in the file


def parse_flow(spec: str) -> tuple[int, int, int, int]:
    """'10.0.0.2:40000-10.0.0.1:5000' -> (src, sport, dst, dport) as integers."""
    try:
        left, right = spec.split("-")
        (sa, sp), (da, dp) = left.rsplit(":", 1), right.rsplit(":", 1)
        return str_to_ip(sa), int(sp), str_to_ip(da), int(dp)
    except ValueError:
        raise AnalysisError(f"bad --flow {spec!r}, want SRC:PORT-DST:PORT") from None


def flag_string(flags: int) -> str:
    """TCP flags as letters (scapy's order: F S R P A U E C N), e.g. 'PA', 'SA'."""
    return "".join(ch for bit, ch in _FLAG_LETTERS if flags & bit)


def tshark_bases(pk: Packets, conn: np.ndarray, fwd: np.ndarray) -> tuple[int | None, int | None]:
    """tshark's relative-sequence base of each direction (forward, reverse) of one connection
    (`conn`: its packet indices in capture order; `fwd`: per packet, forward direction)."""
    base: list[int | None] = [None, None]
    for i in conn.tolist():
        me = 0 if fwd[i] else 1
        fl = int(pk.flags[i])
        if base[me] is None:
            base[me] = int(pk.seq[i]) if fl & SYN else (int(pk.seq[i]) - 1) & M32
        if fl & ACK and base[1 - me] is None:
            base[1 - me] = (int(pk.ack[i]) - 1) & M32
        if base[0] is not None and base[1] is not None:
            break
    return base[0], base[1]


def window_scales(
    pk: Packets, conn: np.ndarray, fwd: np.ndarray, wscale: np.ndarray
) -> tuple[int, int] | None:
    """Window shift of (forward, reverse) from the connection's SYNs (`wscale`: per packet, the
    option's shift or -1); (0, 0) when the handshake shows no scaling in use; None when the
    capture lacks the handshake (windows unknown: show the raw fields)."""
    fl = pk.flags[conn]
    syn_f = conn[((fl & SYN) != 0) & fwd[conn]]
    syn_r = conn[((fl & SYN) != 0) & ~fwd[conn]]
    if not syn_f.size or not syn_r.size:
        return None
    a, b = int(wscale[syn_f[0]]), int(wscale[syn_r[0]])
    if a < 0 or b < 0:
        return (0, 0)  # RFC 7323: scaling only if both SYNs carry the option
    return (min(a, 14), min(b, 14))


def list_connections(pk: Packets, *, rto_min_s: float = RTO_MIN_S) -> list[dict[str, object]]:
    """The capture's TCP connections, busiest (most frame bytes) first, as dicts: connection
    ("A:port-B:port", A the sender of its first packet: a --flow value), packets, bytes (frame
    bytes on the wire, as tshark's conversation table counts them), payload_bytes, retransmits
    (packets tshark's tcp.analysis.retransmission matches: plain, fast and spurious), timeouts
    and loss_probes (rto.rto_events' timer events with that rto_min: meaningful on a sender's
    capture), start_s (its first packet, s since the capture's first packet)."""
    if not len(pk):
        return []
    d = directions(pk)
    rtx = (analyze(pk).bits & ws.ANY_RETRANSMISSION) != 0
    nconv = int(d.conv.max()) + 1
    idx = np.arange(len(pk))
    first = np.full(nconv, len(pk), dtype=np.int64)
    np.minimum.at(first, d.conv, idx)
    conv_of_dir = np.zeros(len(d.keys), dtype=np.int64)
    conv_of_dir[d.fid] = d.conv
    by_name = {d.name(f): int(conv_of_dir[f]) for f in range(len(d.keys))}
    timeouts = np.zeros(nconv, dtype=np.int64)
    probes = np.zeros(nconv, dtype=np.int64)
    for f in rto_events(pk, tsval=read_options(pk).tsval, rto_min_s=rto_min_s).flows:
        timeouts[by_name[f.flow]] += f.timeouts
        probes[by_name[f.flow]] += f.loss_probes
    count = {
        "packets": np.bincount(d.conv, minlength=nconv),
        "bytes": np.bincount(d.conv, weights=pk.wirelen, minlength=nconv),
        "payload_bytes": np.bincount(d.conv, weights=pk.plen, minlength=nconv),
        "retransmits": np.bincount(d.conv[rtx], minlength=nconv),
    }
    t0 = int(pk.ts_ns[0])
    rows: list[dict[str, object]] = []
    for c in range(nconv):
        i = int(first[c])
        row: dict[str, object] = {"connection": d.name(int(d.fid[i]))}
        row.update({k: int(v[c]) for k, v in count.items()})
        row.update(
            timeouts=int(timeouts[c]),
            loss_probes=int(probes[c]),
            start_s=round((int(pk.ts_ns[i]) - t0) / 1e9, 9),
        )
        rows.append(row)
    rows.sort(key=lambda r: (-int(r["bytes"]), -int(r["packets"]), str(r["connection"])))  # type: ignore[call-overload]
    return rows


def connections(
    path: str, *, rto_min_s: float = RTO_MIN_S, allow_truncated: bool = False
) -> tuple[Packets, list[dict[str, object]]]:
    """The capture (TCP packets; a capture without any is no error) and list_connections of it."""
    pk = read_pcap(path, allow_truncated=allow_truncated, require_tcp=False)
    return pk, list_connections(pk, rto_min_s=rto_min_s)


def _not_there(path: str, flow: str, pk: Packets, rto_min_s: float) -> str:
    """One line: the flow is not in the file, and the busiest connections that are."""
    rows = list_connections(pk, rto_min_s=rto_min_s)
    top = ", ".join(str(r["connection"]) for r in rows[:SHOWN_WHEN_MISSING])
    more = f" and {len(rows) - SHOWN_WHEN_MISSING} more" if len(rows) > SHOWN_WHEN_MISSING else ""
    return f"no connection {flow} in {path}; its busiest: {top}{more} (`incastlab inspect {path}` lists them)"


def _what(pk: Packets, an: TcpAnalysis, i: int, timer: dict[int, str]) -> list[str]:
    """Packet i's labels: tcp.py's (tshark's words), except that a plain retransmission without
    dup-ACK evidence stays tshark's "retransmission" (tcp.py's own split calls it a timeout, and
    no timer need have fired); a timer's event found by rto.py is added by name."""
    what = an.labels(i)
    bits = int(an.bits[i])
    plain = bits & ws.RETRANSMISSION and not bits & (ws.FAST_RETRANSMISSION | ws.SPURIOUS_RETRANSMISSION)
    if plain and not an.dup_recovery[i]:
        what[0] = "retransmission"
    frame = int(pk.frame[i])
    if frame in timer:
        what.append(timer[frame])
    return what


def connection_rows(
    path: str,
    flow: str,
    *,
    absolute: bool = False,
    allow_truncated: bool = False,
    rto_min_s: float = RTO_MIN_S,
) -> tuple[list[dict[str, object]], tuple[int, int] | None]:
    """The packets of connection `flow` (both directions, capture order) as dicts: frame, t_rel
    (s since the capture's first packet), dir ("->": flow's first endpoint sending), flags, seq,
    ack (None on a SYN without ACK), len, win (scaled as tshark scales it), what (labels; timer
    events with rto_min_s); and the window shifts (forward, reverse), None when the capture lacks
    the handshake (windows raw). A flow not in the file is an AnalysisError naming the ones that are."""
    src, sport, dst, dport = parse_flow(flow)
    pk = read_pcap(path, allow_truncated=allow_truncated)
    fwd = (pk.src == src) & (pk.sport == sport) & (pk.dst == dst) & (pk.dport == dport)
    rev = (pk.src == dst) & (pk.sport == dport) & (pk.dst == src) & (pk.dport == sport)
    conn = np.flatnonzero(fwd | rev)
    if not conn.size:
        raise AnalysisError(_not_there(path, flow, pk, rto_min_s))
    an = analyze(pk)
    opts = read_options(pk)
    bases = tshark_bases(pk, conn, fwd)
    scales = window_scales(pk, conn, fwd, opts.wscale)
    names = {"rto": "RTO timeout", "syn": "SYN timeout", "tlp": "tail loss probe"}
    timer: dict[int, str] = {}
    for f in rto_events(pk, tsval=opts.tsval, rto_min_s=rto_min_s).flows:
        for e in f.events:
            timer[e.frame] = names[e.kind] + (f" (backoff {e.backoff})" if e.backoff else "")
    t0 = int(pk.ts_ns[0])
    rows: list[dict[str, object]] = []
    for i in conn.tolist():
        is_fwd = bool(fwd[i])
        fl = int(pk.flags[i])
        me = 0 if is_fwd else 1
        seq, ack = int(pk.seq[i]), int(pk.ack[i])
        if not absolute:
            bs, ba = bases[me], bases[1 - me]
            seq = (seq - bs) & M32 if bs is not None else seq
            ack = (ack - ba) & M32 if ba is not None else ack
        win = int(pk.win[i])
        if scales is not None and not fl & SYN:
            win <<= scales[me]
        rows.append(
            {
                "frame": int(pk.frame[i]),
                "t_rel": (int(pk.ts_ns[i]) - t0) / 1e9,
                "dir": "->" if is_fwd else "<-",
                "flags": flag_string(fl),
                "seq": seq,
                "ack": None if (fl & SYN) and not (fl & ACK) else ack,
                "len": int(pk.plen[i]),
                "win": win,
                "what": _what(pk, an, i, timer),
            }
        )
    return rows, scales


def inspect_flow(
    path: str,
    flow: str,
    around: float | None = None,
    span: float = 0.05,
    out: TextIO | None = None,
    *,
    absolute: bool = False,
    allow_truncated: bool = False,
    rto_min_s: float = RTO_MIN_S,
    as_json: bool = False,
) -> int:
    """Print the packets of the connection `flow` (both directions); returns how many were printed.

    around: seconds since the first packet of the capture; only packets within +-span are shown.
    absolute: raw sequence/ACK numbers instead of tshark's relative ones. allow_truncated: read
    what precedes a cut record instead of failing. rto_min_s: the senders' minimum RTO, for the
    timer labels. as_json: one JSON document (file, flow, window_scales, packets: the rows of
    connection_rows) instead of the text. out: where to print (default: sys.stdout).
    """
    out = sys.stdout if out is None else out  # at call time: sys.stdout may have been replaced
    rows, scales = connection_rows(
        path, flow, absolute=absolute, allow_truncated=allow_truncated, rto_min_s=rto_min_s
    )
    if around is not None:
        rows = [r for r in rows if abs(float(r["t_rel"]) - around) <= span]  # type: ignore[arg-type]
    if as_json:
        doc = {"file": path, "flow": flow, "window_scales": scales, "packets": rows}
        out.write(json.dumps(doc, allow_nan=False) + "\n")
        return len(rows)
    if scales is None:
        out.write(f"# {flow}: window sizes unscaled (the capture lacks the connection's handshake)\n")
    else:
        out.write(f"# {flow}: window scale -> x{1 << scales[0]}, <- x{1 << scales[1]} (from the handshake)\n")
    out.write(
        f"# sequence numbers {'absolute' if absolute else 'relative (as tshark)'}; time in s since "
        f"the capture's first packet; -> is {flow.split('-')[0]} sending\n"
    )
    win_head = "win" if scales is not None else "win(unscaled)"
    out.write(
        f"{'frame':>7} {'time':>10} dir {'flags':<5} {'seq':<10} {'ack':<10} {'len':<5} {win_head:<13} what\n"
    )
    for r in rows:
        ack = "" if r["ack"] is None else str(r["ack"])
        line = (
            f"{r['frame']:>7} {r['t_rel']:10.6f} {r['dir']:<3} {r['flags']:<5} {r['seq']:<10} {ack:<10} "
            f"{r['len']:<5} {r['win']:<13} {', '.join(r['what'])}"
        )  # type: ignore[arg-type]
        out.write(line.rstrip() + "\n")
    return len(rows)
