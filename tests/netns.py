"""Network namespaces joined by veth pairs, and tcpdump inside them: the small real networks the
analysis integration tests send through (no Mininet, no OVS), so that what they capture and what the
kernel counts can be checked against each other. Needs root, iproute2, ethtool and tcpdump.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path


def sh(*args: str, check: bool = True) -> str:
    """Run a command (60 s at most); its stdout."""
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=60).stdout


def nx(ns: str, *args: str, check: bool = True) -> str:
    """Run a command inside namespace `ns`; its stdout."""
    return sh("ip", "netns", "exec", ns, *args, check=check)


def delete_namespaces(names: Iterable[str]) -> None:
    """Delete the namespaces that exist of `names` (their veth ends go with them)."""
    for ns in names:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def veth(ns_a: str, a: str, ip_a: str, ns_b: str, b: str, ip_b: str) -> None:
    """A veth pair a (in ns_a, address ip_a) -- b (in ns_b, ip_b), both up, with checksum and
    segmentation offloads off so that captures show the packets as they go on the wire."""
    sh("ip", "link", "add", a, "netns", ns_a, "type", "veth", "peer", "name", b, "netns", ns_b)
    for ns, ifc, ip in ((ns_a, a, ip_a), (ns_b, b, ip_b)):
        nx(ns, "ip", "addr", "add", ip, "dev", ifc)
        nx(ns, "ip", "link", "set", ifc, "up")
        nx(ns, "ethtool", "-K", ifc, "tx", "off", "tso", "off", "gso", "off", "gro", "off", check=False)


def start_tcpdump(ns: str, ifc: str, pcap: Path, *options: str) -> subprocess.Popen[str]:
    """tcpdump of the TCP packets on `ifc` in `ns` into `pcap` (128-byte snaplen, written packet by
    packet), extra `options` added; returned once it says it listens."""
    cap = subprocess.Popen(
        ["ip", "netns", "exec", ns, "tcpdump", "-i", ifc, "-s", "128", "-U", "--immediate-mode", *options]
        + ["-w", str(pcap), "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert cap.stderr is not None
    while "listening on" not in (line := cap.stderr.readline()):
        assert line, "tcpdump exited before it listened"
    return cap


def stop_tcpdumps(caps: Iterable[subprocess.Popen[str]]) -> int:
    """Stop the tcpdumps; the packets they say the kernel dropped before they could write them."""
    said = []
    for cap in caps:
        cap.terminate()
        said.append(cap.communicate(timeout=10)[1])
    return sum(int(x) for s in said for x in re.findall(r"(\d+) packets dropped by kernel", s))
