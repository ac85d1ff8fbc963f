"""capture/ on a real shaped link: a veth from the root namespace into `ilt-cap-b`.

The root end `iltcap0` stands in for a switch's PS port: htb 1: with leaf class 1:1 at 20 mbit and
txqueuelen 20, so its pfifo holds 20 packets. Paced UDP from four sockets offers 1.5x the rate, so
the queue fills and overflows; the sampler and the two pcaps are checked against the kernel's own
counters and against each other.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from analysis.packets import str_to_ip
from analysis.pcapfile import read_pcap
from capture.pcap import CaptureError, CapturePoint, PcapCapture
from capture.queue_depth import QueueSampler, read_root_qdiscs

NS = "ilt-cap-b"
ROOT_IF, NS_IF = "iltcap0", "iltcap1"
SPARE_IF, SPARE_PEER = "iltcapx0", "iltcapx1"
ROOT_IP, NS_IP = "198.18.77.1", "198.18.77.2"  # RFC 2544 benchmark range: never routed here
QUEUE_LIMIT = 20


def _missing_tool() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("tcpdump", "tc", "ip", "capinfos"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    return None


pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(_missing_tool() is not None, reason=str(_missing_tool())),
]


def sh(*argv: str, check: bool = True) -> str:
    """Run one command (argv, no shell) and return its stdout."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def teardown_links() -> None:
    """Remove this test's namespace and veths (deleting one end of a veth removes both)."""
    if NS in sh("ip", "netns", "list", check=False).split():
        sh("ip", "netns", "del", NS, check=False)
    for dev in (ROOT_IF, SPARE_IF):
        if Path(f"/sys/class/net/{dev}").exists():
            sh("ip", "link", "del", dev, check=False)


def ns_popen(argv: list[str], **kw: Any) -> subprocess.Popen[Any]:
    """Like Mininet's host.popen: run argv inside the namespace (ip netns exec execs, same pid)."""
    return subprocess.Popen(["ip", "netns", "exec", NS, *argv], **kw)


@dataclass(frozen=True)
class Link:
    """The shaped veth: root end ROOT_IF, namespace end NS_IF."""

    ns_mac: str


@pytest.fixture
def link() -> Iterator[Link]:
    """Build the shaped veth; always tear it down, and check nothing of it is left."""
    teardown_links()
    try:
        sh("ip", "netns", "add", NS)
        sh("ip", "link", "add", ROOT_IF, "type", "veth", "peer", "name", NS_IF, "netns", NS)
        # no IPv6 chatter through the shaped class, so every packet it counts is ours
        Path(f"/proc/sys/net/ipv6/conf/{ROOT_IF}/disable_ipv6").write_text("1\n")
        sh("ip", "netns", "exec", NS, "sysctl", "-qw", f"net.ipv6.conf.{NS_IF}.disable_ipv6=1")
        # the leaf pfifo takes its limit from txqueuelen when the class is made: set it first
        sh("ip", "link", "set", ROOT_IF, "txqueuelen", str(QUEUE_LIMIT))
        sh("ip", "addr", "add", f"{ROOT_IP}/30", "dev", ROOT_IF)
        sh("ip", "-n", NS, "addr", "add", f"{NS_IP}/30", "dev", NS_IF)
        sh("ip", "link", "set", ROOT_IF, "up")
        sh("ip", "-n", NS, "link", "set", NS_IF, "up")
        sh("ip", "-n", NS, "link", "set", "lo", "up")
        sh("tc", "qdisc", "add", "dev", ROOT_IF, "root", "handle", "1:", "htb", "default", "1")
        sh("tc", "class", "add", "dev", ROOT_IF, "parent", "1:", "classid", "1:1", "htb", "rate", "20mbit")
        # static neighbours: no ARP to be dropped in (or to bypass) the full queue
        root_mac = Path(f"/sys/class/net/{ROOT_IF}/address").read_text().strip()
        ns_mac = sh("ip", "netns", "exec", NS, "cat", f"/sys/class/net/{NS_IF}/address").strip()
        sh("ip", "neigh", "replace", NS_IP, "lladdr", ns_mac, "dev", ROOT_IF, "nud", "permanent")
        sh("ip", "-n", NS, "neigh", "replace", ROOT_IP, "lladdr", root_mac, "dev", NS_IF, "nud", "permanent")
        yield Link(ns_mac=ns_mac)
    finally:
        teardown_links()
        left = [n for n in sh("ip", "netns", "list", check=False).split() if n.startswith("ilt-cap")]
        left += [d.name for d in Path("/sys/class/net").iterdir() if d.name.startswith("iltcap")]
        assert not left, f"left behind: {left}"


