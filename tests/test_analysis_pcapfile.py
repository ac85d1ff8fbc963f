"""pcap reader on hand-made files (fields exactly as written) and the one-line errors of bad input."""

from __future__ import annotations

import dataclasses
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from analysis import pcapfile
from analysis.errors import NoTcpError, PcapError, TruncatedPcapError
from analysis.pcapfile import read_pcap
from incastlab.cli import main as cli_main

# (src, dst, sport, dport, seq, ack, flags, win, payload, ts_sec, ts_frac)
PKTS = [
    (0x0A000002, 0x0A000001, 40000, 5000, 0xFFFFFF00, 0, 0x002, 64240, 0, 100, 1),
    (0x0A000001, 0x0A000002, 5000, 40000, 7, 0xFFFFFF01, 0x012, 65160, 0, 100, 999_999),
    (0x0A000002, 0x0A000001, 40000, 5000, 0xFFFFFF01, 8, 0x118, 502, 1448, 101, 5),
]


def _ip_tcp(
    src: int, dst: int, sport: int, dport: int, seq: int, ack: int, flags: int, win: int, payload: int
) -> bytes:
    ip = struct.pack("!BBHHHBBHII", 0x45, 0, 40 + payload, 1, 0x4000, 64, 6, 0, src, dst)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, (5 << 4) | (flags >> 8), flags & 0xFF, win, 0, 0)
    return ip + tcp + b"\xab" * payload


def write_pcap(
    path: Path,
    *,
    order: str = "<",
    nano: bool = False,
    linktype: int = 1,
    snap: int = 128,
    pkts: list[tuple] = PKTS,
    extra: bytes = b"",
) -> None:
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    with open(path, "wb") as fh:
        fh.write(struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snap, linktype))
        for src, dst, sp, dp, seq, ack, fl, win, pl, sec, frac in pkts:
            l3 = _ip_tcp(src, dst, sp, dp, seq, ack, fl, win, pl)
            if linktype == 1:
                frame = b"\x00" * 12 + b"\x08\x00" + l3
            elif linktype == 113:
                frame = struct.pack("!HHH8sH", 0, 1, 6, b"\x00" * 8, 0x0800) + l3
            elif linktype == 9:  # PPP in HDLC-like framing: address, control, protocol IPv4
                frame = b"\xff\x03\x00\x21" + l3
            elif linktype == 242:  # IPoIB: 40-byte pseudo-header, type, reserved
                frame = b"\x00" * 40 + b"\x08\x00\x00\x00" + l3
            else:  # 276 SLL2
                frame = struct.pack("!HHIHBB8s", 0x0800, 0, 2, 1, 0, 6, b"\x00" * 8) + l3
            data = frame[:snap]
            fh.write(struct.pack(order + "IIII", sec, frac, len(data), len(frame)) + data)
        fh.write(extra)


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True])
@pytest.mark.parametrize("linktype", [1, 113, 276, 9, 242])
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


def test_select_keeps_the_picked_packets_whole(tmp_path: Path) -> None:
    """select() cuts every per-packet array alike (checked against the packets as written) and keeps
    the file's facts."""
    f = tmp_path / "x.pcap"
    write_pcap(f)
    p = read_pcap(f)
    s = p.select(p.src == PKTS[0][0])
    assert list(s.frame) == [1, 3] and len(s) == 2
    for i, k in enumerate((0, 2)):
        src, dst, sp, dp, seq, ack, fl, win, pl, _, _ = PKTS[k]
        assert (s.dst[i], s.sport[i], s.seq[i], s.ack[i], s.flags[i], s.win[i], s.plen[i]) == (
            dst,
            sp,
            seq,
            ack,
            fl,
            win,
            pl,
        )
    assert (s.path, s.records, s.linktype) == (p.path, 3, 1)
    assert len(p.select(np.zeros(len(p), dtype=bool))) == 0


