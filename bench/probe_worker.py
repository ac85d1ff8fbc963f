"""The α probes of `make bench`, run inside Mininet hosts: what one exchange's fixed cost is made of.

    python -m bench.probe_worker tcp-server --port P
    python -m bench.probe_worker tcp-client --addr A --port P --size N [--reply M] [--count K]
                                            [--idle S] --out F
    python -m bench.probe_worker gloo-pingpong --rank R --master A --port P --ifname IF [--size N]
                                               [--count K] --out F

tcp-client sends N bytes over one TCP connection (TCP_NODELAY, as gloo's pairs are) and waits for
the server's M-byte reply, K times, `--idle` seconds apart, after three untimed rounds: with small
N and M that is a message's round trip; with a chunk-sized N after an idle second, what slow start
after idle and delayed ACKs add to a transfer. gloo-pingpong does the same with torch.distributed
send/recv between two ranks, so the difference is gloo's own cost. Each writes one JSON document:
{"probe": ..., "times_s": [...]}.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
import threading
import time
from pathlib import Path

from workloads.errors import exit_flushed

HEADER = struct.Struct("!II")  # bytes the client sends, bytes the server replies


def _recv_exact(sock: socket.socket, n: int, buf: bytearray) -> None:
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:n])
        if not k:
            raise ConnectionError("peer closed")
        got += k


def _serve(conn: socket.socket) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(1 << 16)
    try:
        while True:
            _recv_exact(conn, HEADER.size, buf)
            n, m = HEADER.unpack_from(buf)
            left = n
            while left:
                k = conn.recv_into(memoryview(buf)[: min(left, len(buf))])
                if not k:
                    return
                left -= k
            conn.sendall(bytes(m))
    except (ConnectionError, OSError):
        return
    finally:
        conn.close()


def tcp_server(port: int) -> int:
    """Answer every client until killed."""
    srv = socket.create_server(("0.0.0.0", port), backlog=16, reuse_port=False)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=_serve, args=(conn,), daemon=True).start()


def tcp_client(addr: str, port: int, size: int, reply: int, count: int, idle: float) -> list[float]:
    """Round trips of `size` bytes out and `reply` bytes back; three untimed first."""
    deadline = time.monotonic() + 30
    while True:
        try:
            sock = socket.create_connection((addr, port), timeout=30)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = HEADER.pack(size, reply) + bytes(size)
    buf = bytearray(max(reply, 1))
    times = []
    for k in range(count + 3):
        if idle:
            time.sleep(idle)
        t0 = time.perf_counter()
        sock.sendall(payload)
        _recv_exact(sock, reply, buf)
        if k >= 3:
            times.append(time.perf_counter() - t0)
    sock.close()
    return times


def gloo_pingpong(rank: int, master: str, port: int, ifname: str, size: int, count: int) -> list[float]:
    """Rank 0 sends `size` bytes to rank 1 and waits for them back, `count` times (3 untimed)."""
    os.environ["GLOO_SOCKET_IFNAME"] = ifname
    import torch
    import torch.distributed as dist

    from workloads.collectives import join_gloo

    torch.set_num_threads(1)
    join_gloo(f"tcp://{master}:{port}", rank, 2, 60)
    t = torch.zeros(max(1, size // 4))
    times = []
    for k in range(count + 3):
        t0 = time.perf_counter()
        if rank == 0:
            dist.send(t, dst=1)
            dist.recv(t, src=1)
        else:
            dist.recv(t, src=0)
            dist.send(t, dst=0)
        if k >= 3:
            times.append(time.perf_counter() - t0)
    dist.barrier()
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.probe_worker", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("tcp-server")
    s.add_argument("--port", type=int, required=True)
    c = sub.add_parser("tcp-client")
    c.add_argument("--addr", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--size", type=int, default=64)
    c.add_argument("--reply", type=int, default=64)
    c.add_argument("--count", type=int, default=100)
    c.add_argument("--idle", type=float, default=0.0)
    c.add_argument("--out", required=True)
    g = sub.add_parser("gloo-pingpong")
    g.add_argument("--rank", type=int, required=True)
    g.add_argument("--master", required=True)
    g.add_argument("--port", type=int, required=True)
    g.add_argument("--ifname", required=True)
    g.add_argument("--size", type=int, default=64)
    g.add_argument("--count", type=int, default=100)
    g.add_argument("--out", default=None)
    args = p.parse_args(argv)
    try:
        if args.cmd == "tcp-server":
            return tcp_server(args.port)
        if args.cmd == "tcp-client":
            times = tcp_client(args.addr, args.port, args.size, args.reply, args.count, args.idle)
        else:
            times = gloo_pingpong(args.rank, args.master, args.port, args.ifname, args.size, args.count)
    except Exception as exc:  # noqa: BLE001 - one line for the bench, whatever broke
        print(f"probe {args.cmd}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    if args.out:
        Path(args.out).write_text(json.dumps({"probe": args.cmd, "times_s": times}))
    return 0


if __name__ == "__main__":
    exit_flushed(main())
