"""Real processes on loopback for the workload tests: a free port to meet at, and ranks spawned
as processes of their own that hand their results back through a queue.

Each rank runs in a fresh interpreter (the `spawn` start method), as a worker host's process
would: no torch state or gloo group leaks from the test process into the ranks.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
from collections.abc import Callable
from typing import Any

RANK_TIMEOUT_S = 180  # a hang guard for a rank's result; nothing asserts on durations


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_ranks(target: Callable[..., None], world: int, *args: Any) -> dict[int, Any]:
    """Run `target(rank, *args, queue)` (a module-level function) in `world` spawned processes;
    each puts `(rank, result)` on the queue once. Their results by rank, after every process
    exited 0 (a process still alive 30 s after its result is killed, and fails the check)."""
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, *args, out)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        got = dict(out.get(timeout=RANK_TIMEOUT_S) for _ in range(world))
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0] * world
    return got
