"""What a captured TCP packet is, as numpy arrays, and the one decoder of its headers.

Packets holds the IPv4/IPv6 TCP header fields of a capture, one array element per packet; _decode
reads them out of a file's bytes for any record layout (Layout: where a record's own header fields
and its packet data sit), so classic pcap (analysis/pcapfile.py) and pcapng (analysis/pcapng.py)
share it. Why numpy, not scapy/dpkt: a Python object per packet costs ~50 us; one gather of fixed-
size byte strings per chunk of records reads a million packets in well under a second. The payload
length comes from the IP length, not the captured one: captures use a small snaplen. IPv6
addresses are ids (analysis/ipv6.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np

from analysis import ipv6
from analysis.errors import PcapError

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_PPP = 9
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_IPOIB = 242
LINKTYPE_LINUX_SLL2 = 276
SUPPORTED_LINKTYPES = (
    LINKTYPE_NULL,
    LINKTYPE_ETHERNET,
    LINKTYPE_PPP,
    LINKTYPE_RAW,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_IPOIB,
    LINKTYPE_LINUX_SLL2,
)

# TCP flag bits as in the header (NS is bit 8)
FIN, SYN, RST, PSH, ACK, URG, ECE, CWR = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80

# the per-packet array fields of Packets (the rest describe the file)
_PER_PACKET = (
    "frame",
    "ts_ns",
    "src",
    "dst",
    "sport",
    "dport",
    "seq",
    "ack",
    "flags",
    "win",
    "plen",
    "caplen",
    "wirelen",
    "tcp_at",
    "tcp_cap",
)
# zero bytes after the file: a header read of a short last record stays in the array (pcapng
# record header 28 + link 44 (IPoIB; the others 22 at most with 2 VLAN tags) + IP header 60 + TCP
# to the window 16, and some slack)
_WINDOW = 256


@dataclass(frozen=True)
class Packets:
    """IPv4 and IPv6 TCP packets of one capture, one array element per packet, in file order.

    `frame` is the 1-based record number in the file (as Wireshark numbers frames; in pcapng the
    packet blocks), so results can be cross-checked with tshark. `truncated_at` is the number of
    the cut record if the file was read with allow_truncated=True and ended inside a record, else
    None. For pcapng the file facts are those of the first section and interface; `nanosecond` says
    whether any timestamp resolution is finer than a microsecond.
    """

    path: str
    linktype: int
    nanosecond: bool
    big_endian: bool
    snaplen: int
    records: int  # all records read (TCP or not)
    truncated_at: int | None
    frame: np.ndarray  # int64, 1-based record number
    ts_ns: np.ndarray  # int64, capture time in ns since the epoch
    src: np.ndarray  # int64 source address: IPv4 as its 32-bit value, IPv6 as an id (ipv6.py)
    dst: np.ndarray  # int64
    sport: np.ndarray  # uint16
    dport: np.ndarray  # uint16
    seq: np.ndarray  # uint32 (absolute)
    ack: np.ndarray  # uint32 (absolute)
    flags: np.ndarray  # uint16 TCP flags (FIN=1 ... CWR=0x80, NS=0x100)
    win: np.ndarray  # uint16 raw (unscaled) window field
    plen: np.ndarray  # int64 TCP payload length from the IP total length
    caplen: np.ndarray  # int64 captured length of the record
    wirelen: np.ndarray  # int64 original length on the wire
    tcp_at: np.ndarray  # int64 byte offset of the TCP header in the file (for tcpopts.py)
    tcp_cap: np.ndarray  # int64 captured bytes from the TCP header on

    def __len__(self) -> int:
        return int(self.frame.shape[0])

    @property
    def ts(self) -> np.ndarray:
        """Timestamps in float seconds since the epoch (ns precision is kept in ts_ns)."""
        return self.ts_ns / 1e9

    def select(self, mask: np.ndarray) -> Packets:
        """The packets where mask (or an index array) picks them, same file facts, in the same order."""
        return replace(self, **{f: getattr(self, f)[mask] for f in _PER_PACKET})


def ip_to_str(addr: int) -> str:
    """Text of an address as Packets holds it: dotted quad for IPv4, compressed IPv6."""
    a = int(addr)
    if a >= ipv6.V6_BASE:
        return ipv6.v6_str(a)
    return f"{a >> 24 & 255}.{a >> 16 & 255}.{a >> 8 & 255}.{a & 255}"


def ep_to_str(addr: int, port: int) -> str:
    """ADDR:PORT of an endpoint, the IPv6 address in brackets ([2001:db8::1]:5000)."""
    a = int(addr)
    return f"[{ipv6.v6_str(a)}]:{port}" if a >= ipv6.V6_BASE else f"{ip_to_str(a)}:{port}"


def str_to_ip(text: str) -> int:
    """The integer Packets uses for an address given as text (dotted quad, or IPv6 with or
    without brackets); raises ValueError if it is not one."""
    if ":" in text:
        return ipv6.parse_v6(text)
    parts = text.split(".")
    if len(parts) != 4 or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
        raise ValueError(f"not an IPv4 address: {text!r}")
    return (int(parts[0]) << 24) | (int(parts[1]) << 16) | (int(parts[2]) << 8) | int(parts[3])


def _read_padded(path: str) -> tuple[np.ndarray, int]:
    """The file's bytes in a uint8 array followed by _WINDOW zero bytes, and the file size.

    The padding keeps every header read of a short or cut last record inside the array, and
    reading straight into it saves copying the whole file once more to append it.
    """
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            arr = np.empty(size + _WINDOW, dtype=np.uint8)
            got = fh.readinto(memoryview(arr)[:size]) if size else 0
            rest = fh.read()  # the file grew, or its size was unknown (a pipe)
    except FileNotFoundError:
        raise PcapError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise PcapError(f"is a directory, not a pcap file: {path}") from None
    except OSError as exc:
        raise PcapError(f"cannot read {path}: {exc.strerror or exc}") from None
    if rest or got != size:
        data = arr[:got].tobytes() + rest
        arr = np.empty(len(data) + _WINDOW, dtype=np.uint8)
        arr[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        size = len(data)
    arr[size:] = 0
    return arr, size


@dataclass(frozen=True)
class Layout:
    """Where a record's own header fields and its packet data are, from the record's start.

    fields: name -> (dtype in the file, offset); every layout has "wire" (the original length)
    and all but pcapng's simple packet block have "cap" (the captured length). data: the offset
    of the link-layer packet bytes.
    """

    fields: dict[str, tuple[str, int]]
    data: int


def unsupported_linktype(linktype: int, spath: str) -> PcapError:
    """The one-line error for a link type the decoder does not read."""
    return PcapError(
        f"unsupported link type {linktype} (want Ethernet, Linux cooked SLL/SLL2, PPP, IP over "
        f"InfiniBand, BSD loopback or raw IP): {spath}"
    )


def _words(buf: np.ndarray, dtype: str) -> np.ndarray:
    """Element i: the word of the given dtype (e.g. '>u2') starting at byte i of buf."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((buf.shape[0] - size + 1,), dtype=dtype, buffer=buf, offset=0, strides=(1,))


