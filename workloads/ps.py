"""The parameter-server process: sockets and threads around PSCore's decisions.

One reader and one sender thread per worker, one main thread that owns the weights and PSCore.
Readers receive whole gradients concurrently (the incast the testbed exists to create) and queue
them; the main thread decides, applies SGD and queues replies; senders write them, so a worker
that stops reading cannot block the others. Liveness is judged by the main thread alone: a worker
the PS does not owe a reply to must send something within --timeout.

A worker that is gone (connection lost, or silent past --timeout) fails the run, except with
`--strategy async`, which drops it and trains on with the others (PSCore.lose says why only async):
the PS logs `{"event":"worker_lost",...}`, prints one line on stderr and still exits 0 once every
remaining worker said goodbye; its `done` record then lists the dropped ranks in `lost`.

With the job's `pull` = serial, one thread sends the models of a release one worker after another,
shard k of K from rank k N / K on (each worker gets one slice at a time), each socket holding at most
NOTSENT_LOWAT bytes not yet on the wire (TCP_NOTSENT_LOWAT), so the first worker has its model after
S / B and pushes its next gradient while the PS still sends the others theirs: the full-duplex overlap
the (N + 1) S / B bound counts on, and pushes that arrive one after another instead of all at once
(TicTac, MLSys 2019, and P3, SysML 2019, order a PS's transfers for the same reason). The price: a
worker that stops reading holds up the models of those after it, until --timeout ends the run.
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from runmodel.job import JobSpec
from runmodel.records import JsonlWriter, PsDone
from workloads.errors import STARTUP_GRACE_S, WorkloadError, failures_reported, open_part
from workloads.model import ModelSpec, init_weights, sgd_, shard_bounds
from workloads.pscore import PSCore
from workloads.psproto import (
    Header,
    Kind,
    ProtocolError,
    as_bytes,
    recv_f32,
    recv_header,
    send_msg,
    why_lost,
)

POLL_S = 0.2
NOTSENT_LOWAT = 16 * 1024  # serial pull: bytes a socket may hold unsent before the next model starts
TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)


@dataclass
class _Conn:
    rank: int
    sock: socket.socket
    peer: str
    outbox: queue.Queue[tuple[Header, bytes | memoryview] | None] = field(default_factory=queue.Queue)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The PS's own options; every training parameter comes from the job file."""
    p = argparse.ArgumentParser(prog="python -m workloads.ps", description=__doc__)
    p.add_argument("--job", required=True, type=Path, help="the strategy's job.json (runmodel.job)")
    p.add_argument("--shard", type=int, default=0, help="which shard of the model this PS holds (default: 0)")
    p.add_argument("--bind", default=None, help="listen address (default: the job's ps_bind)")
    p.add_argument("--dump-grad", default=None, help="debug: save the first applied averaged gradient (.npy)")
    return p.parse_args(argv)


