"""pcap reader on hand-made files (fields exactly as written) and the one-line errors of bad input."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from analysis.cli import analyze_main
from analysis.errors import NoTcpError, PcapError, TruncatedPcapError
from analysis.pcapfile import read_pcap

# (src, dst, sport, dport, seq, ack, flags, win, payload, ts_sec, ts_frac)
PKTS = [
    (0x0A000002, 0x0A000001, 40000, 5000, 0xFFFFFF00, 0, 0x002, 64240, 0, 100, 1),
    (0x0A000001, 0x0A000002, 5000, 40000, 7, 0xFFFFFF01, 0x012, 65160, 0, 100, 999_999),
    (0x0A000002, 0x0A000001, 40000, 5000, 0xFFFFFF01, 8, 0x118, 502, 1448, 101, 5),
]


def _ip_tcp(src: int, dst: int, sport: int, dport: int, seq: int, ack: int, flags: int, win: int,
            payload: int) -> bytes:
    ip = struct.pack("!BBHHHBBHII", 0x45, 0, 40 + payload, 1, 0x4000, 64, 6, 0, src, dst)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, (5 << 4) | (flags >> 8), flags & 0xFF, win, 0, 0)
    return ip + tcp + b"\xab" * payload


def write_pcap(path: Path, *, order: str = "<", nano: bool = False, linktype: int = 1, snap: int = 128,
               pkts: list[tuple] = PKTS, extra: bytes = b"") -> None:
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    with open(path, "wb") as fh:
        fh.write(struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snap, linktype))
        for src, dst, sp, dp, seq, ack, fl, win, pl, sec, frac in pkts:
            l3 = _ip_tcp(src, dst, sp, dp, seq, ack, fl, win, pl)
            if linktype == 1:
                frame = b"\x00" * 12 + b"\x08\x00" + l3
            elif linktype == 113:
                frame = struct.pack("!HHH8sH", 0, 1, 6, b"\x00" * 8, 0x0800) + l3
            else:  # 276 SLL2
                frame = struct.pack("!HHIHBB8s", 0x0800, 0, 2, 1, 0, 6, b"\x00" * 8) + l3
            data = frame[:snap]
            fh.write(struct.pack(order + "IIII", sec, frac, len(data), len(frame)) + data)
        fh.write(extra)


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True])
@pytest.mark.parametrize("linktype", [1, 113, 276])
def test_fields_exactly_as_written(tmp_path: Path, order: str, nano: bool, linktype: int) -> None:
    f = tmp_path / "x.pcap"
    write_pcap(f, order=order, nano=nano, linktype=linktype)
    p = read_pcap(f)
    assert len(p) == 3 and p.records == 3 and p.linktype == linktype and p.nanosecond == nano
    assert p.big_endian == (order == ">")
    for i, (src, dst, sp, dp, seq, ack, fl, win, pl, sec, frac) in enumerate(PKTS):
        assert (p.src[i], p.dst[i], p.sport[i], p.dport[i]) == (src, dst, sp, dp)
        assert (p.seq[i], p.ack[i], p.flags[i], p.win[i]) == (seq, ack, fl, win)
        assert p.plen[i] == pl  # from IP total length although the record is cut at 128 bytes
        assert p.ts_ns[i] == sec * 10**9 + frac * (1 if nano else 1000)
        assert p.frame[i] == i + 1
    assert p.caplen[2] == 128 and p.wirelen[2] > 1448


def _errline(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert analyze_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_missing_empty_notpcap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "no such file" in _errline(capsys, [str(tmp_path / "nope.pcap")])
    (tmp_path / "empty.pcap").write_bytes(b"")
    assert "empty file" in _errline(capsys, [str(tmp_path / "empty.pcap")])
    (tmp_path / "t.txt").write_text("hello world, not a capture\n")
    assert "not a pcap" in _errline(capsys, [str(tmp_path / "t.txt")])
    (tmp_path / "n.pcapng").write_bytes(b"\x0a\x0d\x0d\x0a" + b"\x00" * 40)
    assert "pcapng is not supported" in _errline(capsys, [str(tmp_path / "n.pcapng")])
    with pytest.raises(PcapError):
        read_pcap(tmp_path / "t.txt")


def test_truncated_says_where_and_can_return_what_was_read(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "cut.pcap"
    write_pcap(f)
    data = f.read_bytes()
    f.write_bytes(data[:-30])  # cut inside the data of record 3
    with pytest.raises(TruncatedPcapError) as ei:
        read_pcap(f)
    assert ei.value.record == 3 and "record 3" in str(ei.value)
    p = read_pcap(f, allow_truncated=True)
    assert len(p) == 2 and p.truncated_at == 3
    assert "record 3" in _errline(capsys, [str(f)])
    f.write_bytes(data + b"\x01\x02\x03")  # a cut record header after 3 good records
    assert read_pcap(f, allow_truncated=True).truncated_at == 4
    assert analyze_main([str(f), "--allow-truncated", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["truncated_at"] == 4


def test_no_tcp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "udp.pcap"
    udp = struct.pack("!BBHHHBBHII", 0x45, 0, 28, 1, 0, 64, 17, 0, 1, 2) + b"\x00" * 8
    with open(f, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 128, 101))
        fh.write(struct.pack("<IIII", 1, 0, len(udp), len(udp)) + udp)
    with pytest.raises(NoTcpError):
        read_pcap(f)
    assert "no IPv4 TCP packets" in _errline(capsys, [str(f)])
    h = tmp_path / "hdr.pcap"
    h.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 128, 1))
    assert "no IPv4 TCP packets" in _errline(capsys, [str(h)])


def test_bad_args_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert "required" in _errline(capsys, [])
