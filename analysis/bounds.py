"""Lower bounds of one step's communication, and what a measured time is made of.

PS family: every worker's gradient comes in through the PS host's link, and the new model goes out
through it, N S each way. The link is full duplex, so a worker that already got its model pushes
its next gradient while the PS still sends the others theirs: push-then-pull, 2 N S / B, is what a
PS needs without that overlap, not a bound (a run can beat it: docs/RESULTS.md). The bound of a
synchronous PS (ps, ssp, backup) is (N + 1) S / B: a step's pushes end, the first model leaves
S / B later at the earliest, and the next step's N pushes follow it down the other direction.
Asynchronous SGD has no barrier: N S / B each way per round of N updates. Sharded over K dedicated
hosts, each shard's link carries S / K of all this.
Colocated shards (one on each of K worker hosts): a shard host sends its own gradient's other
slices, S (K - 1) / K, and its model slice to the N - 1 other workers, (N - 1) S / K, and receives
as much: (S (K - 1) + (N - 1) S) / (K B). Ring (and gloo's all-reduce, a ring too): each worker
sends 2 (N - 1) chunks of S / N: 2 (N - 1) S / (N B). Pipeline (pp): a stage boundary carries
the batch's activations one way and their gradients the other, A = batch x hidden x 4 bytes each:
A / B per step on each link between consecutive stages. S counts wire bytes: the HTB shaper charges
whole frames, and a full TCP segment of 1448 payload bytes (timestamps on) is a 1514-byte frame.
"""

from __future__ import annotations

from runmodel.strategy import PIPELINE, StrategySpec

WIRE_PER_PAYLOAD = 1514 / 1448


def comm_bound_s(spec: StrategySpec, workers: int, grad_bytes: int, link_mbit: float) -> float:
    """The communication lower bound of one step, seconds (link_mbit: the slowest link involved)."""
    wire = grad_bytes * WIRE_PER_PAYLOAD
    rate = link_mbit * 1e6 / 8
    if spec.kind == PIPELINE:  # grad_bytes: what a stage boundary carries each way (full duplex)
        return wire / rate
    if not spec.uses_ps:
        return 2 * (workers - 1) * wire / (workers * rate)
    k = spec.shards
    if spec.placement == "colocated":
        return (wire * (k - 1) + (workers - 1) * wire) / (k * rate)
    transfers = workers if spec.kind == "async" else workers + 1
    return transfers * wire / (k * rate)


def push_then_pull_s(spec: StrategySpec, workers: int, grad_bytes: int, link_mbit: float) -> float | None:
    """2 N S / (K B): a PS's step when no push overlaps a pull (None for collectives)."""
    if not spec.uses_ps or spec.placement == "colocated":
        return None
    return 2 * workers * grad_bytes * WIRE_PER_PAYLOAD / (spec.shards * link_mbit * 1e6 / 8)


def comm_split(comm_s: float, bound_s: float, timeout_stall_s: float, steps: int) -> dict[str, float]:
    """comm_s as bound + time lost to timeouts + the rest (never below 0)."""
    timeouts = timeout_stall_s / steps if steps else 0.0
    return {
        "bound_s": round(bound_s, 4),
        "timeouts_s": round(timeouts, 4),
        "rest_s": round(max(0.0, comm_s - bound_s - timeouts), 4),
    }
