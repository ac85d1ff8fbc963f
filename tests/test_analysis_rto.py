"""RTO and loss-probe events (analysis/rto.py) on hand-made traces with known answers; every event
must be a retransmission for tshark too; TCP timestamps (tcpopts.py) must decode as tshark
decodes them. The kernel-counter oracle is in test_analysis_sample_run.py (a real run's
hosts.json) and test_analysis_rto_integration.py (nstat in network namespaces)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.pcapfile import read_pcap
from analysis.rto import rto_events
from analysis.tcpopts import read_options
from tests.test_analysis_trace import ACK, PSH, SYN, Trace, tcp_options
from tests.tshark import tshark_fields

ISN_A, ISN_B = 1000, 5000


def handshake(tr: Trace, isn: int = ISN_A, t: float = 0.0) -> None:
    tr.fwd(t, isn, 0, SYN, opts=tcp_options(mss=1460, wscale=7, sack_ok=True))
    tr.rev(t + 0.001, ISN_B, isn + 1, SYN | ACK, opts=tcp_options(mss=1460, wscale=7, sack_ok=True))
    tr.fwd(t + 0.002, isn + 1, ISN_B + 1)


def data(tr: Trace, t: float, seq: int, n: int = 100) -> None:
    tr.fwd(t, seq, ISN_B + 1, ACK | PSH, n=n)


def ack(tr: Trace, t: float, a: int, win: int = 1000) -> None:
    tr.rev(t, ISN_B + 1, a, ACK, win=win)


def _events(tmp_path: Path, tr: Trace, name: str = "t.pcap", **kw: object):
    f = tr.write(tmp_path / name)
    res = rto_events(read_pcap(f), **kw)  # type: ignore[arg-type]
    return f, res, [e for fl in res.flows for e in fl.events]


def _rto_backoff_trace(isn: int) -> Trace:
    tr = Trace()
    handshake(tr, isn)
    for k in range(10):
        data(tr, 0.010 + 0.001 * k, isn + 1 + 100 * k)
    ack(tr, 0.013, isn + 201)
    ack(tr, 0.016, isn + 501)  # segment 6 (isn+501) and later are lost
    data(tr, 0.266, isn + 501)  # RTO: the head, alone, 0.25 s after the last progress
    data(tr, 0.766, isn + 501)  # no answer: the doubled RTO
    ack(tr, 0.767, isn + 601)
    data(tr, 0.7675, isn + 601)  # slow start after the timeout: ACK-clocked, 2 at once
    data(tr, 0.7676, isn + 701)
    ack(tr, 0.770, isn + 1001)
    return tr


@pytest.mark.parametrize("isn", [ISN_A, 0xFFFFFF80])  # the second wraps the sequence space
def test_timeout_then_doubled_timeout(tmp_path: Path, isn: int) -> None:
    _f, res, ev = _events(tmp_path, _rto_backoff_trace(isn))
    assert [(e.kind, e.seq, e.backoff) for e in ev] == [("rto", 501, 0), ("rto", 501, 1)]
    assert [e.seq_raw for e in ev] == [(isn + 501) & 0xFFFFFFFF] * 2
    assert ev[0].idle_s == pytest.approx(0.266 - 0.019, abs=1e-6)  # since the last segment sent
    assert ev[1].idle_s == pytest.approx(0.5, abs=1e-6)
    assert res.timeouts == 2 and res.loss_probes == 0 and res.stall_s == pytest.approx(0.747, abs=1e-6)
    assert res.by_sender()["10.0.0.2"] == {
        "timeouts": 2,
        "loss_probes": 0,
        "stall_s": pytest.approx(0.747),
        "retransmits": 4,
    }  # the two timeouts, two after them
    assert res.totals("10.0.0.1") == {
        "timeouts": 0,
        "loss_probes": 0,
        "stall_s": 0.0,
        "retransmits": 0,
    }  # it sent only its SYN-ACK
    assert {f.flow for f in res.flows} == {"10.0.0.2:40000-10.0.0.1:5000", "10.0.0.1:5000-10.0.0.2:40000"}


def test_dup_ack_recovery_and_bursts_are_no_timeouts(tmp_path: Path) -> None:
    tr = Trace()
    handshake(tr)
    for k in range(10):
        data(tr, 0.010 + 0.001 * k, ISN_A + 1 + 100 * k)
    ack(tr, 0.016, ISN_A + 501)
    for k in range(3):
        ack(tr, 0.017 + 0.0001 * k, ISN_A + 501)  # dup ACKs
    data(tr, 0.0174, ISN_A + 501)  # fast retransmission
    ack(tr, 0.020, ISN_A + 601)
    # later: a silence, then three lost segments at once (RACK's reordering timer): a burst
    for k in range(10, 14):
        data(tr, 0.030 + 0.001 * k, ISN_A + 1 + 100 * k)
    ack(tr, 0.045, ISN_A + 1101)
    for k in range(3):
        data(tr, 0.400 + 0.0001 * k, ISN_A + 1101 + 100 * k)
    ack(tr, 0.401, ISN_A + 1401)
    _f, res, ev = _events(tmp_path, tr)
    assert ev == [] and res.timeouts == 0


def test_zero_window_retransmission_is_a_probe_not_a_timeout(tmp_path: Path) -> None:
    tr = Trace()
    handshake(tr)
    for k in range(3):
        data(tr, 0.010 + 0.001 * k, ISN_A + 1 + 100 * k)
    ack(tr, 0.016, ISN_A + 201, win=0)
    data(tr, 0.300, ISN_A + 201)
    assert _events(tmp_path, tr)[1].timeouts == 0


def test_tail_loss_probe(tmp_path: Path) -> None:
    tr = Trace()
    handshake(tr)
    for k in range(5):
        data(tr, 0.010 + 0.001 * k, ISN_A + 1 + 100 * k)
    ack(tr, 0.016, ISN_A + 301)  # segments 4 and 5 outstanding, no dup ACKs: Open
    data(tr, 0.050, ISN_A + 401)  # the last segment again ~2 RTT later: the probe
    ack(tr, 0.051, ISN_A + 301)  # its SACK comes back as a dup ACK
    data(tr, 0.0511, ISN_A + 301)  # recovery of segment 4, ACK-clocked
    ack(tr, 0.052, ISN_A + 501)
    _f, res, ev = _events(tmp_path, tr)
    assert [(e.kind, e.seq) for e in ev] == [("tlp", 401)]
    assert res.loss_probes == 1 and res.timeouts == 0 and res.stall_s == 0.0


def test_single_segment_in_flight_probe_first_then_timeout(tmp_path: Path) -> None:
    tr = Trace()
    handshake(tr)
    data(tr, 0.010, ISN_A + 1)
    data(tr, 0.220, ISN_A + 1)  # the probe timer fires first (never after the RTO)
    data(tr, 0.650, ISN_A + 1)  # then the RTO
    ack(tr, 0.651, ISN_A + 101)
    _f, res, ev = _events(tmp_path, tr)
    assert [e.kind for e in ev] == ["tlp", "rto"] and (res.timeouts, res.loss_probes) == (1, 1)


def test_syn_timeouts_and_a_synack_answering_a_duplicate_syn(tmp_path: Path) -> None:
    tr = Trace()
    tr.fwd(0.0, ISN_A, 0, SYN)  # B's SYN-ACK to it is lost: A's capture lacks it
    tr.fwd(1.0, ISN_A, 0, SYN)  # A's SYN timeout
    tr.fwd(3.0, ISN_A, 0, SYN)  # doubled
    tr.rev(3.001, ISN_B, ISN_A + 1, SYN | ACK)
    tr.fwd(3.002, ISN_A + 1, ISN_B + 1)
    _f, res, ev = _events(tmp_path, tr, "syn.pcap")
    assert [(e.kind, e.seq, e.backoff) for e in ev] == [("syn", 0, 0), ("syn", 0, 1)]
    # B's side: its SYN-ACK resent right after a duplicate SYN arrived is no timeout
    tb = Trace()
    tb.fwd(0.0, ISN_A, 0, SYN)
    tb.rev(0.0005, ISN_B, ISN_A + 1, SYN | ACK)
    tb.fwd(1.0, ISN_A, 0, SYN)
    tb.rev(1.0002, ISN_B, ISN_A + 1, SYN | ACK)
    tb.fwd(1.0010, ISN_A + 1, ISN_B + 1)
    _f, res_b, _ev = _events(tmp_path, tb, "synack.pcap")
    assert res_b.totals("10.0.0.1")["timeouts"] == 0 and res_b.totals("10.0.0.2")["timeouts"] == 1


def _with_ts(tr: Trace, kernel_ms: list[float]) -> None:
    """Give every packet a timestamp option: TSval = the sender's kernel time in ms."""
    for i, (row, ms) in enumerate(zip(tr.rows, kernel_ms, strict=True)):
        tr.rows[i] = row[:10] + (row[10] + tcp_options(ts=(int(ms) + 7_000_000, 0)),)


