"""The new analyses on a real `make compare` run folder against independent oracles: the kernel's
own TCP counters (hosts.json), tshark, and the configured link rate.

The run folder is not part of the repository (30 MB of captures): INCASTLAB_SAMPLE_RUN names it
(default /work/sample-run, a 7-worker run with PS h1 behind lf1-eth3, strategies ps and ring).
Without it these tests skip.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from analysis.dequeue import dequeue_gaps, host_link_rate_bps, read_queue_depth
from analysis.goodput import delivered_bytes
from analysis.pcapfile import read_pcap
from analysis.rto import rto_events
from analysis.tcpopts import read_options
from incastlab.cli import main as cli_main
from tests.test_analysis_goodput import tshark_unique_bytes
from tests.test_analysis_trace import needs_tshark

RUN = Path(os.environ.get("INCASTLAB_SAMPLE_RUN", "/work/sample-run"))
pytestmark = pytest.mark.skipif(not (RUN / "config.json").is_file(), reason=f"no sample run folder at {RUN}")


def _hosts(strategy: str) -> dict[str, dict[str, object]]:
    return json.loads((RUN / strategy / "hosts.json").read_text())


def _ip(host: str) -> str:
    return "10.0.0." + host[1:]


def _captures(strategy: str) -> list[str]:
    return sorted(h for h in _hosts(strategy) if (RUN / strategy / "pcap" / f"{h}.pcap").is_file())


@pytest.mark.parametrize("strategy", ["ps", "ring"])
def test_timeouts_per_host_agree_with_the_kernel(strategy: str) -> None:
    """Each host's capture, the flows it sent: timeouts vs TcpExtTCPTimeouts within 10 % (or 2 when
    the kernel counted fewer than 20); loss probes never more than TcpExtTCPLossProbes;
    retransmitted segments exactly TcpRetransSegs."""
    hosts = _hosts(strategy)
    seen = 0
    for h in _captures(strategy):
        p = read_pcap(RUN / strategy / "pcap" / f"{h}.pcap", allow_truncated=True)
        kern = hosts[h]["kernel"]  # type: ignore[index]
        want = int(kern.get("TcpExtTCPTimeouts", 0))  # type: ignore[union-attr]
        for tsval in (read_options(p).tsval, None):
            got = rto_events(p, tsval=tsval).totals(_ip(h))
            assert abs(got["timeouts"] - want) <= max(2, 0.1 * want), (h, got, want)
            assert got["loss_probes"] <= int(kern.get("TcpExtTCPLossProbes", 0)), h  # type: ignore[union-attr]
            assert got["retransmits"] == int(kern.get("TcpRetransSegs", 0)), h  # type: ignore[union-attr]
        seen += want
    assert seen > (100 if strategy == "ps" else -1)


@needs_tshark
@pytest.mark.parametrize("strategy", ["ps", "ring"])
def test_delivered_bytes_per_receiver_equal_tshark(strategy: str) -> None:
    for h in _captures(strategy):
        f = RUN / strategy / "pcap" / f"{h}.pcap"
        ours = delivered_bytes(read_pcap(f), receiver=_ip(h)).bytes
        theirs = sum(n for (_s, _src, _sp, dst), n in tshark_unique_bytes(f).items() if dst == _ip(h))
        assert theirs > 1_000_000 and abs(ours - theirs) <= 0.01 * theirs, h


def test_the_ps_port_kept_its_rate() -> None:
    cfg = json.loads((RUN / "config.json").read_text())
    ps = cfg["ps_host"]
    port = read_pcap(RUN / "ps" / "pcap" / "ps-port.pcap")
    queue = read_queue_depth(RUN / "ps" / "queue_depth.jsonl")
    res = dequeue_gaps(port, queue, host_link_rate_bps(cfg, ps), receiver=_ip(ps))
    assert res.gaps > 10_000
    assert 0.95 <= res.median_ratio <= 1.05  # type: ignore[operator]
    assert res.achieved_share > 0.9  # type: ignore[operator]


def test_analyze_an_empty_port_capture(capsys: pytest.CaptureFixture[str]) -> None:
    f = RUN / "ring" / "pcap" / "ps-port.pcap"
    if f.stat().st_size != 24:
        pytest.skip("the ring's PS-port capture is not empty in this run")
    assert cli_main(["analyze", str(f), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["packets"] == 0 and res["timeouts"] == 0 and res["delivered_bytes"] == 0
