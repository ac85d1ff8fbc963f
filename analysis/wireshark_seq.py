"""Reference, packet-by-packet mirror of Wireshark's TCP sequence analysis (packet-tcp.c,
tcp_analyze_sequence_number, as shipped in 4.0).

Why it exists: tcp.py's vectorised analysis must agree with `tshark -Y tcp.analysis.*`; this plain
state machine follows the C code line by line so it is easy to audit. tcp.py uses it for the
conversations its fast path cannot model (zero-window probes, ACKs of unseen data) and the tests
check that both paths agree. Not modelled: TCP_MAX_UNACKED_SEGMENTS, MPTCP, port reuse by a new
connection inside one conversation (Wireshark then starts a new stream).
"""

from __future__ import annotations

import numpy as np

from analysis.packets import ACK, FIN, RST, SYN

# per-packet analysis bits (ours; names follow Wireshark's TCP_A_* flags)
RETRANSMISSION = 0x0001
FAST_RETRANSMISSION = 0x0002
SPURIOUS_RETRANSMISSION = 0x0004
OUT_OF_ORDER = 0x0008
DUPLICATE_ACK = 0x0010
ZERO_WINDOW = 0x0020
ZERO_WINDOW_PROBE = 0x0040
KEEP_ALIVE = 0x0080
KEEP_ALIVE_ACK = 0x0100
ZERO_WINDOW_PROBE_ACK = 0x0200
LOST_PACKET = 0x0400
ACK_LOST_PACKET = 0x0800
WINDOW_UPDATE = 0x1000
# what `tcp.analysis.retransmission` matches: plain, fast and spurious retransmissions
ANY_RETRANSMISSION = RETRANSMISSION | FAST_RETRANSMISSION | SPURIOUS_RETRANSMISSION

M32 = 0xFFFFFFFF
FAST_RTX_WINDOW_NS = 20_000_000  # fast retransmission: within 20 ms of the last dup ACK
DEFAULT_OOO_NS = 3_000_000  # out-of-order threshold without a handshake RTT


def lt_seq(a: int, b: int) -> bool:
    """a before b in 32-bit sequence space (Wireshark LT_SEQ)."""
    return ((a - b) & M32) > 0x7FFFFFFF


def gt_seq(a: int, b: int) -> bool:
    return ((b - a) & M32) > 0x7FFFFFFF


class _Dir:
    __slots__ = (
        "nextseq",
        "nextseqtime",
        "maxseqtobeacked",
        "lastack",
        "lastacktime",
        "window",
        "dupacknum",
        "lastsegmentflags",
    )

    def __init__(self) -> None:
        self.nextseq = 0
        self.nextseqtime = 0
        self.maxseqtobeacked = 0
        self.lastack = 0
        self.lastacktime = 0
        self.window = -1  # G_MAXUINT32: equal to no real window
        self.dupacknum = 0
        self.lastsegmentflags = 0


class _Conv:
    __slots__ = ("dirs", "mru_syn", "first_rtt")

    def __init__(self) -> None:
        self.dirs: dict[int, _Dir] = {}
        self.mru_syn = 0
        self.first_rtt = 0


def analyze_exact(
    ts_ns: np.ndarray,
    seq: np.ndarray,
    ack: np.ndarray,
    plen: np.ndarray,
    flags: np.ndarray,
    win: np.ndarray,
    conv: np.ndarray,
    side: np.ndarray,
) -> np.ndarray:
    """Analysis bits of each packet, in the given (capture) order.

    conv: conversation id per packet; side: 0/1 direction within the conversation.
    """
    out = np.zeros(len(seq), dtype=np.uint16)
    convs: dict[int, _Conv] = {}
    it = zip(
        ts_ns.tolist(),
        seq.tolist(),
        ack.tolist(),
        plen.tolist(),
        flags.tolist(),
        win.tolist(),
        conv.tolist(),
        side.tolist(),
        strict=True,
    )
    for i, (ts, sq, ak, seglen, fl, window, c, s) in enumerate(it):
        cv = convs.get(c)
        if cv is None:
            cv = convs[c] = _Conv()
            cv.dirs[0], cv.dirs[1] = _Dir(), _Dir()
        fwd, rev = cv.dirs[s], cv.dirs[1 - s]
        out[i] = _analyze_one(ts, sq, ak, seglen, fl, window, fwd, rev, cv.first_rtt)
        # handshake RTT, as dissect_tcp does after the sequence analysis
        if fl & SYN and not fl & ACK:
            cv.mru_syn = ts
        elif (fl & (SYN | ACK)) == ACK and cv.mru_syn and not cv.first_rtt:
            cv.first_rtt = ts - cv.mru_syn
    return out


