"""pcapng (what dumpcap and Wireshark write by default) read into the same Packets as classic pcap.

The blocks form a chain (each one's total length leads to the next), walked in Python only where
needed: as in pcapfile's classic scan, the enhanced packet blocks are guessed with whole-array
operations (a 4-byte aligned word equal to 6 whose block length is repeated at the block's end)
and only the chain is verified, so a run of packet blocks costs no Python step. Section headers,
interface descriptions and other blocks are read one by one. A file may hold several sections
(each with its own byte order and interfaces) and several interfaces (each with its own link type,
timestamp resolution and offset): the packet blocks are decoded by packets._decode in groups of
one block type and interface, then put back in file order. A simple packet block has no time:
it takes that of the packet before it (_fill_times).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from analysis.errors import PcapError, TruncatedPcapError
from analysis.packets import SUPPORTED_LINKTYPES, Layout, Packets, _decode, unsupported_linktype

SHB, IDB, PB, SPB, EPB = 0x0A0D0D0A, 1, 2, 3, 6  # block types (PB: the obsolete packet block)
# blocks Wireshark numbers as frames although they hold no packet: systemd journal export, and
# the two custom block types; counted as records so that frame numbers stay tshark's
_OTHER_FRAMES = (9, 0x00000BAD, 0x40000BAD)
_PACKETS = (EPB, PB, SPB)
_BOM = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}
_OPT_TSRESOL, _OPT_TSOFFSET = 9, 14
_MIN_LEN = {SHB: 28, IDB: 20, PB: 32, SPB: 16, EPB: 32}
_MAX_BLOCK = 1 << 26  # a block longer than 64 MiB means a corrupt length field
_VECTOR_SCAN_MIN = 1 << 16  # smaller files: the plain walk is as fast
_NS = 1_000_000_000
_UNTIMED = np.iinfo(np.int64).min  # ts_ns of a simple packet block until _fill_times


@dataclass(frozen=True)
class _Iface:
    """One interface description: link type, snap length, timestamp units and offset."""

    linktype: int
    snaplen: int
    tsresol: int  # if_tsresol byte: 10^-v s, or 2^-(v & 0x7f) s if the top bit is set
    tsoffset: int  # if_tsoffset, seconds added to every timestamp


def _fine(resol: int) -> bool:
    """Whether the resolution is finer than a microsecond."""
    return (resol & 0x7F) > 19 if resol & 0x80 else resol > 6


def _to_ns(hi: np.ndarray, lo: np.ndarray, iface: _Iface) -> np.ndarray:
    """Nanoseconds since the epoch of 64-bit timestamps (high and low words) in the interface's units."""
    ts = (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)
    v = iface.tsresol & 0x7F
    if iface.tsresol & 0x80:  # binary fractions: whole seconds, then the fraction cut to 30 bits
        sec = ts >> np.uint64(v)
        frac = ts & np.uint64((1 << v) - 1)
        if v > 30:
            frac >>= np.uint64(v - 30)
        ns = sec * np.uint64(_NS) + ((frac * np.uint64(_NS)) >> np.uint64(min(v, 30)))
    elif v <= 9:
        ns = ts * np.uint64(10 ** (9 - v))
    else:
        ns = ts // np.uint64(10 ** (v - 9))
    out = ns.astype(np.int64)
    if iface.tsoffset:
        out += np.int64(iface.tsoffset * _NS)
    return out


