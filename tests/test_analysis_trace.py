"""A small builder of TCP traces written as pcap files (with TCP options), shared by the analysis
tests, and the checks of the builder itself against tshark."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from tests.tshark import tshark_fields

A_IP, B_IP = 0x0A000002, 0x0A000001  # 10.0.0.2 (sender), 10.0.0.1 (receiver)
MSS = 1448
SYN, ACK, PSH, FIN, RST = 0x02, 0x10, 0x08, 0x01, 0x04


def tcp_options(
    mss: int | None = None,
    wscale: int | None = None,
    sack_ok: bool = False,
    ts: tuple[int, int] | None = None,
) -> bytes:
    """Encoded TCP options, padded with NOPs to a multiple of 4 bytes."""
    out = b""
    if mss is not None:
        out += struct.pack("!BBH", 2, 4, mss)
    if sack_ok:
        out += b"\x04\x02"
    if ts is not None:
        out += struct.pack("!BBII", 8, 10, ts[0], ts[1])
    if wscale is not None:
        out += struct.pack("!BBB", 3, 3, wscale)
    return out + b"\x01" * (-len(out) % 4)


@dataclass
class Trace:
    """Packets of one or more connections, written in the order they were added.

    Times are seconds from 1000 s since the epoch. `fwd(...)` is a packet from A:aport to
    B:bport, `rev(...)` the other way; seq/ack are absolute 32-bit values (wrapped for you)."""

    aport: int = 40000
    bport: int = 5000
    rows: list[tuple] = field(default_factory=list)

    def add(
        self,
        t: float,
        src: int,
        dst: int,
        sport: int,
        dport: int,
        seq: int,
        ack: int,
        flags: int,
        n: int = 0,
        win: int = 1000,
        opts: bytes = b"",
    ) -> None:
        self.rows.append((t, src, dst, sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, flags, n, win, opts))

    def fwd(
        self, t: float, seq: int, ack: int, flags: int = ACK, n: int = 0, win: int = 1000, opts: bytes = b""
    ) -> None:
        self.add(t, A_IP, B_IP, self.aport, self.bport, seq, ack, flags, n, win, opts)

    def rev(
        self, t: float, seq: int, ack: int, flags: int = ACK, n: int = 0, win: int = 1000, opts: bytes = b""
    ) -> None:
        self.add(t, B_IP, A_IP, self.bport, self.aport, seq, ack, flags, n, win, opts)

    def write(self, path: Path, snap: int = 128) -> Path:
        with open(path, "wb") as fh:
            fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snap, 1))
            for t, src, dst, sp, dp, seq, ack, fl, n, win, opts in self.rows:
                tcp = struct.pack("!HHIIBBHHH", sp, dp, seq, ack, ((5 + len(opts) // 4) << 4), fl, win, 0, 0)
                tcp += opts
                ip = struct.pack("!BBHHHBBHII", 0x45, 0, 20 + len(tcp) + n, 1, 0x4000, 64, 6, 0, src, dst)
                frame = b"\x00" * 12 + b"\x08\x00" + ip + tcp + b"\xab" * n
                data = frame[:snap]
                sec = 1000 + int(t)
                usec = int(round((t - int(t)) * 1e6))
                if usec == 1_000_000:
                    sec, usec = sec + 1, 0
                fh.write(struct.pack("<IIII", sec, usec, len(data), len(frame)) + data)
        return path


def test_builder_writes_what_tshark_reads(tmp_path: Path) -> None:
    tr = Trace()
    tr.fwd(0.0, 0xFFFFFFF0, 0, SYN, opts=tcp_options(mss=1460, wscale=7, sack_ok=True))
    tr.rev(0.001, 500, 0xFFFFFFF1, SYN | ACK, opts=tcp_options(mss=1460, wscale=9, sack_ok=True))
    tr.fwd(0.002, 0xFFFFFFF1, 501, ACK | PSH, n=100, win=300)
    rows = tshark_fields(
        tr.write(tmp_path / "b.pcap"),
        "tcp.seq_raw",
        "tcp.ack_raw",
        "tcp.len",
        "tcp.options.wscale.shift",
        "tcp.window_size",
        "frame.time_epoch",
    )
    assert [r[:4] for r in rows] == [
        [str(0xFFFFFFF0), "0", "0", "7"],
        ["500", str(0xFFFFFFF1), "0", "9"],
        [str(0xFFFFFFF1), "501", "100", ""],
    ]
    assert rows[2][4] == str(300 << 7) and rows[2][5].startswith("1000.002")
