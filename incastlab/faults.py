"""Fault injection during a strategy's run: links down, ports flapping, workers killed, the
controller killed and restarted, each at a chosen time (seconds after the strategy starts) or step.

Written as `KIND:TARGET@WHEN`, e.g. `link-down:lf1-eth1@5s`, `flap:lf2-eth2@3s`,
`kill-worker:2@step4`, `controller-restart@4s`. Every fault that fires is appended to the
strategy's faults.jsonl, so the report can mark it on its timelines.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from topologies.spec import SpecError

KINDS = ("link-down", "link-up", "flap", "kill-worker", "controller-restart", "controller-kill")
_SPEC_RE = re.compile(r"^(?P<kind>[a-z-]+)(?::(?P<target>[^@]+))?"
                      r"@(?:(?P<sec>\d+(?:\.\d+)?)s?|step(?P<step>\d+))$")


@dataclass
class Fault:
    """One fault: what, on what, when (seconds after start, or when the slowest worker reaches a step)."""

    kind: str
    target: str = ""
    at_s: float | None = None
    at_step: int | None = None
    duration_s: float = 3.0  # link-down before it comes back up (0: stays down); restart gap
    fired: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def parse_fault(text: str, plan: dict[str, Any], workers: int) -> Fault:
    """Parse `KIND:TARGET@WHEN`; refuse targets that do not exist, naming them."""
    m = _SPEC_RE.match(text.strip())
    if not m:
        raise SpecError(f"fault {text!r}: expected KIND:TARGET@<seconds>s or KIND:TARGET@step<N>, "
                        f"e.g. link-down:lf1-eth1@5s or kill-worker:2@step3")
    kind, target = m["kind"], (m["target"] or "").strip()
    if kind not in KINDS:
        raise SpecError(f"fault {text!r}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
    fault = Fault(kind, target, at_s=float(m["sec"]) if m["sec"] else None,
                  at_step=int(m["step"]) if m["step"] else None)
    ports = {f"{ln['a']}-eth{ln['a_port']}" for ln in plan["links"]}
    ports |= {f"{ln['b']}-eth{ln['b_port']}" for ln in plan["links"] if ln["kind"] == "uplink"}
    if kind in ("link-down", "link-up", "flap") and target not in ports:
        raise SpecError(f"fault {text!r}: no switch port {target!r} (e.g. lf1-eth1 is lf1's uplink to sp1)")
    if kind == "kill-worker":
        if not target.isdigit() or not 0 <= int(target) < workers:
            raise SpecError(f"fault {text!r}: kill-worker needs a worker rank 0..{workers - 1}")
    if kind.startswith("controller") and target:
        raise SpecError(f"fault {text!r}: {kind} takes no target (controller-restart@4s)")
    return fault


class FaultInjector:
    """Fires due faults; `tick()` is called by the runner's follow loop."""

    def __init__(self, faults: list[Fault], log: Path, kill_worker: Callable[[int], None],
                 controller: Any, say: Callable[[str], None]) -> None:
        self.faults = [Fault(**{**f.to_dict(), "fired": False}) for f in faults]
        self.log = log
        self.kill_worker = kill_worker
        self.controller = controller
        self.say = say
        self.t0 = time.time()
        self._pending: list[tuple[float, Callable[[], None], str]] = []

    def start(self) -> None:
        """The strategy has started: fault times count from now."""
        self.t0 = time.time()

    def _record(self, event: str, fault: Fault, **extra: Any) -> None:
        row = {"t": time.time(), "event": event, "kind": fault.kind, "target": fault.target, **extra}
        with open(self.log, "a") as f:
            f.write(json.dumps(row) + "\n")
        self.say(f"fault: {event} {fault.kind} {fault.target}".rstrip())

    def tick(self, slowest_step: int) -> None:
        """Fire what is due: by time since start, or by the slowest worker's step."""
        now = time.time()
        for at, action, _label in list(self._pending):
            if now >= at:
                self._pending.remove((at, action, _label))
                action()
        for f in self.faults:
            if f.fired:
                continue
            due = (f.at_s is not None and now - self.t0 >= f.at_s) or (
                f.at_step is not None and slowest_step >= f.at_step)
            if due:
                f.fired = True
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
            self.kill_worker(int(f.target))
            self._record("fired", f)
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
        for f in self.faults:
            if f.kind in ("link-down", "flap") and f.fired:
                _link(f.target, up=True)


def _bind(fn: Callable[..., None], *args: Any) -> Callable[[], None]:
    return lambda: fn(*args)


def _link(ifname: str, up: bool) -> None:
    """Set a switch-side veth up or down (both ends see the carrier change)."""
    subprocess.run(["ip", "link", "set", "dev", ifname, "up" if up else "down"], check=False,
                   capture_output=True, timeout=10)
