"""A data-parallel training worker: compute a gradient, exchange it by strategy, log one JSONL line per step.

Run inside a Mininet host by the experiment runner; see docs/DESIGN.md "Workload processes".
Prints nothing on success; on an expected failure prints one line `worker R: ...` on stderr and
exits non-zero.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from runmodel.job import JobSpec, RankJob
from runmodel.records import JsonlWriter, StepRecord, WorkerDone
from workloads.collectives import CollectiveExchange
from workloads.errors import exit_flushed, failures_reported, open_rank
from workloads.exchange import Exchange
from workloads.model import ModelSpec, init_weights, loss_and_grad, make_batch, shard_bounds
from workloads.psclient import PSClientExchange, ShardedPSExchange


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The worker's own options; every training parameter comes from the job file."""
    p = argparse.ArgumentParser(prog="python -m workloads.worker", description=__doc__)
    p.add_argument("--job", required=True, type=Path, help="the strategy's job.json (runmodel.job)")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (hosts share the CPU; default 1)"
    )
    p.add_argument("--dump-grad", default=None, help="debug (ring/allreduce): save step 0's mean gradient")
    return p.parse_args(argv)


def make_exchange(job: JobSpec, rank: int, spec: ModelSpec) -> Exchange:
    if not job.uses_ps:
        return CollectiveExchange(
            job.strategy, rank, job.world, job.master_addr, job.master_port, job.timeout, job.lr
        )
    if len(job.shards) == 1:
        return PSClientExchange(rank, spec.nparams, job.shards[0].addr, job.shards[0].port, job.timeout)
    return ShardedPSExchange(
        rank, shard_bounds(spec.nparams, len(job.shards)), [(k.addr, k.port) for k in job.shards], job.timeout
    )


def train(job: JobSpec, me: RankJob, log: JsonlWriter, dump_grad: str | None = None) -> None:
    spec = ModelSpec.from_grad_mb(job.grad_mb)
    weights = init_weights(spec, job.seed)
    ex = make_exchange(job, me.rank, spec)
    ex.start()
    for step in range(job.steps):
        t_start = time.time()
        c0 = time.perf_counter()
        x, y = make_batch(spec, job.seed, me.rank, step, job.batch)
        loss, grad = loss_and_grad(spec, weights, x, y)
        if job.compute_ms:
            time.sleep(job.compute_ms * me.compute_factor / 1000.0)
        compute_s = time.perf_counter() - c0
        if me.slow_every and (step + 1) % me.slow_every == 0:
            time.sleep(compute_s * (me.slow_factor - 1.0))
            compute_s = time.perf_counter() - c0
        stats = ex.step(step, weights, grad)
        if step == 0 and dump_grad and isinstance(ex, CollectiveExchange) and ex.last_avg is not None:
            np.save(dump_grad, ex.last_avg.numpy())
        log.write(
            StepRecord(
                rank=me.rank,
                strategy=job.strategy,
                step=step,
                t_start=t_start,
                t_end=time.time(),
                compute_s=compute_s,
                loss=loss,
                samples=job.batch,
                **asdict(stats),  # the exchange's numbers are the record's fields of the same names
            )
        )
    ex.close()
    log.write(WorkerDone(me.rank, job.steps))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    opened = open_rank(f"worker {args.rank}", args.job, args.rank, args.threads)
    if opened is None:
        return 2
    job, me, log = opened
    with log, failures_reported(f"worker {me.rank}") as outcome:
        train(job, me, log, args.dump_grad)
    return outcome.code


if __name__ == "__main__":
    exit_flushed(main())
