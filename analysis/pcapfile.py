"""Reader of classic pcap files, and read_pcap: pcap or pcapng, told apart by the magic.

The record offsets are found with whole-array operations (see _scan_offsets) and the headers
decoded by analysis/packets.py's _decode, the decoder pcapng files (analysis/pcapng.py) share.
"""

from __future__ import annotations

import bisect
import os
import struct

import numpy as np

from analysis.errors import NoTcpError, PcapError, TruncatedPcapError
from analysis.packets import (
    SUPPORTED_LINKTYPES,
    Layout,
    Packets,
    _decode,
    _read_padded,
    unsupported_linktype,
)
from analysis.pcapng import read_pcapng

# magic as read from the first 4 bytes -> (struct byte order, nanosecond timestamps)
_MAGICS: dict[bytes, tuple[str, bool]] = {
    b"\xd4\xc3\xb2\xa1": ("<", False),
    b"\xa1\xb2\xc3\xd4": (">", False),
    b"\x4d\x3c\xb2\xa1": ("<", True),
    b"\xa1\xb2\x3c\x4d": (">", True),
}
_PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
_MAX_CAPLEN = 1 << 26  # a record longer than 64 MiB means a corrupt length field


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


def pcap_layout(order: str) -> Layout:
    """The record layout of classic pcap in the given byte order."""
    return Layout({k: (order + "u4", 4 * i) for i, k in enumerate(("sec", "frac", "cap", "wire"))}, 16)


def read_pcap(
    path: str | os.PathLike[str], *, allow_truncated: bool = False, require_tcp: bool = True
) -> Packets:
    """Read the IPv4 and IPv6 TCP packets of a pcap or pcapng file (told apart by the magic).

    Raises PcapError (one-line message) for a missing/empty/unreadable/malformed file or an
    unsupported link type; TruncatedPcapError if the file ends inside a record (unless
    allow_truncated, then the complete records are returned and `truncated_at` says where it was
    cut); NoTcpError if require_tcp and no TCP packet is present.
    """
    spath = os.fspath(path)
    buf, size = _read_padded(spath)
    if not size:
        raise PcapError(f"empty file: {spath}")
    magic = buf[:4].tobytes()
    if magic == _PCAPNG_MAGIC:
        packets = read_pcapng(spath, buf, size, allow_truncated=allow_truncated)
    elif magic in _MAGICS:
        packets = _read_classic(spath, buf, size, magic, allow_truncated)
    else:
        raise PcapError(f"not a pcap or pcapng file (magic 0x{magic.hex()}): {spath}")
    if require_tcp and len(packets) == 0:
        raise NoTcpError(
            f"no IPv4 or IPv6 TCP packets in {spath} "
            f"({packets.records} records, link type {packets.linktype})"
        )
    return packets


def _read_classic(spath: str, buf: np.ndarray, size: int, magic: bytes, allow_truncated: bool) -> Packets:
    """read_pcap of a classic pcap file (magic already checked)."""
    order, nano = _MAGICS[magic]
    if size < 24:
        raise PcapError(f"truncated pcap: file header cut after {size} of 24 bytes: {spath}")
    _vmaj, _vmin, _zone, _sig, snaplen, network = struct.unpack_from(order + "HHiIII", buf, 4)
    linktype = network & 0x03FFFFFF
    if linktype not in SUPPORTED_LINKTYPES:
        raise unsupported_linktype(linktype, spath)

    offs, cut, why = _scan_offsets(buf, size, order, nano)
    if cut is not None and not allow_truncated:
        raise TruncatedPcapError(f"truncated pcap: {why} at record {cut}: {spath}", cut)

    f = _decode(buf, offs, pcap_layout(order), linktype)
    ts_ns = f.pop("sec") * 1_000_000_000
    ts_ns += f.pop("frac") * (1 if nano else 1000)
    return Packets(
        path=spath,
        linktype=linktype,
        nanosecond=nano,
        big_endian=(order == ">"),
        snaplen=snaplen,
        records=len(offs),
        truncated_at=cut,
        frame=f.pop("idx") + 1,
        ts_ns=ts_ns,
        **f,
    )
