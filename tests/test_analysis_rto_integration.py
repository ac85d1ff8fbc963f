"""A real incast in network namespaces, checked against oracles the analysis does not share:
four sender namespaces push a burst each to one receiver, round after round, through a router
whose port toward the receiver is an HTB class at 20 Mbit/s with a 10-packet pfifo (what OVS's
linux-htb makes of a switch port). Then

- each sender's timeouts (rto.rto_events on its own capture) against its namespace's
  TcpExtTCPTimeouts (nstat), loss probes at most TcpExtTCPLossProbes, retransmitted segments
  exactly TcpRetransSegs;
- delivered bytes at the receiver against what the application sent;
- the router port's dequeue gaps while its queue held packets against the configured 20 Mbit/s.

Needs root, tcpdump and nstat; removes its namespaces afterwards.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from analysis.dequeue import QueueSamples, dequeue_gaps
from analysis.goodput import delivered_bytes
from analysis.pcapfile import read_pcap
from analysis.rto import rto_events
from analysis.tcpopts import read_options
from tests.netns import delete_namespaces, nx, sh, start_tcpdump, stop_tcpdumps, veth
from tests.waiting import pcap_fins, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)"),
    pytest.mark.skipif(
        not (shutil.which("tcpdump") and shutil.which("nstat")), reason="tcpdump/nstat missing"
    ),
]

SENDERS = 4
ROUNDS = 12
BURST = 256 * 1024
RATE_MBIT = 20
NS_R, NS_B = "ilt-rto-r", "ilt-rto-b"
NS_S = [f"ilt-rto-s{i}" for i in range(1, SENDERS + 1)]
B_IP = "10.203.100.1"

RECV = f"""
import socket, threading
n, rounds, burst = {SENDERS}, {ROUNDS}, {BURST}
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('{B_IP}', 5001)); s.listen(n); s.settimeout(60)
print('ready', flush=True)
conns = [s.accept()[0] for _ in range(n)]
total = 0
for c in conns:
    c.settimeout(60)
def drain(c):
    global total
    left = burst
    while left:
        d = c.recv(min(left, 65536))
        if not d:
            raise SystemExit('peer closed')
        left -= len(d)
for r in range(rounds):
    ts = [threading.Thread(target=drain, args=(c,)) for c in conns]
    for t in ts: t.start()
    for t in ts: t.join()
    for c in conns: c.sendall(b'g')   # release the next round: everyone at once (incast)
print(rounds * burst, flush=True)
"""
SEND = f"""
import socket
c = socket.create_connection(('{B_IP}', 5001), timeout=60)
buf = b'x' * {BURST}
for r in range({ROUNDS}):
    c.sendall(buf)
    assert c.recv(1) == b'g'
c.close()
"""


def _teardown() -> None:
    delete_namespaces([NS_R, NS_B, *NS_S])


def _sample_queue(stop: threading.Event, out: list[tuple[float, int]]) -> None:
    """The router port's backlog (packets) every ~10 ms, from `tc -s qdisc` of its pfifo."""
    while not stop.is_set():
        t = time.time()
        txt = nx(NS_R, "tc", "-s", "qdisc", "show", "dev", "ilt-rto-rb", check=False)
        m = re.search(r"qdisc pfifo 10:.*?backlog \S+ (\d+)p", txt, re.S)
        if m:
            out.append(((t + time.time()) / 2, int(m.group(1))))
        stop.wait(max(0.0, 0.010 - (time.time() - t)))


