"""Conversions of real captures for the reader's tests: classic pcap records read and written back,
pcapng blocks written by hand (several sections, interfaces, byte orders, block kinds) and IPv4
rewritten as IPv6. Plain struct code, independent of analysis/pcapfile.py and analysis/pcapng.py,
so tshark (which reads the same files) stays the oracle.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

V6_PREFIX = bytes.fromhex("20010db8000000000000000000000000")[:12]  # 2001:db8::/96


@dataclass(frozen=True)
class Record:
    """One classic pcap record: time (ns since the epoch), captured bytes and original length."""

    ts_ns: int
    data: bytes
    wire: int


def read_records(path: Path) -> tuple[int, int, list[Record]]:
    """(link type, snaplen, records) of a classic pcap file."""
    raw = path.read_bytes()
    magic = raw[:4]
    order = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    snaplen, linktype = struct.unpack_from(order + "II", raw, 16)
    out, off = [], 24
    while off + 16 <= len(raw):
        sec, frac, cap, wire = struct.unpack_from(order + "IIII", raw, off)
        ns = sec * 10**9 + frac * (1 if nano else 1000)
        out.append(Record(ns, raw[off + 16 : off + 16 + cap], wire))
        off += 16 + cap
    return linktype, snaplen, out


def write_pcap(path: Path, linktype: int, snaplen: int, recs: list[Record], *, order: str = "<") -> None:
    """A classic pcap file with nanosecond timestamps."""
    parts = [struct.pack(order + "IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, snaplen, linktype)]
    for r in recs:
        parts.append(struct.pack(order + "IIII", r.ts_ns // 10**9, r.ts_ns % 10**9, len(r.data), r.wire))
        parts.append(r.data)
    path.write_bytes(b"".join(parts))


def v6_of(addr4: bytes) -> bytes:
    """The IPv6 address a converted packet carries for an IPv4 address: 2001:db8::a.b.c.d."""
    return V6_PREFIX + addr4


def v6_text(ip4: str) -> str:
    """Text of v6_of for a dotted quad, as tshark and incastlab print it."""
    import ipaddress

    return ipaddress.IPv6Address(v6_of(ipaddress.IPv4Address(ip4).packed)).compressed


def ipv6_packet(l3: bytes, wire_l3: int, ext: bytes = b"", first_nh: int = 6) -> tuple[bytes, int]:
    """(captured IPv6 bytes, original IPv6 length) of an IPv4 packet's captured bytes `l3` whose
    original length is wire_l3: same payload, hop limit and addresses mapped by v6_of. `ext`:
    extension headers (chained by the caller, the first of type first_nh) between the header and
    TCP. A total length of 0 (TSO) stays a payload length of 0."""
    ihl = (l3[0] & 15) * 4
    total = struct.unpack_from("!H", l3, 2)[0]
    payload_len = total - ihl + len(ext) if total else 0
    nh = first_nh if ext else l3[9]
    hdr = struct.pack("!IHBB16s16s", 0x60000000, payload_len, nh, l3[8], v6_of(l3[12:16]), v6_of(l3[16:20]))
    return hdr + ext + l3[ihl:], wire_l3 - ihl + 40 + len(ext)


def to_ipv6(recs: list[Record], ext_every: int = 0) -> list[Record]:
    """Ethernet records with IPv4 rewritten as IPv6 (the rest unchanged). With ext_every=k, every
    k-th packet gets a hop-by-hop and a destination options header, every (k+1)-th a fragment
    header of an unfragmented packet, so the reader must walk extension headers to reach TCP."""
    out = []
    for i, r in enumerate(recs):
        if len(r.data) < 34 or r.data[12:14] != b"\x08\x00" or r.data[14] >> 4 != 4:
            out.append(r)
            continue
        l3 = r.data[14:]
        ext, first = b"", 6
        if ext_every and i % ext_every == 0:
            ext, first = (
                struct.pack("!BB6s", 60, 0, b"\x01\x04" + b"\0" * 4)
                + struct.pack("!BB14s", l3[9], 1, b"\x01\x0c" + b"\0" * 12),
                0,
            )
        elif ext_every and i % (ext_every + 1) == 0:
            ext, first = struct.pack("!BBHI", l3[9], 0, 0, 0x1234), 44  # offset 0, no more fragments
        v6, wire6 = ipv6_packet(l3, r.wire - 14, ext, first)
        out.append(Record(r.ts_ns, r.data[:12] + b"\x86\xdd" + v6, wire6 + 14))
    return out


def _pad(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 4)


def block(order: str, btype: int, body: bytes) -> bytes:
    """One pcapng block: type, total length, body (padded to 4 bytes), total length."""
    body = _pad(body)
    n = 12 + len(body)
    return struct.pack(order + "II", btype, n) + body + struct.pack(order + "I", n)


def shb(order: str) -> bytes:
    """A section header block (version 1.0, unknown section length)."""
    return block(order, 0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def idb(order: str, linktype: int, snaplen: int, tsresol: int | None = None, tsoffset: int = 0) -> bytes:
    """An interface description block with the if_tsresol / if_tsoffset options given."""
    opts = b""
    if tsresol is not None:
        opts += struct.pack(order + "HHB3x", 9, 1, tsresol)
    if tsoffset:
        opts += struct.pack(order + "HHq", 14, 8, tsoffset)
    if opts:
        opts += struct.pack(order + "HH", 0, 0)
    return block(order, 1, struct.pack(order + "HHI", linktype, 0, snaplen) + opts)


def epb(order: str, iface: int, ts: int, data: bytes, wire: int, comment: bytes = b"") -> bytes:
    """An enhanced packet block (ts in the interface's units), optionally with an opt_comment."""
    body = struct.pack(order + "IIIII", iface, ts >> 32, ts & 0xFFFFFFFF, len(data), wire) + _pad(data)
    if comment:
        body += _pad(struct.pack(order + "HH", 1, len(comment)) + comment) + struct.pack(order + "HH", 0, 0)
    return block(order, 6, body)


def obsolete_pb(order: str, iface: int, ts: int, data: bytes, wire: int) -> bytes:
    """An obsolete packet block (type 2), which Wireshark still reads."""
    return block(
        order, 2, struct.pack(order + "HHIIII", iface, 0, ts >> 32, ts & 0xFFFFFFFF, len(data), wire) + data
    )


def spb(order: str, data: bytes, wire: int) -> bytes:
    """A simple packet block (interface 0, no timestamp)."""
    return block(order, 3, struct.pack(order + "I", wire) + data)


def isb(order: str, iface: int) -> bytes:
    """An interface statistics block (to be skipped)."""
    return block(order, 5, struct.pack(order + "III", iface, 0, 0))


def in_units(ts_ns: int, tsresol: int | None) -> int:
    """A time in ns as a count of the interface's timestamp units (default: microseconds)."""
    r = 6 if tsresol is None else tsresol
    if r & 0x80:
        return (ts_ns << (r & 0x7F)) // 10**9
    return ts_ns * 10**r // 10**9


# PPP headers (RFC 1661/1662) in turn: address and control then a 2-byte protocol; no address and
# control (ACFC); a 1-byte protocol (PFC); both left out. {IPv4: header, IPv6: header}
_PPP_HEADS = [
    {False: b"\xff\x03\x00\x21", True: b"\xff\x03\x00\x57"},
    {False: b"\x00\x21", True: b"\x00\x57"},
    {False: b"\xff\x03\x21", True: b"\xff\x03\x57"},
    {False: b"\x21", True: b"\x57"},
]


def relink(recs: list[Record], linktype: int) -> list[Record]:
    """Ethernet records re-framed for another link type (the IP packet unchanged): 0 BSD loopback
    (address family in little-endian: 2, or 30 for IPv6 as macOS writes it), 9 PPP (the four
    header forms of _PPP_HEADS in turn), 101 raw IP, 113 Linux cooked SLL, 229 raw IPv6 (IPv6
    records only), 242 IP over InfiniBand (as tcpdump and Wireshark read it: a 40-byte
    pseudo-header, bytes 20-39 the destination address, then the type and 2 reserved bytes), 276
    SLL2, or 1 with an 802.1Q tag."""
    out = []
    for i, r in enumerate(recs):
        et, l3 = r.data[12:14], r.data[14:]
        six = et == b"\x86\xdd"
        if linktype == 0:
            head = struct.pack("<I", 30 if six else 2)
        elif linktype == 9:
            head = _PPP_HEADS[i % len(_PPP_HEADS)][six]
        elif linktype == 242:
            dest = struct.pack("!I16s", 0x48, b"\xfe\x80" + b"\0" * 6 + bytes(range(8)))  # QPN, GID
            head = b"\0" * 20 + dest + et + b"\0\0"
        elif linktype in (101, 229):
            head = b""
        elif linktype == 113:
            head = struct.pack("!HHH8s", 0, 1, 6, b"\0" * 8) + et
        elif linktype == 276:
            head = et + struct.pack("!HIHBB8s", 0, 2, 1, 0, 6, b"\0" * 8)
        else:
            head = r.data[:12] + b"\x81\x00\x00\x05" + et
        if linktype == 229 and not six:
            continue
        out.append(Record(r.ts_ns, head + l3, r.wire - 14 + len(head)))
    return out
