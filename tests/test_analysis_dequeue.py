"""Dequeue gaps at a bottleneck's egress (analysis/dequeue.py) against the configured rate, on a
synthetic port capture whose departures are exactly what the rate allows, plus stalls."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.dequeue import QueueSamples, dequeue_gaps
from analysis.pcapfile import read_pcap
from runmodel.records import read_queue_samples
from tests.test_analysis_trace import ACK, Trace

RATE = 20e6
FULL = 1460  # payload of a 1514-byte frame


def _port_capture(tmp_path: Path, stall_every: int = 0) -> tuple[Path, QueueSamples]:
    """0.5 s of back-to-back departures toward 10.0.0.1 (a full frame, then a 66-byte ACK, ...)
    at RATE while the queue holds 5 packets, then 0.5 s of departures twice as far apart with an
    empty queue; packets from 10.0.0.1 (the port's ingress) in between."""
    tr = Trace()
    t, k = 0.0, 0
    while t < 1.0:
        n = FULL if k % 2 == 0 else 0
        tr.fwd(t, 1 + k * FULL, 1, ACK, n=n)  # 10.0.0.2 -> 10.0.0.1: egress
        if k % 7 == 0:
            tr.rev(t + 1e-6, 1, 1 + k * FULL, ACK)  # 10.0.0.1 -> 10.0.0.2: ingress, ignored
        wire = 14 + 20 + 20 + n
        gap = wire * 8 / RATE
        if t >= 0.5:
            gap *= 2
        if stall_every and k % stall_every == 0 and t < 0.5:
            gap *= 3
        t += gap
        k += 1
    qt = np.arange(-0.005, 1.0, 0.01) + 1000.0
    qb = np.where(qt < 1000.5, 5, 0)
    return tr.write(tmp_path / "port.pcap"), QueueSamples(t=qt, backlog_packets=qb)


def test_a_shaper_that_keeps_its_rate_gives_ratio_one(tmp_path: Path) -> None:
    f, q = _port_capture(tmp_path)
    res = dequeue_gaps(read_pcap(f), q, RATE, receiver="10.0.0.1")
    assert res.median_ratio == pytest.approx(1.0, abs=2e-3)
    assert res.percentiles["p1"] > 0.97 and res.percentiles["p99"] < 1.03
    assert res.achieved_share == pytest.approx(1.0, abs=2e-3)
    # only the backlogged half counts: about 0.5 s / (0.6056 + 0.0264) ms per pair, 2 gaps a pair
    assert abs(res.gaps - 2 * 0.5 / ((1514 + 66) * 8 / RATE)) < 5
    assert res.cdf_x.shape == res.cdf_y.shape and res.cdf_x.size <= 200 and res.cdf_y[-1] == 1.0
    assert np.all(np.diff(res.cdf_x) >= 0)
    d = res.to_dict()
    assert json.loads(json.dumps(d))["median_ratio"] == res.median_ratio and "ratio" not in d
    # with the later packet's size the full-frame / ACK pairs are far off 1
    nxt = dequeue_gaps(read_pcap(f), q, RATE, receiver="10.0.0.1", ideal="next")
    assert nxt.percentiles["p99"] > 10 and nxt.percentiles["p1"] < 0.1


def test_stalls_show_in_the_tail_and_the_share(tmp_path: Path) -> None:
    f, q = _port_capture(tmp_path, stall_every=10)
    res = dequeue_gaps(read_pcap(f), q, RATE, receiver="10.0.0.1")
    assert res.median_ratio == pytest.approx(1.0, abs=2e-3)
    assert res.percentiles["p95"] == pytest.approx(3.0, abs=0.01)
    pair = (1514 + 66) * 8 / RATE
    assert res.achieved_share == pytest.approx(5 * pair / (5 * pair + 2 * 1514 * 8 / RATE), abs=0.01)
    # a higher threshold than the queue ever had: nothing counts
    none = dequeue_gaps(read_pcap(f), q, RATE, receiver="10.0.0.1", min_backlog=6)
    assert none.gaps == 0 and none.median_ratio is None and none.cdf_x.size == 0


def test_one_ports_samples_out_of_the_queue_file(tmp_path: Path) -> None:
    qf = tmp_path / "queue_depth.jsonl"
    qf.write_text(
        '{"t": 2.0, "backlog_bytes": 0, "backlog_packets": 3, "drops": 0, "sent_packets": 1, '
        '"port": "lf1-eth3"}\n'
        "not json\n"
        '{"t": 1.5, "backlog_bytes": 0, "backlog_packets": 9, "drops": 0, "sent_packets": 1, '
        '"port": "lf2-eth1"}\n'
        '{"t": 1.0, "backlog_bytes": 0, "backlog_packets": 0, "drops": 0, "sent_packets": 0}\n'
        '{"t": 3.0, "backlog_pack'
    )
    samples = read_queue_samples(qf)
    q = QueueSamples.of_port(samples, "lf1-eth3", default_port="lf1-eth3")  # unnamed lines: the PS port
    assert q.t.tolist() == [1.0, 2.0] and q.backlog_packets.tolist() == [0, 3]
    assert QueueSamples.of_port(samples, "lf2-eth1").backlog_packets.tolist() == [9]
    with pytest.raises(ValueError):
        dequeue_gaps(read_pcap(_port_capture(tmp_path)[0]), q, 0, receiver="10.0.0.1")
