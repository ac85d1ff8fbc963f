"""The barrier-synchronised read of the incast papers, as two processes run in the Mininet hosts.

    python -m workloads.incast server --job <curve>/servers.json --host h5
    python -m workloads.incast client --job <curve>/<point>/job.json

A server listens on its host's address and answers every request on a connection, a 4-byte
big-endian byte count, with that many bytes (from one preallocated buffer: no copy per request).
The client opens one persistent connection to each of its N servers (runmodel.incast.ClientJob),
then, round after round, asks every server for its block (the SRU) at once (or `max_concurrent` of
them at a time, asking the next as each one finishes), reads until every block is complete, logs
one RoundRecord line and asks again. Connections are opened before the first round, so the
goodput (bytes / time over the rounds) holds no handshake. Both set TCP_NODELAY: a request and a
block's last partial segment go out at once.

Only the standard library (and the run model) is imported, so 15 servers start in well under a
second. On an expected failure a process prints one line on stderr, logs {"event": "error"} and
exits 1; SIGTERM ends a server cleanly.
"""

from __future__ import annotations

import argparse
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from runmodel.incast import ClientDone, ClientJob, RoundRecord, ServerSet
from runmodel.records import JsonlWriter

REQUEST = struct.Struct("!I")
RECV_BUF = 1 << 18


class IncastError(Exception):
    """An expected failure (a peer lost, a timeout): one line on stderr, exit 1."""


