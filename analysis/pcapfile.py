"""Fast reader of classic pcap files into numpy arrays of IPv4/TCP header fields.

Why not scapy/dpkt: a Python object per packet costs ~50 us; here one small loop finds the record
offsets and numpy gathers every field at once, so a million packets take about a second.
The payload length comes from the IP total length, not the captured length, because captures are
taken with a small snaplen (e.g. 128 bytes).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import numpy as np

from analysis.errors import NoTcpError, PcapError, TruncatedPcapError

# magic as read from the first 4 bytes -> (struct byte order, nanosecond timestamps)
_MAGICS: dict[bytes, tuple[str, bool]] = {
    b"\xd4\xc3\xb2\xa1": ("<", False),
    b"\xa1\xb2\xc3\xd4": (">", False),
    b"\x4d\x3c\xb2\xa1": ("<", True),
    b"\xa1\xb2\x3c\x4d": (">", True),
}
_PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_LINUX_SLL2 = 276
SUPPORTED_LINKTYPES = (LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL,
                       LINKTYPE_IPV4, LINKTYPE_LINUX_SLL2)

# TCP flag bits as in the header (NS is bit 8)
FIN, SYN, RST, PSH, ACK, URG, ECE, CWR = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80

_MAX_CAPLEN = 1 << 26  # a record longer than 64 MiB means a corrupt length field
_WINDOW = 16 + 22 + 60 + 20  # record header + link (2 VLAN tags) + IP with options + TCP to window


@dataclass(frozen=True)
class Packets:
    """IPv4 TCP packets of one capture, one array element per packet, in file order.

    `frame` is the 1-based record number in the file (as Wireshark numbers frames), so results
    can be cross-checked with tshark. `truncated_at` is the number of the cut record if the file
    was read with allow_truncated=True and ended inside a record, else None.
    """

    path: str
    linktype: int
    nanosecond: bool
    big_endian: bool
    snaplen: int
    records: int                # all records read (TCP or not)
    truncated_at: int | None
    frame: np.ndarray           # int64, 1-based record number
    ts_ns: np.ndarray           # int64, capture time in ns since the epoch
    src: np.ndarray             # uint32 IPv4 source address
    dst: np.ndarray             # uint32
    sport: np.ndarray           # uint16
    dport: np.ndarray           # uint16
    seq: np.ndarray             # uint32 (absolute)
    ack: np.ndarray             # uint32 (absolute)
    flags: np.ndarray           # uint16 TCP flags (FIN=1 ... CWR=0x80, NS=0x100)
    win: np.ndarray             # uint16 raw (unscaled) window field
    plen: np.ndarray            # int64 TCP payload length from the IP total length
    caplen: np.ndarray          # int64 captured length of the record
    wirelen: np.ndarray         # int64 original length on the wire

    def __len__(self) -> int:
        return int(self.frame.shape[0])

    @property
    def ts(self) -> np.ndarray:
        """Timestamps in float seconds since the epoch (ns precision is kept in ts_ns)."""
        return self.ts_ns / 1e9


def ip_to_str(addr: int) -> str:
    """Dotted quad of an IPv4 address held as an integer."""
    a = int(addr)
    return f"{a >> 24 & 255}.{a >> 16 & 255}.{a >> 8 & 255}.{a & 255}"


def str_to_ip(text: str) -> int:
    """Integer of a dotted-quad IPv4 address; raises AnalysisError-compatible ValueError."""
    parts = text.split(".")
    if len(parts) != 4 or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
        raise ValueError(f"not an IPv4 address: {text!r}")
    return (int(parts[0]) << 24) | (int(parts[1]) << 16) | (int(parts[2]) << 8) | int(parts[3])


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        raise PcapError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise PcapError(f"is a directory, not a pcap file: {path}") from None
    except OSError as exc:
        raise PcapError(f"cannot read {path}: {exc.strerror or exc}") from None


def _scan_offsets(buf: bytes, order: str) -> tuple[list[int], int | None, str]:
    """Offsets of the complete records; also the 1-based number of a cut record and why."""
    unpack = struct.Struct(order + "I").unpack_from
    n = len(buf)
    offs: list[int] = []
    append = offs.append
    off = 24
    last = n - 16
    while off <= last:
        cap = unpack(buf, off + 8)[0]
        append(off)
        off += 16 + cap
    if off == n:
        return offs, None, ""
    if off < n:  # fewer than 16 bytes left: a cut record header
        return offs, len(offs) + 1, f"record header cut after {n - off} of 16 bytes"
    # the last record claims more bytes than the file has
    bad = offs.pop()
    cap = unpack(buf, bad + 8)[0]
    if cap > _MAX_CAPLEN:
        why = f"record claims an impossible length of {cap} bytes (corrupt file)"
    else:
        why = f"record data cut after {n - bad - 16} of {cap} bytes"
    return offs, len(offs) + 1, why


def read_pcap(path: str | os.PathLike[str], *, allow_truncated: bool = False,
              require_tcp: bool = True) -> Packets:
    """Read the IPv4 TCP packets of a classic pcap file.

    Raises PcapError (one-line message) for a missing/empty/non-pcap file or an unsupported link
    type; TruncatedPcapError if the file ends inside a record (unless allow_truncated, then the
    complete records are returned and `truncated_at` says where it was cut); NoTcpError if
    require_tcp and no IPv4 TCP packet is present.
    """
    spath = os.fspath(path)
    buf = _read_bytes(spath)
    if not buf:
        raise PcapError(f"empty file: {spath}")
    magic = buf[:4]
    if magic == _PCAPNG_MAGIC:
        raise PcapError(f"pcapng is not supported, convert it with 'editcap -F pcap IN OUT': {spath}")
    if magic not in _MAGICS:
        raise PcapError(f"not a pcap file (magic 0x{magic.hex()}): {spath}")
    order, nano = _MAGICS[magic]
    if len(buf) < 24:
        raise PcapError(f"truncated pcap: file header cut after {len(buf)} of 24 bytes: {spath}")
    _vmaj, _vmin, _zone, _sig, snaplen, network = struct.unpack_from(order + "HHiIII", buf, 4)
    linktype = network & 0x03FFFFFF
    if linktype not in SUPPORTED_LINKTYPES:
        raise PcapError(f"unsupported link type {linktype} (want Ethernet, Linux cooked SLL/SLL2 "
                        f"or raw IPv4): {spath}")

    offs, cut, why = _scan_offsets(buf, order)
    if cut is not None and not allow_truncated:
        raise TruncatedPcapError(f"truncated pcap: {why} at record {cut}: {spath}", cut)

    pk = _decode(buf, np.asarray(offs, dtype=np.int64), order, nano, linktype)
    packets = Packets(path=spath, linktype=linktype, nanosecond=nano, big_endian=(order == ">"),
                      snaplen=snaplen, records=len(offs), truncated_at=cut, **pk)
    if require_tcp and len(packets) == 0:
        raise NoTcpError(f"no IPv4 TCP packets in {spath} ({len(offs)} records, link type {linktype})")
    return packets


def _decode(buf: bytes, offs: np.ndarray, order: str, nano: bool, linktype: int) -> dict[str, np.ndarray]:
    """Gather all header fields of the records starting at `offs` with vectorised numpy indexing."""
    # Unaligned big-endian views: element i is the 16/32-bit word starting at byte i, so every field
    # of every record is one fancy-index gather. Padding keeps reads of short records in bounds.
    pad = buf + bytes(_WINDOW)
    n = len(pad)
    v8 = np.frombuffer(pad, dtype=np.uint8)
    v16 = np.ndarray((n - 1,), dtype=">u2", buffer=pad, offset=0, strides=(1,))
    v32 = np.ndarray((n - 3,), dtype=">u4", buffer=pad, offset=0, strides=(1,))
    f32 = v32 if order == ">" else np.ndarray((n - 3,), dtype="<u4", buffer=pad, offset=0, strides=(1,))

    def b(pos: np.ndarray) -> np.ndarray:
        return v8[pos].astype(np.uint32)

    def be16(pos: np.ndarray) -> np.ndarray:
        return v16[pos].astype(np.uint32)

    def be32(pos: np.ndarray) -> np.ndarray:
        return v32[pos].astype(np.uint32)

    def file32(pos: np.ndarray) -> np.ndarray:
        return f32[pos].astype(np.uint32)

    frame_all = np.arange(1, len(offs) + 1, dtype=np.int64)
    sec = file32(offs).astype(np.int64)
    frac = file32(offs + 4).astype(np.int64)
    cap = file32(offs + 8).astype(np.int64)
    wire = file32(offs + 12).astype(np.int64)
    d = offs + 16  # start of link-layer data
    end = d + cap

    if linktype == LINKTYPE_ETHERNET:
        et = be16(d + 12)
        l3 = d + 14
        for _ in range(2):  # up to two VLAN tags (802.1Q / 802.1ad)
            tagged = (et == 0x8100) | (et == 0x88A8)
            et = np.where(tagged, be16(l3 + 2), et)
            l3 = np.where(tagged, l3 + 4, l3)
        is_ip = et == 0x0800
    elif linktype == LINKTYPE_LINUX_SLL:
        is_ip = be16(d + 14) == 0x0800
        l3 = d + 16
    elif linktype == LINKTYPE_LINUX_SLL2:
        is_ip = be16(d) == 0x0800
        l3 = d + 20
    elif linktype == LINKTYPE_NULL:  # 4-byte address family in the writer's byte order, AF_INET = 2
        fam = b(d) | (b(d + 1) << 8) | (b(d + 2) << 16) | (b(d + 3) << 24)
        is_ip = (fam == 2) | (fam == 0x02000000)
        l3 = d + 4
    else:  # raw IP
        is_ip = np.ones(len(offs), dtype=bool)
        l3 = d

    vihl = b(l3)
    ihl = ((vihl & 15) * 4).astype(np.int64)
    tcp = l3 + ihl
    ok = (is_ip & ((vihl >> 4) == 4) & (ihl >= 20) & (b(l3 + 9) == 6)
          & ((be16(l3 + 6) & 0x1FFF) == 0) & (tcp + 16 <= end))
    idx = np.flatnonzero(ok)
    l3, tcp, ihl = l3[idx], tcp[idx], ihl[idx]
    total = be16(l3 + 2).astype(np.int64)
    doff = ((b(tcp + 12) >> 4) * 4).astype(np.int64)
    # TSO/GSO captures carry IP total length 0: fall back to the wire length
    wl = wire[idx]
    iplen = np.where(total == 0, wl - (l3 - d[idx]), total)
    plen = np.maximum(iplen - ihl - doff, 0)
    mult = 1 if nano else 1000
    return {
        "frame": frame_all[idx],
        "ts_ns": sec[idx] * 1_000_000_000 + frac[idx] * mult,
        "src": be32(l3 + 12),
        "dst": be32(l3 + 16),
        "sport": be16(tcp).astype(np.uint16),
        "dport": be16(tcp + 2).astype(np.uint16),
        "seq": be32(tcp + 4),
        "ack": be32(tcp + 8),
        "flags": (((b(tcp + 12) & 1) << 8) | b(tcp + 13)).astype(np.uint16),
        "win": be16(tcp + 14).astype(np.uint16),
        "plen": plen,
        "caplen": cap[idx],
        "wirelen": wl,
    }
