"""Ring all-reduce written on torch.distributed point-to-point (gloo), not the library collective.

Reduce-scatter then all-gather over N chunks; each rank only ever sends to rank+1 and receives from
rank-1, so on the fabric the traffic is N neighbour flows of 2(N-1)/N gradients each, which is what
the experiments compare against the parameter server's incast.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class RingStats:
    """What one all-reduce moved; `first_wait_s` is how long the first chunk from the left took."""

    bytes_sent: int = 0
    bytes_recv: int = 0
    first_wait_s: float = 0.0


def _exchange(
    send: torch.Tensor, recv: torch.Tensor, right: int, left: int, stats: RingStats, first: bool
) -> None:
    """Send one chunk right while receiving one from the left; empty chunks are skipped on both ends."""
    t0 = time.perf_counter()
    works = []
    if send.numel():
        works.append(dist.isend(send, dst=right))
        stats.bytes_sent += send.numel() * send.element_size()
    if recv.numel():
        rwork = dist.irecv(recv, src=left)
        assert rwork is not None
        rwork.wait()
        stats.bytes_recv += recv.numel() * recv.element_size()
        if first:
            stats.first_wait_s = time.perf_counter() - t0
    for w in works:
        assert w is not None
        w.wait()


def ring_allreduce_(tensor: torch.Tensor, rank: int, world: int) -> RingStats:
    """Sum `tensor` (1-D, contiguous) across all ranks in place; the same result on every rank."""
    stats = RingStats()
    if world == 1:
        return stats
    if tensor.dim() != 1 or not tensor.is_contiguous():
        raise ValueError("ring_allreduce_ needs a contiguous 1-D tensor")
    chunks = torch.tensor_split(tensor, world)
    right, left = (rank + 1) % world, (rank - 1) % world
    buf = torch.empty(max(c.numel() for c in chunks), dtype=tensor.dtype)
    # Reduce-scatter: after N-1 rounds rank r holds the full sum of chunk (r+1) % N.
    for i in range(world - 1):
        send_c = chunks[(rank - i) % world]
        recv_c = chunks[(rank - i - 1) % world]
        incoming = buf[: recv_c.numel()]
        _exchange(send_c, incoming, right, left, stats, first=i == 0)
        recv_c.add_(incoming)
    # All-gather: pass the finished chunks around the ring.
    for i in range(world - 1):
        send_c = chunks[(rank + 1 - i) % world]
        recv_c = chunks[(rank - i) % world]
        incoming = buf[: recv_c.numel()]
        _exchange(send_c, incoming, right, left, stats, first=False)
        recv_c.copy_(incoming)
    return stats
