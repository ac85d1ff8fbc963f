"""Collective strategies (`ring`, `allreduce`): gloo process group, SGD applied locally on every rank."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from runmodel.job import JobSpec
from workloads.errors import WorkloadError, _reason
from workloads.exchange import ExchangeStats
from workloads.model import BYTES_PER_PARAM, ModelSpec, sgd_
from workloads.rankloop import join_gloo  # the one way a rank joins its group (also for the tests)
from workloads.ring import chunk_sizes, ring_allreduce_

__all__ = ["CollectiveExchange", "join_gloo", "traffic_theory"]


def traffic_theory(job: JobSpec) -> dict[tuple[int, int], int]:
    """The `ring` strategy's payload bytes per step from rank a to rank b: all to the right
    neighbour, the whole gradient twice but the chunk the rank ends its reduce-scatter with
    (r + 1's) and the one its neighbour does (r + 2's): 2 (N-1)/N of the gradient, to the byte of
    the ring's chunking. `allreduce` has none: gloo picks its algorithm and does not say."""
    if job.strategy != "ring":
        raise ValueError(f"no traffic theory for {job.strategy!r}: gloo's all-reduce picks its own algorithm")
    world = job.world
    n = ModelSpec.from_grad_mb(job.grad_mb).nparams
    c = chunk_sizes(n, world)
    if world == 1:
        return {}
    return {
        (r, (r + 1) % world): (2 * n - c[(r + 1) % world] - c[(r + 2) % world]) * BYTES_PER_PARAM
        for r in range(world)
    }


class CollectiveExchange:
    """Averages gradients with our ring (`ring`) or `dist.all_reduce` (`allreduce`), then applies SGD."""

    def __init__(
        self,
        strategy: str,
        rank: int,
        world: int,
        master_addr: str,
        master_port: int,
        timeout: float,
        lr: float,
    ) -> None:
        if strategy not in ("ring", "allreduce"):
            raise ValueError(strategy)
        self.strategy, self.rank, self.world, self.lr = strategy, rank, world, lr
        self.url = f"tcp://{master_addr}:{master_port}"
        self.timeout = timeout
        self.last_avg: torch.Tensor | None = None

    def _fail(self, what: str, step: int | None, exc: BaseException) -> WorkloadError:
        at = "" if step is None else f" at step {step}"
        return WorkloadError(f"{what} (rank {self.rank}/{self.world}, {self.url}) failed{at}: {_reason(exc)}")

    def start(self) -> None:
        try:
            join_gloo(self.url, self.rank, self.world, self.timeout)
        except (RuntimeError, ValueError, OSError) as exc:
            raise self._fail("rendezvous", None, exc) from None

    def step(self, step: int, weights: torch.Tensor, grad: torch.Tensor) -> ExchangeStats:
        t0 = time.perf_counter()
        stats = ExchangeStats()
        try:
            if self.strategy == "ring":
                rs = ring_allreduce_(grad, self.rank, self.world)
                stats.bytes_sent, stats.bytes_recv = rs.bytes_sent, rs.bytes_recv
                stats.wait_s = rs.first_wait_s
            else:
                dist.all_reduce(grad, op=dist.ReduceOp.SUM)
                # gloo does not expose its wire bytes; log what a bandwidth-optimal all-reduce moves.
                moved = 2 * (self.world - 1) * grad.numel() * grad.element_size() // self.world
                stats.bytes_sent = stats.bytes_recv = moved
        except (RuntimeError, ValueError, OSError) as exc:
            left, right = (self.rank - 1) % self.world, (self.rank + 1) % self.world
            name = "all_reduce"
            if self.strategy == "ring":
                name = f"ring all-reduce with ranks {left} and {right}"
            raise self._fail(name, step, exc) from None
        grad.div_(self.world)
        self.last_avg = grad
        sgd_(weights, grad, self.lr)
        stats.comm_s = time.perf_counter() - t0
        return stats

    def close(self) -> None:
        """Barrier so no rank tears down its sockets while a neighbour still reads the last chunk."""
        try:
            dist.barrier()
        except (RuntimeError, ValueError, OSError) as exc:
            raise self._fail("final barrier", None, exc) from None
        dist.destroy_process_group()