@pytest.fixture(scope="module")
def incast(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    tmp = tmp_path_factory.mktemp("ilt-rto")
    _teardown()
    procs: list[subprocess.Popen] = []
    stop = threading.Event()
    samples: list[tuple[float, int]] = []
    try:
        for ns in [NS_R, NS_B, *NS_S]:
            sh("ip", "netns", "add", ns)
        for i, ns in enumerate(NS_S, start=1):
            veth(ns, f"ilt-rto-v{i}", f"10.203.{i}.1/24", NS_R, f"ilt-rto-r{i}", f"10.203.{i}.2/24")
            nx(ns, "ip", "route", "add", "default", "via", f"10.203.{i}.2")
        veth(NS_R, "ilt-rto-rb", "10.203.100.2/24", NS_B, "ilt-rto-vb", f"{B_IP}/24")
        nx(NS_B, "ip", "route", "add", "default", "via", "10.203.100.2")
        nx(NS_R, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        nx(NS_R, *"tc qdisc add dev ilt-rto-rb root handle 1: htb default 1".split())
        nx(NS_R, *f"tc class add dev ilt-rto-rb parent 1: classid 1:1 htb rate {RATE_MBIT}mbit".split())
        nx(NS_R, *"tc qdisc add dev ilt-rto-rb parent 1:1 handle 10: pfifo limit 10".split())
        caps = {ns: tmp / f"{ns}.pcap" for ns in NS_S}
        caps[NS_B] = tmp / "recv.pcap"
        caps[NS_R] = tmp / "port.pcap"
        ifaces = {
            **{ns: f"ilt-rto-v{i}" for i, ns in enumerate(NS_S, start=1)},
            NS_B: "ilt-rto-vb",
            NS_R: "ilt-rto-rb",
        }
        for ns, f in caps.items():
            procs.append(start_tcpdump(ns, ifaces[ns], f, "-B", "8192"))
        sampler = threading.Thread(target=_sample_queue, args=(stop, samples), daemon=True)
        sampler.start()
        r = subprocess.Popen(
            ["ip", "netns", "exec", NS_B, sys.executable, "-c", RECV], stdout=subprocess.PIPE, text=True
        )
        procs.append(r)
        assert r.stdout is not None and r.stdout.readline().strip() == "ready"
        senders = [subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", SEND]) for ns in NS_S]
        procs.extend(senders)
        t_run = time.time()
        for s in senders:
            assert s.wait(timeout=120) == 0
        print(f"transfer {time.time() - t_run:.1f} s", flush=True)
        got = int(r.communicate(timeout=60)[0].strip())
        for ns, f in caps.items():  # both ends have closed: every FIN is in every capture
            fins = 2 if ns in NS_S else 2 * SENDERS
            wait_for(lambda f=f, n=fins: pcap_fins(f) >= n, 30, f"{fins} FINs in {f.name}")
        stop.set()
        sampler.join(timeout=5)
        dropped = stop_tcpdumps(procs[: len(caps)])
        kernel = {}
        for i, ns in enumerate(NS_S, start=1):
            txt = nx(ns, "nstat", "-az", "-s", "TcpExtTCPTimeouts", "TcpExtTCPLossProbes", "TcpRetransSegs")
            kernel[f"10.203.{i}.1"] = {
                m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)", txt, re.M)
            }
        yield {"caps": caps, "received": got, "kernel": kernel, "samples": samples, "tcpdump_drops": dropped}
    finally:
        stop.set()
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
                pr.wait()
        _teardown()
    assert not any(ns.startswith("ilt-rto") for ns in sh("ip", "netns", "list").split())


def test_transfer_completed_and_captured(incast: dict[str, object]) -> None:
    assert incast["received"] == ROUNDS * BURST
    assert incast["tcpdump_drops"] == 0


def test_timeouts_per_sender_agree_with_the_kernel(incast: dict[str, object]) -> None:
    caps, kernel = incast["caps"], incast["kernel"]
    total = 0
    for i, ns in enumerate(NS_S, start=1):
        ip = f"10.203.{i}.1"
        p = read_pcap(caps[ns])  # type: ignore[index]
        got = rto_events(p, tsval=read_options(p).tsval).totals(ip)
        want = kernel[ip].get("TcpExtTCPTimeouts", 0)  # type: ignore[index]
        print(ip, "timeouts", got["timeouts"], "kernel", kernel[ip])  # type: ignore[index]
        assert abs(got["timeouts"] - want) <= max(2, 0.1 * want), (ip, got, kernel[ip])  # type: ignore[index]
        assert got["loss_probes"] <= kernel[ip].get("TcpExtTCPLossProbes", 0)  # type: ignore[index]
        assert got["retransmits"] == kernel[ip].get("TcpRetransSegs", 0)  # type: ignore[index]
        total += want
    assert total >= 8, f"the incast produced too few timeouts to compare: {kernel}"


def test_delivered_bytes_equal_what_the_application_sent(incast: dict[str, object]) -> None:
    res = delivered_bytes(read_pcap(incast["caps"][NS_B]), receiver=B_IP)  # type: ignore[index]
    per = {f.src: f.bytes for f in res.flows}
    # each sender's byte stream, plus nothing else toward the receiver
    assert per == {f"10.203.{i}.1": ROUNDS * BURST for i in range(1, SENDERS + 1)}
    assert sum(f.late_bytes for f in res.flows) > 0  # losses were repaired: the old timeline undercounts


def test_the_router_port_kept_its_rate(incast: dict[str, object]) -> None:
    samples = incast["samples"]
    assert len(samples) > 100  # type: ignore[arg-type]
    q = QueueSamples(
        t=np.array([s[0] for s in samples]),  # type: ignore[union-attr]
        backlog_packets=np.array([s[1] for s in samples]),
    )  # type: ignore[union-attr]
    res = dequeue_gaps(read_pcap(incast["caps"][NS_R]), q, RATE_MBIT * 1e6, receiver=B_IP)  # type: ignore[index]
    print("dequeue", res.gaps, res.median_ratio, res.percentiles, res.achieved_share)
    assert res.gaps > 500
    assert 0.9 <= res.median_ratio <= 1.1  # type: ignore[operator]