class ParameterServer:
    """Runs one training job to completion or raises WorkloadError naming what failed."""

    def __init__(
        self, job: JobSpec, log: JsonlWriter, bind: str, dump_grad: str | None = None, shard: int = 0
    ) -> None:
        self.job = job
        self.log = log
        self.bind = bind
        self.dump_grad = dump_grad
        backup = job.backup if job.strategy == "backup" else 0
        try:
            self.core = PSCore(job.strategy, job.world, job.steps, job.staleness, backup)
        except ValueError as exc:
            raise WorkloadError(str(exc)) from None
        spec = ModelSpec.from_grad_mb(job.grad_mb)
        self.shard = shard
        self.lo, self.hi = shard_bounds(spec.nparams, max(1, len(job.shards)))[shard]
        self.nparams = self.hi - self.lo  # this shard's slice of the model
        self.weights = init_weights(spec, job.seed)[self.lo : self.hi].clone()
        self.events: queue.Queue[tuple[str, int, object]] = queue.Queue()
        self.conns: dict[int, _Conn] = {}
        self.pending: dict[int, np.ndarray] = {}
        self._snapshot: tuple[int, bytes] | None = None
        self._dumped = False
        self._closing = threading.Event()
        # serial pull: (rank, message) for the one sender that answers workers one after another
        self.serial: queue.Queue[tuple[int, tuple[Header, bytes]] | None] | None = (
            queue.Queue() if job.pull == "serial" else None
        )
        # serial pull: ranks whose model waits behind another's send. Their silence is the PS's, not
        # theirs: a worker that stops reading holds up those after it, and only it may be blamed.
        self.queued: set[int] = set()
        self.listener = socket.create_server(
            (bind, job.shard(shard).port if job.shards else job.master_port), backlog=max(16, job.world * 2)
        )

    # --- threads -------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closing.is_set():
            try:
                sock, addr = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handshake, args=(sock, f"{addr[0]}:{addr[1]}"), daemon=True).start()

    def _handshake(self, sock: socket.socket, peer: str) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.settimeout(self.job.timeout)
            h = recv_header(sock)
            sock.settimeout(None)
        except (OSError, ProtocolError):
            sock.close()
            return
        if h.kind != Kind.HELLO:
            self.events.put(("fatal", -1, f"{peer} opened with {h.kind.name} instead of HELLO"))
        elif h.arg != self.nparams:
            msg = f"worker {h.rank} has {h.arg} parameters, PS has {self.nparams} (different --grad-mb?)"
            send_msg(sock, Header(Kind.ERROR), msg.encode())
            self.events.put(("fatal", h.rank, msg))
        else:
            self.events.put(("hello", h.rank, _Conn(h.rank, sock, peer)))
            return
        sock.close()

    def _reader(self, c: _Conn) -> None:
        try:
            while True:
                h = recv_header(c.sock)
                if h.kind == Kind.PUSH:
                    grad = recv_f32(c.sock, h)
                    self.events.put(("push", c.rank, (h, grad)))
                elif h.kind == Kind.BYE:
                    self.events.put(("bye", c.rank, None))
                    return
                else:
                    raise ProtocolError(f"unexpected {h.kind.name}")
        except (OSError, ProtocolError) as exc:
            self.events.put(("lost", c.rank, exc))

    def _sender(self, c: _Conn) -> None:
        while (item := c.outbox.get()) is not None:
            try:
                send_msg(c.sock, *item)
            except OSError as exc:
                self.events.put(("lost", c.rank, exc))
                return

    def _serial_sender(self) -> None:
        """Serial pull: every model of a release, one worker after another (see the module's doc)."""
        assert self.serial is not None
        while (item := self.serial.get()) is not None:
            rank, msg = item
            if rank in self.core.lost:
                continue
            self.events.put(("sending", rank, None))  # its silence counts from here (main thread)
            try:
                send_msg(self.conns[rank].sock, *msg)
            except OSError as exc:
                self.events.put(("lost", rank, exc))

    # --- main thread ---------------------------------------------------------------------------
    def _weights_bytes(self) -> bytes:
        """One immutable copy per version, shared by every reply of that version."""
        if self._snapshot is None or self._snapshot[0] != self.core.version:
            self._snapshot = (self.core.version, bytes(as_bytes(self.weights.numpy())))
        return self._snapshot[1]

    def _reply(self, rank: int) -> None:
        c = self.conns[rank]
        h = Header(Kind.WEIGHTS, rank=rank, step=self.core.clocks[rank], version=self.core.version)
        if self.serial is not None:
            self.queued.add(rank)
            self.serial.put((rank, (h, self._weights_bytes())))
        else:
            c.outbox.put((h, self._weights_bytes()))
        self.core.heard(rank, time.monotonic())  # its silence counts from now on

    def _reply_order(self, release: list[int]) -> list[int]:
        """Serial pull: ranks in order from this shard's offset on (shard k of K starts at rank k N / K),
        the same order every step, so a worker's step is one period and, sharded, each worker gets one
        slice at a time, not K at once through its own port."""
        if self.serial is None:
            return release
        offset = self.shard * self.job.world // max(1, len(self.job.shards))
        return sorted(release, key=lambda r: (r - offset) % self.job.world)

    def _apply(self, ranks: list[int]) -> None:
        acc = torch.zeros(self.nparams)
        for r in sorted(ranks):  # fixed order: the result does not depend on arrival order
            acc += torch.from_numpy(self.pending.pop(r))
        acc /= len(ranks)
        if self.dump_grad and not self._dumped:
            np.save(self.dump_grad, acc.numpy())
            self._dumped = True
        sgd_(self.weights, acc, self.job.lr)

    def _step_of(self, rank: int) -> int:
        return self.core.clocks[rank]

    def _wait_for_workers(self) -> None:
        limit = max(self.job.timeout, STARTUP_GRACE_S)
        deadline = time.monotonic() + limit
        while len(self.conns) < self.job.world:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(self.job.world)) - set(self.conns))
                raise WorkloadError(f"workers {missing} did not connect within {limit:g} s")
            try:
                kind, rank, obj = self.events.get(timeout=min(left, POLL_S))
            except queue.Empty:
                continue
            if kind == "fatal":
                raise WorkloadError(str(obj))
            if kind != "hello" or not isinstance(obj, _Conn):
                continue
            if not 0 <= rank < self.job.world:
                raise WorkloadError(f"{obj.peer} claims rank {rank} in a world of {self.job.world}")
            if rank in self.conns:
                raise WorkloadError(f"two workers claim rank {rank} ({self.conns[rank].peer}, {obj.peer})")
            self.conns[rank] = obj
        if self.serial is not None:
            threading.Thread(target=self._serial_sender, daemon=True).start()
        for c in self.conns.values():
            if self.serial is not None:
                c.sock.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, NOTSENT_LOWAT)
            threading.Thread(target=self._reader, args=(c,), daemon=True).start()
            threading.Thread(target=self._sender, args=(c,), daemon=True).start()
            c.outbox.put((Header(Kind.WELCOME, rank=c.rank, version=self.core.version), b""))
            self.core.heard(c.rank, time.monotonic())

    def _check_liveness(self) -> None:
        for r in self.core.silent(time.monotonic(), self.job.timeout):
            if r in self.queued:  # its model is not on the way yet (serial pull)
                continue
            c = self.conns[r]
            self._lose(
                r,
                f"sent nothing for {self.job.timeout:g} s",
                f"worker {r} ({c.peer}) sent nothing for {self.job.timeout:g} s at step {self._step_of(r)}",
            )

    def _lose(self, rank: int, reason: str, failure: str) -> None:
        """Worker `rank` is gone: drop it and go on (async), or raise `failure` (everything else)."""
        step = self._step_of(rank)
        loss = self.core.lose(rank, reason)
        for e in loss.events:
            self.log.write(e)
        if not loss.carry_on:
            # ps/ssp/backup fail with the message they always had; async only when nobody is left
            raise WorkloadError(f"{failure}; {loss.why}" if loss.events else failure)
        if not loss.events:  # already finished or already dropped: nothing new
            return
        c = self.conns[rank]
        c.outbox.put(None)
        with contextlib.suppress(OSError):  # wakes its reader and sender; a hung worker that
            c.sock.shutdown(socket.SHUT_RDWR)  # resumes finds the connection gone and fails
        n = loss.remaining
        rest = (
            f"async training goes on with {n} worker{'s' if n != 1 else ''}"
            if n
            else "async training ends with the workers that finished"
        )
        print(
            f"parameter server: worker {rank} lost at step {step} ({reason}); {rest}",
            file=sys.stderr,
            flush=True,
        )

    def run(self) -> None:
        threading.Thread(target=self._accept_loop, daemon=True).start()
        self._wait_for_workers()
        while not self.core.all_done:
            try:
                kind, rank, obj = self.events.get(timeout=POLL_S)
            except queue.Empty:
                self._check_liveness()
                continue
            if kind == "fatal":
                raise WorkloadError(str(obj))
            if kind == "hello":
                raise WorkloadError(f"late second connection for rank {rank}")
            if rank in self.core.lost:  # what a dropped worker's threads still report
                continue
            c = self.conns[rank]
            self.core.heard(rank, time.monotonic())
            if kind == "sending":
                self.queued.discard(rank)
                continue
            if kind == "lost":
                if rank in self.core.done:
                    continue
                why = why_lost(obj)
                failure = f"lost connection to worker {rank} ({c.peer}) at step {self._step_of(rank)}: {why}"
                self._lose(rank, why, failure)
                continue
            try:
                if kind == "bye":
                    self.core.bye(rank)
                    continue
                assert isinstance(obj, tuple)
                h, grad = obj
                d = self.core.push(rank, h.step, h.version)
            except ValueError as exc:
                raise WorkloadError(f"protocol error from worker {rank} ({c.peer}): {exc}") from None
            if grad.size != self.nparams:
                raise WorkloadError(f"worker {rank} pushed {grad.size} values, expected {self.nparams}")
            if d.keep:
                self.pending[rank] = grad
            if d.apply:
                self._apply(d.apply)
            for r in self._reply_order(d.release):
                self._reply(r)
            for e in d.events:
                self.log.write(e)
            self._check_liveness()

    def close(self) -> None:
        self._closing.set()
        if self.serial is not None:
            self.serial.put(None)
        with contextlib.suppress(OSError):
            self.listener.close()
        for c in self.conns.values():
            c.outbox.put(None)
            with contextlib.suppress(OSError):
                c.sock.shutdown(socket.SHUT_RDWR)
            c.sock.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    opened = open_part("parameter server", args.job, lambda job: job.shard(args.shard))
    if opened is None:
        return 2
    job, me, log = opened
    bind = args.bind or job.ps_bind
    where = f"{bind}:{me.port}" + (f" (shard {me.index} of {len(job.shards)})" if len(job.shards) > 1 else "")
    server: ParameterServer | None = None
    try:
        with failures_reported(f"parameter server {where}") as outcome:
            try:
                server = ParameterServer(job, log, bind, args.dump_grad, args.shard)
            except OSError as exc:
                raise WorkloadError(f"cannot listen on {where}: {exc.strerror}") from None
            server.run()
            # async is the only strategy that can finish without some workers
            lost = sorted(server.core.lost) if job.strategy == "async" else []
            log.write(PsDone(time.time(), server.core.version, job.world, lost))
    finally:
        if server is not None:
            server.close()
        log.close()
    return outcome.code


if __name__ == "__main__":
    raise SystemExit(main())
