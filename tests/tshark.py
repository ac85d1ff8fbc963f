"""tshark as the tests' oracle: one way to run it and read its fields.

Every capture figure incastlab computes (retransmissions, delivered bytes, timestamps) is checked
against Wireshark's own dissector. tshark is installed by `make deps`; without it a test that needs
it skips through `require`, which under CI=true fails the run.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
from pathlib import Path

from tests.conftest import require


def need_tshark() -> None:
    """Skip (fail under CI=true) when tshark is not installed."""
    require(None if shutil.which("tshark") else "tshark not installed (make deps)")


def tshark_fields(path: Path, *fields: str, display: str | None = None) -> list[list[str]]:
    """tshark -T fields rows (one list of the fields per packet, in file order)."""
    need_tshark()
    cmd = ["tshark", "-r", str(path), "-T", "fields", "-E", "separator=\t"]
    if display:
        cmd += ["-Y", display]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-500:]
    return [line.split("\t") for line in out.stdout.splitlines()]


def tshark_count(path: Path, display: str) -> int:
    """How many packets of the capture match the display filter."""
    return len(tshark_fields(path, "frame.number", display=display))


def tshark_unique_bytes(path: Path) -> dict[tuple[str, str, str, str], int]:
    """{(stream, src, srcport, dst): unique payload bytes}: the union of each direction's sequence
    ranges (what a receiver got at least once), from tshark's raw sequence numbers."""
    ranges: dict[tuple[str, str, str, str], list[tuple[int, int]]] = collections.defaultdict(list)
    first: dict[tuple[str, str, str, str], int] = {}
    for st, src, sp, dst, seq, ln, syn in tshark_fields(
        path, "tcp.stream", "ip.src", "tcp.srcport", "ip.dst", "tcp.seq_raw", "tcp.len", "tcp.flags.syn"
    ):
        n = int(ln or 0)
        if not n:
            continue
        key = (st, src, sp, dst)
        s = int(seq) + (syn == "1")
        b = first.setdefault(key, s)
        r = ((s - b + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)  # unwrapped, relative to the first
        ranges[key].append((r, r + n))
    out = {}
    for key, rs in ranges.items():
        rs.sort()
        tot, (lo, hi) = 0, rs[0]
        for a, b in rs[1:]:
            if a > hi:
                tot, lo, hi = tot + hi - lo, a, b
            else:
                hi = max(hi, b)
        out[key] = tot + hi - lo
    return out


def tshark_delivered_bytes(path: Path, dst_ip: str) -> int:
    """Unique payload bytes the capture shows going to dst_ip, over every connection."""
    return sum(n for (_st, _src, _sp, dst), n in tshark_unique_bytes(path).items() if dst == dst_ip)


def tshark_host_matrix(pcaps: dict[str, Path], ips: dict[str, str]) -> dict[str, int]:
    """{"a->b": unique payload bytes from host a to host b} for every ordered pair of the hosts in
    `ips` (host -> address), each counted in the receiver b's own capture (`pcaps[b]`)."""
    out = {}
    for b in ips:
        seen = tshark_unique_bytes(pcaps[b])
        for a in ips:
            if a != b:
                out[f"{a}->{b}"] = sum(
                    n for (_, src, _, dst), n in seen.items() if (src, dst) == (ips[a], ips[b])
                )
    return out