def _nodelay(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    """n bytes, or b'' at a clean end of the connection before the first of them."""
    chunks, got = [], 0
    while got < n:
        data = conn.recv(n - got)
        if not data:
            if got:
                raise IncastError("connection closed inside a request")
            return b""
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


# -- server -----------------------------------------------------------------------------------------
class Server:
    """Answers block requests on every connection to (ip, port), one thread per connection."""

    def __init__(self, ip: str, port: int, sru_bytes: int, log: JsonlWriter) -> None:
        self.payload = memoryview(b"\x5a" * max(sru_bytes, 1))
        self.log = log
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((ip, port))
        self.sock.listen(128)

    def serve(self) -> None:
        """Accept connections until the process is told to stop."""
        with self.lock:
            self.log.write({"event": "listening", "t": time.time(), "addr": list(self.sock.getsockname())})
        while True:
            conn, peer = self.sock.accept()
            _nodelay(conn)
            threading.Thread(target=self._answer, args=(conn, peer), daemon=True).start()

    def _answer(self, conn: socket.socket, peer: Any) -> None:
        requests = sent = 0
        error = None
        try:
            while True:
                head = _recv_exact(conn, REQUEST.size)
                if not head:
                    break
                (n,) = REQUEST.unpack(head)
                view = self.payload if n <= len(self.payload) else memoryview(b"\x5a" * n)
                conn.sendall(view[:n])
                requests += 1
                sent += n
        except (OSError, IncastError) as exc:
            error = str(exc)
        finally:
            conn.close()
        with self.lock:
            self.log.write(
                {
                    "event": "conn",
                    "t": time.time(),
                    "peer": f"{peer[0]}:{peer[1]}",
                    "requests": requests,
                    "bytes": sent,
                    "error": error,
                }
            )


def run_server(args: argparse.Namespace) -> int:
    job = ServerSet.load(args.job)
    me = job.server(args.host)
    log = JsonlWriter(job.log(args.host))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        Server(me.ip, me.port, job.sru_bytes, log).serve()
    except OSError as exc:
        log.write({"event": "error", "t": time.time(), "error": str(exc)})
        print(f"incast server {args.host}: {exc}", file=sys.stderr)
        return 1
    finally:
        log.close()
    return 0


# -- client -----------------------------------------------------------------------------------------
def connect_all(job: ClientJob) -> list[socket.socket]:
    """One connection per server, in job order (blocking connects, then non-blocking sockets)."""
    socks = []
    for s in job.servers:
        deadline = time.monotonic() + job.timeout
        while True:
            try:
                sock = socket.create_connection((s.ip, s.port), timeout=job.timeout)
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise IncastError(
                        f"cannot connect to the server on {s.host} ({s.ip}:{s.port}): {exc}"
                    ) from exc
                time.sleep(0.05)
        _nodelay(sock)
        sock.setblocking(False)
        socks.append(sock)
    return socks


def one_round(
    job: ClientJob, socks: list[socket.socket], sel: selectors.BaseSelector, buf: memoryview, r: int
) -> RoundRecord:
    """Ask every server (at most max_concurrent at once), read every block; the round's record."""
    n = len(socks)
    want = job.sru_bytes
    remaining = [want] * n
    asked = [0.0] * n
    done = [0.0] * n
    pending = deque(range(n))
    active = 0
    limit = job.max_concurrent or n
    got = 0
    t0 = time.time()

    def ask(i: int) -> None:
        asked[i] = time.time() - t0
        if socks[i].send(REQUEST.pack(want)) != REQUEST.size:
            raise IncastError(f"round {r}: request to {job.servers[i].host} not sent whole")

    while pending and active < limit:
        ask(pending.popleft())
        active += 1
    while active:
        events = sel.select(job.timeout)
        if not events:
            late = [job.servers[i].host for i in range(n) if remaining[i] and i not in pending]
            raise IncastError(f"round {r}: nothing from {', '.join(late)} for {job.timeout:g} s")
        for key, _mask in events:
            i = key.data
            try:
                k = socks[i].recv_into(buf, min(len(buf), remaining[i]) if remaining[i] else len(buf))
            except BlockingIOError:
                continue
            except OSError as exc:
                raise IncastError(f"round {r}: {job.servers[i].host}: {exc}") from exc
            if k == 0:
                raise IncastError(f"round {r}: the server on {job.servers[i].host} closed the connection")
            if k > remaining[i]:
                raise IncastError(f"round {r}: {job.servers[i].host} sent more than asked")
            remaining[i] -= k
            got += k
            if remaining[i] == 0:
                done[i] = time.time() - t0
                active -= 1
                if pending:
                    ask(pending.popleft())
                    active += 1
    t1 = time.time()
    return RoundRecord(
        round=r,
        t_start=t0,
        t_end=t1,
        bytes=got,
        asked_s=[round(a, 6) for a in asked],
        done_s=[round(d, 6) for d in done],
    )


def run_client(args: argparse.Namespace) -> int:
    job = ClientJob.load(args.job)
    log = JsonlWriter(Path(job.log))
    socks: list[socket.socket] = []
    try:
        c0 = time.monotonic()
        socks = connect_all(job)
        connect_s = time.monotonic() - c0
        sel = selectors.DefaultSelector()
        for i, sock in enumerate(socks):
            sel.register(sock, selectors.EVENT_READ, i)
        buf = memoryview(bytearray(RECV_BUF))
        total = 0
        for r in range(job.rounds):
            rec = one_round(job, socks, sel, buf, r)
            total += rec.bytes
            log.write(rec)
        log.write(ClientDone(job.rounds, total, round(connect_s, 6)))
    except IncastError as exc:
        log.write({"event": "error", "t": time.time(), "error": str(exc)})
        print(f"incast client {job.client}: {exc}", file=sys.stderr)
        return 1
    finally:
        for sock in socks:
            sock.close()
        log.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.incast", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="role", required=True)
    s = sub.add_parser("server", help="answer block requests")
    s.add_argument("--job", required=True, type=Path, help="the curve's servers.json")
    s.add_argument("--host", required=True, help="which server of the job this is")
    c = sub.add_parser("client", help="ask every server for a block, round after round")
    c.add_argument("--job", required=True, type=Path, help="the point's job.json")
    args = p.parse_args(argv)
    return run_server(args) if args.role == "server" else run_client(args)


if __name__ == "__main__":
    sys.exit(main())
