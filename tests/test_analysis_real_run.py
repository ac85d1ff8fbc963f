"""The analyses on a real compare run (the shared `compare_run`) against independent oracles: the
kernel's own TCP counters per host (hosts.json), tshark, and the configured link rate."""

from __future__ import annotations

import json

import pytest

from analysis.dequeue import QueueSamples, dequeue_gaps
from analysis.goodput import delivered_bytes
from analysis.pcapfile import read_pcap
from analysis.rto import rto_events
from analysis.tcpopts import read_options
from incastlab.cli import main as cli_main
from runmodel.folder import RunFolder
from tests.conftest import timeout_bounds
from tests.tshark import tshark_delivered_bytes

pytestmark = pytest.mark.integration


def _captured_hosts(run, strategy: str) -> list[str]:
    hosts = json.loads((run / strategy / "hosts.json").read_text())
    return sorted(h for h in hosts if (run / strategy / "pcap" / f"{h}.pcap").is_file())


def _ip(run, host: str) -> str:
    return RunFolder(run).plan().host(host).ip


@pytest.mark.parametrize("strategy", ["ps", "ring"])
def test_timeouts_per_host_agree_with_the_kernel(compare_run, strategy: str) -> None:
    """Each host's capture, the flows it sent: timeouts against its TcpExtTCPTimeouts, a worker to
    within one (10 % from ten on) with and without TSval, the PS host, whose sends wait in its own
    1000-packet queue, between half and two more (tests.conftest.timeout_bounds) with TSval; loss
    probes never more than TcpExtTCPLossProbes; retransmitted segments exactly TcpRetransSegs."""
    run, _ = compare_run
    hosts = json.loads((run / strategy / "hosts.json").read_text())
    ps_host = RunFolder(run).plan().ps_host
    seen = 0
    for h in _captured_hosts(run, strategy):
        p = read_pcap(run / strategy / "pcap" / f"{h}.pcap", allow_truncated=True)
        kern = hosts[h]["kernel"]
        want = int(kern.get("TcpExtTCPTimeouts", 0))
        # without TSval a sender's own queue hides when it sent: a PS host's count is not held then
        for tsval in (read_options(p).tsval, None) if h != ps_host else (read_options(p).tsval,):
            got = rto_events(p, tsval=tsval).totals(_ip(run, h))
            lo, hi = timeout_bounds(want, ps_host=h == ps_host)
            assert lo <= got["timeouts"] <= hi, (h, tsval is not None, got, want)
            assert got["loss_probes"] <= int(kern.get("TcpExtTCPLossProbes", 0)), h
            assert got["retransmits"] == int(kern.get("TcpRetransSegs", 0)), h
        seen += want
    if strategy == "ps":
        assert seen > 0, "an incast into a 20-packet buffer times out"


@pytest.mark.parametrize("strategy", ["ps", "ring"])
def test_delivered_bytes_per_receiver_equal_tshark(compare_run, strategy: str) -> None:
    run, _ = compare_run
    for h in _captured_hosts(run, strategy):
        f = run / strategy / "pcap" / f"{h}.pcap"
        ip = _ip(run, h)
        ours = delivered_bytes(read_pcap(f), receiver=ip).bytes
        theirs = tshark_delivered_bytes(f, ip)
        assert theirs > 100_000 and abs(ours - theirs) <= 0.01 * theirs, h


def test_the_ps_port_kept_its_rate(compare_run) -> None:
    run, _ = compare_run
    folder = RunFolder(run)
    plan = folder.plan()
    port = read_pcap(run / "ps" / "pcap" / "ps-port.pcap")
    queue = QueueSamples.of_port(folder.strategy("ps").queue_samples(), plan.ps_port.name)
    ps = plan.host(plan.ps_host)
    res = dequeue_gaps(port, queue, ps.rate_mbit * 1e6, receiver=ps.ip)
    assert res.gaps > 1000
    assert 0.95 <= res.median_ratio <= 1.05
    assert res.achieved_share > 0.9


def test_analyze_the_rings_empty_ps_port_capture(compare_run, capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = compare_run
    f = run / "ring" / "pcap" / "ps-port.pcap"
    assert f.stat().st_size == 24, "the ring sends nothing to the PS host: a header-only capture"
    assert cli_main(["analyze", str(f), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["packets"] == 0 and res["timeouts"] == 0 and res["delivered_bytes"] == 0
