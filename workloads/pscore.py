"""The parameter server's decisions, without sockets or tensors, so tests can drive it with a fake clock.

The server feeds it every gradient arrival (`push`) and goodbye (`bye`); it answers which stored
gradients to average and apply now, and which workers may receive the current weights now, plus the
PS log records. Strategies:

- `ps`: synchronous; a step is applied when all N gradients computed on the current version are in.
- `backup` (b backups): synchronous; the first N-b fresh gradients make the step, the other b ranks'
  gradients of that step are discarded when they arrive (they still get the new weights at once).
- `async`: every gradient is applied on arrival and its sender gets the newest weights at once.
- `ssp` (bound s): as async, but the reply to a worker that would start step c is held until
  c - (fewest steps completed by any worker) <= s.

Versions count applied updates (sync: one per step). An `update` record's `version` is the PS
version when the gradient arrived and `staleness` is that minus the version the worker computed on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SYNC = ("ps", "backup")
ASYNC = ("async", "ssp")
STRATEGIES = SYNC + ASYNC

Record = dict[str, Any]


@dataclass
class Decision:
    """What the server must do after one arrival, in order: store, apply, reply, log."""

    keep: bool = False
    apply: list[int] = field(default_factory=list)
    release: list[int] = field(default_factory=list)
    events: list[Record] = field(default_factory=list)


class PSCore:
    """Version counter, staleness accounting, SSP bound and backup selection for one training run."""

    def __init__(
        self,
        strategy: str,
        world: int,
        steps: int,
        staleness: int | None = None,
        backup: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown PS strategy {strategy!r}")
        if world < 1 or steps < 1:
            raise ValueError("world and steps must be >= 1")
        if strategy == "backup" and not 1 <= backup < world:
            raise ValueError(f"backup needs 1 <= --backup < world ({world}), got {backup}")
        if strategy != "backup" and backup:
            raise ValueError("--backup only applies to the backup strategy")
        if strategy == "ssp" and (staleness is None or staleness < 0):
            raise ValueError("ssp needs --staleness >= 0")
        self.strategy = strategy
        self.world = world
        self.steps = steps
        self.staleness = staleness if strategy == "ssp" else None
        self.quorum = world - backup
        self.clock = clock
        self.version = 0
        self.clocks = [0] * world  # gradients received from each worker = its next step
        self.done: set[int] = set()
        self._pending: list[int] = []  # sync: ranks whose fresh gradient is stored, in arrival order
        self._held: set[int] = set()  # ssp: ranks whose reply is being delayed

    @property
    def all_done(self) -> bool:
        return len(self.done) == self.world

    def waiting_for_reply(self, worker: int) -> bool:
        """True while the PS owes `worker` weights (so its silence is not a hang)."""
        return worker in self._pending or worker in self._held

    def bye(self, worker: int) -> None:
        if self.clocks[worker] != self.steps:
            raise ValueError(f"worker {worker} said goodbye after {self.clocks[worker]}/{self.steps} steps")
        self.done.add(worker)

    def push(self, worker: int, worker_step: int, grad_version: int) -> Decision:
        """A complete gradient from `worker` for its step `worker_step`, computed on `grad_version`."""
        if not 0 <= worker < self.world:
            raise ValueError(f"no worker {worker} in a world of {self.world}")
        if worker_step != self.clocks[worker] or worker_step >= self.steps:
            raise ValueError(f"worker {worker} pushed step {worker_step}, expected {self.clocks[worker]}")
        if self.waiting_for_reply(worker):
            raise ValueError(f"worker {worker} pushed again before receiving weights")
        if grad_version > self.version:
            raise ValueError(f"worker {worker} computed on version {grad_version} > PS {self.version}")
        self.clocks[worker] += 1
        if self.strategy in SYNC:
            return self._push_sync(worker, worker_step, grad_version)
        return self._push_async(worker, worker_step, grad_version)

    def _update(self, t: float, worker: int, worker_step: int, grad_version: int, applied: bool) -> Record:
        return {
            "event": "update", "t": t, "worker": worker, "worker_step": worker_step,
            "version": self.version, "staleness": self.version - grad_version, "applied": applied,
        }

    def _push_sync(self, worker: int, worker_step: int, grad_version: int) -> Decision:
        t = self.clock()
        fresh = grad_version == self.version and self.version < self.steps
        d = Decision(events=[self._update(t, worker, worker_step, grad_version, applied=fresh)])
        if not fresh:  # late for its step (or all steps done): drop it, hand out the newest weights
            d.release = [worker]
            return d
        d.keep = True
        self._pending.append(worker)
        if len(self._pending) == self.quorum:
            applied = self._pending
            self._pending = []
            discarded = sorted(set(range(self.world)) - set(applied))
            d.events.append({"event": "step", "step": self.version, "t": self.clock(),
                             "applied": list(applied), "discarded": discarded})
            self.version += 1
            d.apply = list(applied)
            d.release = list(applied)
        return d

    def _push_async(self, worker: int, worker_step: int, grad_version: int) -> Decision:
        t = self.clock()
        d = Decision(keep=True, apply=[worker])
        d.events.append(self._update(t, worker, worker_step, grad_version, applied=True))
        self.version += 1
        if self.staleness is None:
            d.release = [worker]
            return d
        self._held.add(worker)
        slowest = min(self.clocks)
        for w in sorted(self._held):
            nxt = self.clocks[w]
            if nxt >= self.steps:  # its last reply: it starts no further step, nothing to bound
                d.release.append(w)
            elif nxt - slowest <= self.staleness:
                d.release.append(w)
                d.events.append({"event": "release", "t": self.clock(), "worker": w, "next_step": nxt,
                                 "slowest": slowest, "gap": nxt - slowest})
        self._held.difference_update(d.release)
        return d
