"""IPv6 for the capture reader: addresses as integers, and where the TCP header starts.

Packets keeps every address in one int64 array so that the analyses compare, sort and pack
them (`addr << 16 | port`) the same way for both IP versions: an IPv4 address is its own 32-bit
value, an IPv6 address is V6_BASE plus its index in one table of this process. The table only
grows, so an id means the same address in every capture the process reads, and a host address
given as text (str_to_ip) compares equal to the packets' ids.
"""

from __future__ import annotations

import ipaddress

import numpy as np

V6_BASE = 1 << 32  # ids at or above this are IPv6 addresses

_IDS: dict[bytes, int] = {}
_ADDRS: list[bytes] = []

# next-header values of the extension headers walked to reach TCP: hop-by-hop, routing,
# fragment, authentication, destination options
_HOP, _ROUTING, _FRAGMENT, _AH, _DSTOPTS = 0, 43, 44, 51, 60
_EXTENSIONS = np.array([_HOP, _ROUTING, _FRAGMENT, _AH, _DSTOPTS], dtype=np.int64)
_MAX_EXTENSIONS = 8  # more in one packet is not TCP we can read (and bounds the walk)


def _intern_one(raw: bytes) -> int:
    got = _IDS.get(raw)
    if got is None:
        got = V6_BASE + len(_ADDRS)
        _IDS[raw] = got
        _ADDRS.append(raw)
    return got


def intern(addrs: np.ndarray) -> np.ndarray:
    """int64 ids of an array of 16-byte addresses (dtype V16), one per element.

    The few distinct addresses are found by a 64-bit mix of the two halves: the distinct mixes of
    the first packets, a binary search of every packet's among them, a sort of the rest only if
    some are not; a mix that two different addresses share (never seen in practice) falls back to
    sorting the bytes.
    """
    n = addrs.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    halves = np.ascontiguousarray(addrs).view(">u8").reshape(-1, 2)
    with np.errstate(over="ignore"):
        key = halves[:, 0].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ halves[:, 1].astype(np.uint64)
    uniq = np.unique(key[:4096])  # a capture's first packets name most of its hosts
    inv = np.minimum(np.searchsorted(uniq, key), uniq.shape[0] - 1)
    miss = uniq[inv] != key
    if miss.any():
        uniq = np.unique(np.concatenate([uniq, key[miss]]))
        inv = np.searchsorted(uniq, key)
    first = np.empty(uniq.shape[0], dtype=np.int64)
    first[inv[::-1]] = np.arange(n - 1, -1, -1)  # the last write wins: each one's first element
    if not np.array_equal(halves, halves[first[inv]]):
        _u, first, inv = np.unique(halves, axis=0, return_index=True, return_inverse=True)
        inv = inv.ravel()
    ids = np.array([_intern_one(addrs[i].tobytes()) for i in first.tolist()], dtype=np.int64)
    return ids[inv]


def v6_str(addr: int) -> str:
    """The compressed text of the IPv6 address with this id (e.g. 2001:db8::1)."""
    i = int(addr) - V6_BASE
    if not 0 <= i < len(_ADDRS):
        raise ValueError(f"not an address id of this process: {addr}")
    return ipaddress.IPv6Address(_ADDRS[i]).compressed


def parse_v6(text: str) -> int:
    """The id of an IPv6 address given as text (brackets allowed); ValueError if it is not one."""
    t = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        return _intern_one(ipaddress.IPv6Address(t).packed)
    except ValueError:
        raise ValueError(f"not an IP address: {text!r}") from None


def tcp_offset(
    buf: np.ndarray, rec: np.ndarray, l3: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Where TCP starts in IPv6 packets, and which packets carry a readable TCP header.

    rec: record offsets in buf; l3: the IPv6 header's offset from the record start; end: the end
    of the captured bytes from the record start. Returns (offset of the TCP header from the record
    start, ok): ok when the version is 6, the extension headers (at most _MAX_EXTENSIONS) lead to
    next header 6, the packet is not a non-first fragment, and the TCP header up to its window
    field is captured. Walked for all packets at once, one extension header per step.
    """
    at = rec + l3
    ok = ((buf[at] >> 4) == 6) & (l3 + 40 <= end)
    nh = buf[at + 6].astype(np.int64)
    pos = l3 + 40
    for _ in range(_MAX_EXTENSIONS):
        ext = ok & np.isin(nh, _EXTENSIONS)
        if not ext.any():
            break
        i = np.flatnonzero(ext)
        p, h = pos[i], nh[i]
        fits = p + 8 <= end[i]
        i, p, h = i[fits], p[fits], h[fits]
        ok[np.flatnonzero(ext)[~fits]] = False  # an extension header cut by the snaplen
        a = rec[i] + p
        hlen = buf[a + 1].astype(np.int64)
        size = np.where(h == _FRAGMENT, 8, np.where(h == _AH, (hlen + 2) * 4, (hlen + 1) * 8))
        frag = (buf[a + 2].astype(np.int64) << 8 | buf[a + 3]) & 0xFFF8
        ok[i] &= ~((h == _FRAGMENT) & (frag != 0))  # a later fragment carries no TCP header
        nh[i] = buf[a]
        pos[i] = p + size
    ok &= (nh == 6) & (pos + 16 <= end)
    return pos, ok
