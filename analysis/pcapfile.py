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
_VECTOR_SCAN_MIN = 1 << 16   # smaller files: the plain walk is as fast
_SEC_SLACK = 1 << 20
_MAX_SINGLE_STEPS = 512      # this many records in a row missed by the guess: walk the rest


def _walk(mv: memoryview, order: str, off: int, last: int, out: list[int], limit: int = -1,
          stop: np.ndarray | None = None) -> int:
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


def _scan_vectorised(buf: np.ndarray, mv: memoryview, f32: np.ndarray, n: int, order: str, nano: bool,
                     pieces: list[np.ndarray]) -> int:
    """Append the record offsets (arrays, in file order) to pieces; return the offset after the
    last record whose header fits in the file (see the comment above _VECTOR_SCAN_MIN)."""
    last = n - 16
    k = 3 if order == "<" else 0  # the top byte of the seconds
    hit = buf[24 + k:last + 1 + k] == buf[24 + k]
    if np.count_nonzero(hit) > (n - 24) // 32:  # e.g. timestamps near 0: no useful guess
        rest: list[int] = []
        off = _walk(mv, order, 24, last, rest)
        pieces.append(np.asarray(rest, dtype=np.int64))
        return off
    cand = np.flatnonzero(hit) + 24
    sec = f32[cand]
    keep = ((f32[cand + 4] < (1_000_000_000 if nano else 1_000_000))
            & ((sec - sec[0] + np.uint32(_SEC_SLACK)) < np.uint32(2 * _SEC_SLACK)))
    keep[0] = True  # the first record is at 24 whatever it holds
    cand = cand[keep]
    nxt = cand + 16 + f32[cand + 8].astype(np.int64)
    brk = np.flatnonzero(nxt[:-1] != cand[1:]).tolist()
    brk.append(cand.shape[0] - 1)
    i = 0
    while True:
        b = brk[bisect.bisect_left(brk, i)]
        pieces.append(cand[i:b + 1])      # a verified run: each one's successor is the next
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


def read_pcap(path: str | os.PathLike[str], *, allow_truncated: bool = False,
              require_tcp: bool = True) -> Packets:
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
        raise PcapError(f"unsupported link type {linktype} (want Ethernet, Linux cooked SLL/SLL2 "
                        f"or raw IPv4): {spath}")

    offs, cut, why = _scan_offsets(buf, size, order, nano)
    if cut is not None and not allow_truncated:
        raise TruncatedPcapError(f"truncated pcap: {why} at record {cut}: {spath}", cut)

    pk = _decode(buf, offs, order, nano, linktype)
    packets = Packets(path=spath, linktype=linktype, nanosecond=nano, big_endian=(order == ">"),
                      snaplen=snaplen, records=len(offs), truncated_at=cut, **pk)
    if require_tcp and len(packets) == 0:
        raise NoTcpError(f"no IPv4 TCP packets in {spath} ({len(offs)} records, link type {linktype})")
    return packets


def _words(buf: np.ndarray, dtype: str) -> np.ndarray:
    """Element i: the word of the given dtype (e.g. '>u8') starting at byte i of buf."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((buf.shape[0] - size + 1,), dtype=dtype, buffer=buf, offset=0, strides=(1,))


_M16, _M32 = np.uint64(0xFFFF), np.uint64(0xFFFFFFFF)
_S16, _S24, _S32, _S48, _S56 = (np.uint64(x) for x in (16, 24, 32, 48, 56))


def _decode(buf: np.ndarray, offs: np.ndarray, order: str, nano: bool, linktype: int) -> dict[str, np.ndarray]:
    """Gather all header fields of the records starting at `offs` with vectorised numpy indexing.

    Unaligned views (element i is the word starting at byte i) make each 8-byte piece of a header
    of every record one fancy-index gather (a memory pass per gather, so few wide ones beat many
    narrow ones); the fields are cut out of those words. buf's zero padding keeps the reads of
    short records in bounds.
    """
    v64, v16 = _words(buf, ">u8"), _words(buf, ">u2")
    f64 = v64 if order == ">" else _words(buf, "<u8")
    lo_first = order == "<"  # the first 32-bit field of a pair is in the low half of the word

    def be64(pos: np.ndarray) -> np.ndarray:  # gathered in native byte order: arithmetic is cheaper
        return v64[pos].astype(np.uint64)

    def be16(pos: np.ndarray) -> np.ndarray:
        return v16[pos].astype(np.uint16)

    def pair(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = f64[pos].astype(np.uint64)
        lo, hi = (w & _M32).astype(np.int64), (w >> _S32).astype(np.int64)
        return (lo, hi) if lo_first else (hi, lo)

    d = offs + 16  # start of link-layer data
    cap, wire = pair(offs + 8)
    end = d + cap

    if linktype == LINKTYPE_ETHERNET:
        et = be16(d + 12)
        l3 = d + 14
        for _ in range(2):  # up to two VLAN tags (802.1Q / 802.1ad)
            tagged = (et == 0x8100) | (et == 0x88A8)
            if not tagged.any():
                break
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
        fam = _words(buf, "<u4")[d]
        is_ip = (fam == 2) | (fam == 0x02000000)
        l3 = d + 4
    else:  # raw IP
        is_ip = np.ones(len(offs), dtype=bool)
        l3 = d

    ip0 = be64(l3)        # version/IHL, TOS, total length, id, flags/fragment offset
    ip1 = be64(l3 + 8)    # TTL, protocol, checksum, source address
    vihl = (ip0 >> _S56).astype(np.int64)
    ihl = (vihl & 15) * 4
    tcp = l3 + ihl
    ok = (is_ip & ((vihl >> 4) == 4) & (ihl >= 20) & (((ip1 >> _S48) & np.uint64(0xFF)) == 6)
          & ((ip0 & np.uint64(0x1FFF)) == 0) & (tcp + 16 <= end))
    idx = np.flatnonzero(ok)
    if idx.shape[0] != ok.shape[0]:
        offs, ip0, ip1, l3, tcp, ihl, cap, wire, d = (
            x[idx] for x in (offs, ip0, ip1, l3, tcp, ihl, cap, wire, d))
    sec, frac = pair(offs)
    t0 = be64(tcp)        # ports, sequence number
    t1 = be64(tcp + 8)    # ack number, data offset, flags, window
    total = ((ip0 >> _S32) & _M16).astype(np.int64)
    toff = (t1 >> _S24).astype(np.uint16)  # data offset, reserved bits and NS (low byte: wraps)
    doff = ((toff & 0xF0) >> 2).astype(np.int64)
    # TSO/GSO captures carry IP total length 0: fall back to the wire length
    iplen = np.where(total == 0, wire - (l3 - d), total)
    plen = np.maximum(iplen - ihl - doff, 0)
    ts_ns = sec * 1_000_000_000
    ts_ns += frac * (1 if nano else 1000)
    flags = ((toff & 1) << 8) | ((t1 >> _S16).astype(np.uint16) & 0xFF)
    return {
        "frame": idx + 1,
        "ts_ns": ts_ns,
        "src": ip1.astype(np.uint32),
        "dst": _words(buf, ">u4")[l3 + 16].astype(np.uint32),
        "sport": (t0 >> _S48).astype(np.uint16),
        "dport": (t0 >> _S32).astype(np.uint16),
        "seq": t0.astype(np.uint32),
        "ack": (t1 >> _S32).astype(np.uint32),
        "flags": flags.astype(np.uint16),
        "win": t1.astype(np.uint16),
        "plen": plen,
        "caplen": cap,
        "wirelen": wire,
    }