# Header fields by (dtype in the file, offset from the IP header, native dtype). TCP ones are
# relative to the TCP header.
_IP_FIELDS = {
    "vihl": ("u1", 0, np.uint8),
    "total": (">u2", 2, np.int64),
    "frag": (">u2", 6, np.uint16),
    "proto": ("u1", 9, np.uint8),
    "src": (">u4", 12, np.int64),
    "dst": (">u4", 16, np.int64),
}
_IP6_FIELDS = {
    "paylen": (">u2", 4, np.int64),
    "src6": ("V16", 8, np.dtype("V16")),
    "dst6": ("V16", 24, np.dtype("V16")),
}
_TCP_FIELDS = {
    "sport": (">u2", 0, np.uint16),
    "dport": (">u2", 2, np.uint16),
    "seq": (">u4", 4, np.uint32),
    "ack": (">u4", 8, np.uint32),
    "toff": ("u1", 12, np.uint8),
    "fl": ("u1", 13, np.uint8),
    "win": (">u2", 14, np.uint16),
}
# link layer: offset of the IP header in the link data (the usual one, for PPP), and the field
# that names the protocol (for PPP its first 4 bytes, read by _ppp)
_LINK: dict[int, tuple[int, tuple[str, int] | None]] = {
    LINKTYPE_ETHERNET: (14, (">u2", 12)),
    LINKTYPE_PPP: (4, (">u4", 0)),
    LINKTYPE_IPOIB: (44, (">u2", 40)),  # as tcpdump and Wireshark: a 40-byte GRH/address, type, 2 reserved
    LINKTYPE_LINUX_SLL: (16, (">u2", 14)),
    LINKTYPE_LINUX_SLL2: (20, (">u2", 0)),
    LINKTYPE_NULL: (4, ("<u4", 0)),
    LINKTYPE_RAW: (0, None),
    LINKTYPE_IPV4: (0, None),
    LINKTYPE_IPV6: (0, None),
}
ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD
_VLAN_TPIDS = (0x8100, 0x88A8)
# BSD loopback address families of IPv6 (Linux, NetBSD/OpenBSD, FreeBSD, macOS), either byte order
_AF_INET6 = np.array([10, 24, 28, 30, 10 << 24, 24 << 24, 28 << 24, 30 << 24], dtype=np.int64)
_CHUNK = 16384  # records per gather: the copied headers stay in the CPU cache while cut into fields

