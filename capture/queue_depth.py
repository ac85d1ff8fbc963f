"""Queue-depth sampler: the backlog and drops of switch port queues, every 10 ms, as JSON lines.

Why rtnetlink and not `tc`: forking tc 100 times a second costs a core on a 2-core machine, while
one RTM_GETTCLASS dump on an open netlink socket costs microseconds. If netlink cannot be used, one
long-lived `tc -s -batch -` process is fed a `class show` line per sample instead (still no fork per
sample). Root network namespace only: the switch ports it watches live there.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Queue
from typing import IO, Any, Protocol

from runmodel.records import QueueSample

# linux/rtnetlink.h, linux/netlink.h, linux/gen_stats.h, linux/pkt_sched.h
RTM_GETTCLASS = 42
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
TCA_STATS2 = 7
TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_PKT64 = 1, 3, 8
NLA_TYPE_MASK = 0x3FFF
_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_TCMSG = struct.Struct("=BxxxiIII")  # family, pad, ifindex, handle, parent, info
_RTATTR = struct.Struct("=HH")  # len, type
_BASIC = struct.Struct("=QI")  # gnet_stats_basic: bytes, packets
_QUEUE = struct.Struct("=IIIII")  # gnet_stats_queue: qlen, backlog, drops, requeues, overlimits


class QueueSamplerError(RuntimeError):
    """The class cannot be sampled (interface or class missing, no backend works)."""


class BackendError(OSError):
    """A sampling backend itself failed (as opposed to the class being absent)."""


@dataclass(frozen=True)
class ClassStats:
    """One reading of a tc class's counters."""

    backlog_bytes: int
    backlog_packets: int
    drops: int
    sent_packets: int


def parse_classid(text: str) -> int:
    """'1:1' -> 0x00010001 (tc writes both halves in hex)."""
    major, _, minor = text.partition(":")
    return (int(major or "0", 16) << 16) | int(minor or "0", 16)


