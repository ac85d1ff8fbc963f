"""TCP classification on hand-made sequences: known answers, fast path == exact path, and tshark."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis import wireshark_seq as ws
from analysis.pcapfile import read_pcap
from analysis.tcp import _ids, analyze, goodput_timeline
from tests.test_analysis_pcapfile import write_pcap
from tests.tshark import tshark_fields

A, B = 0x0A000002, 0x0A000001


def pk(t: float, fwd: bool, seq: int, ack: int, flags: int = 0x10, n: int = 0, win: int = 1000) -> tuple:
    sec = int(t)
    frac = int(round((t - sec) * 1e6))
    if fwd:
        return (A, B, 40000, 5000, seq, ack, flags, win, n, 1000 + sec, frac)
    return (B, A, 5000, 40000, seq, ack, flags, win, n, 1000 + sec, frac)


SCENARIO = [
    pk(0.000, True, 1000, 0, 0x02),
    pk(0.005, False, 5000, 1001, 0x12),
    pk(0.010, True, 1001, 5001),
    pk(0.100, True, 1001, 5001, 0x18, 100),  # 4 data
    pk(0.1001, True, 1101, 5001, 0x18, 100),  # 5 data (will be "lost")
    pk(0.1002, True, 1201, 5001, 0x18, 100),  # 6
    pk(0.1003, True, 1301, 5001, 0x18, 100),  # 7
    pk(0.101, False, 5001, 1101),  # 8 ack
    pk(0.1011, False, 5001, 1101),  # 9 dup ack 1
    pk(0.1012, False, 5001, 1101),  # 10 dup ack 2
    pk(0.1013, True, 1101, 5001, 0x18, 100),  # 11 fast retransmission
    pk(0.102, False, 5001, 1401),  # 12 ack all
    pk(0.600, True, 1301, 5001, 0x18, 100),  # 13 spurious retransmission (already acked)
    pk(0.700, True, 1401, 5001, 0x18, 100),  # 14 data
    pk(0.701, False, 5001, 1401, 0x10, 0, 0),  # 15 zero window
    pk(1.200, True, 1401, 5001, 0x18, 100),  # 16 retransmission (no dup-ACK)
]


def _write(tmp_path: Path, pkts: list[tuple]) -> Path:
    f = tmp_path / "s.pcap"
    write_pcap(f, pkts=pkts)
    return f


def test_known_answers(tmp_path: Path) -> None:
    an = analyze(read_pcap(_write(tmp_path, SCENARIO)))
    rtx = set((an.packets.frame[an.retransmission_mask()]).tolist())
    assert rtx == {11, 13, 16}
    assert an.bits[10] & ws.FAST_RETRANSMISSION and an.bits[12] & ws.SPURIOUS_RETRANSMISSION
    assert an.bits[15] & ws.RETRANSMISSION
    s = an.summary()
    assert (s["retransmits"], s["dup_acks"], s["zero_window"], s["wireshark_fast_retransmits"]) == (
        3,
        2,
        1,
        1,
    )
    assert s["retransmits_with_dup_acks"] == 1 and s["retransmits_without_dup_acks"] == 2
    assert (s["segments"], s["bytes"], s["flows"], s["connections"]) == (8, 800, 2, 1)
    assert "fast retransmission" in an.labels(10) and "dup ACK" in an.labels(8)
    g = goodput_timeline(an, bin_s=0.1)
    assert sum(g["bytes"]) == 500  # 1001..1501: five new 100-byte segments


def _random_trace(rng: np.random.Generator, n: int, zero_window: bool) -> list[tuple]:
    out, t, nxt, acked = (
        [pk(0, True, 1, 0, 0x02), pk(0.001, False, 9, 2, 0x12), pk(0.002, True, 2, 10)],
        0.01,
        2,
        2,
    )
    for _ in range(n):
        t += float(rng.choice([0.0001, 0.001, 0.03, 0.3]))
        r = rng.random()
        if r < 0.55:
            out.append(pk(t, True, nxt, 10, 0x18, 100))
            nxt += 100
        elif r < 0.65:
            back = int(rng.integers(1, 6)) * 100
            out.append(pk(t, True, max(2, nxt - back), 10, 0x18, 100))
        elif r < 0.7 and zero_window:
            out.append(pk(t, True, nxt, 10, 0x18, 1))
        else:
            acked = min(nxt, acked + int(rng.integers(0, 3)) * 100)
            win = 0 if zero_window and rng.random() < 0.2 else 1000
            out.append(pk(t, False, 10, acked, 0x10, 0, win))
    return out


@pytest.mark.parametrize("zero_window", [False, True])
def test_fast_path_equals_exact_state_machine(tmp_path: Path, zero_window: bool) -> None:
    rng = np.random.default_rng(7)
    for _ in range(5):
        p = read_pcap(_write(tmp_path, _random_trace(rng, 400, zero_window)))
        _flow, conv, side, _ = _ids(p)
        exact = ws.analyze_exact(p.ts_ns, p.seq, p.ack, p.plen, p.flags, p.win, conv, side)
        an = analyze(p)
        assert np.array_equal(an.bits, exact)
        if not zero_window:  # no fallback needed: the vectorised path alone must agree
            assert an.exact_conversations == 0
            assert np.array_equal(analyze(p, exact_fallback=False).bits, exact)


def test_random_traces_agree_with_tshark(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    for zw in (False, True):
        f = _write(tmp_path, _random_trace(rng, 600, zw))
        an = analyze(read_pcap(f))
        for field, bit in (
            ("tcp.analysis.retransmission", ws.ANY_RETRANSMISSION),
            ("tcp.analysis.duplicate_ack", ws.DUPLICATE_ACK),
            ("tcp.analysis.out_of_order", ws.OUT_OF_ORDER),
            ("tcp.analysis.zero_window", ws.ZERO_WINDOW),
        ):
            out = [r[0] for r in tshark_fields(f, "frame.number", display=field)]
            ours = an.packets.frame[(an.bits & bit) != 0].tolist()
            assert sorted(map(int, out)) == ours, field


@pytest.mark.parametrize("lookahead", [1, 2, 8])
def test_handshake_rtt_beyond_the_lookahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lookahead: int
) -> None:
    """The out-of-order threshold (handshake RTT) is the same whether the handshake ACK is found
    near the first SYN or by the dense search over all packets."""
    import analysis.tcp as tcp_mod

    monkeypatch.setattr(tcp_mod, "_HANDSHAKE_LOOKAHEAD", lookahead)
    rng = np.random.default_rng(3)
    # SYN retransmissions push the handshake ACK further from the first SYN
    syns = [pk(0.001 * i, True, 1, 0, 0x02) for i in range(4)]
    pkts = syns + _random_trace(rng, 300, False)[1:]
    for trace in (pkts, _random_trace(rng, 300, False)):
        p = read_pcap(_write(tmp_path, trace))
        _flow, conv, side, _ = _ids(p)
        exact = ws.analyze_exact(p.ts_ns, p.seq, p.ack, p.plen, p.flags, p.win, conv, side)
        assert np.array_equal(analyze(p, exact_fallback=False).bits, exact)