def _errline(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli_main(["analyze", *argv]) == 2
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
    assert "corrupt pcapng: section header" in _errline(capsys, [str(tmp_path / "n.pcapng")])
    with pytest.raises(PcapError):
        read_pcap(tmp_path / "t.txt")


def test_an_unsupported_link_type_is_one_line_naming_those_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Link type 10 (FDDI) is not read: one line naming it and the link layers that are."""
    f = tmp_path / "fddi.pcap"
    write_pcap(f, linktype=10)
    err = _errline(capsys, [str(f)])
    assert "unsupported link type 10" in err
    for name in ("Ethernet", "SLL2", "PPP", "InfiniBand", "loopback", "raw IP"):
        assert name in err, name


def test_truncated_says_where_and_can_return_what_was_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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
    assert cli_main(["analyze", str(f), "--allow-truncated", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["truncated_at"] == 4


def test_no_tcp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """read_pcap refuses a capture without TCP by default; `analyze` reports zeros for it, exit 0."""
    f = tmp_path / "udp.pcap"
    udp = struct.pack("!BBHHHBBHII", 0x45, 0, 28, 1, 0, 64, 17, 0, 1, 2) + b"\x00" * 8
    with open(f, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 128, 101))
        fh.write(struct.pack("<IIII", 1, 0, len(udp), len(udp)) + udp)
    with pytest.raises(NoTcpError):
        read_pcap(f)
    h = tmp_path / "hdr.pcap"  # a valid capture of nothing: the global header only
    h.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 128, 1))
    for path, records in ((f, 1), (h, 0)):
        assert cli_main(["analyze", str(path)]) == 0
        out = capsys.readouterr().out
        assert f"no TCP packets in {records} records" in out and "Traceback" not in out
        assert cli_main(["analyze", str(path), "--json", "--per-flow"]) == 0
        res = json.loads(capsys.readouterr().out)
        assert res["records"] == records and res["per_flow"] == []
        for key in (
            "packets",
            "segments",
            "retransmits",
            "timeouts",
            "loss_probes",
            "delivered_bytes",
            "flows",
        ):
            assert res[key] == 0, key
        assert res["stall_s"] == 0.0


def test_several_files_one_json_line_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, hdr, bad = tmp_path / "x.pcap", tmp_path / "hdr.pcap", tmp_path / "missing.pcap"
    write_pcap(good)
    hdr.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 128, 1))
    assert cli_main(["analyze", str(good), str(hdr), "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(x)["file"] for x in lines] == [str(good), str(hdr)]
    assert json.loads(lines[0])["packets"] == 3 and json.loads(lines[1])["packets"] == 0
    # a bad file among good ones: its error line, the others still counted, exit 2
    assert cli_main(["analyze", str(good), str(bad), "--json"]) == 2
    cap = capsys.readouterr()
    rows = [json.loads(x) for x in cap.out.splitlines()]
    assert rows[0]["packets"] == 3 and "no such file" in rows[1]["error"]
    assert cap.err.count("\n") == 1 and "no such file" in cap.err
    assert cli_main(["analyze", str(good), str(hdr)]) == 0
    text = capsys.readouterr().out
    assert text.count(str(good)) == 1 and text.count(str(hdr)) == 1 and "timeouts" in text


def _option_help(text: str) -> dict[str, str]:
    """--flag -> its help text, from argparse's --help output (options start a line with "  -")."""
    out: dict[str, str] = {}
    flag = None
    for line in text.splitlines():
        m = re.match(r"^  (?:-\w, )?(--[\w-]+)(.*)", line)
        if m:
            flag = m.group(1)
            out[flag] = m.group(2)
        elif flag and line.startswith("    "):
            out[flag] += " " + line.strip()
        else:
            flag = None
    return {k: " ".join(v.split()) for k, v in out.items()}


def test_help_states_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    from incastlab.cli import main as cli_main

    for command, flags in (
        ("analyze", ("--json", "--per-flow", "--allow-truncated", "--rto-min")),
        ("inspect", ("--around", "--span", "--absolute", "--allow-truncated")),
    ):
        assert cli_main([command, "--help"]) == 0
        helps = _option_help(capsys.readouterr().out)
        for flag in flags:
            assert "(default:" in helps[flag], flag
    assert "(default: 0.05)" in helps["--span"]
    assert cli_main(["analyze", "--help"]) == 0
    assert "(default: 0.2)" in _option_help(capsys.readouterr().out)["--rto-min"]


def test_bad_args_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert "required" in _errline(capsys, [])


# ---- record offsets: the vectorised guess-and-verify scan must equal the plain walk


def _records(
    rng: np.random.Generator,
    count: int,
    *,
    order: str = "<",
    t0: int = 1_700_000_000,
    step: float = 0.01,
    lures: bool = False,
) -> bytes:
    """Records of mixed captured lengths; with lures, payloads that look like record headers."""
    out = []
    t = float(t0)
    for i in range(count):
        plen = int(rng.choice([0, 0, 10, 100, 1448]))
        l3 = _ip_tcp(
            0x0A000002,
            0x0A000001,
            40000 + i % 3,
            5000,
            int(rng.integers(1 << 32)),
            int(rng.integers(1 << 32)),
            0x18,
            502,
            plen,
        )
        frame = b"\x00" * 12 + b"\x08\x00" + l3
        if lures and plen:  # a fake header: same seconds, small fraction, caplen pointing anywhere
            fake = struct.pack(order + "IIII", int(t), 5, int(rng.integers(0, 200)), 60)
            frame = frame[:54] + fake + frame[54 + len(fake) :]
        data = frame[: int(rng.choice([54, 64, 96, 128, 200]))]
        sec = int(t)
        out.append(struct.pack(order + "IIII", sec, int((t - sec) * 1e6), len(data), len(frame)) + data)
        t += step
    return b"".join(out)


def _header(order: str = "<", linktype: int = 1) -> bytes:
    return struct.pack(order + "IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)


def _both_scans(monkeypatch: pytest.MonkeyPatch, f: Path) -> tuple[object, object]:
    """read_pcap with the vectorised scan forced, and with the plain walk forced."""
    out = []
    for limit in (0, 1 << 62):
        monkeypatch.setattr(pcapfile, "_VECTOR_SCAN_MIN", limit)
        try:
            out.append(read_pcap(f, allow_truncated=True, require_tcp=False))
        except PcapError as exc:
            out.append(str(exc))
    return out[0], out[1]


def _same(a: object, b: object) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), field.name
        else:
            assert x == y, field.name


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize(
    "case", ["mixed", "lures", "slow_clock", "long_gap", "cut_data", "cut_header", "corrupt_length", "epoch"]
)
def test_vectorised_scan_equals_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: str, case: str
) -> None:
    rng = np.random.default_rng(5)
    body = _records(
        rng, 3000, order=order, lures=case == "lures", t0=100 if case == "epoch" else 1_700_000_000
    )
    if case == "slow_clock":  # seconds beyond the guess's +-12 days: every record missed
        body = _records(rng, 3000, order=order, step=3 * 86400.0)
    if case == "long_gap":  # a jump in the clock: the records after it are reached by single steps
        body += _records(rng, 2000, order=order, t0=1_700_000_000 + 40 * 86400)
    if case == "cut_data":
        body = body[:-7]
    if case == "cut_header":
        body += b"\x01\x02\x03"
    if case == "corrupt_length":
        body += struct.pack(order + "IIII", 1_700_000_100, 1, 1 << 30, 1 << 30) + b"\x00" * 64
    f = tmp_path / "m.pcap"
    f.write_bytes(_header(order) + body)
    vec, walk = _both_scans(monkeypatch, f)
    _same(vec, walk)
    assert not isinstance(vec, str) and vec.records >= 2999
    assert vec.truncated_at == (
        None if case in ("mixed", "lures", "slow_clock", "long_gap", "epoch") else vec.records + 1
    )


