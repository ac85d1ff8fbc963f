"""TCP options read back from the file (analysis/tcpopts.py) for every link type and layout the
pcap reader accepts, with non-TCP records in between, against the values written and tshark."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from analysis.pcapfile import read_pcap
from analysis.tcpopts import read_options
from tests.test_analysis_trace import tcp_options
from tests.tshark import tshark_fields


def _frame(linktype: int, l3: bytes, vlan: int) -> bytes:
    if linktype == 1:
        tags = b"".join(struct.pack("!HH", 0x8100, 7) for _ in range(vlan))
        return b"\x00" * 12 + tags + b"\x08\x00" + l3
    if linktype == 113:
        return struct.pack("!HHH8sH", 0, 1, 6, b"\x00" * 8, 0x0800) + l3
    if linktype == 276:
        return struct.pack("!HHIHBB8s", 0x0800, 0, 2, 1, 0, 6, b"\x00" * 8) + l3
    return l3  # 101 raw IPv4


def _write(path: Path, linktype: int, order: str, rng: np.random.Generator, n: int = 60) -> list[tuple]:
    """Random packets (TCP with random options, IP options, VLAN tags; UDP in between); returns
    (tsval, tsecr, wscale) of each TCP packet written."""
    want = []
    with open(path, "wb") as fh:
        fh.write(struct.pack(order + "IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 128, linktype))
        for i in range(n):
            if rng.random() < 0.15:
                l3 = struct.pack("!BBHHHBBHII", 0x45, 0, 28, 1, 0, 64, 17, 0, 1, 2) + b"\x00" * 8
            else:
                ts = (int(rng.integers(1 << 32)), int(rng.integers(1 << 32))) if rng.random() < 0.7 else None
                ws = int(rng.integers(0, 15)) if rng.random() < 0.3 else None
                opts = tcp_options(
                    mss=1460 if rng.random() < 0.5 else None,
                    sack_ok=bool(rng.random() < 0.5),
                    ts=ts,
                    wscale=ws,
                )
                doff = (5 + len(opts) // 4) << 4
                tcp = struct.pack("!HHIIBBHHH", 40000, 5000, i, 0, doff, 0x10, 100, 0, 0) + opts
                ipopt = b"\x01\x01\x01\x00" if rng.random() < 0.2 else b""
                ihl = 5 + len(ipopt) // 4
                ip = (
                    struct.pack(
                        "!BBHHHBBHII",
                        0x40 | ihl,
                        0,
                        ihl * 4 + len(tcp) + 100,
                        1,
                        0x4000,
                        64,
                        6,
                        0,
                        0x0A000002,
                        0x0A000001,
                    )
                    + ipopt
                )
                l3 = ip + tcp + b"\xab" * 100
                want.append((ts[0] if ts else -1, ts[1] if ts else -1, ws if ws is not None else -1))
            vlan = int(rng.integers(0, 3)) if linktype == 1 else 0
            data = _frame(linktype, l3, vlan)[:128]
            fh.write(struct.pack(order + "IIII", 100 + i, 0, len(data), len(data) + 50) + data)
    return want


@pytest.mark.parametrize("linktype", [1, 113, 276, 101])
@pytest.mark.parametrize("order", ["<", ">"])
def test_options_as_written(tmp_path: Path, linktype: int, order: str) -> None:
    rng = np.random.default_rng(linktype)
    f = tmp_path / "o.pcap"
    want = _write(f, linktype, order, rng)
    p = read_pcap(f)
    o = read_options(p)
    assert len(p) == len(want)
    assert list(zip(o.tsval.tolist(), o.tsecr.tolist(), o.wscale.tolist(), strict=True)) == want


def test_options_equal_tshark(tmp_path: Path) -> None:
    f = tmp_path / "o.pcap"
    _write(f, 1, "<", np.random.default_rng(9), n=200)
    o = read_options(read_pcap(f))
    rows = tshark_fields(f, "tcp.options.timestamp.tsval", "tcp.options.wscale.shift", display="tcp")
    assert [int(r[0]) if r[0] else -1 for r in rows] == o.tsval.tolist()
    assert [int(r[1]) if r[1] else -1 for r in rows] == o.wscale.tolist()


def test_cut_or_changed_files(tmp_path: Path) -> None:
    f = tmp_path / "o.pcap"
    want = _write(f, 1, "<", np.random.default_rng(3))
    data = f.read_bytes()
    f.write_bytes(data[:-30])
    p = read_pcap(f, allow_truncated=True)
    o = read_options(p)
    assert o.tsval.tolist() == [w[0] for w in want[: len(p)]]
    f.write_bytes(b"\x00" * len(data))  # the file changed under us: no options, no crash
    assert (read_options(p).tsval == -1).all()
