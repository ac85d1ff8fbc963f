"""Worker side of the PS family (`ps`, `async`, `ssp`, `backup`): push the gradient, pull the weights.

The worker protocol is the same for all four strategies; only the PS decides when to answer. A
sharded PS is one connection per shard, each carrying its slice of the gradient and of the model,
all shards at once (one thread each), as ps-lite's workers do.
"""

from __future__ import annotations

import contextlib
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from workloads.errors import STARTUP_GRACE_S, WorkloadError
from workloads.exchange import ExchangeStats
from workloads.psproto import (
    Header,
    Kind,
    ProtocolError,
    as_bytes,
    recv_f32,
    recv_header,
    recv_text,
    send_msg,
    why_lost,
)

CONNECT_RETRY_S = 0.2


class PSClientExchange:
    """One TCP connection to the PS; every failure becomes a WorkloadError naming the PS and step."""

    def __init__(self, rank: int, nparams: int, addr: str, port: int, timeout: float) -> None:
        self.rank, self.nparams, self.addr, self.port, self.timeout = rank, nparams, addr, port, timeout
        self.sock: socket.socket | None = None
        self.version = 0

    @property
    def where(self) -> str:
        return f"parameter server {self.addr}:{self.port}"

    def _lost(self, exc: BaseException, when: str) -> WorkloadError:
        """`when` completes the sentence: "at step 3", "during start-up"."""
        if isinstance(exc, TimeoutError):
            return WorkloadError(f"no reply from {self.where} within {self.timeout:g} s {when}")
        if isinstance(exc, ProtocolError):
            return WorkloadError(f"{self.where} broke the protocol {when}: {exc}")
        return WorkloadError(f"lost connection to {self.where} {when} ({why_lost(exc)})")

    def _recv_header(self, when: str) -> Header:
        assert self.sock is not None
        h = recv_header(self.sock)
        if h.kind == Kind.ERROR:
            raise WorkloadError(f"{self.where} refused us {when}: {recv_text(self.sock, h)}")
        return h

    def start(self) -> None:
        """Connect (retrying while the PS is not up yet), say HELLO, wait for the common start."""
        limit = max(self.timeout, STARTUP_GRACE_S)
        deadline = time.monotonic() + limit
        last: OSError | None = None
        while self.sock is None:
            left = deadline - time.monotonic()
            if left <= 0:
                why = f" ({last.strerror or last})" if last else ""
                raise WorkloadError(f"cannot connect to {self.where} within {limit:g} s{why}")
            try:
                self.sock = socket.create_connection((self.addr, self.port), timeout=min(left, 5.0))
            except OSError as exc:
                last = exc
                time.sleep(CONNECT_RETRY_S)
        self.sock.settimeout(limit)  # WELCOME waits for the slowest worker to connect
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            send_msg(self.sock, Header(Kind.HELLO, rank=self.rank, arg=self.nparams))
            h = self._recv_header("during start-up")
        except (OSError, ProtocolError) as exc:
            raise self._lost(exc, "during start-up") from None
        if h.kind != Kind.WELCOME:
            raise WorkloadError(f"{self.where} answered HELLO with {h.kind.name}")
        self.version = h.version
        self.sock.settimeout(self.timeout)

    def step(self, step: int, weights: torch.Tensor, grad: torch.Tensor) -> ExchangeStats:
        assert self.sock is not None
        stats = ExchangeStats()
        t0 = time.perf_counter()
        try:
            stats.bytes_sent = send_msg(
                self.sock,
                Header(Kind.PUSH, rank=self.rank, step=step, version=self.version),
                as_bytes(grad.numpy()),
            )
            t_sent = time.perf_counter()
            h = self._recv_header(f"at step {step}")
            stats.wait_s = time.perf_counter() - t_sent
            if h.kind != Kind.WEIGHTS:
                raise ProtocolError(f"expected WEIGHTS, got {h.kind.name}")
            recv_f32(self.sock, h, weights.numpy())
        except (OSError, ProtocolError) as exc:
            raise self._lost(exc, f"at step {step}") from None
        stats.bytes_recv = h.nbytes + len(h.pack())
        self.version = h.version
        stats.comm_s = time.perf_counter() - t0
        return stats

    def close(self) -> None:
        if self.sock is None:
            return
        try:
            # Nothing is left unread on our side, so closing sends a FIN after BYE, never a reset.
            send_msg(self.sock, Header(Kind.BYE, rank=self.rank, version=self.version))
        except OSError as exc:
            raise self._lost(exc, "while saying goodbye") from None
        finally:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None


class ShardedPSExchange:
    """Push/pull with every shard of a sharded PS at once; shard k holds parameters [a_k, b_k)."""

    def __init__(
        self, rank: int, bounds: list[tuple[int, int]], servers: list[tuple[str, int]], timeout: float
    ) -> None:
        self.bounds = bounds
        self.shards = [
            PSClientExchange(rank, b - a, addr, port, timeout)
            for (a, b), (addr, port) in zip(bounds, servers, strict=True)
        ]
        self.pool = ThreadPoolExecutor(max_workers=len(self.shards), thread_name_prefix="shard")

    def start(self) -> None:
        for f in [self.pool.submit(c.start) for c in self.shards]:
            f.result()

    def step(self, step: int, weights: torch.Tensor, grad: torch.Tensor) -> ExchangeStats:
        t0 = time.perf_counter()
        futures = [
            self.pool.submit(c.step, step, weights[a:b], grad[a:b])
            for c, (a, b) in zip(self.shards, self.bounds, strict=True)
        ]
        parts = [f.result() for f in futures]  # the first failure propagates, naming its shard
        return ExchangeStats(
            comm_s=time.perf_counter() - t0,
            wait_s=max(p.wait_s for p in parts),
            bytes_sent=sum(p.bytes_sent for p in parts),
            bytes_recv=sum(p.bytes_recv for p in parts),
        )

    def close(self) -> None:
        try:
            for f in [self.pool.submit(c.close) for c in self.shards]:
                f.result()
        finally:
            self.pool.shutdown(wait=False)