def test_vectorised_scan_every_caplen_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkts = [
        (
            0x0A000002,
            0x0A000001,
            40000,
            5000,
            i * 1448,
            1,
            0x18,
            502,
            1448,
            1_700_000_000 + i // 100,
            i % 100 * 10_000,
        )
        for i in range(5000)
    ]
    f = tmp_path / "u.pcap"
    write_pcap(f, pkts=pkts, snap=96)
    vec, walk = _both_scans(monkeypatch, f)
    _same(vec, walk)
    assert len(vec) == 5000 and (vec.caplen == 96).all()
    assert np.array_equal(vec.seq, np.arange(5000, dtype=np.uint32) * 1448)


def test_vlan_tags_and_ip_options_mixed_with_plain_records(tmp_path: Path) -> None:
    """Records with other layouts than Ethernet/20-byte IP are decoded with their own."""
    rows = []
    want = []
    for i in range(40):
        vlans, opts = i % 3, (i // 3) % 3 * 4  # 0-2 VLAN tags, 0/4/8 bytes of IP options
        ihl = 5 + opts // 4
        ip = (
            struct.pack(
                "!BBHHHBBHII",
                0x40 | ihl,
                0,
                ihl * 4 + 20 + i,
                1,
                0x4000,
                64,
                6,
                0,
                0x0A000002 + i,
                0x0A000001,
            )
            + b"\x01" * opts
        )
        tcp = struct.pack("!HHIIBBHHH", 40000 + i, 5000, 1000 * i, 7 * i, 5 << 4, 0x18, 500 + i, 0, 0)
        eth = (
            b"\x00" * 12
            + b"".join(
                (b"\x88\xa8" if v == 0 and vlans == 2 else b"\x81\x00") + b"\x00\x05" for v in range(vlans)
            )
            + b"\x08\x00"
        )
        frame = eth + ip + tcp + b"\xab" * i
        rows.append(struct.pack("<IIII", 100 + i, i, len(frame), len(frame)) + frame)
        want.append((0x0A000002 + i, 40000 + i, 1000 * i, 7 * i, 500 + i, i))
    f = tmp_path / "v.pcap"
    f.write_bytes(_header() + b"".join(rows))
    p = read_pcap(f)
    assert len(p) == 40
    got = list(
        zip(
            p.src.tolist(),
            p.sport.tolist(),
            p.seq.tolist(),
            p.ack.tolist(),
            p.win.tolist(),
            p.plen.tolist(),
            strict=True,
        )
    )
    assert got == want
