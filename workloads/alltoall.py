"""All-to-all on torch.distributed point-to-point (gloo), with the bytes it moved.

Rank r holds one equal-size buffer per destination (`send[j]` goes to rank j) and ends with one per
source (`recv[j]` came from rank j). Every rank posts all its receives, then all its sends at once,
in a fixed order (step i = 1..N-1: send to r + i, receive from r - i, as gloo's own alltoall and
NCCL's pairwise exchange order them), so on the fabric every host receives from the N - 1 others
at the same moment: the receivers' incast that mixture-of-experts dispatch and combine cause.

torch 2.13's gloo has `dist.all_to_all_single` (and `all_to_all`); we still build our own, as
workloads.ring does for all-reduce: gloo does not say what it put on the wire, ours counts every
payload byte it sends and receives (the theory's rows and columns, exactly), times the wait for the
first buffer to arrive, and its wire pattern (which peer, which order, all at once) is this code's,
not a library version's. Its own buffer never crosses the network and is not counted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

TAG = 7  # the all-to-all's gloo tag, apart from the ring all-reduce's (0) on the same process group


@dataclass
class AllToAllStats:
    """What all-to-alls moved (payload bytes, the own buffer not included) and how long this rank
    waited, from posting its receives to the last buffer's arrival; adds up over calls."""

    bytes_sent: int = 0
    bytes_recv: int = 0
    wait_s: float = 0.0
    calls: int = 0

    def add(self, other: AllToAllStats) -> None:
        """Accumulate another call's figures."""
        self.bytes_sent += other.bytes_sent
        self.bytes_recv += other.bytes_recv
        self.wait_s += other.wait_s
        self.calls += other.calls


def peer_order(rank: int, world: int) -> list[tuple[int, int]]:
    """(send to, receive from) of rank `rank`, step i = 1..N-1: (r + i, r - i) mod N. Over a step
    every rank sends to a different peer, and over all steps to every peer once."""
    return [((rank + i) % world, (rank - i) % world) for i in range(1, world)]


def all_to_all(
    send: torch.Tensor, rank: int, world: int, tag: int = TAG
) -> tuple[torch.Tensor, AllToAllStats]:
    """Exchange `send` (shape (world, ...): row j for rank j) for `recv` (row j from rank j).

    Every row has the same size on every rank (the caller pads, as GShard/Switch pad experts'
    buffers to a fixed capacity), so a receiver knows what to post without a size exchange.
    Receives are posted before sends, so gloo's rendezvous never waits on a peer's program order.
    """
    if send.dim() < 1 or send.shape[0] != world:
        raise ValueError(f"all_to_all needs one row per rank: shape {tuple(send.shape)}, world {world}")
    send = send.contiguous()
    recv = torch.empty_like(send)
    recv[rank] = send[rank]
    stats = AllToAllStats(calls=1)
    if world == 1:
        return recv, stats
    row_bytes = send[0].numel() * send.element_size()
    order = peer_order(rank, world)
    t0 = time.perf_counter()
    recvs: list[Any] = [dist.irecv(recv[src], src=src, tag=tag) for _, src in order]
    sends: list[Any] = [dist.isend(send[dst], dst=dst, tag=tag) for dst, _ in order]
    for work in recvs:
        work.wait()
        stats.bytes_recv += row_bytes
    stats.wait_s = time.perf_counter() - t0
    for work in sends:
        work.wait()
        stats.bytes_sent += row_bytes
    return recv, stats
