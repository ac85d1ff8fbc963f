"""Kernel counters of a host's network namespace: TCP (nstat's names) and its interface's bytes.

Read from /proc/<pid>/net of the host shell's pid, before and after a measurement; the difference
is a record's hosts.json, the independent oracle of the captures' figures (retransmissions,
timeouts, bytes).
"""

from __future__ import annotations

import re
from pathlib import Path

from runmodel.records import HostCounters


def parse_nstat(snmp: str, netstat: str) -> dict[str, int]:
    """/proc/net/snmp and /proc/net/netstat as nstat names them (TcpRetransSegs, TcpExtTCPTimeouts, ...).

    Both files hold pairs of lines, a header line of field names and a line of values, each line
    starting with its group ("Tcp:", "TcpExt:"); only the TCP groups are kept.
    """
    out: dict[str, int] = {}
    for text in (snmp, netstat):
        lines = [ln.split() for ln in text.splitlines() if ln.strip()]
        for head, vals in zip(lines[::2], lines[1::2], strict=False):
            group = head[0].rstrip(":")
            if group not in ("Tcp", "TcpExt") or vals[0] != head[0]:
                continue
            for name, val in zip(head[1:], vals[1:], strict=False):
                try:
                    out[group + name] = int(val)
                except ValueError:
                    continue
    return out


def read_host_counters(name: str, pid: int) -> HostCounters:
    """TCP counters and interface bytes of one host's namespace, read from /proc/<pid>/net.

    Read through the host shell's pid, not by running a command in the shell: a shell whose last
    command was cut short by Ctrl-C never answers again, while its /proc files always do.
    """
    base = Path(f"/proc/{pid}/net")
    kernel = parse_nstat((base / "snmp").read_text(), (base / "netstat").read_text())
    rx = tx = 0
    m = re.search(rf"{name}-eth0:\s*(\d+)(?:\s+\d+){{7}}\s+(\d+)", (base / "dev").read_text())
    if m:
        rx, tx = int(m.group(1)), int(m.group(2))
    return HostCounters(
        tcp_retransmits=kernel.get("TcpRetransSegs", 0), tx_bytes=tx, rx_bytes=rx, kernel=kernel
    )


def host_counters(pid: int, name: str) -> HostCounters:
    """read_host_counters with the pid first: the form Fabric.host_call calls (on the host's machine)."""
    return read_host_counters(name, pid)


def counter_deltas(before: HostCounters, after: HostCounters) -> HostCounters:
    """after - before; `kernel` keeps only the counters that moved (gauges such as TcpCurrEstab are
    differences too: read them as such)."""
    kernel = {
        k: v - before.kernel.get(k, 0) for k, v in sorted(after.kernel.items()) if v - before.kernel.get(k, 0)
    }
    return HostCounters(
        after.tcp_retransmits - before.tcp_retransmits,
        after.tx_bytes - before.tx_bytes,
        after.rx_bytes - before.rx_bytes,
        kernel,
    )
