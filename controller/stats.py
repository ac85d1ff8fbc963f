"""Port and queue statistics: latest counters, rates, and a time series, keyed by plan names.

The controller feeds raw OpenFlow counters in; this store turns them into samples a person can
read (switch `lf1`, port 3, interface `lf1-eth3`, peer `h1`, bits per second, drops per second),
keeps them in a bounded series for the API, and appends each to a JSON-lines record file so a run
keeps its statistics even when the controller dies. A controller started again on the same record
(the fault `controller-restart`) serves the events it finds there, so the API and the dashboard keep
the run's history of decisions across the restart.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from runmodel.fabric import Plan
from runmodel.records import dumps, read_jsonl

PORT_FIELDS = (
    "tx_bytes",
    "rx_bytes",
    "tx_packets",
    "rx_packets",
    "tx_dropped",
    "rx_dropped",
    "tx_errors",
    "rx_errors",
)
QUEUE_FIELDS = ("tx_bytes", "tx_packets", "drops")


class StatsStore:
    """Latest port/queue counters with rates, plus a time series of every sample."""

    def __init__(
        self,
        plan: Plan,
        max_samples: int = 500_000,
        record: Path | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        import time

        self._clock = clock or time.time
        self._lock = threading.Lock()
        self.dpid_name = {s.dpid: s.name for s in plan.switches}
        self.peer = {(p.switch, p.port): p.peer for p in plan.switch_ports()}
        self.rate_mbit = {(p.switch, p.port): p.rate_mbit for p in plan.switch_ports()}
        self.ports: dict[tuple[str, int], dict[str, Any]] = {}
        self.queues: dict[tuple[str, int, int], dict[str, Any]] = {}
        self.series: deque[dict[str, Any]] = deque(maxlen=max_samples)
        self.events: deque[dict[str, Any]] = deque(maxlen=10_000)
        if record is not None:  # an earlier controller's events of this run (a restart)
            self.events.extend(r for r in read_jsonl(record) if r.get("kind") == "event")
        self._record: TextIO | None = open(record, "a", buffering=1) if record else None  # noqa: SIM115

    def now(self) -> float:
        """The store's clock (wall time, so samples line up with captures and worker logs)."""
        return self._clock()

    def known_port(self, dpid: int, port: int) -> bool:
        """True for switch ports that are part of the plan (not OFPP_LOCAL and friends)."""
        name = self.dpid_name.get(dpid)
        return name is not None and (name, port) in self.peer

    def _base(self, name: str, port: int, t: float) -> dict[str, Any]:
        return {
            "t": round(t, 4),
            "switch": name,
            "port": port,
            "name": f"{name}-eth{port}",
            "peer": self.peer.get((name, port), ""),
        }

    @staticmethod
    def _rate(prev: dict[str, Any] | None, key: str, now_val: int, dt: float, bits: bool) -> float:
        if prev is None or dt <= 0:
            return 0.0
        delta = max(0, now_val - prev[key])
        return delta * (8 if bits else 1) / dt

    def add_port(
        self, dpid: int, port: int, counters: dict[str, int], duration: float, t: float | None = None
    ) -> dict[str, Any] | None:
        """One port's counters from a port-stats reply; returns the sample (None if unknown)."""
        if not self.known_port(dpid, port):
            return None
        t = self.now() if t is None else t
        name = self.dpid_name[dpid]
        key = (name, port)
        with self._lock:
            prev = self.ports.get(key)
            dt = duration - prev["_duration"] if prev else 0.0
            sample = self._base(name, port, t)
            sample["kind"] = "port"
            sample.update({f: int(counters.get(f, 0)) for f in PORT_FIELDS})
            sample["tx_bps"] = round(self._rate(prev, "tx_bytes", sample["tx_bytes"], dt, True), 1)
            sample["rx_bps"] = round(self._rate(prev, "rx_bytes", sample["rx_bytes"], dt, True), 1)
            rate = self.rate_mbit.get(key, 0.0)
            sample["util"] = round(min(1.0, sample["tx_bps"] / (rate * 1e6)), 4) if rate else 0.0
            self.ports[key] = dict(sample, _duration=duration)
            self._append(sample)
        return sample

    def add_queue(
        self,
        dpid: int,
        port: int,
        queue_id: int,
        counters: dict[str, int],
        duration: float,
        t: float | None = None,
    ) -> dict[str, Any] | None:
        """One queue's counters from a queue-stats reply (`drops` is OpenFlow's tx_errors)."""
        if not self.known_port(dpid, port):
            return None
        t = self.now() if t is None else t
        name = self.dpid_name[dpid]
        key = (name, port, queue_id)
        with self._lock:
            prev = self.queues.get(key)
            dt = duration - prev["_duration"] if prev else 0.0
            sample = self._base(name, port, t)
            sample.update({"kind": "queue", "queue_id": queue_id})
            sample.update({f: int(counters.get(f, 0)) for f in QUEUE_FIELDS})
            sample["tx_bps"] = round(self._rate(prev, "tx_bytes", sample["tx_bytes"], dt, True), 1)
            sample["drops_per_s"] = round(self._rate(prev, "drops", sample["drops"], dt, False), 2)
            self.queues[key] = dict(sample, _duration=duration)
            self._append(sample)
        return sample

    def add_event(self, kind: str, **fields: Any) -> dict[str, Any]:
        """A fabric event (switch connected, port down...) for the API and the record."""
        event = {"t": round(self.now(), 4), "kind": "event", "event": kind, **fields}
        with self._lock:
            self.events.append(event)
            self._append(event)
        return event

    def add_sample(self, sample: dict[str, Any]) -> None:
        """A sample made elsewhere (a flow row, kind "flow") into the series and the record."""
        with self._lock:
            self._append(sample)

    def _append(self, sample: dict[str, Any]) -> None:
        if sample["kind"] != "event":
            self.series.append(sample)
        if self._record is not None:
            self._record.write(dumps(sample, "controller.jsonl") + "\n")

    @staticmethod
    def _public(entry: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in entry.items() if not k.startswith("_")}

    def latest_ports(self) -> list[dict[str, Any]]:
        """The newest sample of every port, in switch/port order."""
        with self._lock:
            return [self._public(self.ports[k]) for k in sorted(self.ports)]

    def latest_queues(self) -> list[dict[str, Any]]:
        """The newest sample of every queue, in switch/port/queue order."""
        with self._lock:
            return [self._public(self.queues[k]) for k in sorted(self.queues)]

    def since(self, t: float, limit: int = 200_000) -> list[dict[str, Any]]:
        """Samples newer than `t` (unix seconds), oldest first, at most `limit` (the newest ones)."""
        with self._lock:
            out = [s for s in self.series if s["t"] > t]
        return out[-limit:]

    def close(self) -> None:
        """Flush and close the record file."""
        if self._record is not None:
            self._record.close()
            self._record = None
