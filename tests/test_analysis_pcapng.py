"""pcapng and IPv6 captures read like classic IPv4 pcap: real captures converted (editcap, or the
plain writer in tests/pcapwrite.py for what editcap does not write) and checked against tshark.

The oracle is tshark reading the very same converted file: its retransmission count, delivered
bytes, frame numbers, timestamps and TCP fields. The counts tshark has no figure for (timeout
events) must equal those of the original classic pcap.
"""

from __future__ import annotations

import json
import subprocess
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from analysis.errors import TruncatedPcapError
from analysis.packets import ip_to_str
from analysis.pcapfile import read_pcap
from incastlab.cli import main as cli_main
from tests import pcapwrite as pw
from tests.tshark import need_tshark, tshark_count, tshark_delivered_bytes, tshark_fields

DATA = Path(__file__).parent / "data"
# a PS host's capture (141 retransmissions) and an incast sender's (timeouts)
CAPTURES = [DATA / "run-small/ps/pcap/h1.pcap", DATA / "incast-small/base/n04/pcap/h5.pcap"]
_KEYS = ("records", "packets", "segments", "bytes", "retransmits", "dup_acks", "timeouts", "delivered_bytes")


def _analyze(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    assert cli_main(["analyze", str(path), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _editcap(src: Path, dst: Path, fmt: str) -> Path:
    need_tshark()
    subprocess.run(["editcap", "-F", fmt, str(src), str(dst)], check=True, capture_output=True)
    return dst


def _ns(epoch: str) -> int:
    return int(Decimal(epoch) * 10**9)


def _same_as_tshark(path: Path) -> None:
    """Every TCP packet's frame number, time, ports, raw sequence number and length as tshark reads them."""
    p = read_pcap(path)
    rows = tshark_fields(
        path, "frame.number", "frame.time_epoch", "tcp.srcport", "tcp.seq_raw", "tcp.len", display="tcp"
    )
    assert len(rows) == len(p) > 40
    want = np.array([[int(r[0]), int(r[2]), int(r[3]), int(r[4])] for r in rows], dtype=np.int64)
    got = np.stack([p.frame, p.sport.astype(np.int64), p.seq.astype(np.int64), p.plen], axis=1)
    assert np.array_equal(got, want)
    assert [_ns(r[1]) for r in rows] == p.ts_ns.tolist()


@pytest.mark.parametrize("cap", CAPTURES, ids=["ps-host", "incast-sender"])
@pytest.mark.parametrize("kind", ["pcapng", "pcapng-ns", "ipv6", "ipv6-ext-pcapng"])
def test_conversions_give_tsharks_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cap: Path, kind: str
) -> None:
    """A capture converted to pcapng (micro- and nanosecond), to IPv6 (classic pcap) and to IPv6
    with extension headers in pcapng: the retransmissions and delivered bytes of tshark on the
    converted file, every other count (timeouts among them) as on the original."""
    conv = tmp_path / f"conv-{kind}"
    ipmap = str
    if kind == "pcapng":
        _editcap(cap, conv, "pcapng")
    elif kind == "pcapng-ns":
        _editcap(_editcap(cap, tmp_path / "ns.pcap", "nsecpcap"), conv, "pcapng")
    else:
        lt, snap, recs = pw.read_records(cap)
        v6 = pw.to_ipv6(recs, ext_every=7 if "ext" in kind else 0)
        pw.write_pcap(tmp_path / "v6.pcap", lt, snap, v6)
        if "pcapng" in kind:
            _editcap(tmp_path / "v6.pcap", conv, "pcapng")
        else:
            (tmp_path / "v6.pcap").rename(conv)
        ipmap = pw.v6_text
    orig, got = _analyze(cap, capsys), _analyze(conv, capsys)
    assert {k: got[k] for k in _KEYS} == {k: orig[k] for k in _KEYS}
    assert got["timeouts_by_sender"] == {ipmap(k): v for k, v in orig["timeouts_by_sender"].items()}
    assert got["retransmits"] == tshark_count(conv, "tcp.analysis.retransmission") > 10
    field = "ipv6.dst" if kind.startswith("ipv6") else "ip.dst"
    for ip, n in got["delivered_by_receiver"].items():
        assert n == (tshark_delivered_bytes(conv, ip) if field == "ip.dst" else _v6_delivered(conv, ip)), ip
    _same_as_tshark(conv)


def _v6_delivered(path: Path, dst: str) -> int:
    """tshark's unique payload bytes to an IPv6 receiver: the union of each connection's
    sequence ranges (as tests/tshark.tshark_unique_bytes does for IPv4)."""
    ranges: dict[str, list[tuple[int, int]]] = {}
    for st, seq, ln in tshark_fields(
        path, "tcp.stream", "tcp.seq", "tcp.len", display=f"ipv6.dst=={dst} && tcp.len>0"
    ):
        ranges.setdefault(st, []).append((int(seq), int(seq) + int(ln)))
    tot = 0
    for rs in ranges.values():
        rs.sort()
        lo, hi = rs[0]
        for a, b in rs[1:]:
            if a > hi:
                tot, lo, hi = tot + hi - lo, a, b
            else:
                hi = max(hi, b)
        tot += hi - lo
    return tot


def _hand_built(cap: Path, path: Path) -> int:
    """A pcapng file of the capture's packets that editcap never writes: two sections (little- and
    big-endian); in the first two Ethernet interfaces (microseconds; nanoseconds and an offset of
    an hour, if_tsoffset) taking turns, some obsolete packet blocks, a comment option, statistics
    and unknown blocks; in the second an
    interface of another link type that is skipped, and raw IPv6 at 2^-20 s resolution, the last
    packets left out. Returns how many frames were written (packets and custom blocks, which
    Wireshark numbers as frames too)."""
    lt, snap, recs = pw.read_records(cap)
    assert lt == 1
    half = len(recs) // 2
    le, be = "<", ">"
    out = [pw.shb(le), pw.idb(le, 1, snap), pw.idb(le, 1, snap, tsresol=9, tsoffset=3600)]
    for i, r in enumerate(recs[:half]):
        iface = i % 2
        ts = pw.in_units(r.ts_ns - 3600 * 10**9, 9) if iface else pw.in_units(r.ts_ns, None)
        if i % 11 == 5:
            out.append(pw.obsolete_pb(le, iface, ts, r.data, r.wire))
        else:
            out.append(pw.epb(le, iface, ts, r.data, r.wire, comment=b"hello" if i % 13 == 0 else b""))
        if i % 97 == 0:
            out += [pw.isb(le, iface), pw.block(le, 0x40000BAD, b"custom!")]  # tshark: a frame
    # section 2: interface 0 is USB (link type 220, no packets of it are decoded), 1 raw IPv6
    out += [pw.shb(be), pw.idb(be, 220, 0), pw.idb(be, 101, snap, tsresol=0x94)]
    six = pw.to_ipv6(recs[half:])
    for r in six[:-20]:
        out.append(pw.epb(be, 1, pw.in_units(r.ts_ns, 0x94), r.data[14:], r.wire - 14))
    out.append(pw.block(be, 4, b"\0" * 4))  # a name resolution block (empty)
    path.write_bytes(b"".join(out))
    return half + len(range(0, half, 97)) + len(six) - 20


def test_hand_built_sections_interfaces_and_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Several sections, byte orders, interfaces, link types, resolutions and block kinds: every
    packet's fields and time as tshark reads them, and tshark's retransmission count."""
    f = tmp_path / "hand.pcapng"
    n = _hand_built(CAPTURES[0], f)
    p = read_pcap(f)
    assert p.records == n and p.big_endian is False and p.nanosecond is True
    _same_as_tshark(f)
    got = _analyze(f, capsys)
    assert got["retransmits"] == tshark_count(f, "tcp.analysis.retransmission") > 10
    addrs = {ip_to_str(a) for a in np.unique(p.src).tolist()}
    assert any(":" in a for a in addrs) and any("." in a for a in addrs)


def test_simple_packet_blocks_take_the_interfaces_snaplen(tmp_path: Path) -> None:
    """Simple packet blocks mixed with enhanced ones: interface 0's link type, captured length
    min(original, snaplen) (both as tshark reads them); no time of their own (tshark shows none),
    so each takes the time of the enhanced block before it (the first one's before any)."""
    lt, snap, recs = pw.read_records(CAPTURES[1])
    f = tmp_path / "spb.pcapng"
    body = [pw.shb("<"), pw.idb("<", lt, 64)]
    want_ts, last = [], None
    for i, r in enumerate(recs):
        if i % 4 == 1:
            body.append(pw.epb("<", 0, pw.in_units(r.ts_ns, None), r.data[:64], r.wire))
            last = r.ts_ns // 1000 * 1000
        else:
            body.append(pw.spb("<", r.data[:64], r.wire))
        want_ts.append(last)
    want_ts[0] = want_ts[1]
    f.write_bytes(b"".join(body))
    p = read_pcap(f)
    rows = tshark_fields(f, "frame.number", "tcp.seq_raw", "frame.cap_len", display="tcp")
    assert p.frame.tolist() == [int(r[0]) for r in rows] and p.seq.tolist() == [int(r[1]) for r in rows]
    assert p.caplen.tolist() == [int(r[2]) for r in rows] and (p.caplen == 64).all()
    assert p.ts_ns.tolist() == [want_ts[i - 1] for i in p.frame.tolist()]


def _errline(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> str:
    assert cli_main(["analyze", str(path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_malformed_pcapng_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Cut and corrupt pcapng files: one line naming the problem and exit 2; a cut file read with
    --allow-truncated gives the packets before the cut (as many as tshark reads)."""
    good = _editcap(CAPTURES[1], tmp_path / "g.pcapng", "pcapng")
    raw = good.read_bytes()
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(raw[: len(raw) - 50])
    with pytest.raises(TruncatedPcapError) as ei:
        read_pcap(cut)
    assert "truncated pcapng" in str(ei.value)
    p = read_pcap(cut, allow_truncated=True)
    assert p.truncated_at == ei.value.record and p.records == ei.value.record - 1
    # tshark reads the same packets, then fails on the cut one
    ran = subprocess.run(
        ["tshark", "-r", str(cut), "-T", "fields", "-e", "frame.number"], capture_output=True, text=True
    )
    assert ran.returncode != 0 and p.records == len(ran.stdout.split()) > 50
    assert "truncated pcapng" in _errline(capsys, cut)

    def corrupt(name: str, at: int, value: bytes) -> Path:
        f = tmp_path / name
        b = bytearray(raw)
        b[at : at + len(value)] = value
        f.write_bytes(bytes(b))
        return f

    shb_len = int.from_bytes(raw[4:8], "little")
    idb_len = int.from_bytes(raw[shb_len + 4 : shb_len + 8], "little")
    epb = shb_len + idb_len  # the first packet block
    assert "byte-order magic" in _errline(capsys, corrupt("bom.pcapng", 8, b"\1\2\3\4"))
    assert "version 2" in _errline(capsys, corrupt("ver.pcapng", 12, b"\2\0"))
    assert "length at its end" in _errline(
        capsys, corrupt("trail.pcapng", epb + 4, (132).to_bytes(4, "little"))
    )
    assert "names interface 3" in _errline(capsys, corrupt("if.pcapng", epb + 8, b"\3\0\0\0"))
    assert "captured length" in _errline(capsys, corrupt("cap.pcapng", epb + 20, b"\xff\xff\0\0"))
    assert "length 13" in _errline(capsys, corrupt("len.pcapng", epb + 4, b"\x0d\0\0\0"))


def test_help_says_pcapng_and_ipv6(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #30: --help tells that pcapng (and IPv6) is read."""
    assert cli_main(["analyze", "--help"]) == 0
    out = capsys.readouterr().out
    assert "pcapng" in out and "IPv6" in out
    assert cli_main(["inspect", "--help"]) == 0
    assert "pcapng" in capsys.readouterr().out


@pytest.mark.parametrize("linktype", [9, 242])
@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_ppp_and_ipoib_give_tsharks_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], linktype: int, fmt: str
) -> None:
    """Issue #36: TCP over PPP (link type 9, the four header forms of RFC 1661/1662 in turn) and
    IP over InfiniBand (242) read like Ethernet: the PS host's capture re-framed gives tshark's
    retransmissions and delivered bytes on the re-framed file and every count of the original."""
    cap = CAPTURES[0]
    lt, snap, recs = pw.read_records(cap)
    f = tmp_path / f"lt{linktype}.pcap"
    pw.write_pcap(f, linktype, snap, pw.relink(recs, linktype))
    if fmt == "pcapng":
        f = _editcap(f, tmp_path / f"lt{linktype}.pcapng", "pcapng")
    orig, got = _analyze(cap, capsys), _analyze(f, capsys)
    assert {k: got[k] for k in _KEYS} == {k: orig[k] for k in _KEYS}
    assert got["retransmits"] == tshark_count(f, "tcp.analysis.retransmission") > 10
    for ip, n in got["delivered_by_receiver"].items():
        assert n == tshark_delivered_bytes(f, ip), ip
    _same_as_tshark(f)


@pytest.mark.parametrize("linktype", [0, 9, 101, 113, 229, 242, 276, 1])
def test_ipv6_on_every_link_type(tmp_path: Path, linktype: int) -> None:
    """IPv6 (mixed with IPv4) behind every link layer the reader knows, and behind a VLAN tag
    (linktype 1 here: Ethernet with 802.1Q): every packet as tshark reads it."""
    lt, snap, recs = pw.read_records(CAPTURES[1])
    mixed = [
        r6 if i % 2 else r4
        for i, (r4, r6) in enumerate(zip(recs, pw.to_ipv6(recs, ext_every=5), strict=True))
    ]
    f = tmp_path / f"lt{linktype}.pcap"
    pw.write_pcap(f, linktype, snap + 60, pw.relink(mixed, linktype))
    _same_as_tshark(f)
