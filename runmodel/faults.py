"""Fault specs: `KIND[:TARGET]@WHEN`, checked against the plan before anything starts.

WHEN is `<seconds>s` after the strategy starts or `step<N>`: when the slowest worker has finished
N steps, or for kill-worker when the worker it kills has (async workers drift apart: the slowest
worker's step could come after the target has finished). The injector that fires them lives with
the runner (incastlab/faults.py).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from runmodel.fabric import Plan
from runmodel.params import ParamError

KINDS = ("link-down", "link-up", "flap", "kill-worker", "controller-restart", "controller-kill", "cpu")
_SPEC_RE = re.compile(
    r"^(?P<kind>[a-z-]+)(?::(?P<target>[^@]+))?"
    r"@(?:(?P<sec>\d+(?:\.\d+)?)s?|step(?P<step>\d+))$"
)


@dataclass(frozen=True)
class Fault:
    """One fault: what, on what, when (seconds after start, or a step: see `due`)."""

    kind: str
    target: str = ""
    at_s: float | None = None
    at_step: int | None = None
    duration_s: float = 3.0  # link-down before it comes back up (0: stays down); restart gap
    value: float | None = None  # cpu: the host's new CPU share (Mininet's: a share of the whole machine)

    @property
    def host(self) -> str:
        """cpu: the host whose CPU limit changes (the target's part before '=')."""
        return self.target.partition("=")[0]

    def due(self, seconds: float, steps_done: dict[int, int]) -> bool:
        """Due `seconds` after the strategy started, given each rank's steps done so far."""
        if self.at_s is not None:
            return seconds >= self.at_s
        if self.at_step is None or not steps_done:
            return False
        if self.kind == "kill-worker":
            return steps_done.get(int(self.target), 0) >= self.at_step
        return min(steps_done.values()) >= self.at_step

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def parse_fault(text: str, plan: Plan, workers: int) -> Fault:
    """Parse `KIND:TARGET@WHEN`; refuse targets that do not exist, naming them."""
    m = _SPEC_RE.match(text.strip())
    if not m:
        raise ParamError(
            f"fault {text!r}: expected KIND:TARGET@<seconds>s or KIND:TARGET@step<N>, "
            f"e.g. link-down:lf1-eth1@5s or kill-worker:2@step3"
        )
    kind, target = m["kind"], (m["target"] or "").strip()
    if kind not in KINDS:
        raise ParamError(f"fault {text!r}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
    fault = Fault(
        kind,
        target,
        at_s=float(m["sec"]) if m["sec"] else None,
        at_step=int(m["step"]) if m["step"] else None,
    )
    if kind in ("link-down", "link-up", "flap") and target not in plan.port_names():
        raise ParamError(f"fault {text!r}: no switch port {target!r} (e.g. lf1-eth1 is lf1's uplink to sp1)")
    if kind == "kill-worker":
        # ASCII digits only: str.isdigit() also takes '²', which int() refuses (a traceback)
        if not (target.isascii() and target.isdigit()) or not 0 <= int(target) < workers:
            raise ParamError(f"fault {text!r}: kill-worker needs a worker rank 0..{workers - 1}")
    if kind.startswith("controller") and target:
        raise ParamError(f"fault {text!r}: {kind} takes no target (controller-restart@4s)")
    if kind == "cpu":
        host, sep, raw = target.partition("=")
        if not sep or host not in plan.host_names:
            raise ParamError(
                f"fault {text!r}: cpu needs HOST=SHARE with a host of the fabric, e.g. cpu:h3=0.25@step4"
            )
        try:
            share = float(raw)
        except ValueError:
            share = float("nan")
        if not 0 < share <= 1:
            raise ParamError(f"fault {text!r}: the cpu limit must be a share in (0, 1], got {raw!r}")
        fault = Fault(kind, target, fault.at_s, fault.at_step, duration_s=0.0, value=share)
    return fault