def test_timestamps_place_sends_at_the_kernel_time(tmp_path: Path) -> None:
    """A fast retransmission sent right after a dup ACK but reaching the wire 150 ms later (queued in
    the sender's qdisc) looks timer driven on the wire; with TSval it is ACK-clocked. And a long
    RTT (dup ACKs 0.3 s after the original) does not make a fast retransmission a timeout."""
    tr = Trace()
    handshake(tr)
    kernel = [0.0, 0.001, 0.002]
    for k in range(6):
        data(tr, 0.310 + 0.001 * k, ISN_A + 1 + 100 * k)  # sent at 0.010.., on the wire 0.3 s later
        kernel.append(0.010 + 0.001 * k)
    ack(tr, 0.320, ISN_A + 201)
    kernel.append(0.320)
    for k in range(3):
        ack(tr, 0.321 + 0.0002 * k, ISN_A + 201)  # dup ACKs: segment 3 lost
        kernel.append(0.321 + 0.0002 * k)
    data(tr, 0.330, ISN_A + 201)  # kernel sent it at 0.3215, queued 8.5 ms
    kernel.append(0.3215)
    ack(tr, 0.331, ISN_A + 601)
    kernel.append(0.331)
    _with_ts(tr, [k * 1000 for k in kernel])
    f = tr.write(tmp_path / "ts.pcap")
    p = read_pcap(f)
    opts = read_options(p)
    rows = tshark_fields(f, "tcp.options.timestamp.tsval")
    assert [int(r[0]) if r[0] else -1 for r in rows] == opts.tsval.tolist()
    assert rto_events(p, tsval=opts.tsval).timeouts == 0
    # without timestamps the capture alone cannot tell: the wire shows a lone head retransmission
    # 0.3 s after the segment's original and no ACK progress for 10 ms ... which is < 0.15 s: none
    assert rto_events(p).timeouts == 0


