"""Fault injection during a strategy's run: links down, ports flapping, workers killed, the
controller killed and restarted, a host's CPU limit changed (its container's, or its cgroup's), each at
a chosen time (seconds after the strategy starts) or step.

The specs (`KIND:TARGET@WHEN`) are parsed and checked in runmodel.faults. Every fault that fires is
appended to the strategy's faults.jsonl, so the report can mark it on its timelines.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runmodel.faults import Fault
from runmodel.records import FaultRecord, JsonlWriter


class FaultInjector:
    """Fires due faults; `tick()` is called by the runner's follow loop."""

    def __init__(
        self,
        faults: list[Fault],
        log: Path,
        kill_worker: Callable[[int], bool],
        controller: Any,
        say: Callable[[str], None],
        set_cpu: Callable[[str, float | None], None] | None = None,
    ) -> None:
        self.faults = list(faults)
        self.fired: set[int] = set()
        self.log = JsonlWriter(log, truncate=False)
        self.kill_worker = kill_worker
        self.set_cpu = set_cpu
        self.controller = controller
        self.say = say
        self.t0 = time.time()
        self._pending: list[tuple[float, Callable[[], None], str]] = []

    def start(self) -> None:
        """The strategy has started: fault times count from now."""
        self.t0 = time.time()

    def _record(self, event: str, fault: Fault, state: str | None = None) -> None:
        self.log.write(FaultRecord(time.time(), event, fault.kind, fault.target, state))
        self.say(f"fault: {event} {fault.kind} {fault.target}".rstrip())

    def tick(self, steps_done: dict[int, int]) -> None:
        """Fire what is due: by time since start, or by steps done (see Fault.due)."""
        now = time.time()
        for at, action, _label in list(self._pending):
            if now >= at:
                self._pending.remove((at, action, _label))
                action()
        for k, f in enumerate(self.faults):
            if k in self.fired:
                continue
            if f.due(now - self.t0, steps_done):
                self.fired.add(k)
                self._fire(f, now)

    def _fire(self, f: Fault, now: float) -> None:
        if f.kind in ("link-down", "flap"):
            _link(f.target, up=False)
            self._record("fired", f, state="down")
            if f.kind == "flap":
                for k in range(1, 6):  # down/up every 0.5 s, ends up
                    up = k % 2 == 1
                    self._pending.append((now + 0.5 * k, _bind(self._flap_step, f, up), "flap"))
            elif f.duration_s > 0:
                self._pending.append((now + f.duration_s, _bind(self._restore, f), "restore"))
        elif f.kind == "link-up":
            _link(f.target, up=True)
            self._record("fired", f, state="up")
        elif f.kind == "kill-worker":
            # a worker that has already ended cannot be killed: say so rather than claim a kill
            self._record("fired" if self.kill_worker(int(f.target)) else "missed", f)
        elif f.kind == "cpu" and self.set_cpu is not None and f.value is not None:
            self.set_cpu(f.host, f.value)
            self._record("fired", f, state=f"cpu={f.value:g}")
        elif f.kind in ("controller-kill", "controller-restart"):
            self.controller.kill()
            self._record("fired", f, state="killed")
            if f.kind == "controller-restart":
                self._pending.append((now + f.duration_s, _bind(self._restart, f), "restart"))

    def _flap_step(self, f: Fault, up: bool) -> None:
        _link(f.target, up=up)
        self._record("flap", f, state="up" if up else "down")

    def _restore(self, f: Fault) -> None:
        _link(f.target, up=True)
        self._record("restored", f, state="up")

    def _restart(self, f: Fault) -> None:
        self.controller.start()
        self._record("restored", f, state="restarted")

    def finish(self) -> None:
        """Undo what is still pending (links left down come back up) before the fabric is reused."""
        for _at, action, label in list(self._pending):
            if label in ("restore", "restart", "flap"):
                try:
                    action()
                except Exception as exc:  # noqa: BLE001 - best effort; the fabric is torn down anyway
                    self.say(f"fault: could not undo {label}: {exc}")
        self._pending.clear()
        for k, f in enumerate(self.faults):
            if f.kind in ("link-down", "flap") and k in self.fired:
                _link(f.target, up=True)
            if f.kind == "cpu" and k in self.fired and self.set_cpu is not None:
                try:  # the next strategy runs with the host's own limit again
                    self.set_cpu(f.host, None)
                    self._record("restored", f, state="cpu=planned")
                except Exception as exc:  # noqa: BLE001
                    self.say(f"fault: could not restore {f.host}'s CPU limit: {exc}")
        self.log.close()


def _bind(fn: Callable[..., None], *args: Any) -> Callable[[], None]:
    return lambda: fn(*args)


def _link(ifname: str, up: bool) -> None:
    """Set a switch-side veth up or down (both ends see the carrier change)."""
    subprocess.run(
        ["ip", "link", "set", "dev", ifname, "up" if up else "down"],
        check=False,
        capture_output=True,
        timeout=10,
    )