class _Walk:
    """The block chain of one file: the offsets of the blocks that are frames (packet blocks and
    _OTHER_FRAMES, in file order), their kinds and sections, the interfaces and sections met, and
    where the file was cut."""

    def __init__(self, buf: np.ndarray, size: int, spath: str) -> None:
        self.buf, self.size, self.spath = buf, size, spath
        self.mv = memoryview(buf)
        self.ifaces: list[_Iface] = []
        self.sections: list[tuple[str, int]] = []  # (byte order, index of its first interface)
        self.count = 0  # packet blocks so far
        self.cut: int | None = None
        self.why = ""
        self._cands: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def fail(self, off: int, what: str) -> PcapError:
        return PcapError(f"corrupt pcapng: {what} (block at byte {off}): {self.spath}")

    def candidates(self, order: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(offsets of the guessed enhanced packet blocks, the offset after each, the last index
        of each run whose successors are the next guesses), computed once per byte order."""
        got = self._cands.get(order)
        if got is not None:
            return got
        n = self.size // 4
        w = np.ndarray((n + 2,), dtype=order + "u4", buffer=self.buf, offset=0)
        c = np.flatnonzero(w[:n] == EPB)
        ln = w[c + 1].astype(np.int64)
        keep = (ln % 4 == 0) & (ln >= _MIN_LEN[EPB]) & (c * 4 + ln <= self.size)
        c, ln = c[keep], ln[keep]
        keep = w[c + ln // 4 - 1] == ln
        cand = c[keep].astype(np.int64) * 4
        nxt = cand + ln[keep]
        brk = np.flatnonzero(nxt[:-1] != cand[1:])
        got = (cand, nxt, np.append(brk, cand.shape[0] - 1))
        self._cands[order] = got
        return got

    def run(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Walk the whole file; returns (offsets, kinds, sections) of the frames."""
        offs: list[np.ndarray] = []
        kinds: list[np.ndarray] = []
        secs: list[np.ndarray] = []
        singles: list[tuple[int, int, int]] = []

        def flush() -> None:
            if singles:
                arr = np.array(singles, dtype=np.int64).reshape(-1, 3)
                offs.append(arr[:, 0])
                kinds.append(arr[:, 1])
                secs.append(arr[:, 2])
                singles.clear()

        size, mv = self.size, self.mv
        vector = size >= _VECTOR_SCAN_MIN
        off, order = 0, "<"
        while off < size:
            if size - off < 12:
                self.cut, self.why = self.count + 1, f"block header cut after {size - off} of 12 bytes"
                break
            if self.sections and vector:
                cand, nxt, brk = self.candidates(order)
                j = int(cand.searchsorted(off))
                if j < cand.shape[0] and int(cand[j]) == off:
                    b = int(brk[int(brk.searchsorted(j))])
                    flush()
                    offs.append(cand[j : b + 1])
                    kinds.append(np.full(b + 1 - j, EPB, dtype=np.int64))
                    secs.append(np.full(b + 1 - j, len(self.sections) - 1, dtype=np.int64))
                    self.count += b + 1 - j
                    off = int(nxt[b])
                    continue
            btype = struct.unpack_from(order + "I", mv, off)[0]
            if btype == SHB:
                bom = bytes(mv[off + 8 : off + 12])
                if bom not in _BOM:
                    raise self.fail(off, f"section header with byte-order magic 0x{bom.hex()}")
                order = _BOM[bom]
            elif not self.sections:
                raise self.fail(off, "the file does not start with a section header")
            ln = struct.unpack_from(order + "I", mv, off + 4)[0]
            if ln < _MIN_LEN.get(btype, 12) or ln % 4:
                raise self.fail(off, f"block type {btype} with length {ln}")
            if off + ln > size:
                self.cut = self.count + 1
                if ln > _MAX_BLOCK:
                    self.why = f"block claims an impossible length of {ln} bytes"
                else:
                    self.why = f"block of type {btype} cut after {size - off} of {ln} bytes"
                break
            if struct.unpack_from(order + "I", mv, off + ln - 4)[0] != ln:
                raise self.fail(off, f"block type {btype}: the length at its end differs from {ln}")
            if btype == SHB:
                major = struct.unpack_from(order + "H", mv, off + 12)[0]
                if major != 1:
                    raise self.fail(off, f"pcapng version {major} (want 1)")
                self.sections.append((order, len(self.ifaces)))
            elif btype == IDB:
                self.ifaces.append(self.interface(off, ln, order))
            elif btype in _PACKETS or btype in _OTHER_FRAMES:
                singles.append((off, btype, len(self.sections) - 1))
                self.count += 1
            off += ln
        flush()
        if not offs:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        return np.concatenate(offs), np.concatenate(kinds), np.concatenate(secs)

    def interface(self, off: int, ln: int, order: str) -> _Iface:
        """The interface description block at off (its options: if_tsresol, if_tsoffset)."""
        linktype, _res, snaplen = struct.unpack_from(order + "HHI", self.mv, off + 8)
        resol, tsoff = 6, 0
        pos, end = off + 16, off + ln - 4
        while pos + 4 <= end:
            code, olen = struct.unpack_from(order + "HH", self.mv, pos)
            if code == 0:  # opt_endofopt
                break
            if pos + 4 + olen > end:
                raise self.fail(off, f"interface option {code} runs past the block")
            if code == _OPT_TSRESOL and olen >= 1:
                resol = self.buf[pos + 4]
            elif code == _OPT_TSOFFSET and olen >= 8:
                tsoff = struct.unpack_from(order + "q", self.mv, pos + 4)[0]
            pos += 4 + (olen + 3) // 4 * 4
        resol = int(resol)
        if (resol & 0x7F) > (63 if resol & 0x80 else 19):
            raise self.fail(off, f"timestamp resolution 0x{resol:02x}")
        return _Iface(linktype=linktype, snaplen=snaplen, tsresol=resol, tsoffset=tsoff)


def read_pcapng(spath: str, buf: np.ndarray, size: int, *, allow_truncated: bool) -> Packets:
    """read_pcap for a pcapng file (buf: its bytes, zero padded, as read_pcap reads them)."""
    wk = _Walk(buf, size, spath)
    offs, kinds, secs = wk.run()
    if wk.cut is not None and not allow_truncated:
        raise TruncatedPcapError(f"truncated pcapng: {wk.why} at packet {wk.cut}: {spath}", wk.cut)
    n = offs.shape[0]
    key, blen = _keys(wk, offs, kinds, secs)
    if n and int(key.min()) == int(key.max()) >= 0:  # the usual file: one interface, all EPBs
        groups: list[tuple[int, np.ndarray | None]] = [(int(key[0]), None)]
    else:
        groups = [(int(k), np.flatnonzero(key == k)) for k in np.unique(key[key >= 0]).tolist()]
    parts = [_group(wk, offs, blen, k, at) for k, at in groups]
    got = [p for p in parts if p is not None]
    if parts and not got:  # every packet is on an interface of an unsupported link type
        raise unsupported_linktype(wk.ifaces[groups[0][0] & 0xFFFFFFFF].linktype, spath)
    fields = _merge(got) if got else _nothing()
    if any(k >> 32 == SPB for k, _at in groups):
        _fill_times(fields["ts_ns"])
    first_if = wk.ifaces[0] if wk.ifaces else _Iface(-1, 0, 6, 0)
    return Packets(
        path=spath,
        linktype=first_if.linktype,
        nanosecond=any(_fine(i.tsresol) for i in wk.ifaces),
        big_endian=bool(wk.sections) and wk.sections[0][0] == ">",
        snaplen=first_if.snaplen,
        records=n,
        truncated_at=wk.cut,
        **fields,
    )


def _keys(wk: _Walk, offs: np.ndarray, kinds: np.ndarray, secs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per frame: kind << 32 | the file-wide number of its interface (-1 for frames that are no
    packet), and its block length. Refuses a packet that names an interface its section lacks."""
    n = offs.shape[0]
    key = np.full(n, -1, dtype=np.int64)
    blen = np.zeros(n, dtype=np.int64)
    buf = wk.buf
    for s, (order, first) in enumerate(wk.sections):
        sel: np.ndarray | slice = np.flatnonzero(secs == s) if len(wk.sections) > 1 else slice(None)
        o, k = offs[sel], kinds[sel]  # a view when there is one section
        if not o.size:
            continue
        w32 = np.ndarray((buf.shape[0] - 3,), dtype=order + "u4", buffer=buf, offset=0, strides=(1,))
        if bool((k == EPB).all()):
            local = w32[o + 8].astype(np.int64)
            pkt = None
        else:
            w16 = np.ndarray((buf.shape[0] - 1,), dtype=order + "u2", buffer=buf, offset=0, strides=(1,))
            local = np.where(k == EPB, w32[o + 8], np.where(k == PB, w16[o + 8], 0)).astype(np.int64)
            pkt = np.isin(k, _PACKETS)
        known = (wk.sections[s + 1][1] if s + 1 < len(wk.sections) else len(wk.ifaces)) - first
        bad = np.flatnonzero((local >= known) if pkt is None else (local >= known) & pkt)
        if bad.size:
            i = int(bad[0] if isinstance(sel, slice) else sel[bad[0]])
            raise wk.fail(int(offs[i]), f"packet {i + 1} names interface {int(local[bad[0]])} of {known}")
        local += first | (k << 32)
        key[sel] = local if pkt is None else np.where(pkt, local, -1)
        blen[sel] = w32[o + 4]
    return key, blen


def _group(
    wk: _Walk, offs: np.ndarray, blen: np.ndarray, key: int, at: np.ndarray | None
) -> dict[str, np.ndarray] | None:
    """Packets fields of the packet blocks of one kind and interface, the frames `at` (None: all);
    None if its link type is not read. Checks that each block holds its captured bytes."""
    kind, ifn = key >> 32, key & 0xFFFFFFFF
    buf = wk.buf
    itf = wk.ifaces[ifn]
    if itf.linktype not in SUPPORTED_LINKTYPES:
        return None
    o, ln = (offs, blen) if at is None else (offs[at], blen[at])
    order = wk.sections[_section_of(wk, ifn)][0]
    u4 = order + "u4"
    cap = None
    if kind == SPB:
        lay = Layout({"wire": (u4, 8)}, 12)
        w32 = np.ndarray((buf.shape[0] - 3,), dtype=u4, buffer=buf, offset=0, strides=(1,))
        cap = np.minimum(w32[o + 8].astype(np.int64), ln - 16)
        if itf.snaplen:
            cap = np.minimum(cap, itf.snaplen)
    else:
        lay = Layout({"th": (u4, 12), "tl": (u4, 16), "cap": (u4, 20), "wire": (u4, 24)}, 28)
        w32 = np.ndarray((buf.shape[0] - 3,), dtype=u4, buffer=buf, offset=0, strides=(1,))
        over = np.flatnonzero(w32[o + 20].astype(np.int64) + 32 > ln)
        if over.size:
            i = int(over[0] if at is None else at[over[0]])
            raise wk.fail(int(offs[i]), f"packet {i + 1}: its captured length does not fit its block")
    f = _decode(buf, o, lay, itf.linktype, cap)
    idx = f.pop("idx")
    if kind == SPB:
        ts = np.full(idx.shape[0], _UNTIMED, dtype=np.int64)  # a simple packet block has no time
    else:
        ts = _to_ns(f.pop("th"), f.pop("tl"), itf)
    return {"frame": (idx if at is None else at[idx]) + 1, "ts_ns": ts, **f}


def _section_of(wk: _Walk, ifn: int) -> int:
    """The section an interface (global number) belongs to."""
    s = 0
    for i, (_order, first) in enumerate(wk.sections):
        if first <= ifn:
            s = i
    return s


def _fill_times(ts: np.ndarray) -> None:
    """Give the untimed packets (simple packet blocks) the time of the timed packet before them,
    or of the first one for those before it (all 0 without any): the capture's time span stays
    that of its timed packets, where 0 would stretch it back to 1970."""
    timed = ts != _UNTIMED
    if not timed.any():
        ts[:] = 0
        return
    last = np.maximum.accumulate(np.where(timed, np.arange(ts.shape[0]), -1))
    last[last < 0] = int(np.flatnonzero(timed)[0])
    ts[:] = ts[last]


def _merge(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The groups' fields as one set of arrays in file (frame) order."""
    if len(parts) == 1:
        return parts[0]
    out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.argsort(out["frame"], kind="stable")
    return {k: v[order] for k, v in out.items()}


def _nothing() -> dict[str, np.ndarray]:
    """Empty per-packet arrays of the Packets dtypes."""
    i64 = np.zeros(0, dtype=np.int64)
    u16, u32 = np.zeros(0, dtype=np.uint16), np.zeros(0, dtype=np.uint32)
    return {
        "frame": i64,
        "ts_ns": i64,
        "src": i64,
        "dst": i64,
        "sport": u16,
        "dport": u16,
        "seq": u32,
        "ack": u32,
        "flags": u16,
        "win": u16,
        "plen": i64,
        "caplen": i64,
        "wirelen": i64,
        "tcp_at": i64,
        "tcp_cap": i64,
    }