def _kernel_trace(queue_s: float) -> tuple[Trace, list[float]]:
    """One sequence of kernel events (sends at kernel times), put on the wire as a sender with a
    backlog in its own qdisc would: the initial burst reaches the wire queue_s late (0: at once),
    the later sends find the qdisc empty."""
    tr = Trace()
    kernel: list[float] = []

    def send(t: float, seq: int, flags: int = ACK | PSH, n: int = 100, delay: float = 0.0) -> None:
        tr.fwd(round(t + delay, 6), seq, ISN_B + 1, flags, n=n)
        kernel.append(t)

    def recv(t: float, a: int) -> None:
        tr.rev(t, ISN_B + 1, a)
        kernel.append(t)

    send(0.0, ISN_A, SYN, 0)
    tr.rev(0.001, ISN_B, ISN_A + 1, SYN | ACK)
    kernel.append(0.001)
    send(0.002, ISN_A + 1, ACK, 0)
    for k in range(8):
        send(0.010 + 0.001 * k, ISN_A + 1 + 100 * k, delay=queue_s + 0.0001 * k)
    recv(0.013 + queue_s + 0.001, ISN_A + 201)  # segment 3 onwards lost
    t_rto = 0.013 + queue_s + 0.25
    send(t_rto, ISN_A + 201)
    send(t_rto + 0.5, ISN_A + 201)
    recv(t_rto + 0.501, ISN_A + 301)
    send(t_rto + 0.5015, ISN_A + 301)
    send(t_rto + 0.5016, ISN_A + 401)
    recv(t_rto + 0.503, ISN_A + 801)
    return tr, kernel


