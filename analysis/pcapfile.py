"""Fast reader of classic pcap files into numpy arrays of IPv4/TCP header fields.

Why not scapy/dpkt: a Python object per packet costs ~50 us; here one small loop finds the record
offsets and numpy gathers every field at once, so a million packets take about a second.
The payload length comes from the IP total length, not the captured length, because captures are
taken with a small snaplen (e.g. 128 bytes).
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass, replace

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
SUPPORTED_LINKTYPES = (
    LINKTYPE_NULL,
    LINKTYPE_ETHERNET,
    LINKTYPE_RAW,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_IPV4,
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
)
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
    records: int  # all records read (TCP or not)
    truncated_at: int | None
    frame: np.ndarray  # int64, 1-based record number
    ts_ns: np.ndarray  # int64, capture time in ns since the epoch
    src: np.ndarray  # uint32 IPv4 source address
    dst: np.ndarray  # uint32
    sport: np.ndarray  # uint16
    dport: np.ndarray  # uint16
    seq: np.ndarray  # uint32 (absolute)
    ack: np.ndarray  # uint32 (absolute)
    flags: np.ndarray  # uint16 TCP flags (FIN=1 ... CWR=0x80, NS=0x100)
    win: np.ndarray  # uint16 raw (unscaled) window field
    plen: np.ndarray  # int64 TCP payload length from the IP total length
    caplen: np.ndarray  # int64 captured length of the record
    wirelen: np.ndarray  # int64 original length on the wire

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
    """Dotted quad of an IPv4 address held as an integer."""
    a = int(addr)
    return f"{a >> 24 & 255}.{a >> 16 & 255}.{a >> 8 & 255}.{a & 255}"


def str_to_ip(text: str) -> int:
    """Integer of a dotted-quad IPv4 address; raises AnalysisError-compatible ValueError."""
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


def _u32_view(buf: np.ndarray, order: str) -> np.ndarray:
    """Element i: the 32-bit word (file byte order) starting at byte i of buf."""
    return np.ndarray((buf.shape[0] - 3,), dtype=order + "u4", buffer=buf, offset=0, strides=(1,))


# Record offsets. The chain "next = off + 16 + caplen" is sequential, so instead of walking it in
# Python we guess where the record headers are with whole-array operations and then only verify
# the chain: a candidate's successor must be the next candidate. The guess: the top byte of the
# timestamp seconds equals the first record's (changes every 194 days), the seconds are within
# +-12 days of the first record's and the fraction is below 1e6 (1e9 for ns files). Wrong guesses
# cost speed, never correctness: a candidate that is not on the chain is skipped, a record that
# is not a candidate is reached by single steps, and the result is exactly what a walk from
# offset 24 gives.
_VECTOR_SCAN_MIN = 1 << 16  # smaller files: the plain walk is as fast
_SEC_SLACK = 1 << 20
_SCAN_BLOCK = 1 << 20  # bytes searched per step
_MAX_SINGLE_STEPS = 512  # this many records in a row missed by the guess: walk the rest


def _walk(
    mv: memoryview,
    order: str,
    off: int,
    last: int,
    out: list[int],
    limit: int = -1,
    stop: np.ndarray | None = None,
) -> int:
    """Append record offsets from `off` while a record header fits; return the offset after.

    With `stop` (sorted candidate offsets), return at the first offset found in it (without
    appending it) or after `limit` records.
    """
    unpack = struct.Struct(order + "I").unpack_from
    append = out.append
    if stop is None:
        while off <= last:
            append(off)
            off += 16 + unpack(mv, off + 8)[0]
        return off
    ns = stop.shape[0]
    while off <= last and limit != 0:
        j = int(stop.searchsorted(off))
        if j < ns and int(stop[j]) == off:
            return off
        append(off)
        off += 16 + unpack(mv, off + 8)[0]
        limit -= 1
    return off


def _scan_offsets(buf: np.ndarray, n: int, order: str, nano: bool) -> tuple[np.ndarray, int | None, str]:
    """Offsets of the complete records of the n-byte file in buf (padded); also the 1-based
    number of a cut record and why."""
    mv = memoryview(buf)
    last = n - 16
    f32 = _u32_view(buf, order)
    pieces: list[np.ndarray] = []
    if n - 24 < _VECTOR_SCAN_MIN:
        rest: list[int] = []
        off = _walk(mv, order, 24, last, rest)
        pieces.append(np.asarray(rest, dtype=np.int64))
    else:
        off = _scan_vectorised(buf, mv, f32, n, order, nano, pieces)
    offs = np.concatenate(pieces) if len(pieces) != 1 else pieces[0]
    if off == n:
        return offs, None, ""
    if off < n:  # fewer than 16 bytes left: a cut record header
        return offs, len(offs) + 1, f"record header cut after {n - off} of 16 bytes"
    # the last record claims more bytes than the file has
    bad = int(offs[-1])
    offs = offs[:-1]
    cap = int(f32[bad + 8])
    if cap > _MAX_CAPLEN:
        why = f"record claims an impossible length of {cap} bytes (corrupt file)"
    else:
        why = f"record data cut after {n - bad - 16} of {cap} bytes"
    return offs, len(offs) + 1, why


def _scan_vectorised(
    buf: np.ndarray, mv: memoryview, f32: np.ndarray, n: int, order: str, nano: bool, pieces: list[np.ndarray]
) -> int:
    """Append the record offsets (arrays, in file order) to pieces; return the offset after the
    last record whose header fits in the file (see the comment above _VECTOR_SCAN_MIN)."""
    last = n - 16
    k = 3 if order == "<" else 0  # the top byte of the seconds
    sample = buf[24 + k : min(last + 1, 24 + (1 << 20)) + k]
    if np.count_nonzero(sample == buf[24 + k]) > sample.shape[0] // 32:  # e.g. timestamps near 0
        rest: list[int] = []
        off = _walk(mv, order, 24, last, rest)
        pieces.append(np.asarray(rest, dtype=np.int64))
        return off
    rows = np.ndarray((buf.shape[0] - 15,), dtype="V16", buffer=buf, offset=0, strides=(1,))
    hdr_t = np.dtype(
        {"names": ["sec", "frac", "cap"], "formats": [order + "u4"] * 3, "offsets": [0, 4, 8], "itemsize": 16}
    )
    sec0 = np.uint32(f32[24])
    fmax = 1_000_000_000 if nano else 1_000_000
    cands, nxts = [], []
    for lo in range(24, last + 1, _SCAN_BLOCK):  # blocks that stay in the CPU cache
        hi = min(lo + _SCAN_BLOCK, last + 1)
        c = np.flatnonzero(buf[lo + k : hi + k] == buf[24 + k])
        c += lo
        hdr = rows[c].view(hdr_t)
        keep = hdr["frac"] < fmax
        keep &= (hdr["sec"] - sec0 + np.uint32(_SEC_SLACK)) < np.uint32(2 * _SEC_SLACK)
        if lo == 24:
            keep[0] = True  # the first record is at 24 whatever it holds
        c = c[keep]
        nx = hdr["cap"][keep].astype(np.int64)
        nx += c
        nx += 16
        cands.append(c)
        nxts.append(nx)
    cand, nxt = np.concatenate(cands), np.concatenate(nxts)
    brk = np.flatnonzero(nxt[:-1] != cand[1:]).tolist()
    brk.append(cand.shape[0] - 1)
    i = 0
    while True:
        b = brk[bisect.bisect_left(brk, i)]
        pieces.append(cand[i : b + 1])  # a verified run: each one's successor is the next
        off = int(nxt[b])
        single: list[int] = []
        off = _walk(mv, order, off, last, single, _MAX_SINGLE_STEPS, cand)
        if len(single) == _MAX_SINGLE_STEPS:  # the guess misses here: plain walk to the end
            off = _walk(mv, order, off, last, single)
        if single:
            pieces.append(np.asarray(single, dtype=np.int64))
        if off > last:
            return off
        i = int(cand.searchsorted(off))


def read_pcap(
    path: str | os.PathLike[str], *, allow_truncated: bool = False, require_tcp: bool = True
) -> Packets:
    """Read the IPv4 TCP packets of a classic pcap file.

    Raises PcapError (one-line message) for a missing/empty/non-pcap file or an unsupported link
    type; TruncatedPcapError if the file ends inside a record (unless allow_truncated, then the
    complete records are returned and `truncated_at` says where it was cut); NoTcpError if
    require_tcp and no IPv4 TCP packet is present.
    """
    spath = os.fspath(path)
    buf, size = _read_padded(spath)
    if not size:
        raise PcapError(f"empty file: {spath}")
    magic = buf[:4].tobytes()
    if magic == _PCAPNG_MAGIC:
        raise PcapError(f"pcapng is not supported, convert it with 'editcap -F pcap IN OUT': {spath}")
    if magic not in _MAGICS:
        raise PcapError(f"not a pcap file (magic 0x{magic.hex()}): {spath}")
    order, nano = _MAGICS[magic]
    if size < 24:
        raise PcapError(f"truncated pcap: file header cut after {size} of 24 bytes: {spath}")
    _vmaj, _vmin, _zone, _sig, snaplen, network = struct.unpack_from(order + "HHiIII", buf, 4)
    linktype = network & 0x03FFFFFF
    if linktype not in SUPPORTED_LINKTYPES:
        raise PcapError(
            f"unsupported link type {linktype} (want Ethernet, Linux cooked SLL/SLL2 or raw IPv4): {spath}"
        )

    offs, cut, why = _scan_offsets(buf, size, order, nano)
    if cut is not None and not allow_truncated:
        raise TruncatedPcapError(f"truncated pcap: {why} at record {cut}: {spath}", cut)

    pk = _decode(buf, offs, order, nano, linktype)
    packets = Packets(
        path=spath,
        linktype=linktype,
        nanosecond=nano,
        big_endian=(order == ">"),
        snaplen=snaplen,
        records=len(offs),
        truncated_at=cut,
        **pk,
    )
    if require_tcp and len(packets) == 0:
        raise NoTcpError(f"no IPv4 TCP packets in {spath} ({len(offs)} records, link type {linktype})")
    return packets


def _words(buf: np.ndarray, dtype: str) -> np.ndarray:
    """Element i: the word of the given dtype (e.g. '>u2') starting at byte i of buf."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((buf.shape[0] - size + 1,), dtype=dtype, buffer=buf, offset=0, strides=(1,))


