"""Payload bytes per (sender rank, receiver rank) pair for ring, fsdp and moe, worked from first
principles at a run's own size, without the product's traffic_theory, width or chunking code.

The size comes from the run's config.json (workers, grad_mb, batch, steps, the moe variant's
experts); the formulas are the models' and the collectives' definitions (docs/DESIGN.md,
"Workload processes"), written out here:

- The ring's and fsdp's model is the MLP 32 -> h -> 10 with biases: 32h + h + 10h + 10 = 43h + 10
  float32 parameters, h the integer width whose count is nearest grad_mb MiB / 4 B.
- A tensor of n elements is cut into N chunks of n // N elements, the first n % N one longer
  (torch.tensor_split's cut, the same on every rank).
- Ring collectives send only to the right neighbour, r -> r + 1 (mod N). A chunk travels N - 1
  hops around the ring, so N - 1 of the N ranks send it once and one rank never does: which one,
  for each collective, is worked in the functions below.

Everything is in bytes per training step; the tests multiply by the steps the run logged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FLOAT = 4  # bytes per float32 parameter or activation
D_IN, CLASSES = 32, 10  # workloads.model's inputs and classes (DESIGN: the MLP 32 -> h -> 10)
MOE_CAPACITY = (5, 4)  # capacity factor 1.25 = 5/4 (Switch Transformer's default), as a fraction
MOE_A2A_PER_STEP = 4  # dispatch and combine forward, and each one's gradient backward

Pairs = dict[tuple[int, int], int]


@dataclass(frozen=True)
class RunSize:
    """What a run's config.json says about its size."""

    workers: int
    steps: int
    batch: int
    grad_mb: float
    strategies: tuple[str, ...]

    @classmethod
    def of_run(cls, run: Path) -> RunSize:
        doc = json.loads((run / "config.json").read_text())
        return cls(int(doc["workers"]), int(doc["steps"]), int(doc["batch"]), float(doc["grad_mb"]),
                   tuple(doc["strategies"]))  # fmt: skip

    def option(self, kind: str, name: str, default: int) -> int:
        """An integer option of the strategy of `kind` ('moe:experts=2' -> 2), else `default`."""
        for text in self.strategies:
            head, *opts = text.split(":")
            if head == kind:
                return next((int(v) for k, _, v in (o.partition("=") for o in opts) if k == name), default)
        raise KeyError(f"no {kind} strategy in {self.strategies}")


def nearest_width(grad_mb: float, params_of_width: Callable[[int], int]) -> int:
    """The integer width h >= 1 whose parameter count is nearest grad_mb MiB of float32 (a search
    over h, not a closed form), the smaller width on a tie."""
    target = grad_mb * 2**20 / FLOAT
    h = 1
    while params_of_width(h + 1) <= target:
        h += 1
    return h if target - params_of_width(h) <= params_of_width(h + 1) - target else h + 1


def mlp_params(h: int) -> int:
    """The ring's and fsdp's MLP: w1 32 x h, b1 h, w2 h x 10, b2 10."""
    return D_IN * h + h + h * CLASSES + CLASSES


def chunks(n: int, world: int) -> list[int]:
    """n elements cut into `world` chunks, the first n % world one element longer."""
    return [n // world + (1 if k < n % world else 0) for k in range(world)]


def ring_pairs(size: RunSize) -> Pairs:
    """The ring all-reduce of the whole gradient (P = 43h + 10 floats), per step, r -> r + 1.

    Reduce-scatter: rank r ends holding the full sum of chunk r + 1 (DESIGN: the ring's own
    chunk). Chunk k's partial sums start at k + 2 and go round to k + 1, so every rank sends chunk
    k but k + 1: rank r sends all but chunk r + 1. All-gather: the finished chunk k leaves its
    holder k - 1 and goes round to k - 2, so every rank but k - 2 sends it: rank r sends all but
    chunk r + 2. Per step r -> r + 1: 2P - c[r + 1] - c[r + 2] floats."""
    n = size.workers
    p = mlp_params(nearest_width(size.grad_mb, mlp_params))
    c = chunks(p, n)
    return {(r, (r + 1) % n): (2 * p - c[(r + 1) % n] - c[(r + 2) % n]) * FLOAT for r in range(n)}


def fsdp_pairs(size: RunSize) -> Pairs:
    """fsdp (ZeRO-3, FULL_SHARD) per step, r -> r + 1 only: per unit (w1, b1: 33h floats; w2, b2:
    10h + 10), rank r holding chunk r of it.

    All-gather of a unit: chunk k starts at its holder k and goes round to k - 1, so every rank but
    k - 1 sends it: rank r sends all but chunk r + 1, U - c[r + 1]. Reduce-scatter of the unit's
    gradient: chunk k's sum must end at k, so it starts at k + 1 and every rank but k sends it:
    rank r sends U - c[r]. Each unit is gathered twice a step (before its forward, and again
    before its backward, as it was freed after the forward) and reduce-scattered once."""
    n = size.workers
    h = nearest_width(size.grad_mb, mlp_params)
    out = {}
    for r in range(n):
        right = (r + 1) % n
        floats = 0
        for unit in (D_IN * h + h, h * CLASSES + CLASSES):
            c = chunks(unit, n)
            floats += 2 * (unit - c[right]) + (unit - c[r])
        out[(r, right)] = floats * FLOAT
    return out


@dataclass(frozen=True)
class MoeSize:
    """moe's shape at a run's size: width, experts, the dense part, one all-to-all buffer."""

    hidden: int
    experts: int  # E = N x k
    per_rank: int  # k
    capacity: int  # C rows per (sending rank, expert)
    dense: int  # floats all-reduced by the ring each step


def moe_size(size: RunSize) -> MoeSize:
    """Model: dense input 32 -> h, gate h -> E, E experts (two h x h layers with biases each), the
    classifier h -> 10; the width h nearest grad_mb MiB for the whole of it. Capacity per expert of
    each rank's batch: C = ceil(1.25 x batch / E)."""
    k = size.option("moe", "experts", 1)
    e = size.workers * k

    def dense(h: int) -> int:
        return D_IN * h + h + h * e + h * CLASSES + CLASSES

    def params(h: int) -> int:
        return dense(h) + e * (2 * h * h + 2 * h)

    h = nearest_width(size.grad_mb, params)
    num, den = MOE_CAPACITY
    return MoeSize(h, e, k, -(-num * size.batch // (den * e)), dense(h))


def moe_pairs(size: RunSize) -> Pairs:
    """moe per step: every rank sends every other rank, in each of the 4 all-to-alls, the padded
    buffers of that rank's k experts, k x C rows of h floats (the own buffers never leave the host);
    the dense gradient's ring all-reduce (ring_pairs' count, on the D dense floats) adds to r -> r + 1."""
    n, m = size.workers, moe_size(size)
    a2a = MOE_A2A_PER_STEP * m.per_rank * m.capacity * m.hidden * FLOAT
    out = {(a, b): a2a for a in range(n) for b in range(n) if a != b}
    c = chunks(m.dense, n)
    for r in range(n if n > 1 else 0):
        out[(r, (r + 1) % n)] += (2 * m.dense - c[(r + 1) % n] - c[(r + 2) % n]) * FLOAT
    return out