def test_timestamps_undo_the_senders_queue(tmp_path: Path) -> None:
    plain, _k = _kernel_trace(0.0)
    queued, kernel = _kernel_trace(0.12)
    _with_ts(queued, [k * 1000 for k in kernel])
    ref = rto_events(read_pcap(plain.write(tmp_path / "plain.pcap")))
    pq = read_pcap(queued.write(tmp_path / "queued.pcap"))
    got = rto_events(pq, tsval=read_options(pq).tsval)
    want = [("rto", 201, 0), ("rto", 201, 1)]
    assert [(e.kind, e.seq, e.backoff) for f in ref.flows for e in f.events] == want
    assert [(e.kind, e.seq, e.backoff) for f in got.flows for e in f.events] == want


def test_timestamps_find_a_timeout_the_wire_hides(tmp_path: Path) -> None:
    """Nothing acknowledged: the kernel armed the timer when it sent the first segment at 10 ms and
    retransmits it at 310 ms; the burst waited 0.2 s in the sender's qdisc, so on the wire the head's
    retransmission comes only 0.1 s after its original. TSval tells the real 0.3 s."""
    tr = Trace()
    handshake(tr)
    kernel = [0.0, 0.001, 0.002]
    for k in range(8):
        data(tr, 0.210 + 0.0001 * k, ISN_A + 1 + 100 * k)
        kernel.append(0.010 + 0.001 * k)
    data(tr, 0.310, ISN_A + 1)
    kernel.append(0.310)
    _with_ts(tr, [k * 1000 for k in kernel])
    p = read_pcap(tr.write(tmp_path / "hidden.pcap"))
    ev = [e for f in rto_events(p, tsval=read_options(p).tsval).flows for e in f.events]
    assert [(e.kind, e.seq) for e in ev] == [("rto", 1)]
    assert rto_events(p).timeouts == 0  # the wire alone: 0.1 s is no RTO


def test_every_event_is_a_retransmission_for_tshark(tmp_path: Path) -> None:
    """On random lossy traces: each event's frame is one tshark flags as a retransmission."""
    rng = np.random.default_rng(5)
    for trial in range(4):
        tr = Trace()
        handshake(tr)
        t, nxt, acked = 0.01, ISN_A + 1, ISN_A + 1
        for _ in range(400):
            t += float(rng.choice([0.0005, 0.002, 0.03, 0.25]))
            r = rng.random()
            if r < 0.5:
                data(tr, t, nxt)
                nxt += 100
            elif r < 0.65 and nxt > acked:
                data(tr, t, acked)  # the head again
            else:
                acked = min(nxt, acked + int(rng.integers(0, 3)) * 100)
                ack(tr, t, acked)
        f, res, ev = _events(tmp_path, tr, f"r{trial}.pcap")
        rtx = {int(r[0]) for r in tshark_fields(f, "frame.number", display="tcp.analysis.retransmission")}
        assert ev and {e.frame for e in ev} <= rtx
        assert all(e.kind in ("rto", "tlp") for e in ev)
