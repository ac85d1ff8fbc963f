"""Following one strategy's processes: progress from their logs, and who failed first.

Pure logic over anything with `poll()` (a Popen, or a fake in the unit tests): the runner asks
`check()` twice a second. The first process to die is the cause of a failure (the others usually
fail because of it), except that a worker killed by a fault is named before anything else; async
SGD goes on without a dead worker and says so. Processes first seen dead in the same look are
ordered by their last write to stderr: a failing process prints its error, then exits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class ExperimentError(RuntimeError):
    """A strategy's run failed; the message is one line naming the process and step."""


class Pollable(Protocol):
    """What the follower needs of a process."""

    def poll(self) -> int | None: ...


@dataclass
class Tracked:
    """One launched training process."""

    role: str  # "ps" or "worker"
    rank: int  # a worker's rank, a PS's shard
    host: str
    proc: Pollable
    stderr: Path
    container: str | None = None  # the docker container it runs in (runtime docker)

    @property
    def label(self) -> str:
        """How errors name it."""
        where = f"{self.host}, container {self.container}" if self.container else self.host
        if self.role == "ps":
            if self.container:
                return f"parameter server{f' shard {self.rank}' if self.rank else ''} ({where})"
            shard = f" shard {self.rank} ({self.host})" if self.rank else ""
            return "parameter server" + shard
        return f"worker {self.rank} ({where})"

    def last_error(self) -> str:
        """The last line it wrote on stderr."""
        try:
            lines = [ln for ln in self.stderr.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            lines = []
        last = lines[-1].strip() if lines else "no message"
        if self.container and ("docker.sock" in last or "Docker daemon" in last):  # the client lost dockerd
            return f"dockerd stopped answering ({last.rsplit(': ', 1)[-1]})"
        if self.container and not self.dockerd_answers():
            # the process died with its daemon: what it printed last (a torch warning...) is not the cause
            return f"dockerd stopped answering (the process's last line: {last})"
        return last

    def last_written(self) -> float:
        """When it last wrote to stderr (never: infinity), to order deaths seen in the same look."""
        try:
            return self.stderr.stat().st_mtime
        except OSError:
            return float("inf")

    def dockerd_answers(self) -> bool:
        """Asked only when a container's process failed: was its daemon still there?"""
        from topologies.image import daemon_answers

        return daemon_answers(timeout=3)


@dataclass(frozen=True)
class Loss:
    """A worker an async run goes on without."""

    proc: Tracked
    why: str
    step: int


@dataclass
class Check:
    """What one look at the processes found."""

    done: dict[int, int]  # rank -> steps finished
    finished: bool
    new_losses: list[Loss] = field(default_factory=list)

    @property
    def slowest(self) -> int:
        """Steps of the slowest worker."""
        return min(self.done.values(), default=0)

    @property
    def fastest(self) -> int:
        """Steps of the fastest worker."""
        return max(self.done.values(), default=0)


@dataclass(eq=False)
class Follower:
    """Judges a strategy's processes: finished, still going, or failed (raises ExperimentError)."""

    strategy: str
    procs: list[Tracked]
    steps_done: Callable[[], dict[int, int]]
    carry_on_without_workers: bool = False
    clock: Callable[[], float] = time.monotonic
    killed: dict[int, str] = field(default_factory=dict, init=False)  # rank -> the fault that killed it
    # rank -> why the run goes on without it (async)
    lost: dict[int, str] = field(default_factory=dict, init=False)
    # index in procs -> when first seen dead
    dead_since: dict[int, float] = field(default_factory=dict, init=False)

    def mark_killed(self, rank: int, fault: str) -> None:
        """A fault is about to kill this worker: name the fault, not the crash, as the cause."""
        self.killed[rank] = fault

    def _why(self, p: Tracked, code: int | None) -> str:
        if p.role == "worker" and p.rank in self.killed:
            return f"killed by fault {self.killed[p.rank]}"
        return f"exited with code {code}: {p.last_error()}"

    def check(self) -> Check:
        """One look: steps done, new async losses, finished or not; raises on a failure."""
        done = self.steps_done()
        codes = [(p, p.proc.poll()) for p in self.procs]
        now = self.clock()
        for k, (_p, c) in enumerate(codes):
            if c not in (None, 0):
                self.dead_since.setdefault(k, now)
        failed = [(k, p, c) for k, (p, c) in enumerate(codes) if c not in (None, 0)]
        result = Check(done=done, finished=False)
        if self.carry_on_without_workers:
            for _k, p, code in failed:
                if p.role == "worker" and p.rank not in self.lost:
                    why = self._why(p, code)
                    self.lost[p.rank] = why
                    result.new_losses.append(Loss(p, why, done.get(p.rank, 0)))
            failed = [(k, p, c) for k, p, c in failed if p.role != "worker" or p.rank not in self.lost]
        if failed:

            def cause(kpc: tuple[int, Tracked, int | None]) -> tuple[bool, float, float]:
                k, p, _ = kpc
                return (p.role != "worker" or p.rank not in self.killed, self.dead_since[k], p.last_written())

            _k, p, code = min(failed, key=cause)
            if not done:  # steps not known while it runs (a user's job): none named
                raise ExperimentError(f"{self.strategy}: {p.label} {self._why(p, code)}")
            step = done.get(p.rank, 0) if p.role == "worker" else min(done.values(), default=0)
            raise ExperimentError(f"{self.strategy}: {p.label} {self._why(p, code)} at step {step}")
        result.finished = all(c == 0 or (p.role == "worker" and p.rank in self.lost) for p, c in codes)
        return result
