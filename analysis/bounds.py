"""Lower bounds of one step's communication, and what a measured time is made of.

PS family: every worker's gradient comes in and the new model goes out through the PS host's one
link: 2 N S / B. Ring (and gloo's all-reduce, a ring too): each worker sends 2 (N - 1) chunks of
S / N: 2 (N - 1) S / (N B). S counts wire bytes: the HTB shaper charges whole frames, and a full
TCP segment of 1448 payload bytes (timestamps on) is a 1514-byte frame.
"""

from __future__ import annotations

from runmodel.config import PS_FAMILY

WIRE_PER_PAYLOAD = 1514 / 1448


def comm_bound_s(strategy: str, workers: int, grad_bytes: int, link_mbit: float) -> float:
    """The communication lower bound of one step, seconds."""
    wire = grad_bytes * WIRE_PER_PAYLOAD
    rate = link_mbit * 1e6 / 8
    if strategy in PS_FAMILY:
        return 2 * workers * wire / rate
    return 2 * (workers - 1) * wire / (workers * rate)


def comm_split(comm_s: float, bound_s: float, timeout_stall_s: float, steps: int) -> dict[str, float]:
    """comm_s as bound + time lost to timeouts + the rest (never below 0)."""
    timeouts = timeout_stall_s / steps if steps else 0.0
    return {"bound_s": round(bound_s, 4), "timeouts_s": round(timeouts, 4),
            "rest_s": round(max(0.0, comm_s - bound_s - timeouts), 4)}