_Spec = dict[str, tuple[str, int, "np.dtype | type"]]


def _spec(lay: Layout, linktype: int, l3: int, ihl: int) -> _Spec:
    """The fields to gather of records with the IPv4 header `l3` bytes and the TCP header
    `l3 + ihl` bytes after the record start."""
    fields: _Spec = {k: (f, o, np.int64) for k, (f, o) in lay.fields.items()}
    link = _LINK[linktype][1]
    if link is not None:
        fields["link"] = (link[0], lay.data + link[1], np.int64)
    fields.update({k: (f, l3 + o, t) for k, (f, o, t) in _IP_FIELDS.items()})
    fields.update({k: (f, l3 + ihl + o, t) for k, (f, o, t) in _TCP_FIELDS.items()})
    return fields


def _gather(
    buf: np.ndarray,
    offs: np.ndarray,
    fields: _Spec,
    out: dict[str, np.ndarray] | None = None,
    at: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """The `fields` of the records at `offs` (bytes past a record's end are junk).

    Each chunk of records is copied with one fancy-index gather of fixed-size byte strings out of
    an overlapping view (element i: the bytes from i on) and cut into fields by a structured view.
    Into new arrays, or into `out` at the positions `at`.
    """
    size = max(o + np.dtype(f).itemsize for f, o, _ in fields.values())
    dt = np.dtype(
        {
            "names": list(fields),
            "formats": [f for f, _, _ in fields.values()],
            "offsets": [o for _, o, _ in fields.values()],
            "itemsize": size,
        }
    )
    rows = np.ndarray((buf.shape[0] - size + 1,), dtype=f"V{size}", buffer=buf, offset=0, strides=(1,))
    m = offs.shape[0]
    if out is None:
        out = {k: np.empty(m, dtype=t) for k, (_, _, t) in fields.items()}
    for s in range(0, m, _CHUNK):
        got = rows[offs[s : s + _CHUNK]].view(dt)
        sel = slice(s, s + _CHUNK) if at is None else at[s : s + _CHUNK]
        for k in fields:
            out[k][sel] = got[k]
    return out


def _ethertype(linktype: int, f: dict[str, np.ndarray]) -> np.ndarray:
    """Per record, the Ethernet type of what the link layer carries (ETH_IPV4, ETH_IPV6, a VLAN
    tag on Ethernet, or anything else for the rest)."""
    if linktype in (LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2, LINKTYPE_IPOIB):
        return f["link"].copy()
    n = f["vihl"].shape[0]
    if linktype == LINKTYPE_NULL:  # 4-byte address family in the writer's byte order, AF_INET = 2
        af = f["link"]
        v4 = (af == 2) | (af == 0x02000000)
        return np.where(v4, ETH_IPV4, np.where(np.isin(af, _AF_INET6), ETH_IPV6, 0))
    if linktype == LINKTYPE_IPV4:
        return np.full(n, ETH_IPV4, dtype=np.int64)
    if linktype == LINKTYPE_IPV6:
        return np.full(n, ETH_IPV6, dtype=np.int64)
    ver = f["vihl"] >> 4  # raw IP: the version nibble says which
    return np.where(ver == 4, ETH_IPV4, np.where(ver == 6, ETH_IPV6, 0))


def _ppp(head: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Ethernet type, offset of the IP header in the link data) of PPP records from their first
    4 bytes (big-endian), read as Wireshark reads link type 9: an address byte 0xff means address
    and control (2 bytes) come first, else they were left out; a protocol whose first byte is odd
    is one byte long (protocol-field compression), else two. 0x21 is IPv4, 0x57 IPv6."""
    at = np.where(head >> 24 == 0xFF, 2, 0)
    two = (head >> (16 - 8 * at)) & 0xFFFF  # the 2 bytes at `at`
    short = (two >> 8) & 1 == 1
    proto = np.where(short, two >> 8, two)
    et = np.where(proto == 0x21, ETH_IPV4, np.where(proto == 0x57, ETH_IPV6, 0))
    return et, at + np.where(short, 1, 2)


def _decode(
    buf: np.ndarray, offs: np.ndarray, lay: Layout, linktype: int, cap: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """All header fields of the TCP records among those starting at `offs` (vectorised, see _gather).

    Returns the Packets per-packet arrays but frame and ts_ns, plus "idx" (which of offs they
    are) and the layout's own fields but cap and wire. `cap`: the captured lengths when the
    layout has none. Every record is first read with the usual layout (no VLAN tag, 20-byte IPv4
    header); the few that have another are read again, grouped by their layout; IPv6 records are
    read again by _decode_v6. buf's zero padding keeps the reads of short records in bounds.
    """
    base = lay.data + _LINK[linktype][0]
    f = _gather(buf, offs, _spec(lay, linktype, base, 20))
    if cap is not None:
        f["cap"] = cap
    n = offs.shape[0]
    l3 = np.full(n, base, dtype=np.int64)  # IP header offset from the record start
    vihl = f["vihl"]
    if linktype == LINKTYPE_PPP:
        et, at = _ppp(f["link"])
        moved = (at != base - lay.data) & (et != 0)  # another PPP header length: read again
        l3 += np.where(moved, at - (base - lay.data), 0)
        other = moved | ((et == ETH_IPV4) & (vihl > 0x45) & (vihl < 0x50))
    else:
        et = _ethertype(linktype, f)
        other = (et == ETH_IPV4) & (vihl > 0x45) & (vihl < 0x50)  # IP options: TCP is further
    if linktype == LINKTYPE_ETHERNET:
        other |= np.isin(et, _VLAN_TPIDS)
    redo = np.flatnonzero(other)
    if redo.size:
        _regather(buf, offs, lay, linktype, redo, f, l3, et)
        vihl = f["vihl"]
    ihl = (vihl & 15).astype(np.int64) * 4
    end = lay.data + f["cap"]  # end of the captured bytes, from the record start
    ok = (
        (et == ETH_IPV4)
        & ((vihl >> 4) == 4)
        & (ihl >= 20)
        & (f["proto"] == 6)
        & ((f["frag"] & 0x1FFF) == 0)
        & (l3 + ihl + 16 <= end)
    )  # the TCP header up to the window field is captured
    six = np.flatnonzero(et == ETH_IPV6)
    if six.size:
        ok[six] = _decode_v6(buf, offs, lay, six, f, l3, ihl, end)
    idx = np.flatnonzero(ok)
    if idx.shape[0] != n:
        f = {k: v[idx] for k, v in f.items()}
        ihl, l3, end = ihl[idx], l3[idx], end[idx]
    total, wire, toff = f.pop("total"), f.pop("wire"), f.pop("toff")
    # TSO/GSO captures carry IP total length 0: fall back to the wire length
    iplen = np.where(total == 0, wire - (l3 - lay.data), total)
    plen = np.maximum(iplen - ihl - ((toff >> 4).astype(np.int64) * 4), 0)
    flags = (toff & 1).astype(np.uint16) << 8
    flags |= f.pop("fl")
    for k in ("link", "vihl", "frag", "proto"):
        f.pop(k, None)
    tcp = l3 + ihl
    f.update(
        idx=idx,
        flags=flags,
        plen=plen,
        caplen=f.pop("cap"),
        wirelen=wire,
        tcp_at=offs[idx] + tcp,
        tcp_cap=end - tcp,
    )
    return f


def _decode_v6(
    buf: np.ndarray,
    offs: np.ndarray,
    lay: Layout,
    six: np.ndarray,
    f: dict[str, np.ndarray],
    l3: np.ndarray,
    ihl: np.ndarray,
    end: np.ndarray,
) -> np.ndarray:
    """Read the IPv6 records `six` (indices into offs) into f and ihl (the bytes from the IPv6
    header to TCP, extension headers included) in place; returns which of them are TCP whose
    header is captured up to the window field. Addresses become ids (ipv6.intern); "total" is
    the IPv4-style total length (payload length + 40, 0 when the payload length is 0)."""
    o, a = offs[six], l3[six]
    pos, ok = ipv6.tcp_offset(buf, o, a, end[six])
    ihl[six] = pos - a
    key = np.where(ok, a * (1 << 24) + (pos - a), -1)
    one = key.shape[0] and int(key.min()) == int(key.max()) >= 0  # the usual: one layout for all
    for k in [int(key[0])] if one else np.unique(key[ok]).tolist():
        sel = np.arange(key.shape[0]) if one else np.flatnonzero(key == k)
        at, hl = k >> 24, k & ((1 << 24) - 1)
        fields: _Spec = {n: (fm, at + off, t) for n, (fm, off, t) in _IP6_FIELDS.items()}
        fields.update({n: (fm, at + hl + off, t) for n, (fm, off, t) in _TCP_FIELDS.items()})
        g = _gather(buf, o[sel], fields)
        dest = six[sel]
        f["src"][dest] = ipv6.intern(g.pop("src6"))
        f["dst"][dest] = ipv6.intern(g.pop("dst6"))
        paylen = g.pop("paylen")
        f["total"][dest] = np.where(paylen == 0, 0, paylen + 40)
        for name, v in g.items():
            f[name][dest] = v
    return ok


def _regather(
    buf: np.ndarray,
    offs: np.ndarray,
    lay: Layout,
    linktype: int,
    redo: np.ndarray,
    f: dict[str, np.ndarray],
    l3: np.ndarray,
    et: np.ndarray,
) -> None:
    """Read the records `redo` (indices into offs) again with their own layout: up to two VLAN
    tags (802.1Q / 802.1ad) and IPv4 options. Updates f, l3 and et in place (et of a record that
    is not IPv4 after all becomes -1; IPv6 behind tags is left to _decode_v6)."""
    v16 = _words(buf, ">u2")
    o = offs[redo]
    pos = l3[redo].copy()
    e = et[redo]
    if linktype == LINKTYPE_ETHERNET:
        for _ in range(2):
            tagged = np.isin(e, _VLAN_TPIDS)
            e = np.where(tagged, v16[o + pos + 2], e)
            pos = np.where(tagged, pos + 4, pos)
    vihl = buf[o + pos]
    ihl = (vihl & 15).astype(np.int64) * 4
    ip = (e == ETH_IPV4) & ((vihl >> 4) == 4) & (ihl >= 20)  # else it is not decoded as IPv4 TCP anyway
    et[redo] = np.where((e == ETH_IPV4) & ~ip, -1, e)
    l3[redo] = pos
    key = pos * 64 + ihl
    for k in np.unique(key[ip]).tolist():
        sel = np.flatnonzero(ip & (key == k))
        _gather(buf, o[sel], _spec(lay, linktype, k // 64, k % 64), out=f, at=redo[sel])