def _attrs(buf: bytes, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of each rtattr in buf[start:end]."""
    off = start
    while off + _RTATTR.size <= end:
        length, kind = _RTATTR.unpack_from(buf, off)
        if length < _RTATTR.size:
            break
        yield kind & NLA_TYPE_MASK, buf[off + _RTATTR.size : off + length]
        off += (length + 3) & ~3


def parse_tclass_stats(payload: bytes) -> ClassStats | None:
    """ClassStats from the attributes after a tcmsg (None if the kernel sent no TCA_STATS2)."""
    basic = queue = None
    pkt64: int | None = None
    for kind, data in _attrs(payload, _TCMSG.size, len(payload)):
        if kind != TCA_STATS2:
            continue
        for sub, sdata in _attrs(data, 0, len(data)):
            if sub == TCA_STATS_BASIC and len(sdata) >= _BASIC.size:
                basic = _BASIC.unpack_from(sdata)
            elif sub == TCA_STATS_QUEUE and len(sdata) >= _QUEUE.size:
                queue = _QUEUE.unpack_from(sdata)
            elif sub == TCA_STATS_PKT64 and len(sdata) >= 8:
                pkt64 = struct.unpack_from("=Q", sdata)[0]
    if basic is None or queue is None:
        return None
    qlen, backlog, drops, _requeues, _overlimits = queue
    return ClassStats(
        backlog_bytes=backlog,
        backlog_packets=qlen,
        drops=drops,
        sent_packets=pkt64 if pkt64 is not None else basic[1],
    )


class _Backend(Protocol):
    name: str

    def read(self) -> ClassStats | None: ...

    def close(self) -> None: ...


class NetlinkBackend:
    """Reads one class's stats with an RTM_GETTCLASS dump on a raw NETLINK_ROUTE socket."""

    name = "netlink"

    def __init__(self, ifindex: int, classid: int) -> None:
        self.ifindex = ifindex
        self.classid = classid
        self.seq = 0
        self.sock = socket.socket(
            socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE
        )
        try:
            self.sock.bind((0, 0))
            self.sock.settimeout(2.0)
        except OSError:
            self.sock.close()
            raise

    def read(self) -> ClassStats | None:
        """The class's stats now, or None if the interface has no such class."""
        self.seq += 1
        body = _TCMSG.pack(socket.AF_UNSPEC, self.ifindex, 0, 0, 0)
        head = _NLMSGHDR.pack(
            _NLMSGHDR.size + len(body), RTM_GETTCLASS, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0
        )
        try:
            self.sock.send(head + body)
        except OSError as exc:
            raise BackendError(f"netlink send: {exc}") from exc
        found: ClassStats | None = None
        while True:
            try:
                buf = self.sock.recv(65536)
            except OSError as exc:
                raise BackendError(f"netlink recv: {exc}") from exc
            off = 0
            while off + _NLMSGHDR.size <= len(buf):
                length, kind, _flags, seq, _pid = _NLMSGHDR.unpack_from(buf, off)
                if length < _NLMSGHDR.size:
                    raise BackendError("netlink: malformed message")
                msg = buf[off + _NLMSGHDR.size : off + length]
                off += (length + 3) & ~3
                if seq != self.seq:
                    continue  # a late answer to an earlier request
                if kind == NLMSG_DONE:
                    return found
                if kind == NLMSG_ERROR:
                    errno = -struct.unpack_from("=i", msg)[0]
                    if errno == 0:
                        continue
                    if errno in (19, 22):  # ENODEV, EINVAL: interface gone
                        return None
                    raise BackendError(f"netlink: {os.strerror(errno)}")
                if len(msg) >= _TCMSG.size:
                    _fam, ifindex, handle, _parent, _info = _TCMSG.unpack_from(msg)
                    if ifindex == self.ifindex and handle == self.classid:
                        found = parse_tclass_stats(msg)

    def close(self) -> None:
        self.sock.close()


RTM_GETQDISC = 38
TC_H_ROOT = 0xFFFFFFFF


class QdiscDumpBackend:
    """Every port's root qdisc at once: one RTM_GETQDISC dump over all interfaces.

    OVS's linux-htb QoS puts the port's queue under an HTB root qdisc, whose counters are the sum
    over its classes (backlog, drops, packets): with one class per port, the port's queue. One
    dump a tick costs the same however many ports are watched.
    """

    name = "netlink-qdisc"

    def __init__(self, ifindexes: dict[int, str]) -> None:
        self.ifindexes = ifindexes
        self.seq = 0
        self.sock = socket.socket(
            socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE
        )
        try:
            self.sock.bind((0, 0))
            self.sock.settimeout(2.0)
        except OSError:
            self.sock.close()
            raise

    def read_all(self) -> dict[str, ClassStats]:
        """Root-qdisc stats of the watched interfaces (an interface that is gone is left out)."""
        self.seq += 1
        body = _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        head = _NLMSGHDR.pack(
            _NLMSGHDR.size + len(body), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0
        )
        try:
            self.sock.send(head + body)
        except OSError as exc:
            raise BackendError(f"netlink send: {exc}") from exc
        found: dict[str, ClassStats] = {}
        while True:
            try:
                buf = self.sock.recv(1 << 20)
            except OSError as exc:
                raise BackendError(f"netlink recv: {exc}") from exc
            off = 0
            while off + _NLMSGHDR.size <= len(buf):
                length, kind, _flags, seq, _pid = _NLMSGHDR.unpack_from(buf, off)
                if length < _NLMSGHDR.size:
                    raise BackendError("netlink: malformed message")
                msg = buf[off + _NLMSGHDR.size : off + length]
                off += (length + 3) & ~3
                if seq != self.seq:
                    continue
                if kind == NLMSG_DONE:
                    return found
                if kind == NLMSG_ERROR:
                    errno = -struct.unpack_from("=i", msg)[0]
                    if errno:
                        raise BackendError(f"netlink: {os.strerror(errno)}")
                    continue
                if len(msg) >= _TCMSG.size:
                    _fam, ifindex, _handle, parent, _info = _TCMSG.unpack_from(msg)
                    name = self.ifindexes.get(ifindex)
                    if name is not None and parent == TC_H_ROOT:
                        stats = parse_tclass_stats(msg)
                        if stats is not None:
                            found[name] = stats

    def close(self) -> None:
        self.sock.close()


def read_root_qdiscs(ifaces: Iterable[str]) -> dict[str, ClassStats]:
    """Root-qdisc counters of the named ports now, from one netlink dump (no tc fork per port).

    A name with no interface in this namespace is left out, as is one without a root qdisc.
    """
    ifindexes = {}
    for name in ifaces:
        try:
            ifindexes[socket.if_nametoindex(name)] = name
        except OSError:
            continue
    dump = QdiscDumpBackend(ifindexes)
    try:
        return dump.read_all()
    finally:
        dump.close()


def parse_tc_class_block(lines: list[str]) -> ClassStats | None:
    """ClassStats from `tc -s class show` lines of one class (the 'Sent' and 'backlog' lines)."""
    sent = backlog = None
    for line in lines:
        words = line.split()
        if words[:1] == ["Sent"] and "pkt" in words:
            sent = words
        elif words[:1] == ["backlog"] and len(words) >= 3:
            backlog = words
    if sent is None or backlog is None:
        return None
    drops = int(sent[sent.index("(dropped") + 1].rstrip(",")) if "(dropped" in sent else 0
    return ClassStats(
        backlog_bytes=_tc_size(backlog[1]),
        backlog_packets=int(backlog[2].rstrip("p")),
        drops=drops,
        sent_packets=int(sent[sent.index("pkt") - 1]),
    )


def _tc_size(text: str) -> int:
    """tc's backlog size ('1514b', '30Kb', '1.5Mb') in bytes."""
    text = text.rstrip("b")
    scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


class TcBatchBackend:
    """Fallback: one long-lived `tc -s -batch -` fed one `class show` command per sample."""

    name = "tc-batch"

    def __init__(self, iface: str, classid: str, timeout: float = 2.0) -> None:
        self.cmd = f"class show dev {iface} classid {classid}\n"
        self.header = f" {classid} "
        self.timeout = timeout
        argv = ["tc", "-s", "-batch", "-"]
        if shutil.which("stdbuf"):
            argv = ["stdbuf", "-oL", *argv]  # tc's stdout is a pipe: make it line buffered
        self.proc: subprocess.Popen[str] = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self.lines: Queue[str | None] = Queue()
        self.reader = threading.Thread(target=self._pump, name="tc-batch-reader", daemon=True)
        self.reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def read(self) -> ClassStats | None:
        """Send one command and parse its block (ends at the line after 'backlog')."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(self.cmd)
            self.proc.stdin.flush()
        except OSError as exc:
            raise BackendError(f"tc batch: {exc}") from exc
        block: list[str] = []
        inside = False  # skips the tail of the previous answer and any other class
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except Empty:
                return None  # tc printed nothing: no such class
            if line is None:
                raise BackendError("tc batch exited")
            if line.startswith("class "):
                inside, block = self.header in line + " ", []
            if not inside:
                continue
            block.append(line)
            if line.split()[:1] == ["backlog"]:
                return parse_tc_class_block(block)

    def close(self) -> None:
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class _OnePort:
    """A single-class backend seen as a many-port one: {iface: stats}."""

    def __init__(self, iface: str, backend: _Backend) -> None:
        self.iface = iface
        self.backend = backend
        self.name = backend.name

    def read_all(self) -> dict[str, ClassStats]:
        stats = self.backend.read()
        return {} if stats is None else {self.iface: stats}

    def close(self) -> None:
        self.backend.close()


@dataclass
class _PortState:
    """Running account of one port's samples."""

    first: ClassStats
    last: ClassStats
    written: ClassStats | None = None
    max_bytes: int = 0
    max_packets: int = 0


class QueueSampler:
    """Background thread appending one JSON line per port and sample (runmodel QueueSample) to `out`.

    One interface: its tc class `classid`, by netlink (or a long-lived `tc -batch`, backend "tc").
    Several interfaces (`ifaces` a list): every port's root qdisc from one netlink dump per tick,
    and a line only when a port's counters changed since its last line (an idle port writes none),
    so that sampling every switch port every 10 ms stays cheap. Lines are flushed as they are
    written, so a crashed run keeps what it sampled.
    """

    def __init__(
        self,
        ifaces: str | list[str],
        out: Path,
        interval: float = 0.01,
        classid: str = "1:1",
        backend: str = "auto",
    ) -> None:
        if backend not in ("auto", "netlink", "tc"):
            raise ValueError(f"backend must be auto, netlink or tc, not {backend!r}")
        self.ifaces = [ifaces] if isinstance(ifaces, str) else list(ifaces)
        if not self.ifaces:
            raise ValueError("queue sampler: no interface to sample")
        self.iface = self.ifaces[0]
        self.many = not isinstance(ifaces, str)
        self.out = out
        self.interval = interval
        self.classid = classid
        self.backend_choice = backend
        self._backend: QdiscDumpBackend | _OnePort | None = None
        self._file: IO[str] | None = None
        self._thread: threading.Thread | None = None
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._times: list[float] = []
        self._ports: dict[str, _PortState] = {}
        self.error: str | None = None
        self._summary: dict[str, Any] | None = None

    def _ifindexes(self) -> dict[int, str]:
        out = {}
        for name in self.ifaces:
            try:
                out[socket.if_nametoindex(name)] = name
            except OSError as exc:
                raise QueueSamplerError(f"queue sampler: no interface {name!r} in this namespace") from exc
        return out

    def _open_backend(self) -> QdiscDumpBackend | _OnePort:
        """The first backend that can read the port(s); QueueSamplerError if they are absent."""
        ifindexes = self._ifindexes()
        if self.many:
            try:
                dump = QdiscDumpBackend(ifindexes)
                stats = dump.read_all()
            except (OSError, ValueError, struct.error) as exc:
                raise QueueSamplerError(f"queue sampler: netlink qdisc dump failed ({exc})") from exc
            missing = [n for n in self.ifaces if n not in stats]
            if missing:
                dump.close()
                raise QueueSamplerError(f"queue sampler: no root qdisc on {', '.join(missing[:3])}")
            self._record(stats, force=True)
            return dump
        tried = []
        kinds = {"auto": ["netlink", "tc"], "netlink": ["netlink"], "tc": ["tc"]}[self.backend_choice]
        for kind in kinds:
            backend: _Backend | None = None
            try:
                if kind == "netlink":
                    backend = NetlinkBackend(next(iter(ifindexes)), parse_classid(self.classid))
                else:
                    backend = TcBatchBackend(self.iface, self.classid)
                stats1 = backend.read()
            except (OSError, ValueError, struct.error) as exc:
                if backend is not None:
                    backend.close()
                tried.append(f"{kind}: {exc}")
                continue
            if stats1 is None:
                backend.close()
                raise QueueSamplerError(f"queue sampler: no tc class {self.classid} on {self.iface}")
            self._record({self.iface: stats1}, force=True)
            return _OnePort(self.iface, backend)
        raise QueueSamplerError(f"queue sampler on {self.iface}: no backend works ({'; '.join(tried)})")

    def start(self) -> None:
        """Take the first sample now (so errors surface here), then sample in the background."""
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.out.open("a", encoding="utf-8")
        try:
            self._backend = self._open_backend()
        except BaseException:
            self._file.close()
            self._file = None
            raise
        self._thread = threading.Thread(target=self._loop, name=f"queue-sampler-{self.iface}", daemon=True)
        self._thread.start()

    @property
    def backend(self) -> str | None:
        """Which backend is in use ('netlink', 'tc-batch' or 'netlink-qdisc'), once started."""
        return self._backend.name if self._backend is not None else None

    def _record(self, stats: dict[str, ClassStats], force: bool = False) -> None:
        """Append the sample's lines and update the running account (force: every port, changed or not)."""
        t = time.time()
        assert self._file is not None
        for name, st in stats.items():
            ps = self._ports.get(name)
            if ps is None:
                ps = self._ports[name] = _PortState(first=st, last=st)
            ps.last = st
            ps.max_bytes = max(ps.max_bytes, st.backlog_bytes)
            ps.max_packets = max(ps.max_packets, st.backlog_packets)
            if self.many and not force and ps.written == st:
                continue
            ps.written = st
            sample = QueueSample(
                t=round(t, 6),
                backlog_bytes=st.backlog_bytes,
                backlog_packets=st.backlog_packets,
                drops=st.drops,
                sent_packets=st.sent_packets,
                port=name,
            )
            self._file.write(json.dumps(sample.to_dict()) + "\n")
        self._file.flush()
        self._times.append(t)

    def _sample_once(self, force: bool = False) -> bool:
        """One sample; False (with self.error set) when sampling must end."""
        assert self._backend is not None
        try:
            stats = self._backend.read_all()
        except (OSError, ValueError, struct.error) as exc:
            self.error = f"{self._backend.name}: {exc}"
            return False
        if not stats:
            self.error = f"tc class {self.classid} on {self.iface} disappeared"
            return False
        self._record(stats, force=force)
        return True

    def _loop(self) -> None:
        """Sample on a fixed grid of `interval`; if late, skip ahead rather than burst."""
        next_t = time.monotonic() + self.interval
        while not self._halt.wait(max(0.0, next_t - time.monotonic())):
            with self._lock:
                if not self._sample_once():
                    return
            next_t += self.interval
            now = time.monotonic()
            if next_t < now:
                next_t = now + self.interval

    def stop(self) -> dict[str, Any]:
        """End sampling with one last sample (every port), close everything, and return the summary."""
        if self._summary is not None:
            return self._summary
        if self._thread is not None:
            self._halt.set()
            self._thread.join()
            with self._lock:
                if self.error is None:
                    self._sample_once(force=True)  # the counters as they are at the end of the run
        if self._backend is not None:
            self._backend.close()
        if self._file is not None:
            self._file.close()
        gaps = [b - a for a, b in zip(self._times, self._times[1:], strict=False)]
        first = self._ports.get(self.iface)
        self._summary = {
            "samples": len(self._times),
            "max_backlog_packets": first.max_packets if first else 0,
            "max_backlog_bytes": first.max_bytes if first else 0,
            "drops_delta": (first.last.drops - first.first.drops) if first else 0,
            "interval_s_median": round(statistics.median(gaps), 6) if gaps else None,
            "interval_s_max": round(max(gaps), 6) if gaps else None,
            "backend": self.backend,
            "error": self.error,
            "ports": {
                name: {
                    "max_backlog_packets": ps.max_packets,
                    "max_backlog_bytes": ps.max_bytes,
                    "drops_delta": ps.last.drops - ps.first.drops,
                }
                for name, ps in sorted(self._ports.items())
            },
        }
        return self._summary

    def __enter__(self) -> QueueSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