# Header fields by (dtype in the file, offset from the IP header, native dtype); the record header
# ones (offset from the record start) are added per file byte order. TCP ones are relative to the
# TCP header.
_IP_FIELDS = {
    "vihl": ("u1", 0, np.uint8),
    "total": (">u2", 2, np.int64),
    "frag": (">u2", 6, np.uint16),
    "proto": ("u1", 9, np.uint8),
    "src": (">u4", 12, np.uint32),
    "dst": (">u4", 16, np.uint32),
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
# link layer: offset of the IP header in the link data, and the field that says "IPv4"
_LINK: dict[int, tuple[int, tuple[str, int] | None]] = {
    LINKTYPE_ETHERNET: (14, (">u2", 12)),
    LINKTYPE_LINUX_SLL: (16, (">u2", 14)),
    LINKTYPE_LINUX_SLL2: (20, (">u2", 0)),
    LINKTYPE_NULL: (4, ("<u4", 0)),
    LINKTYPE_RAW: (0, None),
    LINKTYPE_IPV4: (0, None),
}
_CHUNK = 16384  # records per gather: the copied headers stay in the CPU cache while cut into fields


def _gather(
    buf: np.ndarray,
    offs: np.ndarray,
    order: str,
    linktype: int,
    l3: int,
    ihl: int,
    out: dict[str, np.ndarray] | None = None,
    at: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Header fields of the records at `offs`, all laid out with the IP header `l3` bytes and the
    TCP header `l3 + ihl` bytes after the record start (bytes past a record's end are junk).

    Each chunk of records is copied with one fancy-index gather of fixed-size byte strings out of
    an overlapping view (element i: the bytes from i on) and cut into fields by a structured view.
    Into new arrays, or into `out` at the positions `at`.
    """
    fields = {
        k: (order + "u4", 4 * i, np.uint32 if i < 2 else np.int64)
        for i, k in enumerate(("sec", "frac", "cap", "wire"))
    }
    link = _LINK[linktype][1]
    if link is not None:
        fields["link"] = (link[0], 16 + link[1], np.uint32)
    fields.update({k: (f, l3 + o, t) for k, (f, o, t) in _IP_FIELDS.items()})
    fields.update({k: (f, l3 + ihl + o, t) for k, (f, o, t) in _TCP_FIELDS.items()})
    size = l3 + ihl + 16
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


def _decode(
    buf: np.ndarray, offs: np.ndarray, order: str, nano: bool, linktype: int
) -> dict[str, np.ndarray]:
    """All header fields of the IPv4 TCP records starting at `offs` (vectorised, see _gather).

    Every record is first read with the usual layout (no VLAN tag, 20-byte IP header); the few
    that have another are read again, grouped by their layout. buf's zero padding keeps the reads
    of short records in bounds.
    """
    base = 16 + _LINK[linktype][0]
    f = _gather(buf, offs, order, linktype, base, 20)
    n = offs.shape[0]
    l3 = np.full(n, base, dtype=np.int64)  # IP header offset from the record start
    vlan = None
    if linktype == LINKTYPE_ETHERNET:
        vlan = (f["link"] == 0x8100) | (f["link"] == 0x88A8)
        is_ip = f["link"] == 0x0800
    elif linktype in (LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2):
        is_ip = f["link"] == 0x0800
    elif linktype == LINKTYPE_NULL:  # 4-byte address family in the writer's byte order, AF_INET = 2
        is_ip = (f["link"] == 2) | (f["link"] == 0x02000000)
    else:  # raw IP
        is_ip = np.ones(n, dtype=bool)
    vihl = f["vihl"]
    other = is_ip & (vihl > 0x45) & (vihl < 0x50)  # IPv4 with options: the TCP header is further
    if vlan is not None:
        other |= vlan
    redo = np.flatnonzero(other)
    if redo.size:
        _regather(buf, offs, order, linktype, redo, f, l3, is_ip)
        vihl = f["vihl"]
    ihl = (vihl & 15).astype(np.int64) * 4
    ok = (
        is_ip
        & ((vihl >> 4) == 4)
        & (ihl >= 20)
        & (f["proto"] == 6)
        & ((f["frag"] & 0x1FFF) == 0)
        & (l3 + ihl <= f["cap"])
    )  # the TCP header up to the window field is captured
    idx = np.flatnonzero(ok)
    if idx.shape[0] != n:
        f = {k: v[idx] for k, v in f.items()}
        ihl, l3 = ihl[idx], l3[idx]
    total, wire, toff = f["total"], f["wire"], f["toff"]
    # TSO/GSO captures carry IP total length 0: fall back to the wire length
    iplen = np.where(total == 0, wire - (l3 - 16), total)
    plen = np.maximum(iplen - ihl - ((toff >> 4).astype(np.int64) * 4), 0)
    ts_ns = f["sec"].astype(np.int64) * 1_000_000_000
    ts_ns += f["frac"].astype(np.int64) * (1 if nano else 1000)
    flags = (toff & 1).astype(np.uint16) << 8
    flags |= f["fl"]
    return {
        "frame": idx + 1,
        "ts_ns": ts_ns,
        "src": f["src"],
        "dst": f["dst"],
        "sport": f["sport"],
        "dport": f["dport"],
        "seq": f["seq"],
        "ack": f["ack"],
        "flags": flags,
        "win": f["win"],
        "plen": plen,
        "caplen": f["cap"],
        "wirelen": wire,
    }


def _regather(
    buf: np.ndarray,
    offs: np.ndarray,
    order: str,
    linktype: int,
    redo: np.ndarray,
    f: dict[str, np.ndarray],
    l3: np.ndarray,
    is_ip: np.ndarray,
) -> None:
    """Read the records `redo` (indices into offs) again with their own layout: up to two VLAN
    tags (802.1Q / 802.1ad) and IP options. Updates f, l3 and is_ip in place."""
    v16 = _words(buf, ">u2")
    o = offs[redo]
    pos = np.full(redo.shape[0], 16 + _LINK[linktype][0], dtype=np.int64)
    if linktype == LINKTYPE_ETHERNET:
        et = f["link"][redo]
        for _ in range(2):
            tagged = (et == 0x8100) | (et == 0x88A8)
            et = np.where(tagged, v16[o + pos + 2], et)
            pos = np.where(tagged, pos + 4, pos)
        ip = et == 0x0800
    else:
        ip = np.ones(redo.shape[0], dtype=bool)
    vihl = buf[o + pos]
    ihl = (vihl & 15).astype(np.int64) * 4
    ip &= ((vihl >> 4) == 4) & (ihl >= 20)  # else it is not decoded as IPv4 TCP anyway
    is_ip[redo] = ip
    l3[redo] = pos
    key = pos * 64 + ihl
    for k in np.unique(key[ip]).tolist():
        sel = np.flatnonzero(ip & (key == k))
        _gather(buf, o[sel], order, linktype, k // 64, k % 64, out=f, at=redo[sel])
