"""Our ring all-reduce against a locally computed sum, in real gloo processes on 127.0.0.1."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest
import torch

from tests.procs import free_port, spawn_ranks

pytestmark = pytest.mark.processes


def _print_seeds(world: int) -> None:
    """Name the ranks' tensor seeds in the log (fixed, so a failure can be run again)."""
    print(f"tensor seeds: {[100 + r for r in range(world)]} (rank r: torch seed 100 + r)")


def _rank_tensor(rank: int, length: int) -> torch.Tensor:
    return torch.randn(length, generator=torch.Generator().manual_seed(100 + rank))


def _ring_child(
    rank: int,
    world: int,
    port: int,
    length: int,
    segment_bytes: int,
    window: int,
    out: mp.Queue,
) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    import torch.distributed as dist

    from workloads.collectives import join_gloo
    from workloads.ring import ring_allreduce_

    torch.set_num_threads(1)
    join_gloo(f"tcp://127.0.0.1:{port}", rank, world, 30)
    t = _rank_tensor(rank, length)
    stats = ring_allreduce_(t, rank, world, segment_bytes=segment_bytes, window=window)
    whole = _rank_tensor(rank, length)  # the same sum unpipelined: one segment a chunk
    ring_allreduce_(whole, rank, world, segment_bytes=1 << 40, min_segments=1)
    dist.barrier()
    dist.destroy_process_group()
    same = bool(torch.equal(t, whole))
    out.put((rank, (t.numpy().tobytes(), stats.bytes_sent, stats.bytes_recv, same, stats.segments)))


def test_a_small_chunk_is_still_cut_to_pipeline() -> None:
    from workloads.ring import segments_per_chunk

    assert segments_per_chunk(2**20 // 7) == 4  # 1 MiB over 7 ranks: 4 segments, not one
    assert segments_per_chunk(40 * 1024) == 1  # under two minimum segments: one
    assert segments_per_chunk(8 * 2**20 // 7) == 5  # large chunks: segments of at most 256 KiB
    assert segments_per_chunk(2**20, segment_bytes=1 << 40, min_segments=1) == 1  # unpipelined


@pytest.mark.parametrize(
    ("world", "length", "segment_bytes", "window"),
    [
        (2, 1001, 256 * 1024, 4),
        (3, 1001, 256 * 1024, 4),
        (4, 1001, 256 * 1024, 4),
        (4, 3, 256 * 1024, 4),
        (3, 1001, 64, 1),  # 6 segments a chunk, one receive ahead: the pipeline's bookkeeping at its tightest
        (4, 40_003, 4096, 4),  # 10 segments a chunk of unequal chunks
        (3, 100_003, 256 * 1024, 4),  # a chunk under one segment still goes in 4 (133 KB: 4 of 33 KB)
    ],
)
def test_ring_allreduce_sums_exactly_like_local_sum(
    world: int, length: int, segment_bytes: int, window: int
) -> None:
    assert length % world  # the point: chunks of unequal size (and an empty one for length 3)
    _print_seeds(world)
    got = spawn_ranks(_ring_child, world, world, free_port(), length, segment_bytes, window)
    results = {}
    for rank, (raw, sent, recv, same_as_unpipelined, segments) in got.items():
        results[rank] = (torch.frombuffer(bytearray(raw), dtype=torch.float32), sent, recv)
        assert same_as_unpipelined, f"rank {rank}: the pipelined sum differs from the unpipelined one"
        chunk_bytes = -(-length // world) * 4
        assert segments == max(1, -(-chunk_bytes // segment_bytes), min(4, chunk_bytes // (32 * 1024)))
    expected = sum(_rank_tensor(r, length) for r in range(world))
    for rank, (t, _, _) in results.items():
        assert torch.allclose(t, expected, atol=1e-5), f"rank {rank} disagrees"
    # every chunk travels N-1 hops in reduce-scatter and N-1 in all-gather, neighbours only
    total = 2 * (world - 1) * length * 4
    assert sum(s for _, s, _ in results.values()) == total
    assert sum(r for _, _, r in results.values()) == total
    # every rank ends with the bit-identical tensor, so SGD stays in lockstep
    first = results[0][0]
    assert all(torch.equal(first, t) for t, _, _ in results.values())


def _halves_child(rank: int, world: int, port: int, length: int, segment_bytes: int, out: mp.Queue) -> None:
    """Reduce-scatter a rank's tensor, then all-gather a tensor holding only its own chunk."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    import torch.distributed as dist

    from workloads.collectives import join_gloo
    from workloads.ring import ring_all_gather_, ring_reduce_scatter_

    torch.set_num_threads(1)
    join_gloo(f"tcp://127.0.0.1:{port}", rank, world, 30)
    t = _rank_tensor(rank, length)
    rs = ring_reduce_scatter_(t, rank, world, segment_bytes=segment_bytes)
    mine = torch.tensor_split(t, world)[rank].clone()
    g = torch.full((length,), float("nan"))
    torch.tensor_split(g, world)[rank].copy_(_rank_tensor(rank, length)[: mine.numel()])
    ag = ring_all_gather_(g, rank, world, segment_bytes=segment_bytes)
    dist.barrier()
    dist.destroy_process_group()
    rs_bytes, ag_bytes = (rs.bytes_sent, rs.bytes_recv), (ag.bytes_sent, ag.bytes_recv)
    out.put((rank, (mine.numpy().tobytes(), g.numpy().tobytes(), rs_bytes, ag_bytes)))


@pytest.mark.parametrize(
    ("world", "length", "segment_bytes", "chunks"),
    [
        (3, 1001, 256 * 1024, [334, 334, 333]),  # chunks worked by hand: 1001 = 334 + 334 + 333
        (4, 3, 256 * 1024, [1, 1, 1, 0]),  # an empty chunk: nothing on the wire for it
        (4, 40_003, 4096, [10_001, 10_001, 10_001, 10_000]),  # 10 segments a chunk
    ],
)
def test_reduce_scatter_and_all_gather(
    world: int, length: int, segment_bytes: int, chunks: list[int]
) -> None:
    """Reduce-scatter leaves rank r the exact sum of chunk r; all-gather gives every rank every
    rank's chunk. Rank r sends all chunks but its own (reduce-scatter) or but its right
    neighbour's (all-gather) to the right: (length - chunk) x 4 bytes, from the chunks by hand."""
    from workloads.ring import chunk_sizes

    assert chunk_sizes(length, world) == chunks
    _print_seeds(world)
    results = spawn_ranks(_halves_child, world, world, free_port(), length, segment_bytes)
    expected = torch.tensor_split(sum(_rank_tensor(r, length) for r in range(world)), world)
    own = [_rank_tensor(r, length)[: chunks[r]] for r in range(world)]
    for rank, (mine, gathered, rs, ag) in results.items():
        mine_t = torch.frombuffer(bytearray(mine), dtype=torch.float32) if mine else torch.empty(0)
        assert torch.allclose(mine_t, expected[rank], atol=1e-5), f"rank {rank}: wrong reduced chunk"
        g = torch.frombuffer(bytearray(gathered), dtype=torch.float32)
        assert torch.equal(g, torch.cat(own)), f"rank {rank}: gathered tensor differs"
        left, right = (rank - 1) % world, (rank + 1) % world
        assert rs == ((length - chunks[rank]) * 4, (length - chunks[left]) * 4), rank
        assert ag == ((length - chunks[right]) * 4, (length - chunks[rank]) * 4), rank
