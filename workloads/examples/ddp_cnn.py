"""A user's own training job: a small CNN trained with torch.nn.parallel.DistributedDataParallel.

Nothing here is incastlab's: it is a plain PyTorch DDP script, started as `torchrun` would start it
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT in the environment; GLOO_SOCKET_IFNAME names
the interface gloo uses). Backend gloo (CPU). DDP splits the gradients into buckets of --bucket-mb and
all-reduces each bucket as soon as backward has filled it, overlapping communication with the rest of
backward. The data are generated: 28x28 one-channel images labelled by a fixed random "teacher"
network, so the loss falls as the model learns. Each rank prints one line per step
(`step K loss L time T`), which incastlab keeps in worker-<rank>.stdout.

    incastlab job --image incastlab/worker:0.1.0 -- python3 /opt/incastlab/workloads/examples/ddp_cnn.py
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class SmallCNN(nn.Module):
    """Two convolutions and two linear layers: about 110k parameters (0.42 MiB of float32 gradient)."""

    def __init__(self, width: int = 16, hidden: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.fc1 = nn.Linear(2 * width * 7 * 7, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def batches(rank: int, batch: int, seed: int):
    """Endless generated batches: each rank its own samples, every rank the same teacher."""
    teacher = torch.Generator().manual_seed(seed)
    w = torch.randn(28 * 28, 10, generator=teacher)
    gen = torch.Generator().manual_seed(seed * 1000 + rank + 1)
    while True:
        x = torch.randn(batch, 1, 28, 28, generator=gen)
        yield x, (x.flatten(1) @ w).argmax(1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=512, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--bucket-mb", type=float, default=0.25, help="DDP's bucket_cap_mb")
    p.add_argument("--width", type=int, default=16, help="channels of the first convolution")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fail-at", type=int, default=0, help="rank 1 exits with code 3 at this step (a test)")
    args = p.parse_args(argv)

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))  # env:// from torchrun's variables
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)  # the same initial model everywhere (DDP broadcasts rank 0's anyway)
    model = DistributedDataParallel(SmallCNN(args.width), bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    n_params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(
            f"world {world}, {n_params} parameters ({n_params * 4 / 2**20:.2f} MiB of gradient), "
            f"buckets of {args.bucket_mb} MB, interface {os.environ.get('GLOO_SOCKET_IFNAME', '?')}",
            flush=True,
        )
    data = batches(rank, args.batch, args.seed)
    for step in range(1, args.steps + 1):
        if args.fail_at and step == args.fail_at and rank == 1:
            print(f"rank {rank}: failing on purpose at step {step}", file=sys.stderr, flush=True)
            return 3
        t0 = time.time()
        x, y = next(data)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces each bucket during backward
        opt.step()
        # the mean loss over the ranks, as one more (tiny) all-reduce, for the printout only
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        print(f"step {step} loss {mean.item() / world:.4f} time {time.time() - t0:.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