def tc_class() -> dict[str, int]:
    """The kernel's own counters of class 1:1, read with tc."""
    out = sh("tc", "-s", "class", "show", "dev", ROOT_IF, "classid", "1:1")
    m = re.search(r"Sent \d+ bytes (\d+) pkt \(dropped (\d+),", out)
    assert m is not None, out
    return {"drops": int(m.group(2)), "sent_packets": int(m.group(1))}


def blast_udp(flows: int = 4, per_flow: int = 1000, seconds: float = 1.5, size: int = 1400) -> int:
    """Paced UDP from `flows` sockets (5.6 MB at 30 Mbit/s by default); returns datagrams sent."""
    sent = [0] * flows

    def flow(i: int) -> None:
        payload = bytes(size)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            start = time.monotonic()
            for k in range(per_flow):
                delay = start + k * seconds / per_flow - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                s.sendto(payload, (NS_IP, 9000 + i))  # a local qdisc drop is silent for UDP
                sent[i] += 1

    threads = [threading.Thread(target=flow, args=(i,)) for i in range(flows)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(sent)


def capinfos_count(path: Path) -> int:
    """Packets in a pcap as Wireshark's capinfos counts them."""
    out = sh("capinfos", "-M", "-c", "-T", "-r", str(path)).strip()
    return int(out.split("\t")[-1])


def my_tcpdumps(marker: str) -> list[int]:
    """tcpdump processes whose command line mentions `marker` (this test's tmp dir)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"tcpdump") and marker.encode() in b" ".join(cmd):
                pids.append(int(entry.name))
    return pids


def both_ends(tmp_path: Path, bpf: str) -> PcapCapture:
    return PcapCapture(
        [
            CapturePoint("root-end", ROOT_IF, tmp_path / "pcap" / "root-end.pcap"),
            CapturePoint("ns-end", NS_IF, tmp_path / "pcap" / "ns-end.pcap", ns_popen),
        ],
        bpf=bpf,
        base_dir=tmp_path,
    )


def test_overload_queue_depth_and_pcaps_agree_with_kernel(link: Link, tmp_path: Path) -> None:
    before = tc_class()
    cap = both_ends(tmp_path, "udp")
    cap.start()
    sampler = QueueSampler([ROOT_IF], tmp_path / "queue_depth.jsonl")
    sampler.start()
    sent = blast_udp()
    summary = sampler.stop()
    doc = cap.stop()
    after = tc_class()

    assert summary["backend"] == "netlink-qdisc"
    assert summary["error"] is None
    assert 15 <= summary["max_backlog_packets"] <= QUEUE_LIMIT
    assert summary["max_backlog_bytes"] >= 15 * 1400
    assert summary["drops_delta"] == after["drops"] - before["drops"] > 0
    assert summary["samples"] >= 50

    lines = [json.loads(line) for line in (tmp_path / "queue_depth.jsonl").read_text().splitlines()]
    assert 50 <= len(lines) <= summary["samples"]  # a tick whose counters did not change writes none
    gaps = [b["t"] - a["t"] for a, b in zip(lines, lines[1:], strict=False)]
    assert statistics.median(gaps) == pytest.approx(0.01, abs=0.003)  # the configured interval
    assert summary["interval_s_median"] == pytest.approx(0.01, abs=0.003)
    assert set(lines[0]) == {"t", "backlog_bytes", "backlog_packets", "drops", "sent_packets", "port"}
    assert {ln["port"] for ln in lines} == {ROOT_IF}
    assert all(a["t"] < b["t"] for a, b in zip(lines, lines[1:], strict=False))
    # the last sample is taken at stop(): what was queued then is sent later, nothing more is dropped
    assert lines[-1]["drops"] == after["drops"]
    assert lines[-1]["sent_packets"] + lines[-1]["backlog_packets"] == after["sent_packets"]

    # every datagram was either sent by the class (and captured on both ends) or dropped by it
    root, ns = doc["points"]
    assert doc["complete"] is True, doc
    assert root["file"] == "pcap/root-end.pcap" and ns["file"] == "pcap/ns-end.pcap"
    assert root["packets_captured"] == capinfos_count(tmp_path / root["file"]) > 0
    assert ns["packets_captured"] == capinfos_count(tmp_path / ns["file"]) == root["packets_captured"]
    assert root["packets_captured"] == after["sent_packets"] - before["sent_packets"]
    assert sent == root["packets_captured"] + summary["drops_delta"]
    assert json.loads((tmp_path / "capture.json").read_text()) == doc
    assert my_tcpdumps(str(tmp_path)) == []


def test_root_qdisc_drops_of_one_dump_are_tcs(link: Link) -> None:
    """read_root_qdiscs (one netlink dump for all ports) against `tc -s qdisc show` of each port."""
    blast_udp(per_flow=500, seconds=0.75)
    got = read_root_qdiscs([ROOT_IF, "iltcap-none"])
    out = sh("tc", "-s", "qdisc", "show", "dev", ROOT_IF)
    root = out.split("\nqdisc ")[0]  # tc lists the root qdisc first
    assert root.startswith("qdisc htb 1: root")
    tc_drops = int(root.split("dropped ")[1].split(",")[0])
    assert set(got) == {ROOT_IF}  # no such interface: left out
    assert got[ROOT_IF].drops == tc_drops > 0


def test_light_tcp_flow_is_captured_completely_on_both_ends(link: Link, tmp_path: Path) -> None:
    server = ns_popen(
        [
            sys.executable,
            "-c",
            (
                "import socket,sys\n"
                f"s=socket.create_server(('{NS_IP}',5201)); print('ready', flush=True)\n"
                "c,_=s.accept(); n=0\n"
                "while (b:=c.recv(65536)): n+=len(b)\n"
                "print(n, flush=True)\n"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        with both_ends(tmp_path, "tcp") as cap:
            with socket.create_connection((NS_IP, 5201), timeout=10) as c:
                c.sendall(bytes(256 * 1024))
            received = int(server.stdout.readline())
        doc = cap.stop()
    finally:
        server.kill()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()
    assert received == 256 * 1024
    root, ns = doc["points"]
    assert doc["complete"] is True, doc
    assert root["packets_captured"] == root["packets_received"] == capinfos_count(tmp_path / root["file"])
    assert ns["packets_captured"] == capinfos_count(tmp_path / ns["file"])
    assert root["packets_captured"] == ns["packets_captured"] > 0
    # veths do GSO, so packets may be up to 64 KB: count the payload bytes, not the packets
    for end in (root, ns):
        pk = read_pcap(tmp_path / end["file"])
        assert int(pk.plen[pk.dst == str_to_ip(NS_IP)].sum()) == 256 * 1024
    assert cap.stop() == doc
    assert my_tcpdumps(str(tmp_path)) == []


def test_missing_interface_fails_start_with_one_line_naming_the_point(link: Link, tmp_path: Path) -> None:
    cap = PcapCapture(
        [
            CapturePoint("root-end", ROOT_IF, tmp_path / "a.pcap"),
            CapturePoint("ps-port", "iltcap-nope", tmp_path / "b.pcap"),
        ],
        base_dir=tmp_path,
    )
    with pytest.raises(CaptureError) as err:
        cap.start()
    assert "\n" not in str(err.value) and "'ps-port'" in str(err.value) and "iltcap-nope" in str(err.value)
    assert my_tcpdumps(str(tmp_path)) == []  # the point that had started was stopped as well
    doc = cap.stop()
    assert cap.stop() == doc
    assert [p["complete"] for p in doc["points"]] == [True, False] and doc["complete"] is False


def test_interface_removed_mid_capture_is_reported_incomplete(link: Link, tmp_path: Path) -> None:
    sh("ip", "link", "add", SPARE_IF, "type", "veth", "peer", "name", SPARE_PEER)
    sh("ip", "link", "set", SPARE_IF, "up")
    cap = PcapCapture(
        [
            CapturePoint("doomed", SPARE_IF, tmp_path / "d.pcap"),
            CapturePoint("root-end", ROOT_IF, tmp_path / "r.pcap"),
        ]
    )
    cap.start()
    sh("ip", "link", "del", SPARE_IF)
    doc = cap.stop()
    doomed, root = doc["points"]
    assert doomed["complete"] is False and "disappeared" in doomed["error"]
    assert root["complete"] is True and doc["complete"] is False
    assert my_tcpdumps(str(tmp_path)) == []
