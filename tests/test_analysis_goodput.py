"""Delivered bytes (analysis/goodput.py): each sequence byte once, at its first arrival. Oracle:
the union of tshark's (tcp.seq_raw, tcp.len) ranges per stream direction."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.goodput import MAX_BINS, delivered_bytes, first_arrival_bytes
from analysis.pcapfile import read_pcap
from analysis.tcp import analyze, goodput_timeline
from incastlab.cli import main as cli_main
from tests.test_analysis_trace import A_IP, ACK, B_IP, PSH, SYN, Trace
from tests.tshark import tshark_count, tshark_delivered_bytes, tshark_unique_bytes

DAY_S = 86_400.0


def _known_trace() -> Trace:
    tr = Trace()
    tr.fwd(0.00, 100, 0, SYN)
    tr.rev(0.001, 900, 101, SYN | ACK)
    tr.fwd(0.002, 101, 901)
    tr.fwd(0.010, 101, 901, ACK | PSH, n=100)  # 101..201
    # 201..301 lost
    tr.fwd(0.012, 301, 901, ACK | PSH, n=100)  # 301..401 (out of order)
    tr.fwd(0.013, 301, 901, ACK | PSH, n=100)  # duplicate: nothing new
    tr.fwd(0.150, 201, 901, ACK | PSH, n=100)  # the retransmission repairs 201..301: counts
    tr.fwd(0.151, 351, 901, ACK | PSH, n=100)  # overlaps 351..401, new 401..451: 50
    tr.rev(0.152, 901, 451, ACK, n=30)  # 30 bytes the other way
    return tr


def test_known_answer_and_the_first_arrival_rule(tmp_path: Path) -> None:
    p = read_pcap(_known_trace().write(tmp_path / "k.pcap"))
    assert first_arrival_bytes(p).tolist() == [0, 0, 0, 100, 100, 0, 100, 50, 30]
    res = delivered_bytes(p, bin_s=0.1)
    by = {f.flow: f for f in res.flows}
    f = by["10.0.0.2:40000-10.0.0.1:5000"]
    assert (f.bytes, f.captured_bytes, f.late_bytes) == (350, 500, 100)
    assert f.series == [200, 150] and res.t0 == pytest.approx(1000.0)
    assert res.by_receiver == {
        "10.0.0.1": {"bytes": 350, "series": [200, 150]},
        "10.0.0.2": {"bytes": 30, "series": [0, 30]},
    }
    assert res.bytes == 380 and res.mbit_s([200, 150]) == [0.016, 0.012]
    # tcp.goodput_timeline counts only bytes beyond the highest sequence seen: it misses the
    # 100 bytes that first arrived in the retransmission
    an = analyze(p)
    fid = an.flows.index((A_IP, 40000, B_IP, 5000))
    assert sum(goodput_timeline(an, bin_s=0.1, flow=fid)["bytes"]) == f.bytes - f.late_bytes
    only = delivered_bytes(p, receiver="10.0.0.2")
    assert [x.flow for x in only.flows] == ["10.0.0.1:5000-10.0.0.2:40000"] and only.bytes == 30
    later = delivered_bytes(p, t0=1000.1, bin_s=0.05)
    assert later.by_receiver["10.0.0.1"] == {"bytes": 350, "series": [0, 150]}  # totals keep the early bytes
    with pytest.raises(ValueError):
        delivered_bytes(p, bin_s=0)


def _random_receiver_trace(rng: np.random.Generator, isn: int, conns: int = 3) -> Trace:
    """Several connections into one receiver: losses, retransmissions, duplicates, reordering,
    repacketised overlaps; sequence numbers near the 32-bit wrap."""
    tr = Trace()
    t = 0.0
    for c in range(conns):
        tr.aport = 40000 + c
        base = (isn + c * 7919) & 0xFFFFFFFF
        tr.fwd(t, base, 0, SYN)
        tr.rev(t + 0.0001, 77, base + 1, SYN | ACK)
        nxt = base + 1
        sent: list[tuple[int, int]] = []
        for _ in range(300):
            t += 0.0005
            r = rng.random()
            if r < 0.55:
                n = int(rng.choice([1448, 1448, 100, 7]))
                if rng.random() > 0.1:  # 10 % lost before the receiver
                    tr.fwd(t, nxt, 78, ACK | PSH, n=n)
                sent.append((nxt, n))
                nxt += n
            elif r < 0.8 and sent:
                s, n = sent[int(rng.integers(len(sent)))]
                cut = int(rng.integers(0, max(n // 2, 1)))  # a retransmission, maybe repacketised
                tr.fwd(t, s + cut, 78, ACK | PSH, n=n - cut + int(rng.integers(0, 200)))
            else:
                tr.rev(t, 78, nxt, ACK)
    return tr


@pytest.mark.parametrize("isn", [12345, 0xFFFF0000])
def test_equals_tshark_sequence_range_union(tmp_path: Path, isn: int) -> None:
    rng = np.random.default_rng(isn & 0xFFFF)
    f = _random_receiver_trace(rng, isn).write(tmp_path / "r.pcap")
    res = delivered_bytes(read_pcap(f))
    oracle = tshark_unique_bytes(f)
    ours = {(f.src, str(f.sport), f.dst): f.bytes for f in res.flows}
    assert len(oracle) == len(ours) >= 3
    for (_st, src, sp, dst), n in oracle.items():
        assert ours[(src, sp, dst)] == n
    assert sum(sum(f.series) for f in res.flows) == res.bytes
    assert all(f.late_bytes > 0 for f in res.flows if f.dst == "10.0.0.1")


@pytest.mark.parametrize("span", ["24-days", "one-record-40-years-off"])
def test_a_capture_spanning_days_gets_its_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], span: str
) -> None:
    """Issue #36: records spanning weeks (the retransmission and all after it 24 days later), or
    one record dated 40 years off, are no reason to refuse the counts: the delivered bytes are
    those of the unshifted capture, the series are left out and the note says why in one line,
    and `incastlab analyze` gives tshark's retransmissions and delivered bytes."""
    tr = _known_trace()
    if span == "24-days":
        tr.rows = [(t + 24 * DAY_S if i >= 6 else t, *rest) for i, (t, *rest) in enumerate(tr.rows)]
        days = "24.0 days"
    else:
        t, *rest = tr.rows[-1]
        tr.rows[-1] = (t + 40 * 365 * DAY_S, *rest)
        days = "14,600.0 days"
    f = tr.write(tmp_path / f"{span}.pcap")
    plain = delivered_bytes(read_pcap(_known_trace().write(tmp_path / "plain.pcap")))
    res = delivered_bytes(read_pcap(f))
    assert plain.note is None and (24 * DAY_S / res.bin_s > MAX_BINS)
    assert [(x.flow, x.bytes, x.late_bytes) for x in res.flows] == [
        (x.flow, x.bytes, x.late_bytes) for x in plain.flows
    ]
    assert res.bytes == plain.bytes == 380
    assert all(x.series == [] for x in res.flows)
    assert all(r["series"] == [] for r in res.by_receiver.values())
    assert res.note is not None and "\n" not in res.note and days in res.note, res.note
    assert cli_main(["analyze", str(f), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["retransmits"] == tshark_count(f, "tcp.analysis.retransmission") >= 1
    for ip, n in got["delivered_by_receiver"].items():
        assert n == tshark_delivered_bytes(f, ip), ip
