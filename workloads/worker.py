"""A data-parallel training worker: compute a gradient, exchange it by strategy, log one JSONL line per step.

Run inside a Mininet host by the experiment runner; see docs/DESIGN.md "Workload processes".
Prints nothing on success; on an expected failure prints one line `worker R: ...` on stderr and
exits non-zero.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from workloads.collectives import CollectiveExchange
from workloads.errors import WorkloadError
from workloads.exchange import Exchange
from workloads.jsonl import JsonlLog
from workloads.model import ModelSpec, init_weights, loss_and_grad, make_batch
from workloads.psclient import PSClientExchange

STRATEGIES = ("ps", "ring", "allreduce", "async", "ssp", "backup")
COLLECTIVE = ("ring", "allreduce")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m workloads.worker", description=__doc__)
    p.add_argument("--strategy", required=True, choices=STRATEGIES)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--grad-mb", type=float, required=True, help="gradient size in MiB of float32")
    p.add_argument("--batch", type=int, required=True, help="samples per step on this worker")
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--master-addr", required=True, help="PS address (PS family) or rank 0's address (ring)")
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--ifname", default=None, help="sets GLOO_SOCKET_IFNAME (e.g. h2-eth0, lo)")
    p.add_argument("--log", required=True)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before a silent peer is a failure")
    p.add_argument("--slow-every", type=int, default=0, help="every K-th step (K-1, 2K-1, ...) is slow")
    p.add_argument("--slow-factor", type=float, default=1.0, help="slow steps compute X times longer")
    p.add_argument("--compute-ms", type=float, default=0.0,
                   help="emulated accelerator time per step (a GPU's forward/backward uses no host CPU)")
    p.add_argument("--compute-factor", type=float, default=1.0,
                   help="this worker's accelerator is X times slower (a slow GPU: a straggler)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (hosts share the CPU)")
    p.add_argument("--dump-grad", default=None, help="debug (ring/allreduce): save step 0's mean gradient")
    args = p.parse_args(argv)
    if not 0 <= args.rank < args.world:
        p.error(f"--rank {args.rank} outside world of {args.world}")
    if args.steps < 1 or args.batch < 1 or args.timeout <= 0 or args.grad_mb <= 0:
        p.error("--steps, --batch, --timeout and --grad-mb must be positive")
    if args.slow_every < 0 or args.slow_factor < 1.0:
        p.error("--slow-every must be >= 0 and --slow-factor >= 1")
    if args.compute_ms < 0 or args.compute_factor < 1.0:
        p.error("--compute-ms must be >= 0 and --compute-factor >= 1")
    return args


def make_exchange(args: argparse.Namespace, spec: ModelSpec) -> Exchange:
    if args.strategy in COLLECTIVE:
        return CollectiveExchange(
            args.strategy, args.rank, args.world, args.master_addr, args.master_port, args.timeout, args.lr
        )
    return PSClientExchange(args.rank, spec.nparams, args.master_addr, args.master_port, args.timeout)


def train(args: argparse.Namespace, log: JsonlLog) -> None:
    spec = ModelSpec.from_grad_mb(args.grad_mb)
    weights = init_weights(spec, args.seed)
    ex = make_exchange(args, spec)
    ex.start()
    for step in range(args.steps):
        t_start = time.time()
        c0 = time.perf_counter()
        x, y = make_batch(spec, args.seed, args.rank, step, args.batch)
        loss, grad = loss_and_grad(spec, weights, x, y)
        if args.compute_ms:
            time.sleep(args.compute_ms * args.compute_factor / 1000.0)
        compute_s = time.perf_counter() - c0
        if args.slow_every and (step + 1) % args.slow_every == 0:
            time.sleep(compute_s * (args.slow_factor - 1.0))
            compute_s = time.perf_counter() - c0
        stats = ex.step(step, weights, grad)
        if step == 0 and args.dump_grad and isinstance(ex, CollectiveExchange) and ex.last_avg is not None:
            np.save(args.dump_grad, ex.last_avg.numpy())
        log.write({
            "rank": args.rank, "strategy": args.strategy, "step": step,
            "t_start": t_start, "t_end": time.time(),
            "compute_s": compute_s, "comm_s": stats.comm_s, "wait_s": stats.wait_s,
            "bytes_sent": stats.bytes_sent, "bytes_recv": stats.bytes_recv,
            "loss": loss, "samples": args.batch,
        })
    ex.close()
    log.write({"event": "done", "rank": args.rank, "steps": args.steps})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = args.ifname
    torch.set_num_threads(args.threads)
    try:
        log = JsonlLog(Path(args.log))
    except OSError as exc:
        print(f"worker {args.rank}: cannot open log {args.log}: {exc.strerror}", file=sys.stderr)
        return 2
    with log:
        try:
            train(args, log)
        except WorkloadError as exc:
            print(f"worker {args.rank}: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(f"worker {args.rank}: interrupted", file=sys.stderr)
            return 130
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # A failed gloo group cannot be torn down cleanly (its destructor may block or warn), and every
    # result is already flushed, so leave without running interpreter teardown.
    os._exit(code)
