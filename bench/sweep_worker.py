"""One rank of `make bench`'s collective sweep, run inside its Mininet host.

    python -m bench.sweep_worker --job <run>/sweep/job.json --rank R

Joins a gloo group once, then for every size runs each collective (the project's ring, gloo's own
all_reduce; all-gather, reduce-scatter, all-to-all and broadcast at the sizes their plans name, see
bench.sweep.OTHERS for whose), nccl-tests style: warm-up iterations, then the timed iterations, the
collectives' in turn (ring, gloo, ring, ...), each after a barrier. Then the parameter-server
rounds: per PS variant and size, connect to the PS processes the bench started for that round
(workloads.ps), push and pull `warmup + iters` times, say goodbye. Every (collective, size) becomes
one JSON line in <out_dir>/rank-R.jsonl with the wall-clock start and end of every iteration, so the
bench can take, per iteration, the moments the last rank started and was done.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from workloads.errors import exit_flushed


@dataclass(frozen=True)
class CollectivePlan:
    """One collective of the sweep: `kind` ring (workloads.ring) or gloo (dist.all_reduce), or
    all-gather, reduce-scatter, all-to-all, broadcast; `sizes` (None: every size of the sweep) and
    `max_iters` (None: the size's count) keep a collective's share of the bench's time small."""

    name: str
    kind: str
    segment_bytes: int | None = None  # ring only: None = workloads.ring's default
    window: int | None = None
    sizes: tuple[int, ...] | None = None
    max_iters: int | None = None

    def runs_at(self, size: int) -> bool:
        """True if this collective is measured at `size` bytes."""
        return self.sizes is None or size in self.sizes


@dataclass(frozen=True)
class PsRound:
    """One PS measurement: variant `name` at one size, served by `servers` (one per shard)."""

    name: str
    size_bytes: int
    nparams: int
    servers: tuple[tuple[str, int], ...]
    warmup: int
    iters: int


@dataclass(frozen=True)
class SweepJob:
    """What every rank of the sweep is told (<run>/sweep/job.json)."""

    world: int
    master_addr: str
    master_port: int
    ifnames: tuple[str, ...]
    sizes: tuple[int, ...]  # bytes, multiples of 4
    warmup: tuple[int, ...]  # per size
    iters: tuple[int, ...]  # per size
    collectives: tuple[CollectivePlan, ...] = ()
    ps_rounds: tuple[PsRound, ...] = ()
    out_dir: str = "."
    timeout: float = 300.0

    def to_json(self) -> str:
        """job.json."""
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> SweepJob:
        """From job.json."""
        doc = dict(doc)
        doc["collectives"] = tuple(
            CollectivePlan(**{**c, "sizes": None if c.get("sizes") is None else tuple(c["sizes"])})
            for c in doc.get("collectives", ())
        )
        doc["ps_rounds"] = tuple(
            PsRound(**{**r, "servers": tuple(tuple(s) for s in r["servers"])})
            for r in doc.get("ps_rounds", ())
        )
        for key in ("ifnames", "sizes", "warmup", "iters"):
            doc[key] = tuple(doc.get(key, ()))
        return cls(**doc)

    @classmethod
    def load(cls, path: Path) -> SweepJob:
        """Read job.json."""
        return cls.from_dict(json.loads(Path(path).read_text()))


def op_floats(kind: str, size: int, world: int) -> int:
    """Floats of one operation's tensor at a sweep size of `size` bytes: all of them for an
    all-reduce and a broadcast; for the collectives that cut the tensor in `world` equal parts
    (all-gather, reduce-scatter, all-to-all) the largest multiple of `world` that fits."""
    n = size // 4
    return n if kind in ("ring", "gloo", "broadcast") else n - n % world


class Buffers:
    """One size's tensors, zeros (zeros stay zeros: no overflow however many iterations): `t` of
    `floats`; made when first used (an all-reduce alone needs no more): its 1/world part `part`
    (all-gather's input) and `out` (all-gather's and all-to-all's output)."""

    def __init__(self, floats: int, world: int) -> None:
        self.t = torch.zeros(floats)
        self.world = world

    @functools.cached_property
    def part(self) -> torch.Tensor:
        return torch.zeros(self.t.numel() // self.world)

    @functools.cached_property
    def out(self) -> torch.Tensor:
        return torch.zeros(self.t.numel())


def _run_collective(plan: CollectivePlan, b: Buffers, rank: int, world: int) -> None:
    import torch.distributed as dist

    from workloads.ring import ring_allreduce_, ring_reduce_scatter_

    kw: dict[str, int] = {}
    if plan.segment_bytes is not None:
        kw["segment_bytes"] = plan.segment_bytes
    if plan.window is not None:
        kw["window"] = plan.window
    if plan.kind == "ring":
        ring_allreduce_(b.t, rank, world, **kw)
    elif plan.kind == "gloo":
        dist.all_reduce(b.t, op=dist.ReduceOp.SUM)
    elif plan.kind == "all-gather":
        dist.all_gather_single(b.out, b.part)
    elif plan.kind == "reduce-scatter":
        ring_reduce_scatter_(b.t, rank, world, **kw)
    elif plan.kind == "all-to-all":
        dist.all_to_all_single(b.out, b.t)
    elif plan.kind == "broadcast":
        dist.broadcast(b.t, src=0)
    else:
        raise ValueError(f"unknown collective kind {plan.kind!r}")


def sweep_collectives(job: SweepJob, rank: int, out: Any) -> None:
    """The collectives that run at every size (the all-reduces) over all sizes first, then those
    with sizes of their own (all-gather...) at theirs: gloo keeps one TCP connection per pair for
    every collective, and the losses of the others (all-to-all's incast) would leave the ring's
    neighbour connections with smaller windows, so the all-reduce rows stay as they were measured
    without them. One JSON line per collective and size (sweep_size)."""
    first = [p for p in job.collectives if p.sizes is None]
    then = [p for p in job.collectives if p.sizes is not None]
    for group in (first, then):
        for size, warm, iters in zip(job.sizes, job.warmup, job.iters, strict=True):
            plans = [p for p in group if p.runs_at(size)]
            if plans:
                sweep_size(job, plans, size, warm, iters, rank, out)


def sweep_size(
    job: SweepJob, plans: list[CollectivePlan], size: int, warm: int, iters: int, rank: int, out: Any
) -> None:
    """One size: each collective's warm-up, then their timed iterations interleaved (ring, gloo, ring,
    gloo, ...), each after a barrier, so a drift of the machine's pace falls on all alike and each
    ring iteration has a gloo iteration next to it to be compared with (a collective with `max_iters`
    sits out the iterations past it). One JSON line per collective, with every iteration's start
    (after its barrier) and end, and the bytes of its tensor (op_floats)."""
    import torch.distributed as dist

    floats = {p.name: op_floats(p.kind, size, job.world) for p in plans}
    bufs = {n: Buffers(n, job.world) for n in set(floats.values())}
    for plan in plans:
        dist.barrier()
        for _ in range(warm):
            _run_collective(plan, bufs[floats[plan.name]], rank, job.world)
    starts: dict[str, list[float]] = {plan.name: [] for plan in plans}
    ends: dict[str, list[float]] = {plan.name: [] for plan in plans}
    for k in range(iters):
        for plan in plans:
            if plan.max_iters is not None and k >= plan.max_iters:
                continue
            dist.barrier()
            starts[plan.name].append(time.time())
            _run_collective(plan, bufs[floats[plan.name]], rank, job.world)
            ends[plan.name].append(time.time())
    for plan in plans:
        rec = {
            "collective": plan.name,
            "kind": plan.kind,
            "size_bytes": floats[plan.name] * 4,
            "rank": rank,
            "t_start": starts[plan.name][0],
            "t_starts": starts[plan.name],
            "t_end": ends[plan.name],
        }
        out.write(json.dumps(rec) + "\n")
    out.flush()


def ps_round(job: SweepJob, r: PsRound, rank: int, out: Any) -> None:
    """One PS round: connect (the PS may still be starting), warm-up and timed steps, goodbye."""
    from workloads.model import shard_bounds
    from workloads.psclient import PSClientExchange, ShardedPSExchange

    ex: PSClientExchange | ShardedPSExchange
    if len(r.servers) == 1:
        ex = PSClientExchange(rank, r.nparams, r.servers[0][0], r.servers[0][1], job.timeout)
    else:
        ex = ShardedPSExchange(rank, shard_bounds(r.nparams, len(r.servers)), list(r.servers), job.timeout)
    ex.start()
    weights = torch.zeros(r.nparams)
    grad = torch.zeros(r.nparams)
    t_start = time.time()  # the PS released every worker at once (WELCOME)
    ends = []
    for step in range(r.warmup + r.iters):
        ex.step(step, weights, grad)
        ends.append(time.time())
    ex.close()
    if r.warmup:
        t_start, ends = ends[r.warmup - 1], ends[r.warmup :]
    out.write(
        json.dumps(
            {
                "collective": r.name,
                "kind": "ps",
                "size_bytes": r.size_bytes,
                "rank": rank,
                "t_start": t_start,
                "t_end": ends,
            }
        )
        + "\n"
    )
    out.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sweep_worker", description=__doc__.splitlines()[0])
    p.add_argument("--job", required=True, type=Path)
    p.add_argument("--rank", required=True, type=int)
    args = p.parse_args(argv)
    job = SweepJob.load(args.job)
    rank = args.rank
    os.environ["GLOO_SOCKET_IFNAME"] = job.ifnames[rank]
    torch.set_num_threads(1)
    out_path = Path(job.out_dir) / f"rank-{rank}.jsonl"
    try:
        with out_path.open("w") as out:
            if job.collectives:
                import torch.distributed as dist

                from workloads.collectives import join_gloo

                join_gloo(f"tcp://{job.master_addr}:{job.master_port}", rank, job.world, job.timeout)
                sweep_collectives(job, rank, out)
                dist.barrier()
            for r in job.ps_rounds:
                ps_round(job, r, rank, out)
    except Exception as exc:  # noqa: BLE001 - one line for the bench, whatever broke
        print(
            f"sweep rank {rank}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            file=sys.stderr,
            flush=True,
        )
        return 1
    return 0


if __name__ == "__main__":
    exit_flushed(main())
