"""Ring all-reduce written on torch.distributed point-to-point (gloo), not the library collective.

Reduce-scatter then all-gather over N chunks; each rank only ever sends to rank+1 and receives from
rank-1, so on the fabric the traffic is N neighbour flows of 2(N-1)/N gradients each, which is what
the experiments compare against the parameter server's incast.

Pipelined, as NCCL and gloo are: every chunk is cut into segments, and segment j of step i leaves
as soon as segment j of step i-1 has arrived (and been added), while the next segments are still
on the wire. Receives are posted a window ahead, so gloo's rendezvous (a send waits for the peer's
"receive ready") never costs a round trip on the critical path. Unpipelined, every one of the
2(N-1) steps ends with the link idle: the last segment's latency, the wake-up of the process, the
next send's start, and a tail loss that only a timer can repair (docs/RESULTS.md, "make bench").

The two halves are collectives of their own too (ZeRO/FSDP's): `ring_reduce_scatter_` leaves rank r
the sum of chunk r, `ring_all_gather_` spreads every rank's chunk r; one loop runs all three.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

SEGMENT_BYTES = 256 * 1024  # the largest segment: small enough to pipeline, large enough to amortise a call
MIN_SEGMENTS = 4  # a chunk of a few segments' size still goes in this many, down to MIN_SEGMENT_BYTES
MIN_SEGMENT_BYTES = 32 * 1024  # below this a segment's own cost (about a millisecond) outweighs its overlap
WINDOW = 4  # receives posted ahead of the one being waited for (per chunk: segments + this)
Steps = list[tuple[int, int, bool]]  # a rank's ring steps: (chunk sent, chunk received, received is added)


@dataclass
class RingStats:
    """What one ring collective moved; `first_wait_s` is how long the first segment from the left took."""

    bytes_sent: int = 0
    bytes_recv: int = 0
    first_wait_s: float = 0.0
    segments: int = 0  # segments per chunk


def segments_per_chunk(
    chunk_bytes: int, segment_bytes: int = SEGMENT_BYTES, min_segments: int = MIN_SEGMENTS
) -> int:
    """How many segments a chunk of `chunk_bytes` is cut into: segments of at most `segment_bytes`, and
    at least `min_segments` of at least MIN_SEGMENT_BYTES where the chunk allows (1 MiB over 7 ranks:
    4 segments of 37 KiB, not one, so every step of the ring pipelines)."""
    if segment_bytes <= 0:
        raise ValueError("segment_bytes must be > 0")
    return max(1, math.ceil(chunk_bytes / segment_bytes), min(min_segments, chunk_bytes // MIN_SEGMENT_BYTES))


def chunk_sizes(numel: int, world: int) -> list[int]:
    """Elements in each of the `world` chunks the ring cuts a tensor of `numel` into (torch.tensor_split's
    cut: the first numel % world chunks one element longer), the same on every rank."""
    if world < 1 or numel < 0:
        raise ValueError(f"need world >= 1 and numel >= 0, got {world} and {numel}")
    return [numel // world + (k < numel % world) for k in range(world)]


def reduce_scatter_steps(world: int, own: int) -> Steps:
    """The N-1 reduce-scatter steps after which a rank holds the full sum of chunk `own`:
    (chunk sent, chunk received, True: the received chunk is added). Step i sends chunk (own - 1 - i)
    and adds the incoming (own - 2 - i), so a rank sends every chunk but `own` to its right."""
    return [((own - 1 - i) % world, (own - 2 - i) % world, True) for i in range(world - 1)]


def all_gather_steps(world: int, own: int) -> Steps:
    """The N-1 all-gather steps of a rank that starts with chunk `own` finished: step i sends chunk
    (own - i) and stores the incoming finished (own - 1 - i), so a rank sends every chunk but its
    right neighbour's own."""
    return [((own - i) % world, (own - 1 - i) % world, False) for i in range(world - 1)]


def schedule(rank: int, world: int) -> Steps:
    """The 2(N-1) steps of rank `rank`'s all-reduce: (chunk sent, chunk received, received chunk is added).

    Reduce-scatter step i sends chunk (r - i) and adds the incoming chunk (r - i - 1); after N-1
    steps rank r holds the full sum of chunk (r + 1). All-gather step i sends chunk (r + 1 - i) and
    stores the incoming finished chunk (r - i). What a step sends is what the step before received.
    """
    own = (rank + 1) % world
    return reduce_scatter_steps(world, own) + all_gather_steps(world, own)


@dataclass(frozen=True)
class RingCollective:
    """A ring collective over a 1-D contiguous tensor, in place: `steps_of(rank, world)` (chunk sent to
    the right, chunk received from the left, add it) run pipelined by `_ring_`; called as
    collective(tensor, rank, world, segment_bytes=, window=, min_segments=) -> RingStats."""

    steps_of: Callable[[int, int], Steps]

    def __call__(
        self,
        tensor: torch.Tensor,
        rank: int,
        world: int,
        segment_bytes: int = SEGMENT_BYTES,
        window: int = WINDOW,
        min_segments: int = MIN_SEGMENTS,
    ) -> RingStats:
        return _ring_(tensor, rank, world, self.steps_of(rank, world), segment_bytes, window, min_segments)


