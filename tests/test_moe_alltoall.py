"""Our all-to-all against the rows it must deliver, in real gloo processes on 127.0.0.1."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest
import torch

from tests.procs import free_port, spawn_ranks

pytestmark = pytest.mark.processes


def _rows(rank: int, world: int, width: int) -> torch.Tensor:
    """Rank `rank`'s send buffer: row j (for rank j) holds 1000 rank + 10 j + column/width."""
    cols = torch.arange(width, dtype=torch.float32) / width
    return torch.stack([1000.0 * rank + 10.0 * j + cols for j in range(world)])


def _child(rank: int, world: int, port: int, width: int, out: mp.Queue) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    import torch.distributed as dist

    from workloads.alltoall import all_to_all
    from workloads.collectives import join_gloo

    torch.set_num_threads(1)
    join_gloo(f"tcp://127.0.0.1:{port}", rank, world, 30)
    recv, stats = all_to_all(_rows(rank, world, width), rank, world)
    again, more = all_to_all(recv, rank, world)  # an all-to-all is its own inverse
    dist.barrier()
    dist.destroy_process_group()
    moved = (stats.bytes_sent, stats.bytes_recv, more.calls)
    out.put((rank, (recv.numpy().tobytes(), again.numpy().tobytes(), *moved)))


def test_peer_order_by_hand() -> None:
    from workloads.alltoall import peer_order

    assert peer_order(1, 4) == [(2, 0), (3, 3), (0, 2)]
    assert peer_order(0, 1) == []


@pytest.mark.parametrize(("world", "width"), [(2, 5), (3, 1000), (5, 33)])
def test_all_to_all_delivers_every_row_and_counts_its_bytes(world: int, width: int) -> None:
    got = spawn_ranks(_child, world, world, free_port(), width)
    for rank, (raw, back, sent, recv, calls) in got.items():
        t = torch.frombuffer(bytearray(raw), dtype=torch.float32).view(world, width)
        for j in range(world):  # row j came from rank j, which meant it for this rank
            assert torch.equal(t[j], _rows(j, world, width)[rank]), (rank, j)
        assert torch.equal(torch.frombuffer(bytearray(back), dtype=torch.float32).view(world, width),
                           _rows(rank, world, width))  # fmt: skip
        # hand-worked: N - 1 rows of `width` float32 each way, the own row not on the wire
        assert sent == recv == (world - 1) * width * 4
        assert calls == 1