def _analyze_one(
    ts: int, seq: int, ack: int, seglen: int, flags: int, window: int, fwd: _Dir, rev: _Dir, first_rtt: int
) -> int:
    ta = 0
    sfr = flags & (SYN | FIN | RST)
    done_fwd = False
    if seglen == 1 and seq == fwd.nextseq and rev.window == 0:
        ta |= ZERO_WINDOW_PROBE
        done_fwd = True
    if not done_fwd:
        if window == 0 and not sfr:
            ta |= ZERO_WINDOW
        if fwd.nextseq and gt_seq(seq, fwd.nextseq) and not flags & RST:
            ta |= LOST_PACKET
        if seglen <= 1 and seq == ((fwd.nextseq - 1) & M32) and not sfr:
            ta |= KEEP_ALIVE
        same = seglen == 0 and seq == fwd.nextseq and ack == fwd.lastack and not sfr
        if same and window and window != fwd.window:
            ta |= WINDOW_UPDATE
        if same and window and window == fwd.window and rev.lastsegmentflags & KEEP_ALIVE:
            ta |= KEEP_ALIVE_ACK
        elif same and window == 0 and window == fwd.window and rev.lastsegmentflags & ZERO_WINDOW_PROBE:
            ta |= ZERO_WINDOW_PROBE_ACK
        elif same and window and window == fwd.window:
            fwd.dupacknum = 1 if fwd.dupacknum == -1 else fwd.dupacknum + 1
            ta |= DUPLICATE_ACK
    # finished_fwd
    if ack != fwd.lastack:
        fwd.dupacknum = 0
    if rev.maxseqtobeacked and gt_seq(ack, rev.maxseqtobeacked) and flags & ACK:
        if rev.maxseqtobeacked > rev.nextseq:
            rev.maxseqtobeacked = rev.nextseq
            ta |= ACK_LOST_PACKET
        else:
            if rev.dupacknum == 0:
                ta |= ACK_LOST_PACKET
            rev.dupacknum = -1
    if (seglen > 0 or flags & (SYN | FIN)) and not ta & KEEP_ALIVE:
        seq_not_advanced = bool(fwd.nextseq) and lt_seq(seq, fwd.nextseq)
        if seglen > 1 and ((fwd.nextseq - 1) & M32) == seq:
            seq_not_advanced = False
        if seglen > 0 and rev.lastack and not gt_seq((seq + seglen) & M32, rev.lastack):
            ta |= SPURIOUS_RETRANSMISSION
        elif (
            seq_not_advanced
            and rev.dupacknum >= 2
            and rev.lastack == seq
            and 0 <= ts - rev.lastacktime < FAST_RTX_WINDOW_NS
        ):
            ta |= FAST_RETRANSMISSION
        else:
            thres = first_rtt or DEFAULT_OOO_NS
            synfin = 1 if flags & (SYN | FIN) else 0
            if (
                seq_not_advanced
                and 0 <= ts - fwd.nextseqtime < thres
                and fwd.nextseq != ((seq + seglen + synfin) & M32)
            ):
                ta |= OUT_OF_ORDER
            elif seq_not_advanced:
                ta |= RETRANSMISSION
    # finished_checking_retransmission_type
    nextseq = (seq + seglen + (1 if flags & (SYN | FIN) else 0)) & M32
    if not fwd.nextseq or gt_seq(nextseq, fwd.nextseq):
        if not ta & ZERO_WINDOW_PROBE:
            fwd.nextseq = nextseq
            fwd.nextseqtime = ts
    if not fwd.maxseqtobeacked or seq == fwd.maxseqtobeacked:
        if not ta & ZERO_WINDOW_PROBE:
            fwd.maxseqtobeacked = fwd.nextseq
    fwd.window = window
    fwd.lastack = ack
    fwd.lastacktime = ts
    fwd.lastsegmentflags = ta
    return ta
