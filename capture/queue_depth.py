"""Queue-depth sampler: the backlog and drops of switch port queues, every 10 ms, as JSON lines.

Why rtnetlink and not `tc`: forking tc 100 times a second costs a core on a 2-core machine, while
one RTM_GETQDISC dump on an open netlink socket reads every port's root qdisc in microseconds.
Root network namespace only: the switch ports it watches live there.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from runmodel.records import QueueSample

# linux/rtnetlink.h, linux/netlink.h, linux/gen_stats.h, linux/pkt_sched.h
RTM_GETQDISC = 38
TC_H_ROOT = 0xFFFFFFFF
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
    """The ports cannot be sampled (an interface missing, or the netlink dump fails)."""


class BackendError(OSError):
    """The netlink dump itself failed (as opposed to a port being absent)."""


@dataclass(frozen=True)
class ClassStats:
    """One reading of a tc class's counters."""

    backlog_bytes: int
    backlog_packets: int
    drops: int
    sent_packets: int


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

    Every port's root qdisc comes from one netlink dump per tick (OVS's linux-htb QoS: the root's
    counters are the port's queue). A port writes a line only when its counters changed since its
    last line, so sampling every switch port every 10 ms stays cheap; the first and the last sample
    write every port. Lines are flushed as written, so a crashed run keeps what it sampled. The
    summary's top-level figures are those of the first port.
    """

    def __init__(self, ifaces: list[str], out: Path, interval: float = 0.01) -> None:
        self.ifaces = list(ifaces)
        if not self.ifaces:
            raise ValueError("queue sampler: no interface to sample")
        self.iface = self.ifaces[0]
        self.out = out
        self.interval = interval
        self._backend: QdiscDumpBackend | None = None
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

    def _open_backend(self) -> QdiscDumpBackend:
        """The dump, after a first sample of every port; QueueSamplerError if a port cannot be read."""
        try:
            dump = QdiscDumpBackend(self._ifindexes())
        except OSError as exc:
            raise QueueSamplerError(f"queue sampler: no netlink socket ({exc})") from exc
        try:
            stats = dump.read_all()
        except (OSError, ValueError, struct.error) as exc:
            dump.close()
            raise QueueSamplerError(f"queue sampler: netlink qdisc dump failed ({exc})") from exc
        missing = [n for n in self.ifaces if n not in stats]
        if missing:
            dump.close()
            raise QueueSamplerError(f"queue sampler: no root qdisc on {', '.join(missing[:3])}")
        self._record(stats, force=True)
        return dump

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
        """The backend in use ('netlink-qdisc'), once started."""
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
            if not force and ps.written == st:
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
            self.error = "every watched port disappeared"
            return False
        try:
            self._record(stats, force=force)
        except OSError as exc:  # the results disk is full: sampling ends, the summary says why
            self.error = f"{self.out.name}: {exc}"
            return False
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
            try:
                self._file.close()
            except OSError as exc:  # its last lines could not be written
                self.error = self.error or f"{self.out.name}: {exc}"
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


class RemoteQueueSampler:
    """A QueueSampler of another machine's ports: `argv` starts `python -m capture.queue_depth` there
    (through ssh), which samples until its standard input gives a line or ends. stop() sends that
    line and returns the remote sampler's summary; a recorder that dies closes the input, so the
    remote sampler ends with it and nothing is left on the server."""

    def __init__(self, argv: list[str], start_timeout: float = 30.0) -> None:
        self.argv = argv
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[str] | None = None
        self._summary: dict[str, Any] | None = None

    def start(self) -> None:
        """Start it; return once it sampled every port once (QueueSamplerError with its line if not)."""
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        timer = threading.Timer(self.start_timeout, self.proc.kill)
        timer.start()
        try:
            first = self.proc.stdout.readline().strip()
        finally:
            timer.cancel()
        if first != SAMPLING:
            summary = self.stop()
            said = json.loads(first).get("error") if first.startswith("{") else first
            raise QueueSamplerError(said or summary.get("error") or "remote queue sampler ended")

    def stop(self) -> dict[str, Any]:
        """Ask it to stop; its summary (QueueSampler.stop's), or one with the error if it said none."""
        if self._summary is not None or self.proc is None:
            return self._summary or {"error": "never started"}
        try:
            out, err = self.proc.communicate("stop\n", timeout=30)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            self.proc.kill()
            out, err = self.proc.communicate()
        last = out.strip().splitlines()[-1] if out.strip() else ""
        try:
            self._summary = dict(json.loads(last))
        except ValueError:
            tail = err.strip().splitlines()[-1] if err.strip() else f"exit {self.proc.returncode}"
            self._summary = {"error": f"remote queue sampler: {tail}"}
        return self._summary


SAMPLING = "sampling"  # what `python -m capture.queue_depth` prints once every port was sampled


def main(argv: list[str] | None = None) -> int:
    """`python -m capture.queue_depth OUT INTERVAL_S PORT...`: sample this machine's PORTs into OUT
    until a line or the end of standard input, then print the summary as one JSON line."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3:
        print("usage: python -m capture.queue_depth OUT INTERVAL_S PORT...", file=sys.stderr)
        return 2
    sampler = QueueSampler(args[2:], Path(args[0]), interval=float(args[1]))
    try:
        sampler.start()
    except QueueSamplerError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        return 1
    print(SAMPLING, flush=True)
    sys.stdin.readline()
    print(json.dumps(sampler.stop()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