# Sum `tensor` across all ranks in place; the same result on every rank. Reduce-scatter then
# all-gather in one pipelined pass (the pipeline does not drain between the halves). Every element is
# summed in the same order as by the unpipelined ring (along the ring, starting at the chunk's owner),
# so the result does not depend on `segment_bytes` or `window`.
ring_allreduce_ = RingCollective(schedule)

# Sum `tensor` across all ranks, in place, into this rank's chunk only: afterwards chunk `rank`
# (torch.tensor_split(tensor, world)[rank], `chunk_sizes`) holds the full sum; the other chunks hold
# partial sums (scratch). Each rank sends (N-1)/N of the tensor to its right neighbour.
ring_reduce_scatter_ = RingCollective(lambda rank, world: reduce_scatter_steps(world, rank))

# Fill `tensor` in place with every rank's chunk: on entry chunk `rank`
# (torch.tensor_split(tensor, world)[rank]) is this rank's, the rest is overwritten. Each rank sends
# (N-1)/N of the tensor to its right neighbour.
ring_all_gather_ = RingCollective(lambda rank, world: all_gather_steps(world, rank))


def _ring_(
    tensor: torch.Tensor,
    rank: int,
    world: int,
    steps: Steps,
    segment_bytes: int,
    window: int,
    min_segments: int,
) -> RingStats:
    """Run `steps` (chunk sent to the right, chunk received from the left, add it) pipelined, in place."""
    stats = RingStats()
    if world == 1:
        return stats
    if tensor.dim() != 1 or not tensor.is_contiguous():
        raise ValueError("a ring collective needs a contiguous 1-D tensor")
    if window < 1:
        raise ValueError("window must be >= 1")
    chunks = torch.tensor_split(tensor, world)
    size = tensor.element_size()
    m = segments_per_chunk(max(c.numel() for c in chunks) * size, segment_bytes, min_segments)
    segs = [torch.tensor_split(c, m) for c in chunks]  # the same cut on every rank
    right, left = (rank + 1) % world, (rank - 1) % world
    # all-reduce: the all-gather's transfer k overwrites the segment reduce-scatter sent in k - lag
    lag = (world - 1) * m if steps and steps[0][2] and not steps[-1][2] else None
    total = len(steps) * m  # transfers, in the order both ends post them: step-major, then segment
    depth = min(total, m + window)  # receives in flight at most
    seg_len = max(s.numel() for c in segs for s in c)
    scratch = [torch.empty(seg_len, dtype=tensor.dtype) for _ in range(depth)]
    recvs: dict[int, tuple[Any, torch.Tensor]] = {}
    sends: list[Any] = []
    t0 = time.perf_counter()

    def done_with(i: int) -> None:
        """Wait for send i once (a gloo send's wait() must not be called twice: it would block)."""
        w, sends[i] = sends[i], None
        if w is not None:
            w.wait()

    def post(k: int) -> None:
        """Post receive k: into the chunk itself (all-gather) or a scratch buffer (reduce-scatter)."""
        step, j = divmod(k, m)
        _, recv_c, add = steps[step]
        dest = segs[recv_c][j]
        into = scratch[k % depth][: dest.numel()] if add else dest
        if not add and lag is not None and k - lag < len(sends):
            # all-gather overwrites a segment reduce-scatter sent (transfer k - (N-1) m). Causality
            # already orders the two (the finished chunk includes what we sent), but be explicit.
            done_with(k - lag)
        recvs[k] = (dist.irecv(into, src=left) if into.numel() else None, into)

    def land(k: int) -> None:
        """Wait for receive k and add it into its chunk (reduce-scatter)."""
        work, into = recvs.pop(k)
        step, j = divmod(k, m)
        _, recv_c, add = steps[step]
        if work is None:
            return
        work.wait()
        stats.bytes_recv += into.numel() * size
        if stats.first_wait_s == 0.0:
            stats.first_wait_s = time.perf_counter() - t0
        if add:
            segs[recv_c][j].add_(into)

    posted = landed = 0
    for k in range(total):
        while landed <= k - m:  # what transfer k sends arrived in transfer k - m
            land(landed)
            landed += 1
        while posted < min(total, landed + depth):  # a scratch buffer is reused once its data landed
            post(posted)
            posted += 1
        src = segs[steps[k // m][0]][k % m]
        if src.numel():
            sends.append(dist.isend(src, dst=right))
            stats.bytes_sent += src.numel() * size
        else:
            sends.append(None)
    while landed < total:
        land(landed)
        landed += 1
    for i in range(len(sends)):
        done_with(i)
    stats.segments = m
    return stats
