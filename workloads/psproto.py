"""Framed TCP protocol between PS-family workers and the parameter server.

Every message is a fixed 40-byte header followed by `nbytes` of payload. Gradients and weights are
raw little-endian float32 sent straight from the tensor's memory (no pickling), so the bytes on the
wire are the gradient plus 40 bytes, which keeps the pcap analysis honest.

    magic "ICLB" | kind u8 | pad 3 | rank i32 | step i32 | version i64 | arg i64 | nbytes u64

HELLO    worker->PS  rank, arg = number of parameters (checked by the PS)
WELCOME  PS->worker  sent to all workers once all N said HELLO (a common start line)
PUSH     worker->PS  step, version = weights version the gradient was computed on, payload = grad
WEIGHTS  PS->worker  version of the weights, step = the worker's next step, payload = weights
BYE      worker->PS  after the worker's last WEIGHTS
ERROR    PS->worker  payload = UTF-8 reason; the worker reports it and exits
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

MAGIC = b"ICLB"
HEADER = struct.Struct("!4sB3xiiqqQ")
F32 = np.dtype("<f4")


class Kind(IntEnum):
    HELLO = 1
    WELCOME = 2
    PUSH = 3
    WEIGHTS = 4
    BYE = 5
    ERROR = 6


class ProtocolError(Exception):
    """The peer sent something that is not our protocol."""


class PeerClosed(ConnectionError):
    """The peer closed the connection (EOF), possibly mid-message."""


def why_lost(exc: object) -> str:
    """A short reason for a broken connection, for the PS's worker_lost record and either side's
    one-line error: "connection closed", "connection reset", "protocol error: ...", the OS's words."""
    if isinstance(exc, PeerClosed):
        return "connection closed"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, BrokenPipeError):
        return "broken pipe"
    if isinstance(exc, ProtocolError):
        return f"protocol error: {exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


@dataclass(frozen=True)
class Header:
    kind: Kind
    rank: int = 0
    step: int = 0
    version: int = 0
    arg: int = 0
    nbytes: int = 0

    def pack(self) -> bytes:
        return HEADER.pack(MAGIC, int(self.kind), self.rank, self.step, self.version, self.arg, self.nbytes)

    @classmethod
    def unpack(cls, raw: bytes | bytearray | memoryview) -> Header:
        magic, kind, rank, step, version, arg, nbytes = HEADER.unpack(raw)
        if magic != MAGIC:
            raise ProtocolError(f"bad magic {bytes(magic)!r}")
        try:
            k = Kind(kind)
        except ValueError:
            raise ProtocolError(f"unknown message kind {kind}") from None
        return cls(k, rank, step, version, arg, nbytes)


def as_bytes(arr: np.ndarray) -> memoryview:
    """Zero-copy byte view of a contiguous float32 array, in wire byte order."""
    if arr.dtype != F32 or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr, dtype=F32)
    return memoryview(arr).cast("B")


def send_msg(sock: socket.socket, header: Header, payload: bytes | memoryview = b"") -> int:
    """Send header + payload (header.nbytes is set from the payload); returns bytes written."""
    body = memoryview(payload).cast("B") if not isinstance(payload, bytes) else payload
    h = Header(header.kind, header.rank, header.step, header.version, header.arg, len(body))
    sock.sendall(h.pack())
    if len(body):
        sock.sendall(body)
    return HEADER.size + len(body)


def recv_into(sock: socket.socket, view: memoryview) -> None:
    """Fill `view` completely or raise PeerClosed."""
    got = 0
    n = len(view)
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise PeerClosed(f"connection closed after {got} of {n} bytes")
        got += k


def recv_header(sock: socket.socket) -> Header:
    raw = bytearray(HEADER.size)
    recv_into(sock, memoryview(raw))
    return Header.unpack(raw)


def recv_f32(sock: socket.socket, header: Header, out: np.ndarray | None = None) -> np.ndarray:
    """Read a float32 payload, into `out` when given (its size must match the header)."""
    if header.nbytes % F32.itemsize:
        raise ProtocolError(f"payload of {header.nbytes} bytes is not float32")
    n = header.nbytes // F32.itemsize
    if out is None:
        out = np.empty(n, dtype=F32)
    elif out.size != n or out.dtype != F32:
        raise ProtocolError(f"expected {out.size} float32, peer sent {n}")
    if n:
        recv_into(sock, memoryview(out).cast("B"))
    return out


def recv_text(sock: socket.socket, header: Header, limit: int = 4096) -> str:
    """Read an ERROR payload (bounded, so a broken peer cannot make us allocate gigabytes)."""
    if header.nbytes > limit:
        raise ProtocolError(f"error text of {header.nbytes} bytes")
    raw = bytearray(header.nbytes)
    recv_into(sock, memoryview(raw))
    return raw.decode("utf-8", errors="replace")
