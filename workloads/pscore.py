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

A worker is gone when its connection breaks or when it stays silent past the timeout while the PS
owes it nothing (`heard` / `silent`); the server then asks `lose`. Only `async` carries on without
it (see `lose` for why the others cannot): the worker is dropped, a `worker_lost` record is logged,
and the run ends once every worker has finished or been dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from runmodel.records import PsEvent, PsRelease, PsStep, PsUpdate, PsWorkerLost

SYNC = ("ps", "backup")
ASYNC = ("async", "ssp")
STRATEGIES = SYNC + ASYNC


@dataclass
class Decision:
    """What the server must do after one arrival, in order: store, apply, reply, log."""

    keep: bool = False
    apply: list[int] = field(default_factory=list)
    release: list[int] = field(default_factory=list)
    events: list[PsEvent] = field(default_factory=list)


@dataclass
class Loss:
    """What the server must do when a worker is gone: log `events`, then go on or fail with `why`."""

    carry_on: bool
    remaining: int = 0  # workers still training (neither finished nor dropped)
    why: str = ""  # when not carry_on: why the run cannot go on without the worker
    events: list[PsEvent] = field(default_factory=list)


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
        self.lost: set[int] = set()  # async: workers dropped (dead or hung); they never come back
        self._heard: list[float | None] = [None] * world  # last sign of life, on the server's clock

    @property
    def all_done(self) -> bool:
        """Every worker said goodbye or was dropped (only async drops workers)."""
        return len(self.done) + len(self.lost) == self.world

    @property
    def remaining(self) -> int:
        """Workers still training: neither finished nor dropped."""
        return self.world - len(self.done) - len(self.lost)

    def waiting_for_reply(self, worker: int) -> bool:
        """True while the PS owes `worker` weights (so its silence is not a hang)."""
        return worker in self._pending or worker in self._held

    def heard(self, worker: int, now: float) -> None:
        """`worker` showed a sign of life at `now` (a message from it, or a reply the PS queued for it:
        its silence counts from then on). `now` is any monotonic clock, the same as `silent`'s."""
        self._heard[worker] = now

    def silent(self, now: float, timeout: float) -> list[int]:
        """Workers that hang: nothing heard for more than `timeout` although the PS owes them nothing.

        Finished and dropped workers, and workers never heard of (not started), are not counted.
        """
        return [
            w
            for w, t in enumerate(self._heard)
            if t is not None
            and now - t > timeout
            and w not in self.done
            and w not in self.lost
            and not self.waiting_for_reply(w)
        ]

    def lose(self, worker: int, reason: str) -> Loss:
        """`worker` is gone (`reason`: "connection closed", "sent nothing for 60 s", ...).

        Only `async` goes on without it. The others fail as they always did:
        - `ps`: a synchronous step needs every worker's gradient, so it can never complete again.
        - `ssp`: the dead worker's clock stops, so once the others are `staleness` steps ahead the
          bound holds every reply forever; dropping it from the bound would silently turn the run
          into a different SSP run than the one configured.
        - `backup`: the quorum of N-b could still be met while no more than b workers are gone, but
          a dead worker silently uses up a backup for the rest of the run: the run would measure
          b-1 (eventually 0) backups against stragglers while reporting b, and every `step` record
          would call the dead rank "discarded". A failure that names the worker is the honest result.
        """
        if not 0 <= worker < self.world:
            raise ValueError(f"no worker {worker} in a world of {self.world}")
        if worker in self.done or worker in self.lost:  # a goodbye's FIN, or a second report
            return Loss(carry_on=True, remaining=self.remaining)
        if self.strategy != "async":
            why = {
                "ps": "a synchronous step cannot complete without it",
                "ssp": "the staleness bound would hold the other workers forever",
                "backup": "a dead worker would silently use up a backup worker for the rest of the run",
            }[self.strategy]
            return Loss(carry_on=False, remaining=self.remaining, why=why)
        self.lost.add(worker)
        event = PsWorkerLost(self.clock(), worker, self.clocks[worker] - 1, reason)
        if len(self.lost) == self.world:
            return Loss(carry_on=False, remaining=0, why=f"all {self.world} workers are lost", events=[event])
        return Loss(carry_on=True, remaining=self.remaining, events=[event])

    def bye(self, worker: int) -> None:
        if worker in self.lost:
            raise ValueError(f"worker {worker} said goodbye after it was dropped")
        if self.clocks[worker] != self.steps:
            raise ValueError(f"worker {worker} said goodbye after {self.clocks[worker]}/{self.steps} steps")
        self.done.add(worker)

    def push(self, worker: int, worker_step: int, grad_version: int) -> Decision:
        """A complete gradient from `worker` for its step `worker_step`, computed on `grad_version`."""
        if not 0 <= worker < self.world:
            raise ValueError(f"no worker {worker} in a world of {self.world}")
        if worker in self.lost:
            raise ValueError(f"worker {worker} pushed after it was dropped")
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

    def _update(self, t: float, worker: int, worker_step: int, grad_version: int, applied: bool) -> PsUpdate:
        return PsUpdate(t, worker, worker_step, self.version, self.version - grad_version, applied)

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
            d.events.append(PsStep(self.clock(), self.version, list(applied), discarded))
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
                d.events.append(PsRelease(self.clock(), w, nxt, slowest, nxt - slowest))
        self._held.difference_update(d.release)
        return d
